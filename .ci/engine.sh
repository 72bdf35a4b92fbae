#!/usr/bin/env bash
# Start (or check) a local Docker engine on the default socket with overlay2 storage.
set -euo pipefail
cmd=${1:-start}
log=${ENVBUILD_DOCKERD_LOG:-/var/log/envbuild-dockerd.log}
ping() { /usr/bin/docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }
case "$cmd" in
  start)
    if ping; then echo "docker engine already running"; exit 0; fi
    # overlay2 is 5-10x faster than vfs here; never pass --bridge=none (it deletes docker0).
    # setsid: its own session, so the engine outlives the shell (and process group) that started it
    setsid nohup dockerd --storage-driver=overlay2 >"$log" 2>&1 </dev/null &
    for _ in $(seq 1 60); do
      if ping; then echo "docker engine started ($(/usr/bin/docker version --format '{{.Server.Version}}'))"; exit 0; fi
      sleep 0.5
    done
    echo "dockerd did not start; last log lines:" >&2; tail -20 "$log" >&2; exit 1 ;;
  status) ping && echo running || { echo stopped; exit 1; } ;;
  # The suite builds many images (per-run users, bundles, stand-in bases): BuildKit's cache grows by
  # tens of GB a run. Below MIN_FREE_GB free on docker's disk, keep only the newest KEEP_GB of it
  # (a full disk fails builds, and g++ writing torch.compile's headers, far from the real cause).
  prune-if-low)
    root=$(/usr/bin/docker info --format '{{.DockerRootDir}}' 2>/dev/null || echo /var/lib/docker)
    free_gb=$(( $(df -Pk "$root" | awk 'NR==2 {print $4}') / 1048576 ))
    if [ "$free_gb" -lt "${MIN_FREE_GB:-60}" ]; then
      echo "docker disk: ${free_gb} GB free; pruning BuildKit's cache to ${KEEP_GB:-15} GB"
      /usr/bin/docker builder prune -f --keep-storage "${KEEP_GB:-15}GB" | tail -1
    else
      echo "docker disk: ${free_gb} GB free"
    fi ;;
  *) echo "usage: $0 start|status|prune-if-low" >&2; exit 2 ;;
esac
