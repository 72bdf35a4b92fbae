#!/usr/bin/env bash
# System packages the tests need: a Docker engine (dockerd 20.10 with BuildKit), debootstrap for a
# local base image, Debian's docker-registry for push tests,
# tinyproxy for builds behind a proxy, apache2-utils (htpasswd) for a registry with a login.
# Idempotent.
set -euo pipefail
need=()
command -v dockerd >/dev/null || need+=(docker.io)
[ -x /usr/bin/docker ] || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v docker-registry >/dev/null || need+=(docker-registry)
command -v tinyproxy >/dev/null || need+=(tinyproxy)  # a real HTTP proxy for the proxy build test
command -v htpasswd >/dev/null || need+=(apache2-utils)  # bcrypt htpasswd for the login registry
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "system deps ok: $(dockerd --version)"
