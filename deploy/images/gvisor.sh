#!/usr/bin/env bash
# Register gVisor's runsc with the local Docker daemon so that classes naming
# `runtime: runsc` get the gvisor tier.
#
#   deploy/images/gvisor.sh                      Debian's runsc (what CI uses: fast)
#   SBX_RUNSC_BUILD=1 deploy/images/gvisor.sh    a newer runsc, built from the Go module
#                                                proxy, cached per machine (~3-7 min once)
#
# The newer runsc is `go install gvisor.dev/gvisor/runsc@$SBX_RUNSC_VERSION` (a
# module version of gVisor's `go` branch; default below), built with CGO off
# into ${SBX_CACHE_DIR:-/var/cache/sandboxio}/runsc/VERSION/, outside the
# repository. A cached build is used without SBX_RUNSC_BUILD; none is ever
# fetched any other way. SBX_RUNSC_NAME registers under another runtime name
# (default runsc) to try a build beside the one in use.
#
# The runtime is registered with --network=none: Debian's runsc cannot start a
# container in the host's root network namespace otherwise, and sandboxio's
# default egress policy is no network anyway. dockerd picks the runtime up on
# SIGHUP; it is not restarted (running containers are untouched). Idempotent;
# needs root. Exit status 0 means `docker info` lists the runtime at the path.
set -euo pipefail

conf=/etc/docker/daemon.json
name=${SBX_RUNSC_NAME:-runsc}
version=${SBX_RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237}
cache=${SBX_CACHE_DIR:-/var/cache/sandboxio}/runsc/$version
log() { printf '==> %s\n' "$*" >&2; }

runsc_path=
if [[ -x $cache/runsc ]]; then
	runsc_path=$cache/runsc
	log "using the cached runsc $version ($runsc_path)"
elif [[ ${SBX_RUNSC_BUILD:-} == 1 ]]; then
	log "building runsc $version from the Go module proxy into $cache"
	mkdir -p "$cache.tmp"
	CGO_ENABLED=0 GOBIN="$cache.tmp" GOFLAGS=-mod=mod go install "gvisor.dev/gvisor/runsc@$version"
	rm -rf "$cache" && mv "$cache.tmp" "$cache"
	runsc_path=$cache/runsc
else
	if ! command -v runsc >/dev/null 2>&1; then
		log "installing Debian's runsc"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null
	fi
	runsc_path=$(command -v runsc)
fi

registered() {
	docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
rt = json.load(sys.stdin).get(sys.argv[1]) or {}
sys.exit(0 if rt.get("path") == sys.argv[2] else 1)' "$name" "$runsc_path"
}

if registered; then
	log "$name is already registered at $runsc_path"
	exit 0
fi
log "registering $runsc_path as the docker runtime '$name' (--network=none)"
mkdir -p "$(dirname "$conf")"
python3 - "$conf" "$name" "$runsc_path" <<'PY'
import json, os, sys
path, name, runsc = sys.argv[1], sys.argv[2], sys.argv[3]
conf = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        conf = json.load(f)
conf.setdefault("runtimes", {})[name] = {"path": runsc, "runtimeArgs": ["--network=none"]}
tmp = path + ".sandboxio.tmp"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2)
os.replace(tmp, path)
PY
pid=$(pidof dockerd || true)
if [ -z "$pid" ]; then
	log "dockerd is not running here; $name will be available after it starts"
	exit 1
fi
kill -HUP "$pid"
for _ in $(seq 1 50); do
	if registered; then
		if docker image inspect sandboxio/base:latest >/dev/null 2>&1; then
			docker run --rm --runtime="$name" --network none sandboxio/base:latest true
		fi
		log "$name registered"
		exit 0
	fi
	sleep 0.2
done
log "dockerd did not pick up $name"
exit 1
