#!/usr/bin/env bash
# deploy-smoke: build the image, bring up deploy/compose.yaml (3-node
# JetStream cluster with authentication, 2 routers, docker-worker,
# fake-worker, auditor, reaper), run sandboxes against it from the host as
# tenant-a (with the creds auth-init wrote), check that a client without
# creds is refused, kill one NATS node and run again, then tear everything
# down. Slow (about a minute); not part of `make check`.
#
#   deploy/compose-smoke.sh            (SBX_SMOKE_KEEP=1 leaves it running;
#                                       SBX_SMOKE_AS=admin runs as the operator)
set -Eeuo pipefail

readonly ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly PROJECT=${SBX_SMOKE_PROJECT:-sbxsmoke}
# Ports away from `sandboxio dev`'s 4222.
export SBX_NATS_PORT_1=${SBX_NATS_PORT_1:-14222} SBX_NATS_PORT_2=${SBX_NATS_PORT_2:-14223} SBX_NATS_PORT_3=${SBX_NATS_PORT_3:-14224}
readonly URLS="nats://127.0.0.1:$SBX_NATS_PORT_1,nats://127.0.0.1:$SBX_NATS_PORT_2,nats://127.0.0.1:$SBX_NATS_PORT_3"
GO=${GO:-go}

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'compose-smoke.sh: FAIL: %s\n' "$*" >&2; exit 1; }
compose() { docker-compose -p "$PROJECT" -f "$ROOT/deploy/compose.yaml" "$@"; }

command -v docker-compose >/dev/null || die "docker-compose is not installed"
tmp=$(mktemp -d)
cleanup() {
	rc=$?
	if ((rc != 0)); then
		log "logs (last 30 lines per service)"
		compose logs --no-color --tail 30 >&2 || true
	fi
	if [[ ${SBX_SMOKE_KEEP:-} != 1 ]]; then
		log "tearing down"
		compose down -v --remove-orphans >/dev/null 2>&1 || true
	fi
	rm -rf "$tmp"
	exit "$rc"
}
trap cleanup EXIT

"$ROOT/deploy/build-image.sh"
log "building the host CLI"
(cd "$ROOT" && "$GO" build -o "$tmp/sandboxio" ./cmd/sandboxio)

log "docker-compose up -d (project $PROJECT)"
compose up -d

# The creds the one-shot auth-init and tenants-init wrote into the volume.
copy_creds() { # PATH-IN-VOLUME DEST
	local id
	id=$(compose ps -q auth-init) && [[ -n $id ]] || die "no auth-init container"
	docker cp "$id:/data/$1" "$2" >/dev/null
}
log "copying creds out of the auth volume"
copy_creds creds/admin.creds "$tmp/admin.creds" || die "no admin creds in the auth volume"
case ${SBX_SMOKE_AS:-tenant-a} in
admin) cp "$tmp/admin.creds" "$tmp/client.creds" ;;
*) copy_creds "creds/tenants/${SBX_SMOKE_AS:-tenant-a}.creds" "$tmp/client.creds" || die "no tenant creds in the auth volume" ;;
esac
sbx() { "$tmp/sandboxio" --nats "$URLS" --creds "$tmp/client.creds" "$@"; }
sbx_admin() { "$tmp/sandboxio" --nats "$URLS" --creds "$tmp/admin.creds" "$@"; }

# poll CMD... until it succeeds or SECONDS_MAX pass
retry() {
	local max=$1; shift
	local end=$((SECONDS + max))
	until "$@" >"$tmp/out" 2>"$tmp/err"; do
		((SECONDS < end)) || { cat "$tmp/out" "$tmp/err" >&2; return 1; }
		sleep 1
	done
}
workers_live() { sbx_admin backends >"$tmp/backends" && grep -q docker-1 "$tmp/backends" && grep -q fake-1 "$tmp/backends"; }

log "waiting for the cluster, both workers and a router"
start=$SECONDS
retry 120 sbx backends || die "no router answered within 120 s"
retry 60 workers_live || die "workers did not register (docker-1, fake-1)"
log "ready after $((SECONDS - start)) s"

# Authentication is on: no creds, no access, and a clear error at once.
if "$tmp/sandboxio" --nats "$URLS" backends >"$tmp/out" 2>"$tmp/err"; then
	die "a client without creds was served"
fi
grep -q "authorization violation" "$tmp/err" || { cat "$tmp/err" >&2; die "no clear authorization error without creds"; }
log "ok: a client without creds is refused: $(head -c 200 "$tmp/err")"

check_run() { # EXPECT ARGS...
	local want=$1; shift
	local out
	out=$(sbx run "$@" 2>"$tmp/run.err") || { cat "$tmp/run.err" >&2; die "sandboxio run $* failed"; }
	[[ $out == "$want" ]] || die "sandboxio run $*: got '$out', want '$want'"
	log "ok: sandboxio run $* -> $out"
}
check_run hello --class fake -- echo hello
if docker image inspect sandboxio/python:3.11 >/dev/null 2>&1; then
	check_run 42 -- python3 -c 'print(6*7)'
else
	log "skipping the Docker class: no sandboxio/python:3.11 image (deploy/images/build.sh)"
fi

# Lose a node: the cluster keeps quorum with two of three.
log "killing NATS node n2"
compose kill n2 >/dev/null 2>&1
t0=$SECONDS
retry 60 sbx run --class fake -- echo after-kill || die "no run within 60 s of losing n2"
log "ok: run after losing n2 succeeded $((SECONDS - t0)) s after the kill: $(cat "$tmp/out")"
if docker image inspect sandboxio/python:3.11 >/dev/null 2>&1; then
	# The streams whose leader was on n2 may still be electing a new one
	# (4-10 s): requests in that window fail with retryable errors.
	t1=$SECONDS
	retry 60 sbx run -- python3 -c 'print(6*7)' || die "no Docker run within 60 s of losing n2"
	log "ok: Docker run after losing n2 -> $(cat "$tmp/out") ($((SECONDS - t0)) s after the kill, $((SECONDS - t1)) s of retries; errors: $(tr '\n' ' ' <"$tmp/err" | head -c 200))"
fi
log "restarting n2"
compose start n2 >/dev/null 2>&1
check_run back --class fake -- echo back
log "PASS"
