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
#
# A second runtime, NAME-net (runsc-net), is gVisor with its own network
# stack (--network=sandbox), for the egress policies allow and allowlist: it
# is registered only when a probe container starts with it on a Docker
# network and sees its interface, and removed again otherwise (Debian's 2022
# runsc fails the probe; the go-branch build passes). The docker worker
# runs gVisor sandboxes with a network on it, and refuses allow/allowlist on
# gVisor when it is missing. SBX_RUNSC_NET_PATH picks its binary (default:
# the runsc above); SBX_RUNSC_NET=0 skips it. A failed probe is not an error.
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

# registered NAME PATH: dockerd has the runtime NAME at PATH.
registered() {
	docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
rt = json.load(sys.stdin).get(sys.argv[1]) or {}
sys.exit(0 if rt.get("path") == sys.argv[2] else 1)' "$1" "$2"
}

# listed NAME: dockerd has a runtime NAME.
listed() {
	docker info --format '{{json .Runtimes}}' 2>/dev/null | python3 -c '
import json, sys
sys.exit(0 if sys.argv[1] in json.load(sys.stdin) else 1)' "$1"
}

# setruntime NAME PATH ARGS_JSON writes (or, with PATH "", removes) a runtime.
setruntime() {
	mkdir -p "$(dirname "$conf")"
	python3 - "$conf" "$1" "$2" "$3" <<'PY'
import json, os, sys
path, name, runsc, args = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
conf = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        conf = json.load(f)
rts = conf.setdefault("runtimes", {})
if runsc:
    rts[name] = {"path": runsc, "runtimeArgs": args}
else:
    rts.pop(name, None)
tmp = path + ".sandboxio.tmp"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2)
os.replace(tmp, path)
PY
}

# reload sends dockerd SIGHUP and waits until `registered NAME PATH` holds
# (PATH "": until NAME is gone).
reload() {
	local pid
	pid=$(pidof dockerd || true)
	if [ -z "$pid" ]; then
		log "dockerd is not running here; the runtimes will be available after it starts"
		return 1
	fi
	kill -HUP "$pid"
	for _ in $(seq 1 50); do
		if [[ -n $2 ]] && registered "$1" "$2"; then return 0; fi
		if [[ -z $2 ]] && ! listed "$1"; then return 0; fi
		sleep 0.2
	done
	log "dockerd did not pick up the change of $1"
	return 1
}

if registered "$name" "$runsc_path"; then
	log "$name is already registered at $runsc_path"
else
	log "registering $runsc_path as the docker runtime '$name' (--network=none)"
	setruntime "$name" "$runsc_path" '["--network=none"]'
	reload "$name" "$runsc_path"
	if docker image inspect sandboxio/base:latest >/dev/null 2>&1; then
		docker run --rm --runtime="$name" --network none sandboxio/base:latest true
	fi
	log "$name registered"
fi

# The netstack runtime, only where a probe container works with it.
[[ ${SBX_RUNSC_NET:-1} == 0 ]] && exit 0
net=$name-net
net_path=${SBX_RUNSC_NET_PATH:-$runsc_path}
if registered "$net" "$net_path"; then
	log "$net is already registered at $net_path"
	exit 0
fi
if ! docker image inspect sandboxio/base:latest >/dev/null 2>&1; then
	log "no sandboxio/base image to probe $net with; not registered"
	exit 0
fi
log "probing $net_path with its own network stack as '$net'"
setruntime "$net" "$net_path" '[]'
reload "$net" "$net_path"
probe=sbx-runsc-net-probe-$$
docker network create --label io.sandboxio.probe=1 "$probe" >/dev/null
# The container must start on a Docker network and see its address inside.
if out=$(timeout 60 docker run --rm --label io.sandboxio.probe=1 --runtime="$net" --network "$probe" \
	sandboxio/base:latest cat /proc/net/dev 2>&1) && grep -q eth0 <<<"$out"; then
	docker network rm "$probe" >/dev/null
	log "$net registered (gVisor netstack: egress allow and allowlist on gVisor)"
	exit 0
fi
docker network rm "$probe" >/dev/null || true
log "$net_path cannot start a container with its own network stack here ($(tail -1 <<<"$out")); $net not registered"
setruntime "$net" "" '[]'
reload "$net" ""
exit 0
