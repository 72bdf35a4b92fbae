"""Integration tests: a Docker engine, a registry, Slurm. In CI nothing here skips: a missing
engine or fixture fails. The fixtures every module here shares: the engine, the local base image
with its wheelhouse (`fixtures`), the proxy on the docker bridge."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import IN_CI, docker_available
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
