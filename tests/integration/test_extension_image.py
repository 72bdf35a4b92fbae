"""A real CUDA image with extensions (issue 23), built by the real CLI on the real engine and
checked without a GPU:
- `--with bitsandbytes`: PyPI's bitsandbytes wheel resolved for torch 2.13.0+cu130, installed in
  its constrained layer; the validator's ext.load loads its CUDA 13.0 library;
- `--build-extension tests/fixtures/extensions/envbuild-tiny-cuda --gpu A100`: the builder stage
  compiles a real CUDA extension with nvcc from PyPI for sm_80 only; only its wheel reaches the
  image (no nvcc, no sources there), and ext.load imports it;
- a second image of the family (one more --pip package) reuses the compiled wheel: BuildKit
  serves the builder's compile step from its cache (the log says CACHED), timed;
- `--with xformers --with bitsandbytes` on torch 2.10.0: xformers' one Linux wheel is compiled
  against torch 2.10.0+cu128, so the resolver takes PyPI's CUDA 12.8 torch; ext.load loads
  xformers' C++ library (libcudart.so.12 from the cu12 wheels) and bitsandbytes' CUDA 12.8 one.
The env stage (base, Python, torch stack) equals test_cuda_image's plain image, which runs just
before (tests/conftest.py HEAVY_FIRST), so its layers come from the cache.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuild.matrix import Matrix
from tests.support import FIXTURES, IN_CI, run_cli, work_dir
from tests.support.cuda_facts import assert_wheel_facts
from tests.support.registry import start_registry

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DOCKER = "/usr/bin/docker"
BASE = os.environ.get("ENVBUILD_TEST_BASE", "local/debian:bookworm")
TINY = FIXTURES / "extensions" / "envbuild-tiny-cuda"
EXT = "envbuild-ext-test/cuda:ext"
EXT2 = "envbuild-ext-test/cuda:ext-more"
XF = "envbuild-ext-test/cuda:xformers"


def _make(tag: str, src: Path, wheelhouse: Path, *extra: str
          ) -> tuple[int, dict[str, Any] | None, str, float]:
    t = time.monotonic()
    r = run_cli("make", "--target", "cuda", "--torch", "2.13.0", "--without", "torchvision",
                "--without", "torchaudio", "--base-image", BASE, "--wheelhouse", str(wheelhouse),
                "--gpu", "A100", "--with", "bitsandbytes",
                "--build-extension", str(src), "--tag", tag, "--progress", "plain", "--json",
                "--ca-cert", "/etc/ssl/certs/ca-certificates.crt",  # PyPI through the TLS proxy
                *extra, timeout=2400)
    data = json.loads(r.stdout) if r.stdout.strip().startswith("{") else None
    return r.returncode, data, r.stdout + r.stderr, time.monotonic() - t


def _team_wheelhouse(name: str) -> Path:
    """A wheelhouse of this run's own (hard links to the CUDA wheelhouse's wheels): the compiled
    extension's ext-KEY directory goes there, not into the shared fixture."""
    d = work_dir() / f"{name}-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    for whl in (work_dir() / "cuda-wheelhouse").glob("*.whl"):
        os.link(whl, d / whl.name)
    return d


@pytest.fixture(scope="module")
def images(docker_engine: None, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[dict[str, Any]]:
    if subprocess.run([DOCKER, "image", "inspect", BASE], capture_output=True,
                      timeout=60).returncode != 0 or \
            not list((work_dir() / "cuda-wheelhouse").glob("torch-2.13.0-cp311-*.whl")):
        msg = f"{BASE} or the CUDA wheelhouse missing (make fixtures)"
        pytest.fail(msg) if IN_CI else pytest.skip(msg)
    # a source of this run's own (a comment in setup.py differs), so the first image compiles it
    # whatever an earlier run left in BuildKit's cache, and the second can only reuse that
    src = tmp_path_factory.mktemp("src") / TINY.name
    shutil.copytree(TINY, src)
    with (src / "setup.py").open("a") as f:
        f.write(f"# run {uuid.uuid4().hex}\n")
    # two machines of one team: each its own wheelhouse, one registry between them
    houses = [_team_wheelhouse("ext-wheelhouse-a"), _team_wheelhouse("ext-wheelhouse-b")]
    reg_root = tmp_path_factory.mktemp("registry")
    reg, addr = start_registry(reg_root)
    out: dict[str, Any] = {"houses": houses, "registry": addr}
    try:
        # the wheels go to the registry without the 7.4 GB image (its push: 144 s here)
        out["ext"] = _make(EXT, src, houses[0], "--ext-wheels", addr)
        # the second machine takes the wheels from the registry (--push REGISTRY looks there
        # too) and its image is checked by importing the extension (below), not by the whole
        # validator again
        out["ext2"] = _make(EXT2, src, houses[1], "--pip", "einops", "--ext-wheels", addr,
                            "--no-validate")
        yield out
    finally:
        reg.terminate()
        reg.wait(timeout=30)
        subprocess.run([DOCKER, "rmi", "-f", EXT, EXT2],
                       capture_output=True, timeout=300)
        for d in [*houses, reg_root]:  # the registry holds a CUDA image: gigabytes
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def xformers_image(docker_engine: None) -> Iterator[tuple[int, Any, str, float]]:
    wheelhouse = work_dir() / "cuda12-wheelhouse"
    if not list(wheelhouse.glob("xformers-0.0.35-*.whl")):
        msg = "the CUDA 12 wheelhouse missing (make fixtures)"
        pytest.fail(msg) if IN_CI else pytest.skip(msg)
    t = time.monotonic()
    try:
        r = run_cli("make", "--target", "cuda", "--torch", "2.10.0", "--without", "torchvision",
                    "--without", "torchaudio", "--base-image", BASE, "--wheelhouse",
                    str(wheelhouse), "--gpu", "A100", "--with", "xformers", "--with",
                    "bitsandbytes", "--tag", XF, "--progress", "plain", "--json",
                    "--ca-cert", "/etc/ssl/certs/ca-certificates.crt", timeout=2400)
        data = json.loads(r.stdout) if r.stdout.strip().startswith("{") else None
        yield r.returncode, data, r.stdout + r.stderr, time.monotonic() - t
    finally:
        subprocess.run([DOCKER, "rmi", "-f", XF], capture_output=True, timeout=300)


def test_xformers_and_bitsandbytes_on_a_cuda_12_torch(
        xformers_image: tuple[int, Any, str, float], matrix: Matrix) -> None:
    rc, data, log, seconds = xformers_image
    assert rc == 0 and data is not None, log[-3000:]
    spec = data["spec"]
    assert (spec["torch"], spec["variant"]) == ("2.10.0", "cu128")
    checks = _checks(data)
    assert checks["ext.load"]["status"] == "pass", checks["ext.load"]
    assert "xformers 0.0.35 (C++ library loaded)" in checks["ext.load"]["detail"]
    assert "bitsandbytes 0.50.2 (libbitsandbytes_cuda128.so loads)" in checks["ext.load"]["detail"]
    assert checks["expect.torch_version"]["status"] == "pass"  # torch 2.10.0 left in place
    assert checks["ext.kernel"]["status"] == "skip"
    assert data["validation"]["summary"]["fail"] == 0
    # the real wheel against the matrix's 2.10 cu128 row: arch list, CUDA, cuDNN, NCCL
    variant = next(v for v in matrix.variants_of("2.10") if v.tag == "cu128")
    assert_wheel_facts(checks, spec, variant, "2.10 cu128")
    print(f"\nxformers image: {seconds:.0f} s")


def _checks(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in data["validation"]["checks"]}


def test_the_image_builds_and_its_extensions_load_without_a_gpu(
        images: dict[str, Any]) -> None:
    rc, data, log, seconds = images["ext"]
    assert rc == 0 and data is not None, log[-3000:]
    load = _checks(data)["ext.load"]
    assert load["status"] == "pass", load
    assert "bitsandbytes 0.50.2 (libbitsandbytes_cuda130.so loads)" in load["detail"]
    assert "envbuild-tiny-cuda 0.1.0" in load["detail"]
    assert _checks(data)["ext.kernel"]["status"] == "skip"  # no GPU here: said, not passed
    print(f"\nextension image: {seconds:.0f} s")


def test_only_the_wheel_reaches_the_image(images: dict[str, Any]) -> None:
    assert images["ext"][0] == 0
    script = ("import sysconfig, pathlib; p = pathlib.Path(sysconfig.get_paths()['purelib']); "
              "print(sorted(x.name for x in (p / 'nvidia' / 'cu13' / 'bin').glob('*')) "
              "if (p / 'nvidia' / 'cu13' / 'bin').is_dir() else []); "
              "print(pathlib.Path('/opt/envbuild/ext-src').exists()); "
              "import torch, envbuild_tiny_cuda; print(envbuild_tiny_cuda.__file__)")
    r = subprocess.run([DOCKER, "run", "--rm", "--network", "none", "--entrypoint",
                        "/opt/venv/bin/python", EXT, "-c", script], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    bins, src, module = r.stdout.split("\n")[:3]
    assert "nvcc" not in bins and src == "False" and module.endswith(".so")


def test_the_compiled_wheel_is_kept_in_the_wheelhouse_and_pushed_to_the_registry(
        images: dict[str, Any]) -> None:
    rc, data, log, _ = images["ext"]
    assert rc == 0 and data is not None, log[-3000:]
    compiled = data["compiled_extensions"]
    key = compiled["key"]
    assert compiled["prebuilt"] is False and re.fullmatch(r"[0-9a-f]{16}", key)
    kept = images["houses"][0] / f"ext-{key}"
    assert compiled["kept"] == str(kept)
    assert [p.name for p in kept.iterdir()] == \
        [p.name for p in kept.glob("envbuild_tiny_cuda-0.1.0-*.whl")] != []
    assert data["pushed"] is None  # --ext-wheels: the wheels, not the image
    assert compiled["pushed"].startswith(
        f"{images['registry']}/envbuild-ext-wheels:{key}@sha256:")


def test_the_next_image_reuses_the_compiled_wheel_from_the_registry(
        images: dict[str, Any]) -> None:
    """Another machine (its own, empty wheelhouse) pulls the wheels the first one pushed: its
    Dockerfile has no builder stage, and no compiler runs."""
    rc, data, log, seconds = images["ext2"]
    assert rc == 0 and data is not None, log[-3000:]
    first = data["compiled_extensions"]
    key = images["ext"][1]["compiled_extensions"]["key"]
    assert first["key"] == key and first["prebuilt"] is True
    assert first["from"] == f"{images['registry']}/envbuild-ext-wheels:{key}"
    assert list((images["houses"][1] / f"ext-{key}").glob("envbuild_tiny_cuda-*.whl"))
    second = Path(data["image"]["log"]).read_text()
    assert "ext-builder" not in second and "build-extensions: " not in second
    r = subprocess.run([DOCKER, "run", "--rm", "--network", "none", "--entrypoint",
                        "/opt/venv/bin/python", EXT2, "-c",
                        "import torch, envbuild_tiny_cuda; print(envbuild_tiny_cuda.__file__)"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith(".so"), r.stderr[-2000:]
    built = re.search(r"envbuild-tiny-cuda built in (\d+) s",
                      Path(images["ext"][1]["image"]["log"]).read_text())
    assert built, "the first image compiled the extension in its builder stage"
    print(f"\ncompiled once in {built.group(1)} s; the next image {seconds:.0f} s with the "
          f"wheels from the registry (first: {images['ext'][3]:.0f} s); seconds: first "
          f"{images['ext'][1]['seconds']}, next {data['seconds']}")
