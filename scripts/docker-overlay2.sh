#!/bin/bash
# docker-overlay2.sh start|stop [DIR]: a second Docker daemon on this host with the overlay2 storage
# driver, beside the machine's own (left untouched), to tell what a storage driver costs from what the
# code costs (docs/benchmarks.md). Its own data root, exec root, pid file
# and socket under DIR (default /tmp/sbx-overlay2), no bridge and no iptables rules (sandboxes
# without a network only). Root, and a backing filesystem that overlay2 accepts (ext4, xfs).
#   sudo scripts/docker-overlay2.sh start
#   DOCKER_HOST=unix:///tmp/sbx-overlay2/docker.sock deploy/images/build.sh base
#   DOCKER_HOST=unix:///tmp/sbx-overlay2/docker.sock SBX_BIN=bin/sandboxio scripts/bench-cs.sh bin/sbx-agent
#   sudo scripts/docker-overlay2.sh stop     # stops it and removes DIR
set -eu
cmd=${1:-}; dir=${2:-/tmp/sbx-overlay2}
case $cmd in
start)
  mkdir -p "$dir/root" "$dir/exec"
  echo '{}' > "$dir/daemon.json"
  setsid dockerd --data-root "$dir/root" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
    -H "unix://$dir/docker.sock" --storage-driver overlay2 --bridge none --iptables=false --ip6tables=false \
    --config-file "$dir/daemon.json" > "$dir/dockerd.log" 2>&1 < /dev/null &
  for _ in $(seq 1 100); do
    DOCKER_HOST="unix://$dir/docker.sock" docker info > /dev/null 2>&1 && { echo "DOCKER_HOST=unix://$dir/docker.sock"; exit 0; }
    sleep 0.2
  done
  echo "docker-overlay2.sh: the daemon did not start; see $dir/dockerd.log" >&2; exit 1 ;;
stop)
  if [ -f "$dir/docker.pid" ]; then
    pid=$(cat "$dir/docker.pid")
    kill -TERM "$pid" 2> /dev/null || true
    for _ in $(seq 1 150); do kill -0 "$pid" 2> /dev/null || break; sleep 0.2; done
    if kill -0 "$pid" 2> /dev/null; then echo "docker-overlay2.sh: dockerd $pid still running; $dir kept" >&2; exit 1; fi
  fi
  rm -rf "$dir" ;;
*) echo "usage: $0 start|stop [DIR]" >&2; exit 2 ;;
esac
