"""Pure parts of the private-registry handling: which registry an image is on, and which build
lines mean a refused login (the real engine test is tests/integration/test_corp_registry.py)."""

from __future__ import annotations

import pytest

from envbuild.core.refs import registry_of
from envbuild.engine.build import base_image_of
from envbuild.engine.docker import registry_denied


@pytest.mark.parametrize("ref,reg", [
    ("127.0.0.1:5000/a/b:1", "127.0.0.1:5000"), ("registry.corp/x", "registry.corp"),
    ("localhost/x:1", "localhost"), ("ubuntu:24.04", "docker.io"),
    ("nvidia/cuda:13.0.2-base-ubuntu24.04", "docker.io"),
])
def test_registry_of(ref: str, reg: str) -> None:
    assert registry_of(ref) == reg


@pytest.mark.parametrize("line,denied", [
    ("#3 ERROR: failed to authorize: failed to fetch oauth token: 401 Unauthorized", True),
    ("error: unauthorized: authentication required", True),
    ("denied: requested access to the resource is denied", True),
    ("ERROR: No matching distribution found for torch==2.13.0", False),
    ("pull access denied for x, repository does not exist", False),
])
def test_denied_lines(line: str, denied: bool) -> None:
    assert registry_denied([line]) is denied


@pytest.mark.parametrize("dockerfile,base", [
    ("# x\nFROM 127.0.0.1:5000/a/b:1\nRUN true\n", "127.0.0.1:5000/a/b:1"),
    ("FROM --platform=linux/amd64 registry.corp/x AS y\n", "registry.corp/x"),
    ("RUN true\n", "(unknown)"),
])
def test_base_image_of(dockerfile: str, base: str) -> None:
    assert base_image_of(dockerfile) == base
