#!/usr/bin/env bash
# Authentication for deploy/k8s: write the NATS account layout with
# `sandboxio auth init` and `sandboxio tenant add` into DIR (kept on the
# operator's machine: it holds the operator and account seeds), then store
# what each workload needs as one Secret per role in namespace sandboxio:
#
#   sandboxio-auth-nats           nats-server.conf (operator, accounts, resolver /data/resolver)
#   sandboxio-auth-router         creds/router.creds, keys/signing-router.nk, keys/port-link.key
#   sandboxio-auth-docker-worker  creds/worker.creds, keys/seal.xk, keys/signing-docker.nk,
#                                 keys/commanders.txt
#   sandboxio-auth-auditor        creds/auditor.creds, keys/signers.txt, keys/signing-auditor.nk
#   sandboxio-auth-reaper         creds/reaper.creds, keys/signing-reaper.nk
#
#   deploy/k8s/auth-init.sh DIR [TENANT...]      (default tenant: tenant-a)
#   kubectl apply -f deploy/k8s/
#   sandboxio bus init --dir DIR --replicas 3 --nats nats://127.0.0.1:4222
#
# The last step creates the streams and buckets as admin, through
# `kubectl -n sandboxio port-forward svc/sandboxio-nats-client 4222`: no
# service credential may create or update a stream (ADR 35), so the
# services wait until it has run.
#
# Run it again after adding tenants (it keeps what DIR holds and updates the
# Secrets); push a new tenant to the running cluster with
#   sandboxio tenant add NAME --dir DIR --push --nats nats://127.0.0.1:4222
# through `kubectl -n sandboxio port-forward svc/sandboxio-nats-client 4222`.
# SBX_K8S_PRINT=1 prints the Secrets as YAML instead of applying them.
set -Eeuo pipefail

SBX=${SANDBOXIO:-sandboxio}
KUBECTL=${KUBECTL:-kubectl}
(($# >= 1)) || { echo "usage: $0 DIR [TENANT...]" >&2; exit 2; }
dir=$1
shift
tenants=("$@")
((${#tenants[@]} > 0)) || tenants=(tenant-a)

"$SBX" auth init --dir "$dir" --if-missing --resolver-dir /data/resolver
"$SBX" tenant add "${tenants[@]}" --dir "$dir" --if-missing

secret() { # NAME KEY=FILE...
	local name=$1 args=()
	shift
	for kv in "$@"; do args+=(--from-file="$kv"); done
	if [[ ${SBX_K8S_PRINT:-} == 1 ]]; then
		echo "---"
		"$KUBECTL" -n sandboxio create secret generic "$name" "${args[@]}" --dry-run=client -o yaml
	else
		"$KUBECTL" -n sandboxio create secret generic "$name" "${args[@]}" --dry-run=client -o yaml | "$KUBECTL" apply -f -
	fi
}
secret sandboxio-auth-nats nats-server.conf="$dir/nats-server.conf"
secret sandboxio-auth-router router.creds="$dir/creds/router.creds" signing-router.nk="$dir/keys/signing-router.nk" \
	port-link.key="$dir/keys/port-link.key"
secret sandboxio-auth-docker-worker worker.creds="$dir/creds/worker.creds" seal.xk="$dir/keys/seal.xk" \
	signing-docker.nk="$dir/keys/signing-docker.nk" commanders.txt="$dir/keys/commanders.txt"
secret sandboxio-auth-auditor auditor.creds="$dir/creds/auditor.creds" signers.txt="$dir/keys/signers.txt" signing-auditor.nk="$dir/keys/signing-auditor.nk"
secret sandboxio-auth-reaper reaper.creds="$dir/creds/reaper.creds" signing-reaper.nk="$dir/keys/signing-reaper.nk"
echo "tenant creds: $dir/creds/tenants/" >&2
