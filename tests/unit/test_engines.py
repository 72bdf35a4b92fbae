"""Builders beyond this machine (issue 22): a team image's engine (per platform), the endpoint
every engine call of a build goes to, and the registry cache a second engine builds from."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.engine import docker
from envbuild.features import team, teamfile

F = Path("/team/envbuild.toml")
TEAM = """
[defaults]
registry = "127.0.0.1:5000/ml"
target = "cpu"
engine = "unix:///run/docker-a.sock"

[image.train]
platforms = ["linux/amd64", "linux/arm64"]

[image.train.arm64]
engine = "ssh://builder@arm64-host"

[image.cpu]
"""


def test_an_engine_per_image_and_per_platform() -> None:
    t = teamfile.parse(TEAM, F)
    train = t.image("train")
    assert train.on("linux/amd64").engine == "unix:///run/docker-a.sock"
    assert train.on("linux/arm64").engine == "ssh://builder@arm64-host"
    assert t.image("cpu").engine == "unix:///run/docker-a.sock"
    assert teamfile.parse('[image.a]\n', F).image("a").engine is None


@given(st.sampled_from(["", "docker.sock", "http://h:2375", "unix://", "tcp://h;rm -rf /",
                        "tcp://h 2375", "ssh://u@h`id`", "unix:///x$(id)", "tcp://h\n"]))
def test_a_bad_engine_address_is_one_usage_error(value: str) -> None:
    text = f'[image.a]\nengine = {value!r}\n'.replace("'", '"')
    with pytest.raises(UsageError) as exc:
        teamfile.parse(text, F)
    assert exc.value.exit_code == 2 and "[image.a]" in exc.value.message


def test_endpoint_aims_the_cli_and_is_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    assert "DOCKER_HOST" not in docker.cli_env() and not docker.remote_engine()
    with docker.endpoint("tcp://builder.example.com:2376"):
        assert docker.cli_env()["DOCKER_HOST"] == "tcp://builder.example.com:2376"
        assert docker.remote_engine()
        with docker.endpoint(None):  # None keeps the current one
            assert docker.current_endpoint() == "tcp://builder.example.com:2376"
    assert "DOCKER_HOST" not in docker.cli_env()
    with docker.endpoint("unix:///run/docker-b.sock"):
        assert not docker.remote_engine()
    assert os.environ.get("DOCKER_HOST") is None


def test_build_argv_carries_the_registry_cache() -> None:
    b = docker.Builder("/usr/bin/docker", False, "20.10", "test")
    argv = docker.build_argv(b, Path("/ctx"), Path("/iid"), {}, {}, "plain",
                             cache_from=["r:5000/ml/a@sha256:" + "1" * 64], inline_cache=True)
    assert argv[argv.index("--cache-from") + 1] == "r:5000/ml/a@sha256:" + "1" * 64
    assert "BUILDKIT_INLINE_CACHE=1" in argv and argv[-1] == "/ctx"
    plain = docker.build_argv(b, Path("/ctx"), Path("/iid"), {}, {}, "plain")
    assert "--cache-from" not in plain and "BUILDKIT_INLINE_CACHE=1" not in plain


def test_the_lock_names_every_registry_image_to_take_layers_from() -> None:
    d1, d2, d3 = ("sha256:" + c * 64 for c in "123")
    lock = {"image": {
        "a": {"tag": "r:5000/ml/a:torch2.13.0-cpu-py3.11-abc", "digest": d1},
        "local": {"tag": "a:torch2.13.0-cpu-py3.11-abc", "digest": ""},
        "train": {"tag": "r:5000/ml/train:t-def", "digest": d2, "platforms": {
            "linux/arm64": {"tag": "r:5000/ml/train:t-arm64-0", "digest": d3}}}}}
    assert team.registry_images(lock) == (f"r:5000/ml/a@{d1}", f"r:5000/ml/train@{d3}")
    assert team.registry_images(None) == ()
