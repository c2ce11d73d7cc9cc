#!/bin/bash
# bench-cs.sh AGENT [BENCH ARGS...]: one `sandboxio dev --backends docker,fake` (the sandboxio on PATH, or
# $SBX_BIN) with that sbx-agent build, `bench exec --class base` (default -n 800 -c 8 --conns 2
# --duration 20s), and, over 5 s of the concurrent series, the context switches and CPU (ticks of
# 10 ms a second) of dev and of all agents, summed over their threads (docs/benchmarks.md). Alternate two builds in turn to compare them on a noisy machine.
set -u
agent=$1; shift
args=("$@"); [ ${#args[@]} -eq 0 ] && args=(-n 800 -c 8 --conns 2 --duration 20s)
bin=${SBX_BIN:-sandboxio}
port=${SBX_CS_PORT:-14811}
d=$(mktemp -d)
SBX_AGENT_BINARY=$agent "$bin" dev --backends docker,fake --listen 127.0.0.1:$port --data-dir "$d/data" --log-level warn > "$d/dev.log" 2>&1 &
dp=$!
for _ in $(seq 1 300); do grep -q listening "$d/dev.log" && break; sleep 0.1; done
"$bin" --nats nats://127.0.0.1:$port bench exec --class base --quiet --rss-pid dev=$dp "${args[@]}" > "$d/bench.txt" 2>&1 &
bp=$!
sleep "${SBX_CS_SLEEP:-9}" # into the concurrent series
snap() {
  for p in $(pgrep -x sbx-agent) $dp; do
    name=agents; [ "$p" = "$dp" ] && name=dev
    for t in /proc/$p/task/*; do
      echo "$name $(awk '/ctxt/{s+=$2} END{printf "%d", s}' "$t/status" 2>/dev/null) $(awk '{print $14+$15}' "$t/stat" 2>/dev/null)"
    done
  done | awk 'NF==3 {cs[$1]+=$2; cpu[$1]+=$3} END {for (k in cs) print k, cs[k], cpu[k]}' | sort
}
snap > "$d/s1"; sleep 5; snap > "$d/s2"
wait $bp
grep -E '^exec' "$d/bench.txt"
join "$d/s1" "$d/s2" | awk '{printf "%s: %d context switches/s, CPU %.1f ticks/s\n", $1, ($4-$2)/5, ($5-$3)/5}'
kill -INT $dp; wait $dp
rm -rf "$d"
