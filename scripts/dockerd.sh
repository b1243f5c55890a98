#!/usr/bin/env bash
# Starts dockerd in the background if none answers. No bridge on a private range, no iptables:
# containers use host networking (see docs/architecture.md).
set -euo pipefail
if docker info >/dev/null 2>&1; then exit 0; fi
mkdir -p /var/log
nohup dockerd --bridge=none --iptables=false --ip-masq=false >/var/log/forge-dockerd.log 2>&1 &
for _ in $(seq 1 60); do
  docker info >/dev/null 2>&1 && exit 0
  sleep 0.5
done
echo "dockerd did not start; see /var/log/forge-dockerd.log" >&2
exit 1
