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
# linux/arm64 builds and runs under emulation (issue 22): qemu's user-mode aarch64 emulator,
# registered with the kernel's binfmt_misc by binfmt-support
[ -x /usr/libexec/qemu-binfmt/aarch64-binfmt-P ] || need+=(qemu-user-static)
command -v update-binfmts >/dev/null || need+=(binfmt-support)
if [ ${#need[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# binfmt_misc may be unmounted in a container or a minimal VM: mount it, then (re)register aarch64
# (flags F: the kernel opens the emulator at registration, so it works inside containers and
# chroots too). Docker's engine runs linux/arm64 containers and BuildKit arm64 steps through it.
if [ ! -e /proc/sys/fs/binfmt_misc/register ]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ] || update-binfmts --enable qemu-aarch64
grep -qx enabled /proc/sys/fs/binfmt_misc/qemu-aarch64 \
  || { echo "qemu-aarch64 is registered but disabled in binfmt_misc" >&2; exit 1; }
echo "system deps ok: $(dockerd --version); linux/arm64 through $(sed -n 's/^interpreter //p' /proc/sys/fs/binfmt_misc/qemu-aarch64)"
