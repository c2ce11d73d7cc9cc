#!/bin/bash
# sustain.sh BIN RUNS: one long-lived dev, RUNS consecutive `bench exec -n 3000` runs: rate, dev CPU per exec and RSS after each (docs/benchmarks.md)
B=$1; runs=$2; port=14723; d=$(mktemp -d)
$B dev --backends fake --listen 127.0.0.1:$port --data-dir $d/data --log-level warn > $d/dev.log 2>&1 & pid=$!
for _ in $(seq 1 100); do grep -q listening $d/dev.log && break; sleep 0.1; done
for i in $(seq 1 $runs); do
  r=$($B --nats nats://127.0.0.1:$port bench --quiet exec -n 3000 --duration 8s --warmup 10 --rss-pid dev=$pid 2>&1 | grep 'exec concurrent' | awk '{print "rate", $10, $11}')
  echo "$(basename $B) run $i: ops rate cpu = $r  rss=$(grep VmRSS /proc/$pid/status | awk '{print $2/1024}') MiB load $(cut -d' ' -f1 /proc/loadavg)"
done
kill -INT $pid; wait $pid; rm -rf $d
