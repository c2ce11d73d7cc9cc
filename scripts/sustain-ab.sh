#!/bin/bash
# sustain-ab.sh A B ROUNDS: two long-lived devs (A on 14724, B on 14725) and bench exec -n 3000 on each in turn, ROUNDS times: sustained throughput of two builds under the same host load (docs/benchmarks.md)
A=$1; B=$2; rounds=$3; d=$(mktemp -d)
$A dev --backends fake --listen 127.0.0.1:14724 --data-dir $d/a --log-level warn > $d/a.log 2>&1 & pa=$!
$B dev --backends fake --listen 127.0.0.1:14725 --data-dir $d/b --log-level warn > $d/b.log 2>&1 & pb=$!
for _ in $(seq 1 100); do grep -q listening $d/a.log && grep -q listening $d/b.log && break; sleep 0.1; done
for i in $(seq 1 $rounds); do
  for side in a b; do
    if [ $side = a ]; then port=14724; pid=$pa; bin=$A; else port=14725; pid=$pb; bin=$B; fi
    st0=$(awk '{print $9}' <(head -1 /proc/stat))
    r=$($B --nats nats://127.0.0.1:$port bench --quiet exec -n 3000 --duration 8s --warmup 10 --rss-pid dev=$pid 2>&1 | grep 'exec concurrent' | awk '{print $4, $10, $11}')
    st1=$(awk '{print $9}' <(head -1 /proc/stat))
    echo "round $i $side $(basename $bin): ops rate cpu = $r rss=$(grep VmRSS /proc/$pid/status | awk '{printf "%d", $2/1024}')MiB steal=$((st1-st0)) load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
kill -INT $pa $pb; wait; rm -rf $d
