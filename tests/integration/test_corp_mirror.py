"""A PyPI mirror as the torch index, on a real engine: a PEP 503 simple index generated over the
local torch wheelhouse and served over HTTP to the build.

What this proves, and what it does not:
- the PyPI-like path: a CUDA request on a `/simple` index renders `torch==2.13.0` (no +cu130),
  pip inside the build resolves it from the served index, and the validator then checks which
  build arrived. The only torch wheel here is `2.13.0+cpu` (PEP 440: `==2.13.0` ignores a
  candidate's local tag, so pip takes it), so the validator must *fail* the image: that is the
  "validator confirms the CUDA build" half, seen from its failing side. A real cu130 wheel
  cannot be installed on this machine (its nvidia-* wheels are not downloadable here).
- the PyTorch-layout override: the same served index declared `--torch-index-kind pytorch`
  gives exact `+cpu` pins, and the CPU image builds and validates.
- a non-default variant on the PyPI-like index is refused before any build (the served index
  sees no request).
The server listens on the docker0 gateway address, not 127.0.0.1: build steps run in the bridge
network, where 127.0.0.1 is the build container itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support import run_cli
from tests.support.docker_helpers import BASE, docker, image_exists
from tests.support.mirror import _gateway, simple_index
from tests.support.served import serve

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@dataclass
class Mirror:
    url: str
    requests: list[str] = field(default_factory=list)


@pytest.fixture(scope="module")
def mirror(fixtures: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Mirror]:
    root = tmp_path_factory.mktemp("mirror")
    simple_index(fixtures, root)
    with serve(root, _gateway()) as served:
        yield Mirror(served.url + "/simple", served.seen)


COMMON = ["--torch", "2.13.0", "--python", "3.11", "--without", "torchvision", "--without",
          "torchaudio", "--base-image", BASE, "--progress", "plain", "--json"]


def _make(*args: str) -> tuple[int, dict[str, Any], str]:
    r = run_cli("make", *args)
    try:
        data = json.loads(r.stdout)
    except json.JSONDecodeError:
        data = {}
    return r.returncode, data, r.stderr + r.stdout


def _rmi(tag: str) -> None:
    docker("image", "rm", tag, check=False)


def test_non_default_variant_refused_before_any_request(mirror: Mirror, tmp_path: Path) -> None:
    before = len(mirror.requests)
    tag = "envbuild-corp/mirror:refused"
    rc, _, err = _make("--target", "cpu", "--os", "debian12", *COMMON, "--tag", tag,
                       "--torch-index-url", mirror.url, "--out", str(tmp_path / "ctx"))
    assert rc == 1, err
    assert "PyPI-like" in err and "--torch-index-kind pytorch" in err
    assert len(mirror.requests) == before and not image_exists(tag)
    assert not (tmp_path / "ctx").exists()


def test_pypi_mirror_pins_default_variant_and_validator_judges_the_build(
        mirror: Mirror, tmp_path: Path) -> None:
    tag = "envbuild-corp/mirror:pypi-cu130"
    ctx = tmp_path / "ctx"
    start = len(mirror.requests)
    try:
        rc, data, err = _make("--target", "cuda", "--cuda", "13.0", "--os", "debian12",
                              *COMMON, "--tag", tag, "--torch-index-url", mirror.url,
                              "--out", str(ctx))
        pins = [x for x in (ctx / "requirements.txt").read_text().splitlines()
                if x and not x.startswith("#")]
        assert pins == ["torch==2.13.0"], pins
        seen = mirror.requests[start:]
        assert any(s.startswith("GET /simple/torch/") for s in seen), seen
        assert image_exists(tag), err[-3000:]  # the build itself succeeded through the mirror
        # ... and the validator refuses the CPU wheel the mirror served under torch==2.13.0
        assert rc == 1, err[-3000:]
        report = json.dumps(data.get("validation"))
        assert "2.13.0+cpu" in report, report[:3000]
    finally:
        _rmi(tag)


def test_pytorch_layout_declared_builds_and_validates(mirror: Mirror, tmp_path: Path) -> None:
    tag = "envbuild-corp/mirror:pytorch-cpu"
    ctx = tmp_path / "ctx"
    start = len(mirror.requests)
    try:
        rc, data, err = _make("--target", "cpu", "--os", "debian12", *COMMON, "--tag", tag,
                              "--torch-index-url", mirror.url, "--torch-index-kind", "pytorch",
                              "--out", str(ctx))
        assert rc == 0, err[-3000:]
        assert "torch==2.13.0+cpu" in (ctx / "requirements.txt").read_text()
        seen = mirror.requests[start:]
        assert any(s.startswith("GET /simple/torch/") for s in seen), seen
        assert data.get("validation"), data
    finally:
        _rmi(tag)


def test_the_exact_local_pin_has_no_match_there(mirror: Mirror, tmp_path: Path) -> None:
    """Why the local tag must go: the served PyPI-like index has torch 2.13.0, but no
    `torch==2.13.0+cu130` (what envbuild rendered before). Host pip, no engine involved."""
    r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir",
                        "--index-url", mirror.url, "-d", str(tmp_path), "torch==2.13.0+cu130"],
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode != 0 and "No matching distribution" in r.stderr, r.stderr[-2000:]
    assert "2.13.0+cpu" in r.stderr  # the index listed what it has
