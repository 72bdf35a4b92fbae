"""Helpers shared by the build tests and others (moved out of test_build.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.support import IN_CI, work_dir

DOCKER = "/usr/bin/docker"
BASE = os.environ.get("ENVBUILD_TEST_BASE", "local/debian:bookworm")
SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def docker(*args: str, check: bool = True,
           timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check,
                          timeout=timeout)


@pytest.fixture(scope="session")
def fixtures(docker_engine: None) -> Path:
    wheelhouse = work_dir() / "wheelhouse"
    problems = []
    if docker("image", "inspect", BASE, check=False).returncode != 0:
        problems.append(f"base image {BASE} missing")
    if not list(wheelhouse.glob("torch-2.13.0*.whl")):
        problems.append(f"wheelhouse {wheelhouse} has no torch 2.13.0")
    if problems:
        msg = "; ".join(problems) + " (run `make fixtures`)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return wheelhouse


def cpu_args(wheelhouse: Path, *extra: str) -> list[str]:
    return ["--target", "cpu", "--torch", "2.13.0", "--python", "3.11", "--os", "debian12",
            "--without", "torchvision", "--without", "torchaudio", "--base-image", BASE,
            "--wheelhouse", str(wheelhouse), "--progress", "plain", *extra]


def image_exists(ref: str) -> bool:
    return docker("image", "inspect", ref, check=False).returncode == 0

