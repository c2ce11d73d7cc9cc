#!/bin/bash
# bench-ab.sh: compare two builds of sandboxio by alternating their `dev` under the same bench command
# (docs/benchmarks.md). Build them first, e.g.
#   git worktree add /tmp/sbx-a main && (cd /tmp/sbx-a && go build -o /tmp/sbx-a.bin ./cmd/sandboxio)
#   go build -o /tmp/sbx-b.bin ./cmd/sandboxio
# then: scripts/bench-ab.sh "/tmp/sbx-a.bin /tmp/sbx-b.bin /tmp/sbx-a.bin /tmp/sbx-b.bin" -- exec -n 3000 --duration 8s
# The last binary of the list drives every run; each dev gets a fresh data directory and port 14722,
# and bench reports dev's CPU per operation (--rss-pid).
set -u
order=$1; shift; [ "${1:-}" = "--" ] && shift
port=${SBX_AB_PORT:-14722}
driver=${order##* }
tmp=$(mktemp -d)
for b in $order; do
  d=$tmp/data; rm -rf "$d"; mkdir -p "$d"
  "$b" dev --backends fake --listen 127.0.0.1:$port --data-dir "$d" --log-level warn > "$tmp/dev.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do grep -q listening "$tmp/dev.log" && break; sleep 0.1; done
  echo "== $b $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
  "$driver" --nats nats://127.0.0.1:$port bench --quiet --rss-pid dev=$pid "$@"
  kill -INT $pid; wait $pid
done
rm -rf "$tmp"
