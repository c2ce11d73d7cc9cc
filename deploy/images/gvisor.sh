#!/usr/bin/env bash
# Register gVisor's runsc with the local Docker daemon, from Debian's `runsc`
# package, so that classes naming `runtime: runsc` get the gvisor tier.
#
#   deploy/images/gvisor.sh        install and register (idempotent; needs root)
#
# The runtime is registered with --network=none: this runsc cannot start a
# container in the host's root network namespace otherwise, and sandboxio's
# default egress policy is no network anyway. dockerd picks the new runtime up
# on SIGHUP; it is not restarted. Exit status 0 means `docker info` lists runsc.
set -euo pipefail

conf=/etc/docker/daemon.json
log() { printf '==> %s\n' "$*" >&2; }

if docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' 2>/dev/null | grep -qw runsc; then
	log "runsc is already registered"
	exit 0
fi
if ! command -v runsc >/dev/null 2>&1; then
	log "installing Debian's runsc"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runsc >/dev/null
fi
runsc_path=$(command -v runsc)
log "registering $runsc_path as the docker runtime 'runsc' (--network=none)"
mkdir -p "$(dirname "$conf")"
python3 - "$conf" "$runsc_path" <<'PY'
import json, os, sys
path, runsc = sys.argv[1], sys.argv[2]
conf = {}
if os.path.exists(path) and os.path.getsize(path) > 0:
    with open(path) as f:
        conf = json.load(f)
conf.setdefault("runtimes", {})["runsc"] = {"path": runsc, "runtimeArgs": ["--network=none"]}
tmp = path + ".sandboxio.tmp"
with open(tmp, "w") as f:
    json.dump(conf, f, indent=2)
os.replace(tmp, path)
PY
pid=$(pidof dockerd || true)
if [ -z "$pid" ]; then
	log "dockerd is not running here; runsc will be available after it starts"
	exit 1
fi
kill -HUP "$pid"
for _ in $(seq 1 50); do
	if docker info --format '{{range $k, $v := .Runtimes}}{{$k}} {{end}}' | grep -qw runsc; then
		if docker image inspect sandboxio/base:latest >/dev/null 2>&1; then
			docker run --rm --runtime=runsc --network none sandboxio/base:latest true
		fi
		log "runsc registered"
		exit 0
	fi
	sleep 0.2
done
log "dockerd did not pick up runsc"
exit 1
