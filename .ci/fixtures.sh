#!/usr/bin/env bash
# Test fixtures that need the outside world once, then are reused:
#   - local/debian:bookworm: a minimal Debian base image made with debootstrap (no image registry here)
#   - $WORK/wheelhouse: torch==2.13.0 (CPU) and its dependencies for offline builds
#   - $WORK/cuda-wheelhouse: PyPI's own torch==2.13.0, the CUDA 13.0 build, with its nvidia-* cu13
#     wheels (about 2.7 GB), plus one CUDA 12 runtime wheel for the mixed-image test
#     (tests/integration/test_cuda_image.py). pip --isolated: this host's pip config adds a local CPU wheel
#     directory, which must not answer here.
#   - local/debian:bookworm-arm64: the same Debian as linux/arm64 (debootstrap --foreign, then its
#     second stage run emulated in a chroot), for the emulated arm64 build (issue 22)
#   - $WORK/cuda12-wheelhouse: PyPI's torch==2.10.0 (CUDA 12.8) and xformers 0.0.35 (issue 23)
#   - $WORK/cuda-wheelhouse-arm64: PyPI's torch==2.13.0 for linux/aarch64, the CUDA 13.0 (sbsa)
#     build, with its aarch64 nvidia-* wheels (about 3 GB)
# Stand-in bases for the real base images (ubuntu:24.04's uid-1000 user, odd uid/gid 1000 states,
# python3 without venv, the dnf family) are built FROM local/debian:bookworm by
# tests/integration/test_bases.py itself, with BuildKit so that re-runs come from its cache; they need Debian's mirror like the
# rendered Dockerfiles do.
set -euo pipefail
work=${1:-.work}
mkdir -p "$work"
work=$(cd "$work" && pwd)
image=${ENVBUILD_TEST_BASE:-local/debian:bookworm}
mirror=${DEBIAN_MIRROR:-$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)}
mirror=${mirror:-http://deb.debian.org/debian}

if ! /usr/bin/docker image inspect "$image" >/dev/null 2>&1; then
  root=$(mktemp -d "$work/rootfs.XXXX")
  trap 'rm -rf "$root"' EXIT
  echo "debootstrap bookworm from $mirror ..."
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | /usr/bin/docker import \
    -c 'CMD ["/bin/bash"]' -c 'ENV LANG=C.UTF-8' - "$image" >/dev/null
  echo "made $image"
else
  echo "$image present"
fi

wh="$work/wheelhouse"
if ! ls "$wh"/torch-2.13.0*.whl >/dev/null 2>&1; then
  mkdir -p "$wh"
  python3 -m pip download -q --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
    --implementation cp -d "$wh" 'torch==2.13.0' 2>"$work/pip-download.log" \
    || python3 -m pip download -q -d "$wh" 'torch==2.13.0'
  echo "wheelhouse ready: $(ls "$wh" | wc -l) files"
else
  echo "wheelhouse present"
fi

# pypi_wheels MACHINE DIR LOG [pip options and requirements]: PyPI's own binary wheels for
# CPython 3.11 on Linux MACHINE (x86_64, aarch64), whatever this host is
pypi_wheels() {
  local machine=$1 dir=$2 log=$3 plats=()
  shift 3
  for n in 17 18 24 25 26 27 28 31 34 35; do plats+=(--platform "manylinux_2_${n}_${machine}"); done
  python3 -m pip download --isolated -q --only-binary=:all: --python-version 3.11 \
    --implementation cp "${plats[@]}" --platform "manylinux2014_${machine}" -d "$dir" "$@" \
    2>>"$log" || { tail -20 "$log" >&2; exit 1; }
}

cwh="$work/cuda-wheelhouse"
if ! ls "$cwh"/torch-2.13.0-cp311-*.whl >/dev/null 2>&1 \
    || ! ls "$cwh"/nvidia_cuda_runtime_cu12-*.whl >/dev/null 2>&1; then
  mkdir -p "$cwh"
  : >"$work/pip-download-cuda.log"
  pypi_wheels x86_64 "$cwh" "$work/pip-download-cuda.log" 'torch==2.13.0'
  pypi_wheels x86_64 "$cwh" "$work/pip-download-cuda.log" --no-deps \
    'nvidia-cuda-runtime-cu12==12.8.90'
  echo "CUDA wheelhouse ready: $(ls "$cwh" | wc -l) files, $(du -sh "$cwh" | cut -f1)"
else
  echo "CUDA wheelhouse present"
fi

# $WORK/cuda12-wheelhouse: PyPI's torch==2.10.0, the CUDA 12.8 build with its nvidia-* cu12 wheels,
# and xformers 0.0.35, whose one Linux wheel is compiled against torch 2.10.0+cu128 (about 3 GB),
# for the xformers image (tests/integration/test_extension_image.py)
xwh="$work/cuda12-wheelhouse"
if ! ls "$xwh"/torch-2.10.0-*cp311-*.whl >/dev/null 2>&1 || ! ls "$xwh"/xformers-0.0.35-*.whl >/dev/null 2>&1; then
  mkdir -p "$xwh"
  : >"$work/pip-download-cuda12.log"
  pypi_wheels x86_64 "$xwh" "$work/pip-download-cuda12.log" 'torch==2.10.0' 'xformers==0.0.35'
  echo "CUDA 12 wheelhouse ready: $(ls "$xwh" | wc -l) files, $(du -sh "$xwh" | cut -f1)"
else
  echo "CUDA 12 wheelhouse present"
fi

arm_image=${ENVBUILD_TEST_BASE_ARM64:-local/debian:bookworm-arm64}
if ! /usr/bin/docker image inspect "$arm_image" >/dev/null 2>&1; then
  aroot=$(mktemp -d "$work/rootfs-arm64.XXXX")
  actx=$(mktemp -d "$work/ctx-arm64.XXXX")
  trap 'umount -R "$aroot/proc" "$aroot/sys" 2>/dev/null || true; rm -rf "$aroot" "$actx"' EXIT
  echo "debootstrap bookworm arm64 from $mirror (two stages, the second emulated) ..."
  t0=$(date +%s)
  debootstrap --arch=arm64 --variant=minbase --foreign bookworm "$aroot" "$mirror" \
    >"$work/debootstrap-arm64.log" 2>&1 || { tail -20 "$work/debootstrap-arm64.log" >&2; exit 1; }
  chroot "$aroot" /debootstrap/debootstrap --second-stage >>"$work/debootstrap-arm64.log" 2>&1 \
    || { tail -20 "$work/debootstrap-arm64.log" >&2; exit 1; }
  umount -R "$aroot/proc" "$aroot/sys" 2>/dev/null || true
  rm -rf "$aroot"/var/cache/apt/archives/*.deb "$aroot"/var/lib/apt/lists/*
  tar -C "$aroot" -cf "$actx/rootfs.tar" .
  # `docker import --platform linux/arm64` records amd64 on this engine: a BuildKit build records
  # the platform it is given
  printf '%s\n' 'FROM scratch' 'ADD rootfs.tar /' 'ENV LANG=C.UTF-8' 'CMD ["/bin/bash"]' \
    >"$actx/Dockerfile"
  DOCKER_BUILDKIT=1 /usr/bin/docker build -q --platform linux/arm64 -t "$arm_image" "$actx" \
    >/dev/null
  arch=$(/usr/bin/docker image inspect -f '{{.Architecture}}' "$arm_image")
  [ "$arch" = arm64 ] || { echo "$arm_image records $arch, not arm64" >&2; exit 1; }
  echo "made $arm_image in $(( $(date +%s) - t0 )) s"
else
  echo "$arm_image present"
fi

awh="$work/cuda-wheelhouse-arm64"
if ! ls "$awh"/torch-2.13.0-cp311-*aarch64*.whl >/dev/null 2>&1; then
  mkdir -p "$awh"
  : >"$work/pip-download-arm64.log"
  pypi_wheels aarch64 "$awh" "$work/pip-download-arm64.log" 'torch==2.13.0'
  echo "arm64 CUDA wheelhouse ready: $(ls "$awh" | wc -l) files, $(du -sh "$awh" | cut -f1)"
else
  echo "arm64 CUDA wheelhouse present"
fi
