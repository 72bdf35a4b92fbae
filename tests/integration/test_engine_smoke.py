"""The Docker engine the later tests build with answers, through the real client."""

from __future__ import annotations

import subprocess

import pytest

pytestmark = pytest.mark.docker


def test_engine_answers_and_has_buildkit(docker_engine: None) -> None:
    import docker

    client = docker.from_env(timeout=30)
    assert client.ping() is True
    info = client.info()
    assert info["Driver"] in ("overlay2", "vfs", "fuse-overlayfs", "btrfs", "zfs")
    # The daemon's built-in BuildKit builds a RUN --mount Dockerfile (no syntax line).
    p = subprocess.run(["/usr/bin/docker", "build", "-q", "-"], input="FROM scratch\nLABEL a=b\n",
                       capture_output=True, text=True, timeout=120,
                       env={"DOCKER_BUILDKIT": "1", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith("sha256:")
