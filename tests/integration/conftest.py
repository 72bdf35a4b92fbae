"""Integration tests: a Docker engine, a registry, Slurm. In CI nothing here skips: a missing
engine or fixture fails. The fixtures every module here shares: the engine, the local base image
with its wheelhouse (`fixtures`), the proxy on the docker bridge."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from tests.support import IN_CI, ROOT, docker_available
from tests.support.docker_helpers import fixtures  # noqa: F401 (a fixture, registered here)
from tests.support.proxy import bridge, proxy  # noqa: F401 (fixtures, registered here)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    """Tests that need a Docker engine: in CI a missing engine is a failure, never a skip."""
    problem = docker_available()
    if problem:
        if IN_CI:
            pytest.fail(f"CI must provide a Docker engine (make engine): {problem}")
        pytest.skip(problem)
    yield


@pytest.fixture(scope="module", autouse=True)
def disk_headroom() -> None:
    """Before each module: where the engine's disk has less than 30 GB free, keep only the newest
    12 GB of BuildKit's cache (the rule in .ci/engine.sh). A whole run builds the CUDA image, the
    arm64 image and the team images: their cache outgrew a 70 GB disk in one run and failed the
    last module with ENOSPC. Done here, between modules, so no build loses its cache mid-way."""
    if docker_available():
        return
    subprocess.run(
        ["bash", str(ROOT / ".ci" / "engine.sh"), "prune-if-low"],
        env={**os.environ, "MIN_FREE_GB": "30", "KEEP_GB": "12"},
        check=True,
    )
