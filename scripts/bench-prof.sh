#!/bin/bash
# bench-prof.sh: CPU and allocation profiles of `sandboxio dev` under `sandboxio bench` (docs/benchmarks.md).
#   scripts/bench-prof.sh BIN exec|stream OUT
# starts BIN dev --backends fake with --pprof, runs the bench scenario, and 7 s into it (SLEEP) takes an 8 s CPU
# profile (OUT.pprof) and the allocations of the same 8 s (OUT.allocs); the bench's report goes to OUT.bench.
#   go tool pprof -top BIN OUT.pprof; go tool pprof -sample_index=alloc_space -top BIN OUT.allocs
set -u
bin=$1; scen=$2; out=$3
port=${SBX_PROF_PORT:-14732}; pport=${SBX_PROF_PPROF:-16061}
d=$(mktemp -d)
"$bin" dev --backends fake --listen 127.0.0.1:$port --data-dir "$d/data" --log-level warn --pprof 127.0.0.1:$pport > "$d/dev.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do grep -q listening "$d/dev.log" && break; sleep 0.1; done
case $scen in
exec) args=(exec -n 5000 --duration 20s) ;;
stream) args=(stream -n 14 --size 64MiB --duration 30s); SLEEP=${SLEEP:-1} ;; # 14 x 64 MiB stays under a sandbox's 1 GiB share of SBX_OUT (40 ran into SBX_E1706)
*) echo "scenario: exec or stream" >&2; exit 2 ;;
esac
"$bin" --nats nats://127.0.0.1:$port bench --quiet --rss-pid dev=$pid "${args[@]}" > "$out.bench" 2>&1 &
bp=$!
sleep "${SLEEP:-7}"
curl -s -o "$out.allocs" "http://127.0.0.1:$pport/debug/pprof/allocs?seconds=8" &
curl -s -o "$out.pprof" "http://127.0.0.1:$pport/debug/pprof/profile?seconds=8"
wait $bp
kill -INT $pid; wait $pid
rm -rf "$d"
