#!/usr/bin/env bash
# Build sandboxio's local container images from Debian packages only.
#
#   deploy/images/build.sh [--force] [base|python|python-data|all]...
#
# No registry is used: the images are assembled from Debian packages fetched
# with the machine's own apt configuration and loaded with `docker import`.
# An image whose tag already exists with the current version label is skipped
# unless --force is given, so running this twice is a no-op.
# See docs/images.md.
set -Eeuo pipefail

# Bump when the contents of an image change; an existing image whose
# io.sandboxio.image.version label differs is rebuilt.
readonly IMAGE_VERSION=2
readonly SUITE=bookworm
readonly SANDBOX_UID=1000
readonly SANDBOX_USER=sandbox
readonly PATH_ENV=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

readonly BASE_REF=sandboxio/base:latest
readonly PYTHON_SERIES=3.11
readonly PYTHON_REF=sandboxio/python:${PYTHON_SERIES}
readonly PYTHON_ALIAS=sandboxio/python:latest
# python3 is Debian's full standard library (json, asyncio, sqlite3...) on a
# minbase root filesystem; python3-minimal would save about 20 MB but lacks
# json, which almost every agent-written script imports.
readonly PYTHON_PACKAGES=python3
# python-data: the python image plus numpy and matplotlib from Debian (the
# stateful code context's rich results: a figure becomes image/png). It is
# optional: built when named, with `all`, or with SBX_IMAGES=python-data.
readonly DATA_REF=sandboxio/python-data:${PYTHON_SERIES}
readonly DATA_ALIAS=sandboxio/python-data:latest
# python3-munkres satisfies python3-fonttools' "python3-scipy | python3-munkres",
# which apt would otherwise take as scipy, and with it pythran, g++ and the
# boost headers (a 1 GB image instead of about 300 MB).
readonly DATA_PACKAGES=python3,python3-numpy,python3-matplotlib,python3-munkres

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'build.sh: error: %s\n' "$*" >&2; exit 1; }
# shellcheck disable=SC2154 # rc is assigned inside the trap string
trap 'rc=$?; ((BASH_SUBSHELL)) || printf "build.sh: error: command failed (exit %s) at line %s: %s\n" "$rc" "$LINENO" "$BASH_COMMAND" >&2; exit "$rc"' ERR

usage() {
	cat <<-EOF
	usage: $0 [--force] [base|python|python-data|all]...

	Builds local Docker images from Debian packages (no registry):
	  base         $BASE_REF     busybox-static userland
	  python       $PYTHON_REF (+ $PYTHON_ALIAS)  Debian $SUITE python3
	  python-data  $DATA_REF (+ $DATA_ALIAS)  python3 + numpy + matplotlib
	With no image named, builds base and python, plus the images named in
	SBX_IMAGES (comma- or space-separated, e.g. SBX_IMAGES=python-data).
	\`all\` builds all three. Existing images are skipped unless --force.
	EOF
}

ARGS=("$@")
FORCE=0
WANT_BASE=0
WANT_PYTHON=0
WANT_DATA=0
for arg in "$@"; do
	case $arg in
	--force | -f) FORCE=1 ;;
	base) WANT_BASE=1 ;;
	python) WANT_PYTHON=1 ;;
	python-data) WANT_DATA=1 ;;
	all) WANT_BASE=1 WANT_PYTHON=1 WANT_DATA=1 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument: $arg" ;;
	esac
done
if [[ $WANT_BASE == 0 && $WANT_PYTHON == 0 && $WANT_DATA == 0 ]]; then
	WANT_BASE=1 WANT_PYTHON=1
	for extra in ${SBX_IMAGES:-}; do
		case $extra in
		base | python) ;;
		python-data) WANT_DATA=1 ;;
		*) die "SBX_IMAGES: unknown image $extra (python-data)" ;;
		esac
	done
fi

# ---------------------------------------------------------------- helpers

WORKDIR=
cleanup() {
	if [[ -n $WORKDIR && -d $WORKDIR ]]; then
		rm -rf --one-file-system -- "$WORKDIR"
	fi
}
trap cleanup EXIT

# image_is_current REF: the image exists and carries the current version label.
image_is_current() {
	local v
	v=$(docker image inspect --format '{{ index .Config.Labels "io.sandboxio.image.version" }}' "$1" 2>/dev/null) || return 1
	[[ $v == "$IMAGE_VERSION" ]]
}

image_id() { docker image inspect --format '{{ .Id }}' "$1" 2>/dev/null || true; }

# needs_build REF NAME: decide (and say) whether NAME must be (re)built.
needs_build() {
	local ref=$1 name=$2
	if [[ $FORCE == 1 ]]; then
		log "$name: --force given, rebuilding $ref"
		return 0
	fi
	if image_is_current "$ref"; then
		log "$name: $ref already exists (version $IMAGE_VERSION), skipping (use --force to rebuild)"
		return 1
	fi
	if [[ -n $(image_id "$ref") ]]; then
		log "$name: $ref exists but is not version $IMAGE_VERSION, rebuilding"
	else
		log "$name: $ref not found, building"
	fi
	return 0
}

require_root() {
	[[ $(id -u) == 0 ]] || die "building images needs root (chroot, file ownership, apt-get); re-run as root, e.g. sudo $0 ${ARGS[*]}"
}

# ensure_packages PKG...: install missing Debian packages on the build host.
ensure_packages() {
	local missing=() p
	for p in "$@"; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	((${#missing[@]})) || return 0
	log "installing build dependencies: ${missing[*]}"
	local aptlog
	aptlog=$(mktemp "${TMPDIR:-/tmp}/sandboxio-apt.XXXXXX")
	if ! { DEBIAN_FRONTEND=noninteractive apt-get update &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } >"$aptlog" 2>&1; then
		tail -n 20 "$aptlog" >&2
		rm -f "$aptlog"
		die "could not install ${missing[*]} with apt-get (see the lines above)"
	fi
	rm -f "$aptlog"
}

new_workdir() {
	WORKDIR=$(mktemp -d "${TMPDIR:-/tmp}/sandboxio-image.XXXXXX")
}

# add_common_dirs ROOT: /work owned by the sandbox user, sticky /tmp.
add_common_dirs() {
	local root=$1
	install -d -m 0755 -o "$SANDBOX_UID" -g "$SANDBOX_UID" "$root/work" "$root/home/$SANDBOX_USER"
	install -d -m 1777 "$root/tmp"
	chmod 1777 "$root/tmp"
	if [[ -d $root/var/tmp ]]; then chmod 1777 "$root/var/tmp"; fi
}

# import_rootfs ROOT REF KIND CHANGE...: tar ROOT and docker-import it as REF.
import_rootfs() {
	local root=$1 ref=$2 kind=$3
	shift 3
	local old new args=()
	old=$(image_id "$ref")
	args+=(--change "ENV PATH=$PATH_ENV" --change "WORKDIR /work")
	args+=(--change "LABEL io.sandboxio.image=$kind" --change "LABEL io.sandboxio.image.version=$IMAGE_VERSION")
	local c
	for c in "$@"; do args+=(--change "$c"); done
	log "$kind: importing $(du -sh "$root" | cut -f1) root filesystem as $ref"
	tar --numeric-owner -C "$root" -cf - . |
		docker import --message "sandboxio $kind image v$IMAGE_VERSION (Debian packages)" "${args[@]}" - "$ref" >/dev/null ||
		die "$kind: docker import of $ref failed"
	new=$(image_id "$ref")
	# Drop the image this one replaced, if nothing else refers to it.
	if [[ -n $old && $old != "$new" ]]; then
		docker image rm "$old" >/dev/null 2>&1 || true
	fi
}

# ---------------------------------------------------------------- base

build_base() {
	needs_build "$BASE_REF" base || return 0
	require_root
	ensure_packages busybox-static
	local bb
	bb=$(dpkg-query -L busybox-static | grep -E '/s?bin/busybox$' | head -n1)
	[[ -n $bb && -x $bb ]] || die "busybox-static is installed but its busybox binary was not found"

	local start=$SECONDS
	new_workdir
	local root=$WORKDIR/rootfs
	log "base: assembling root filesystem from $bb"
	install -d -m 0755 "$root"/{bin,sbin,usr/bin,usr/sbin,etc,home,dev,proc,sys,var/tmp}
	install -d -m 0700 "$root/root"
	install -m 0755 "$bb" "$root/bin/busybox"
	local applet n=0
	while read -r applet; do
		case $applet in
		"" | linuxrc | bin/busybox) continue ;;
		esac
		if [[ ! -e $root/$applet && ! -L $root/$applet ]]; then
			ln -s /bin/busybox "$root/$applet"
			n=$((n + 1))
		fi
	done < <("$bb" --list-full)
	[[ -L $root/bin/sh ]] || die "base: busybox provides no sh applet"
	log "base: linked $n busybox applets"

	cat >"$root/etc/passwd" <<-EOF
	root:x:0:0:root:/root:/bin/sh
	$SANDBOX_USER:x:$SANDBOX_UID:$SANDBOX_UID:$SANDBOX_USER:/home/$SANDBOX_USER:/bin/sh
	nobody:x:65534:65534:nobody:/nonexistent:/bin/false
	EOF
	cat >"$root/etc/group" <<-EOF
	root:x:0:
	$SANDBOX_USER:x:$SANDBOX_UID:
	nogroup:x:65534:
	EOF
	chmod 0644 "$root/etc/passwd" "$root/etc/group"
	add_common_dirs "$root"

	import_rootfs "$root" "$BASE_REF" base 'CMD ["/bin/sh"]'
	cleanup
	WORKDIR=
	log "base: built $BASE_REF in $((SECONDS - start))s"
}

# ---------------------------------------------------------------- python

# The machine's own Debian apt sources, handed to mmdebstrap as a file so that
# no mirror is named here. Without one, mmdebstrap uses its built-in default.
apt_sources_file() {
	local f
	for f in /etc/apt/sources.list.d/debian.sources /etc/apt/sources.list; do
		if [[ -s $f ]] && grep -qvE '^[[:space:]]*(#|$)' "$f"; then
			printf '%s\n' "$f"
			return 0
		fi
	done
}

build_python() {
	build_debian python "$PYTHON_REF" "$PYTHON_ALIAS" "$PYTHON_PACKAGES" 'import sys'
}

build_python_data() {
	# A figure saved as PNG proves numpy, matplotlib's Agg backend and its fonts.
	build_debian python-data "$DATA_REF" "$DATA_ALIAS" "$DATA_PACKAGES" \
		'import io, numpy, matplotlib; matplotlib.use("Agg"); import matplotlib.pyplot as plt; plt.plot(numpy.arange(3)); plt.savefig(io.BytesIO(), format="png")' \
		'ENV MPLBACKEND=Agg'
}

# build_debian KIND REF ALIAS PACKAGES PROBE [CHANGE...]: a Debian minbase
# root with PACKAGES (comma-separated), Python $PYTHON_SERIES and the sandbox
# user; PROBE is Python run in the new root before it is imported, CHANGEs are
# extra `docker import --change`s.
build_debian() {
	local kind=$1 ref=$2 alias=$3 packages=$4 probe=$5
	shift 5
	if ! needs_build "$ref" "$kind"; then
		if [[ $(image_id "$alias") != "$(image_id "$ref")" ]]; then
			log "$kind: tagging $ref as $alias"
			docker tag "$ref" "$alias"
		fi
		return 0
	fi
	require_root
	ensure_packages mmdebstrap

	local start=$SECONDS sources
	sources=$(apt_sources_file || true)
	new_workdir
	local root=$WORKDIR/rootfs
	local mm=(
		mmdebstrap --mode=root --variant=minbase "--include=$packages"
		# bookworm: merged /usr by symlinks, without pulling in usrmerge + perl
		--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
		# keep docs, man pages and translations out (also for later installs)
		--dpkgopt='path-exclude=/usr/share/man/*'
		--dpkgopt='path-exclude=/usr/share/info/*'
		--dpkgopt='path-exclude=/usr/share/doc/*'
		--dpkgopt='path-include=/usr/share/doc/*/copyright'
		--dpkgopt='path-exclude=/usr/share/locale/*'
		--dpkgopt='path-include=/usr/share/locale/locale.alias'
		--dpkgopt='path-exclude=/usr/share/lintian/*'
		"$SUITE" "$root"
	)
	if [[ $kind == python-data ]]; then
		# Depends only: numpy's and matplotlib's Recommends (scipy, sympy,
		# gcc, boost headers...) would make the image 1 GB. (The python
		# image keeps apt's default, as it was built before.)
		mm=("${mm[0]}" --aptopt='Apt::Install-Recommends "false"' "${mm[@]:1}")
	fi
	if [[ -n $sources ]]; then mm+=("$sources"); fi
	log "$kind: mmdebstrap $SUITE minbase + $packages (apt sources: ${sources:-mmdebstrap default})"
	"${mm[@]}" 2>"$WORKDIR/mmdebstrap.log" || {
		tail -n 20 "$WORKDIR/mmdebstrap.log" >&2
		die "$kind: mmdebstrap failed (see the lines above)"
	}
	log "$kind: mmdebstrap done in $((SECONDS - start))s"

	local got
	got=$(chroot "$root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') ||
		die "$kind: python3 does not run in the new root filesystem"
	[[ $got == "$PYTHON_SERIES" ]] || die "$kind: expected Python $PYTHON_SERIES, $SUITE gave $got"
	chroot "$root" env MPLCONFIGDIR=/tmp/mpl-probe python3 -c "$probe" ||
		die "$kind: the probe failed in the new root filesystem: $probe"
	rm -rf "${root:?}"/tmp/mpl-probe

	log "$kind: adding user $SANDBOX_USER ($SANDBOX_UID:$SANDBOX_UID), /work, /tmp"
	chroot "$root" groupadd --gid "$SANDBOX_UID" "$SANDBOX_USER"
	chroot "$root" useradd --uid "$SANDBOX_UID" --gid "$SANDBOX_UID" --create-home \
		--home-dir "/home/$SANDBOX_USER" --shell /bin/sh "$SANDBOX_USER"
	add_common_dirs "$root"
	# Docker supplies /dev, /etc/hosts, /etc/hostname and /etc/resolv.conf;
	# drop the build host's copies and other leftovers.
	rm -rf "${root:?}"/dev/* "${root:?}"/etc/hostname "${root:?}"/etc/resolv.conf \
		"${root:?}"/var/lib/apt/lists/* "${root:?}"/var/cache/apt/* \
		"${root:?}"/var/cache/debconf/*-old "${root:?}"/var/lib/dpkg/*-old \
		"${root:?}"/var/log/*.log "${root:?}"/var/log/apt/*
	install -d -m 0755 "$root/var/lib/apt/lists/partial"

	import_rootfs "$root" "$ref" "$kind" 'CMD ["python3"]' 'ENV LANG=C.UTF-8' "$@"
	docker tag "$ref" "$alias"
	cleanup
	WORKDIR=
	log "$kind: built $ref and $alias in $((SECONDS - start))s"
}

# ---------------------------------------------------------------- main

command -v docker >/dev/null || die "docker CLI not found"
docker info >/dev/null 2>&1 || die "cannot reach the Docker daemon (is dockerd running, and may this user use it?)"

total=$SECONDS
if [[ $WANT_BASE == 1 ]]; then build_base; fi
if [[ $WANT_PYTHON == 1 ]]; then build_python; fi
if [[ $WANT_DATA == 1 ]]; then build_python_data; fi
log "done in $((SECONDS - total))s"
docker image ls --filter 'label=io.sandboxio.image' \
	--format 'table {{.Repository}}:{{.Tag}}\t{{.ID}}\t{{.Size}}' >&2
