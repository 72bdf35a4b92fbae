"""The registry client against a real registry (Debian's docker-registry, no engine needed) and
the bearer-token flow against a small local token-auth server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuild.engine import registry
from tests.support.registry import PASSWORD, USER, _store


@pytest.mark.parametrize("key", ["index.docker.io", "docker.io", "https://index.docker.io/v1/"])
def test_docker_hub_helpers_are_found_by_the_keys_docker_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str) -> None:
    _, calls = _store(tmp_path, monkeypatch, "none", "https://index.docker.io/v1/")
    cfg = {"credHelpers": {key: "envbuildtest"}}
    (tmp_path / "cfg" / "config.json").write_text(json.dumps(cfg))
    assert registry._docker_auth("docker.io") == (USER, PASSWORD)
    assert calls.read_text().split() == ["get", "https://index.docker.io/v1/"]
