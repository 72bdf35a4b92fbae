"""A real linux/arm64 CUDA image, built and checked here under emulation (issue 22).

PyPI's torch 2.13.0 for linux/aarch64 is the CUDA 13.0 (sbsa) build; .ci/fixtures.sh downloads it
with its aarch64 nvidia-* wheels into .work/cuda-wheelhouse-arm64 and makes an arm64 Debian base
(local/debian:bookworm-arm64, by two-stage debootstrap). The module runs the real CLI once:
`make --platform linux/arm64` on that base, the torch stage on this machine's own Debian
(--build-base-image local/debian:bookworm), the rest emulated by qemu through binfmt_misc, and the
GPU-less check in an emulated container with envbuild's stand-in CPU sysfs. Its image is removed at
the end.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from envbuild.core.platforms import on_platform
from envbuild.matrix import Matrix
from envbuild.validator.judges import EMULATION_NOT_RUN, GPU_ONLY_CHECKS
from envbuild.validator.rules import arch_names
from tests.support import IN_CI, run_cli, work_dir
from tests.support.cuda_facts import assert_wheel_facts

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOCKER = "/usr/bin/docker"
ARM_BASE = os.environ.get("ENVBUILD_TEST_BASE_ARM64", "local/debian:bookworm-arm64")
BUILD_BASE = os.environ.get("ENVBUILD_TEST_BASE", "local/debian:bookworm")
TORCH = "2.13.0"
IMAGE = "envbuild-arm64-test/cuda:plain"
# What the image is, proved without a GPU and under emulation: versions, the real arch list,
# cuDNN, NCCL, the CUDA packages and libraries and where torch loads them from, a CPU matmul.
FACTS = ("expect.python", "expect.torch_version", "expect.flavor", "expect.cuda_version",
         "expect.cudnn", "expect.nccl", "expect.archs", "cuda.packages", "cuda.libs",
         "cuda.require", "cuda.triton", "libs.origin", "image.no_driver_userspace",
         "numerics.matmul", "facts.torch")


def docker(*args: str, check: bool = True,
           timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check,
                          timeout=timeout, env={**os.environ, "DOCKER_BUILDKIT": "1"})


@pytest.fixture(scope="module")
def built(docker_engine: None) -> Iterator[tuple[int, Any, str]]:
    wheelhouse = work_dir() / "cuda-wheelhouse-arm64"
    missing = [what for what, ok in (
        (ARM_BASE, docker("image", "inspect", ARM_BASE, check=False).returncode == 0),
        (BUILD_BASE, docker("image", "inspect", BUILD_BASE, check=False).returncode == 0),
        (str(wheelhouse), bool(list(wheelhouse.glob(f"torch-{TORCH}-cp311-*aarch64*.whl")))),
        ("qemu-aarch64 in binfmt_misc", os.path.exists("/proc/sys/fs/binfmt_misc/qemu-aarch64")),
    ) if not ok]
    if missing:
        msg = f"missing for the arm64 build: {', '.join(missing)} (make install)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    try:
        r = run_cli("make", "--target", "cuda", "--torch", TORCH, "--without", "torchvision",
                    "--without", "torchaudio", "--platform", "linux/arm64",
                    "--base-image", ARM_BASE, "--build-base-image", BUILD_BASE,
                    "--wheelhouse", str(wheelhouse), "--tag", IMAGE, "--progress", "plain",
                    "--json", timeout=2400)
        data = json.loads(r.stdout) if r.stdout.strip().startswith("{") else None
        yield r.returncode, data, r.stdout + r.stderr[-4000:]
    finally:
        docker("rmi", "-f", IMAGE, check=False)
        docker("builder", "prune", "--filter", "type=source.local", "-f", check=False)


def _checks(data: Any) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in data["validation"]["checks"]}


def test_arm64_image_passes_the_gpu_less_check_emulated_with_no_fact_skipped(
        built: tuple[int, Any, str], matrix: Matrix) -> None:
    code, data, text = built
    assert code == 0 and data is not None, text
    spec = data["spec"]
    assert (spec["platform"], spec["variant"], spec["torch_cuda"]) == \
        ("linux/arm64", "cu130", "13.0")
    checks = _checks(data)
    for cid in FACTS:
        assert checks[cid]["status"] == "pass", (cid, checks[cid])
    # the artifact against the matrix's arm64 row: the wheel's real arch list, cuDNN, NCCL
    variant = next(v for v in on_platform(matrix, "linux/arm64").variants_of("2.13")
                   if v.tag == "cu130")
    assert spec["archs"] == arch_names(variant.sass, variant.ptx)
    assert_wheel_facts(checks, spec, variant, "[[platform]] 2.13 cu130 linux/arm64")
    # what emulation cannot judge is said, never passed; the GPU's own checks apart
    block = data["validation"]["gpu_less"]
    assert sorted(block["not_run"]) == sorted(GPU_ONLY_CHECKS)
    assert sorted(block["not_run_emulated"]) == sorted(set(EMULATION_NOT_RUN)
                                                       - set(GPU_ONLY_CHECKS))
    for cid in EMULATION_NOT_RUN:
        assert checks[cid]["status"] == "not_run", (cid, checks[cid])
    for cid in set(EMULATION_NOT_RUN) - set(GPU_ONLY_CHECKS):
        assert "emulated" in checks[cid]["reason"], checks[cid]
    assert data["validation"]["summary"]["fail"] == 0


def test_make_says_the_build_and_the_check_ran_emulated(built: tuple[int, Any, str]) -> None:
    _, data, text = built
    assert data is not None, text
    assert "qemu-aarch64" in (data["image"]["emulated"] or ""), data["image"]
    how = data["validation"]["options"]["emulated"]
    assert "qemu-aarch64" in how and "/sys/devices/system/cpu a stand-in (MIDR_EL1 0x" in how
    assert how in _checks(data)["compile.smoke"]["reason"]
    assert data["seconds"]["build"] > 0 and data["seconds"]["validate"] > 0


def test_the_image_is_arm64_and_runs_aarch64(built: tuple[int, Any, str]) -> None:
    code, _, text = built
    assert code == 0, text
    assert docker("image", "inspect", "-f", "{{.Architecture}}", IMAGE).stdout.strip() == "arm64"
    out = docker("run", "--rm", "--platform", "linux/arm64", IMAGE, "bash", "-c",
                 "uname -m; head -1 /opt/venv/bin/torchrun; /opt/venv/bin/python -c "
                 "'import sys, sysconfig; print(sysconfig.get_platform())'").stdout.split()
    # the torch stack came from the native stage: its scripts point at the image's venv
    assert out == ["aarch64", "#!/opt/venv/bin/python", "linux-aarch64"], out
