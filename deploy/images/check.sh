#!/usr/bin/env bash
# Smoke-test the images built by deploy/images/build.sh.
#
#   deploy/images/check.sh [base|python|python-data]...
#                          (default: base and python, and python-data if built)
#
# Every container runs with --rm --network none. Exits non-zero if any check
# fails; the last line is "N passed, N failed". Set RUNTIME to run the
# containers under another OCI runtime (docker run --runtime=$RUNTIME).
# shellcheck disable=SC2016 # $(...) in single quotes is expanded by the container shell
set -euo pipefail

readonly BASE_REF=sandboxio/base:latest
readonly PYTHON_REF=sandboxio/python:3.11
readonly PYTHON_ALIAS=sandboxio/python:latest
readonly DATA_REF=sandboxio/python-data:3.11
# build.sh's IMAGE_VERSION
readonly IMAGE_VERSION=2

RUNTIME_ARGS=()
if [[ -n ${RUNTIME:-} ]]; then RUNTIME_ARGS=(--runtime "$RUNTIME"); fi
passed=0
failed=0

# check NAME WANT -- DOCKER-RUN-ARGS...: run a container; its trimmed output
# must match the extended regex WANT.
check() {
	local name=$1 want=$2 out rc=0
	shift 3
	out=$(docker run --rm --network none "${RUNTIME_ARGS[@]}" "$@" 2>&1) || rc=$?
	if [[ $rc == 0 && $out =~ $want ]]; then
		printf 'PASS  %-48s %s\n' "$name" "${out//$'\n'/ | }"
		passed=$((passed + 1))
	else
		printf 'FAIL  %-48s exit %s, wanted /%s/, got: %s\n' "$name" "$rc" "$want" "${out//$'\n'/ | }"
		failed=$((failed + 1))
	fi
}

# check_labels REF KIND
check_labels() {
	local ref=$1 kind=$2 got
	got=$(docker image inspect --format '{{ index .Config.Labels "io.sandboxio.image" }} {{ index .Config.Labels "io.sandboxio.image.version" }} {{ .Config.WorkingDir }}' "$ref" 2>&1) || true
	if [[ $got == "$kind $IMAGE_VERSION /work" ]]; then
		printf 'PASS  %-48s %s\n' "$ref labels, WorkingDir" "$got"
		passed=$((passed + 1))
	else
		printf 'FAIL  %-48s wanted "%s", got: %s\n' "$ref labels, WorkingDir" "$kind $IMAGE_VERSION /work" "$got"
		failed=$((failed + 1))
	fi
}

# common REF KIND: checks shared by every image.
common() {
	local ref=$1 kind=$2
	check_labels "$ref" "$kind"
	check "$kind: id (default user)" '^uid=0\(root\) gid=0\(root\)' -- "$ref" id
	check "$kind: sh -c 'echo ok'" '^ok$' -- "$ref" /bin/sh -c 'echo ok'
	check "$kind: user 1000 is sandbox" '^uid=1000\(sandbox\) gid=1000\(sandbox\)' -- "$ref" id sandbox
	check "$kind: passwd entry" '^sandbox:x:1000:1000:[^:]*:/home/sandbox:' -- "$ref" grep '^sandbox:' /etc/passwd
	check "$kind: --user sandbox runs as 1000" '^1000 1000$' -- --user sandbox "$ref" /bin/sh -c 'echo "$(id -u) $(id -g)"'
	check "$kind: cwd /work, writable by 1000" '^/work ok$' -- --user 1000:1000 "$ref" \
		/bin/sh -c 'pwd >/work/.probe && touch /tmp/.probe "$HOME/.probe" && echo "$(cat /work/.probe) ok"'
	# find/proc rather than ls -l or /sys: coreutils' statx fails under gVisor 20221219
	check "$kind: /tmp is 1777" '^/tmp$' -- "$ref" find /tmp -maxdepth 0 -perm 1777
	check "$kind: no network but lo" '^lo$' -- "$ref" \
		/bin/sh -c 'tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " "'
}

want_base=0 want_python=0 want_data=0
for arg in "$@"; do
	case $arg in
	base) want_base=1 ;;
	python) want_python=1 ;;
	python-data) want_data=1 ;;
	*) echo "usage: $0 [base|python|python-data]..." >&2; exit 2 ;;
	esac
done
if [[ $want_base == 0 && $want_python == 0 && $want_data == 0 ]]; then
	want_base=1 want_python=1
	if docker image inspect "$DATA_REF" >/dev/null 2>&1; then want_data=1; fi
fi

docker info >/dev/null 2>&1 || { echo "check.sh: cannot reach the Docker daemon" >&2; exit 1; }

if [[ $want_base == 1 ]]; then
	common "$BASE_REF" base
	check "base: busybox" '^BusyBox v1\.' -- "$BASE_REF" /bin/sh -c 'busybox | head -n1'
fi
if [[ $want_python == 1 ]]; then
	common "$PYTHON_REF" python
	check "python: python3 --version" '^Python 3\.11\.' -- "$PYTHON_REF" python3 --version
	check "python: python3 -c 'print(1)' as 1000" '^1$' -- --user 1000:1000 "$PYTHON_REF" python3 -c 'print(1)'
	check "python: :latest is :3.11" '^Python 3\.11\.' -- "$PYTHON_ALIAS" python3 --version
fi
if [[ $want_data == 1 ]]; then
	common "$DATA_REF" python-data
	check "python-data: numpy" '^45$' -- --user 1000:1000 "$DATA_REF" python3 -c 'import numpy; print(numpy.arange(10).sum())'
	check "python-data: a matplotlib PNG as 1000" '^PNG$' -- --user 1000:1000 "$DATA_REF" \
		python3 -c 'import io, matplotlib.pyplot as p; p.plot([1, 2]); b = io.BytesIO(); p.savefig(b, format="png"); print(b.getvalue()[1:4].decode())'
fi

echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
