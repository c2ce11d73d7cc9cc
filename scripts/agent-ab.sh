#!/bin/bash
# agent-ab.sh AGENT_A AGENT_B ROUNDS [BENCH ARGS...]: two sbx-agent builds on the user's path. Two
# `sandboxio dev --backends docker` (the sandboxio on PATH, or $SBX_BIN), one per agent
# (SBX_AGENT_BINARY), live side by side on ports 14801 and 14802; `bench exec --class base` runs
# against each in turn, ROUNDS times, so that both see the same machine (docs/benchmarks.md).
# Default bench args: -n 400 -c 8 --conns 2 --duration 8s. Prints each run's sequential and
# concurrent lines.
set -u
a=$1; b=$2; rounds=$3; shift 3
args=("$@"); [ ${#args[@]} -eq 0 ] && args=(-n 400 -c 8 --conns 2 --duration 8s)
bin=${SBX_BIN:-sandboxio}
tmp=$(mktemp -d)
pids=()
for i in 1 2; do
  agent=$a; [ $i = 2 ] && agent=$b
  mkdir -p "$tmp/$i"
  SBX_AGENT_BINARY=$agent "$bin" dev --backends docker --listen 127.0.0.1:1480$i --data-dir "$tmp/$i/data" --log-level warn > "$tmp/$i/dev.log" 2>&1 &
  pids+=($!)
done
for i in 1 2; do for _ in $(seq 1 300); do grep -q listening "$tmp/$i/dev.log" && break; sleep 0.1; done; done
for r in $(seq 1 "$rounds"); do
  for i in 1 2; do
    name=A; [ $i = 2 ] && name=B
    echo "== round $r $name $(date -u +%H:%M:%S) load $(cut -d' ' -f1 /proc/loadavg)"
    "$bin" --nats nats://127.0.0.1:1480$i bench exec --class base --quiet --rss-pid dev=${pids[$((i-1))]} "${args[@]}" | grep -E '^exec '
  done
done
kill -INT "${pids[@]}"; wait
rm -rf "$tmp"
