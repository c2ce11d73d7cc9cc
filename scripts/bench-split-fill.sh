#!/bin/bash
# bench-split-fill.sh BIN N: split mode (nats-server, router, fake-worker, auditor as four processes on
# 127.0.0.1:14733), then time a fill to N live fake sandboxes with 16 creates in flight, and count the
# creates the worker refused as expired (SBX_E1608). docs/benchmarks.md: the pool consumer's stall.
set -u
B=$1; n=$2; d=$(mktemp -d); cd "$d"; U=nats://127.0.0.1:14733
"$B" nats-server --listen 127.0.0.1:14733 --store-dir ./js --server-name split-fill > nats.log 2>&1 & np=$!
sleep 2
"$B" --nats $U router > router.log 2>&1 & rp=$!
"$B" --nats $U fake-worker --worker-id split-fill > worker.log 2>&1 & wp=$!
"$B" --nats $U auditor --log ./audit.jsonl > auditor.log 2>&1 & ap=$!
sleep 3
s=$(date +%s.%N)
timeout 120 "$B" --nats $U bench --quiet live --live "$n" --parallel 16 --samples 5 --sandbox-timeout 900 --timeout 100s > live.txt 2>&1; rc=$?
e=$(date +%s.%N)
echo "fill $n: rc=$rc $(echo "$e - $s" | bc) s, creates refused SBX_E1608: $(grep -c SBX_E1608 worker.log)"
kill -INT $rp $wp $ap; sleep 4; kill -INT $np; wait
cd /; rm -rf "$d"
