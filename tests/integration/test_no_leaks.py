"""Runs last (the `leak_check` marker, ordered by tests/conftest.py): after the whole suite no
envbuild-labelled container is left."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.leak_check]


def test_no_envbuild_containers_left(docker_engine: None) -> None:
    p = subprocess.run(["/usr/bin/docker", "ps", "-a", "--filter", "label=io.envbuild.role",
                        "--format", "{{.ID}} {{.Image}} {{.Status}}"],
                       capture_output=True, text=True, check=True, timeout=30)
    assert p.stdout.strip() == ""
