"""Real CUDA images, built from PyPI's CUDA torch wheel and checked without a GPU.

PyPI's torch 2.13.0 for Linux x86_64 *is* the CUDA 13.0 build (with its nvidia-* cu13 wheels,
downloaded once into .work/cuda-wheelhouse by .ci/fixtures.sh). The module builds, with the real
CLI and a real engine:
- the plain-base image: `make --target cuda --base-image local/debian:bookworm` (the base is
  inspected: Debian 12, no NVIDIA settings, so envbuild writes them);
- the default render on a stand-in for nvidia/cuda:13.0.2-base (STANDIN_DOCKERFILE: NVIDIA's
  environment, label and loader configuration, and a CUDA runtime in /usr/local/cuda/lib64);
- a mixed image: the plain one plus a CUDA 12 nvidia-* package (`--pip`), which must fail.
Every image is removed at the end; the torch layer is shared by the plain and the mixed image.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuild.matrix import Matrix, load
from tests.support import FIXTURES, IN_CI, ROOT, run_cli, work_dir
from tests.support.cuda_facts import assert_wheel_facts
from tests.support.forward_compat import TOP, _standin_archive
from tests.support.mirror import _gateway
from tests.support.served import Served, serve

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOCKER = "/usr/bin/docker"
BASE = os.environ.get("ENVBUILD_TEST_BASE", "local/debian:bookworm")
TORCH = "2.13.0"
MIXED_PKG = "nvidia-cuda-runtime-cu12"  # a CUDA 12 runtime wheel (fixtures.sh downloads it)
PLAIN = "envbuild-cuda-test/cuda:plain"
ON_STANDIN = "envbuild-cuda-test/cuda:standin"
MIXED = "envbuild-cuda-test/cuda:mixed"
STANDIN = "envbuild-cuda-test/nvidia-cuda:13.0.2-base-standin"
COMPAT = "envbuild-cuda-test/cuda:forward-compat"
COMPAT_BAD = "envbuild-cuda-test/cuda:forward-compat-tampered"
# --forward-compat for an H100 on R535: the plain image plus NVIDIA's compat libraries, from a
# mirror of the redist root served on docker's bridge (the recorded manifest, its archive entry
# pointing at a stand-in archive of the same layout)
FORWARD = ["--forward-compat", "--driver", "535.104.05", "--gpu", "H100"]

# What nvidia/cuda:13.0.2-base-* gives an image, from NVIDIA's base Dockerfile (dist/13.0.2,
# S-NV-CONTAINER-MIRROR): the runtime's environment with NVIDIA_REQUIRE_CUDA's brand clauses,
# CUDA_VERSION, the maintainer label, nvidia.conf and PATH/LD_LIBRARY_PATH, and a CUDA runtime
# (cuda-cudart-13-0) in /usr/local/cuda/lib64, which is on LD_LIBRARY_PATH: here the wheel's own
# libcudart.so.13 stands for it. Not reproduced: the cuda-compat libraries (NVIDIA's driver
# build, not downloadable here) and the Ubuntu userland (the local Debian is the OS).
_BRANDS = " ".join(f"brand={b},driver>={d},driver<{int(d) + 1}"
                   for d in ("535", "550", "565", "570", "575")
                   for b in ("unknown", "grid", "tesla", "nvidia", "quadro", "quadrortx",
                             "nvidiartx", "vapps", "vpc", "vcs", "vws", "cloudgaming"))
STANDIN_DOCKERFILE = f"""FROM {BASE}
ENV NVARCH=x86_64
ENV NVIDIA_REQUIRE_CUDA="cuda>=13.0 {_BRANDS}"
ENV NV_CUDA_CUDART_VERSION=13.0.96-1
LABEL maintainer="NVIDIA CORPORATION <cudatools@nvidia.com>"
ENV CUDA_VERSION=13.0.2
COPY libcudart.so.13 /usr/local/cuda-13.0/targets/x86_64-linux/lib/libcudart.so.13
RUN ln -s cuda-13.0 /usr/local/cuda && ln -s targets/x86_64-linux/lib /usr/local/cuda-13.0/lib64
RUN echo "/usr/local/cuda/lib64" >> /etc/ld.so.conf.d/nvidia.conf && ldconfig
ENV PATH=/usr/local/nvidia/bin:/usr/local/cuda/bin:${{PATH}}
ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64:/usr/local/cuda/lib64
ENV NVIDIA_VISIBLE_DEVICES=all
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
"""

# Checks that prove the image without a GPU: each must pass on every good CUDA image.
FACTS = ("expect.python", "expect.torch_version", "expect.flavor", "expect.cuda_version",
         "expect.cudnn", "expect.nccl", "expect.archs", "cuda.packages", "cuda.libs",
         "cuda.require", "cuda.triton", "compile.smoke", "libs.origin",
         "image.no_driver_userspace")
GPU_ONLY = ("device.count", "device.properties", "device.arch_coverage", "device.kernel",
            "perf.matmul", "perf.mem_bw", "perf.h2d", "memory.estimate")


def docker(*args: str, check: bool = True,
           timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check,
                          timeout=timeout, env={**os.environ, "DOCKER_BUILDKIT": "1"})


def _skip_or_fail(msg: str) -> None:
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


def _make(*args: str, json_out: bool = True,
          env: dict[str, str] | None = None) -> tuple[int, Any, str]:
    r = run_cli("make", "--torch", TORCH, "--without", "torchvision", "--without", "torchaudio",
                "--progress", "plain", *args, *(["--json"] if json_out else []), timeout=2400,
                env=env)
    data = None
    if json_out and r.stdout.strip().startswith("{"):
        data = json.loads(r.stdout)
    return r.returncode, data, r.stdout + r.stderr[-4000:]


@pytest.fixture(scope="module")
def built(docker_engine: None, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[dict[str, tuple[int, Any, str]]]:
    wheelhouse = work_dir() / "cuda-wheelhouse"
    torch_wheels = list(wheelhouse.glob(f"torch-{TORCH}-cp311-*.whl"))
    runtime = list(wheelhouse.glob("nvidia_cuda_runtime-13*.whl"))
    if docker("image", "inspect", BASE, check=False).returncode != 0 or not torch_wheels \
            or not runtime or not list(wheelhouse.glob("nvidia_cuda_runtime_cu12-*.whl")):
        _skip_or_fail(f"{BASE} or the CUDA wheelhouse {wheelhouse} missing (make fixtures)")
    ctx = tmp_path_factory.mktemp("standin")
    with zipfile.ZipFile(runtime[0]) as z:
        member = next(n for n in z.namelist() if n.endswith("/libcudart.so.13"))
        (ctx / "libcudart.so.13").write_bytes(z.read(member))
    (ctx / "Dockerfile").write_text(STANDIN_DOCKERFILE)
    out: dict[str, tuple[int, Any, str]] = {}
    try:
        docker("build", "-q", "-t", STANDIN, str(ctx))
        common = ["--wheelhouse", str(wheelhouse)]
        out["plain"] = _make("--target", "cuda", "--base-image", BASE, "--tag", PLAIN, *common)
        # the default render (no --target, no --os): its base says what it is
        out["standin"] = _make("--base-image", STANDIN, "--tag", ON_STANDIN, *common)
        cu12 = sorted(wheelhouse.glob("nvidia_cuda_runtime_cu12-*.whl"))[-1].name.split("-")[1]
        out["mixed"] = _make("--target", "cuda", "--base-image", BASE, "--tag", MIXED, *common,
                             "--pip", f"{MIXED_PKG}=={cu12}",
                             "--ca-cert", "/etc/ssl/certs/ca-certificates.crt")
        # warm: nothing changed, the passing GPU-less validation is reused, said in words
        out["warm"] = _make("--target", "cuda", "--base-image", BASE, "--tag", PLAIN, *common,
                            json_out=False)
        mirror = tmp_path_factory.mktemp("redist")
        with serve(mirror, _gateway()) as served:
            out["compat"] = _forward_compat(mirror, served, COMPAT, common, tamper=False)
            out["compat_bad"] = _forward_compat(mirror, served, COMPAT_BAD, common, tamper=True)
            out["compat_log"] = (0, None, "\n".join(served.seen))
        yield out
    finally:
        docker("rmi", "-f", PLAIN, ON_STANDIN, MIXED, STANDIN, COMPAT, COMPAT_BAD, check=False)
        # each build sent the 2.6 GB wheelhouse as a new context, which BuildKit keeps as a
        # source.local snapshot (about 33 GB after this module): drop those, keep the layers
        docker("builder", "prune", "--filter", "type=source.local", "-f", check=False)


def _forward_compat(mirror: Path, served: Served, tag: str, common: list[str], *,
                    tamper: bool) -> tuple[int, Any, str]:
    """The recorded manifest and a matrix copy name a stand-in archive (NVIDIA's bytes cannot be
    had here); tampered: the mirror serves other bytes than both name."""
    archive = _standin_archive({f"{TOP}/compat/libcuda.so.595.71.05": b"\x7fELF stand-in",
                                f"{TOP}/LICENSE": b"stand-in"},
                               {f"{TOP}/compat/libcuda.so.1": "libcuda.so.595.71.05"})
    # the tampered build gets its own path: the same RUN line would be a BuildKit cache hit
    rel = (f"cuda_compat/linux-x86_64/{'tampered' if tamper else 'standin'}-595.71.05_cuda13.2"
           "-archive.tar.xz")
    sha, size = hashlib.sha256(archive).hexdigest(), len(archive)
    (mirror / rel).parent.mkdir(parents=True, exist_ok=True)
    (mirror / rel).write_bytes(archive + b"tampered" if tamper else archive)
    doc = json.loads((FIXTURES / "compat" / "redistrib_13.2.2.json")
                     .read_text())
    doc["cuda_compat"]["linux-x86_64"]["cuda13.x"] = {
        "relative_path": rel, "size": str(size), "sha256": sha}
    (mirror / "redistrib_13.2.2.json").write_text(json.dumps(doc))
    matrix = mirror.parent / f"matrix-{tag.rsplit(':', 1)[-1]}"
    if not matrix.exists():
        shutil.copytree(ROOT / "matrix", matrix)
    cuda = (matrix / "cuda.toml").read_text()
    real = next(c for c in load().compat_packages if c.redist == "13.2.2"
                and c.arch == "linux-x86_64")
    (matrix / "cuda.toml").write_text(cuda.replace(real.sha256, sha)
                                      .replace(f"size = {real.size}", f"size = {size}"))
    return _make("--target", "cuda", "--base-image", BASE, "--tag", tag, *common, *FORWARD,
                 "--cuda-redist-url", served.url + "/", env={"ENVBUILD_MATRIX_DIR": str(matrix)})


def _checks(data: Any) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in data["validation"]["checks"]}


@pytest.mark.parametrize("name", ["plain", "standin"])
def test_cuda_image_builds_and_passes_the_gpu_less_check(built: dict[str, tuple[int, Any, str]],
                                                          name: str, matrix: Matrix) -> None:
    code, data, text = built[name]
    assert code == 0 and data is not None, text
    spec = data["spec"]
    assert (spec["target"], spec["variant"], spec["torch_cuda"]) == ("cuda", "cu130", "13.0")
    variant = next(v for v in matrix.variants_of("2.13") if v.tag == "cu130")
    checks = _checks(data)
    for cid in FACTS:
        assert checks[cid]["status"] == "pass", (cid, checks[cid])
    for cid in GPU_ONLY:
        assert checks[cid]["status"] == "not_run", (cid, checks[cid])
    # the artifact against the matrix: the real arch list, cuDNN and NCCL of the wheel
    assert_wheel_facts(checks, spec, variant, "2.13 cu130")
    assert checks["cuda.triton"]["evidence"]["ptxas_version"]
    block = data["validation"]["gpu_less"]
    assert block["facts"] == sum(1 for c in checks.values() if c["status"] == "pass")
    assert sorted(block["not_run"]) == sorted(GPU_ONLY)
    assert data["validation"]["summary"]["fail"] == 0


def test_plain_base_is_inspected_and_gets_the_runtime_settings(
        built: dict[str, tuple[int, Any, str]], matrix: Matrix) -> None:
    _, data, text = built["plain"]
    assert data is not None, text
    spec = data["spec"]
    base_id = docker("image", "inspect", BASE, "--format", "{{.Id}}").stdout.strip()
    assert (spec["os"], spec["base_image"], spec["base_id"]) == ("debian12", BASE, base_id)
    assert spec["require_cuda"] == "13.0" and spec["cuda_image"] is None
    env = json.loads(docker("image", "inspect", PLAIN, "--format",
                            "{{json .Config.Env}}").stdout)
    assert "NVIDIA_REQUIRE_CUDA=cuda>=13.0" in env
    for name, value in matrix.meta["cuda"]["runtime"]["env"]:
        assert f"{name}={value}" in env
    conf = docker("run", "--rm", PLAIN, "cat", "/etc/ld.so.conf.d/nvidia.conf").stdout.split()
    assert conf == list(matrix.meta["cuda"]["runtime"]["ld_so_conf"])
    labels = json.loads(docker("image", "inspect", PLAIN, "--format",
                               "{{json .Config.Labels}}").stdout)
    assert json.loads(labels["io.envbuild.spec"])["base_id"] == base_id


def test_nvidia_base_keeps_its_own_settings(built: dict[str, tuple[int, Any, str]]) -> None:
    _, data, text = built["standin"]
    assert data is not None, text
    spec = data["spec"]
    assert (spec["base_image"], spec["cuda_image"], spec["os"]) == (STANDIN, "13.0.2", "debian12")
    assert "require_cuda" not in spec  # the base sets NVIDIA_REQUIRE_CUDA, with its brands
    env = json.loads(docker("image", "inspect", ON_STANDIN, "--format",
                            "{{json .Config.Env}}").stdout)
    require = next(e for e in env if e.startswith("NVIDIA_REQUIRE_CUDA="))
    assert require.startswith("NVIDIA_REQUIRE_CUDA=cuda>=13.0 brand=unknown,driver>=535")
    # the base's CUDA runtime is on LD_LIBRARY_PATH, yet torch resolves the wheel's (RPATH)
    libs = _checks(data)["cuda.libs"]["evidence"]["needed"]
    cudart = next(row["path"] for row in libs if row["lib"] == "libcudart.so.13")
    assert "/site-packages/nvidia/cu13/lib/" in cudart


def test_a_cuda_12_package_in_a_cuda_13_image_fails_naming_it(
        built: dict[str, tuple[int, Any, str]]) -> None:
    code, data, text = built["mixed"]
    assert code == 1, text
    assert data is not None, text
    check = _checks(data)["cuda.packages"]
    assert check["status"] == "fail"
    assert MIXED_PKG in check["detail"] and MIXED_PKG in check["remediation"]


def test_make_says_what_was_checked_without_a_gpu(built: dict[str, tuple[int, Any, str]]) -> None:
    code, _, text = built["warm"]
    assert code == 0, text
    line = next(ln for ln in text.splitlines() if ln.startswith("gpu "))
    assert "checked without GPU: " in line and f"{len(GPU_ONLY)} GPU checks not run" in line
    assert "cached pass" in text  # the warm run reused the GPU-less validation


def test_forward_compat_image_carries_the_checked_libraries(
        built: dict[str, tuple[int, Any, str]]) -> None:
    code, data, text = built["compat"]
    assert code == 0 and data is not None, text
    spec = data["spec"]
    assert spec["forward_compat"] == "595.71.05" and spec["min_driver"] == "535.104.05"
    checks = _checks(data)
    for cid in ("cuda.require", "image.no_driver_userspace", "cuda.packages", "device.spec_gpus"):
        assert checks[cid]["status"] == "pass", (cid, checks[cid])
    allowed = checks["image.no_driver_userspace"]["evidence"]["allowed"]
    assert any(p.endswith("/compat/libcuda.so.1") for p in allowed), allowed
    env = json.loads(docker("image", "inspect", COMPAT, "--format",
                            "{{json .Config.Env}}").stdout)
    require = next(e for e in env if e.startswith("NVIDIA_REQUIRE_CUDA="))
    assert "brand=tesla,driver>=535,driver<536" in require
    ls = docker("run", "--rm", COMPAT, "bash", "-c",
                "readlink /usr/local/cuda; ls /usr/local/cuda/compat").stdout.split()
    assert ls == ["cuda-13.2", "libcuda.so.1", "libcuda.so.595.71.05"]
    # the build container fetched the manifest's archive from the mirror
    assert "standin-595.71.05_cuda13.2-archive.tar.xz" in built["compat_log"][2]


def test_forward_compat_archive_with_another_checksum_fails_the_build(
        built: dict[str, tuple[int, Any, str]]) -> None:
    code, _, text = built["compat_bad"]
    assert code != 0 and "not the archive envbuild resolved" in text, text[-3000:]
    assert docker("image", "inspect", COMPAT_BAD, check=False).returncode != 0
