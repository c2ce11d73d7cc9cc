#!/bin/bash
# agent-cpu-ab.sh DIR...: BenchmarkAgentSustained from each DIR (a dw.test with its sbx-agent beside it,
# `go test -c -tags integration -o DIR/dw.test ./services/docker-worker/`), in the order given (ABBA);
# prints execs/s and the agents' CPU per exec sampled over 5 s of the run (ADR 26, docs/benchmarks.md).
cd "$(dirname "$0")/../services/docker-worker" || exit 1
ticks() { for p in $(pgrep -f 'sbx-agent serve'); do read -r l < /proc/$p/stat 2>/dev/null || continue; r=${l##*) }; set -- $r; echo $((${12}+${13})); done | awk '{s+=$1} END {print s+0}'; }
for d in "$@"; do
  "$d/dw.test" -test.run '^$' -test.bench 'AgentSustained$' -test.benchtime 1x > /tmp/agent-cpu-ab.out 2>&1 &
  for _ in $(seq 1 150); do grep -q READY /tmp/agent-cpu-ab.out && break; sleep 0.2; done
  sleep 2; t0=$(ticks); sleep 5; t1=$(ticks); wait
  r=$(awk '/^execs\/s/ {print $2}' /tmp/agent-cpu-ab.out)
  echo "$d $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg) execs/s $r agent-cpu-ms/exec $(awk -v t=$((t1-t0)) -v r=$r 'BEGIN {printf "%.3f", t*10/(r*5)}')"
done
