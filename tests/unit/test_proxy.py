"""Proxies for the build: from --proxy or the environment, both spellings, validated, redacted,
and on the docker command line as names only (the values travel in the client's environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from envbuild.common.errors import UsageError
from envbuild.common.proxy import build_proxy_env, describe
from envbuild.engine import docker

GOOD = ["http://proxy.corp:3128", "https://proxy.corp", "http://u:p%40ss@10.0.0.1:8080",
        "socks5h://127.0.0.1:1080", "http://[fd00::1]:3128/"]


@pytest.mark.parametrize("url", GOOD)
def test_flag_sets_both_schemes_in_both_spellings(url: str) -> None:
    env = build_proxy_env({"HTTP_PROXY": "http://ignored:1"}, url)
    assert {k: v for k, v in env.items()} == {
        "http_proxy": url, "HTTP_PROXY": url, "https_proxy": url, "HTTPS_PROXY": url}


def test_environment_upper_case_first_and_no_proxy() -> None:
    env = build_proxy_env({"HTTP_PROXY": "http://a:1", "http_proxy": "http://b:2",
                           "https_proxy": "http://c:3", "no_proxy": "localhost, .corp"})
    assert env["http_proxy"] == env["HTTP_PROXY"] == "http://a:1"
    assert env["HTTPS_PROXY"] == "http://c:3"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,.corp"


def test_no_proxy_alone_means_no_proxy() -> None:
    assert build_proxy_env({"NO_PROXY": "localhost"}) == {}
    assert build_proxy_env({}) == {}
    assert build_proxy_env({"HTTP_PROXY": ""}) == {}


BAD = [f"http://p{c}x:3128" for c in ' \t\n\r\x00\x1b"\'`\\'] + [
    "ftp://p:21", "proxy.corp:3128", "http://", "http://p:99999", "http://p:x",
    "http://p/?token=1", "http://p/#frag", "file:///etc/passwd", "http://p:3128/" + "a" * 2001]


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize("source", ["flag", "HTTPS_PROXY", "http_proxy"])
def test_bad_proxy_values_refused(value: str, source: str) -> None:
    with pytest.raises(UsageError):
        if source == "flag":
            build_proxy_env({}, value)
        else:
            build_proxy_env({source: value})


@pytest.mark.parametrize("value", ["a\nb", 'a"b', "a`b", "x\x00"])
def test_bad_no_proxy_refused(value: str) -> None:
    with pytest.raises(UsageError):
        build_proxy_env({"HTTP_PROXY": "http://p:1", "NO_PROXY": value})


def test_describe_masks_credentials() -> None:
    text = describe(build_proxy_env({}, "http://alice:S3CRET@proxy:3128"))
    assert "S3CRET" not in text and "alice" not in text and "proxy:3128" in text


def test_argv_names_only(tmp_path: Path) -> None:
    builder = docker.Builder("/usr/bin/docker", False, "20.10", "test")
    proxies = build_proxy_env({}, "http://alice:S3CRET@proxy:3128")
    argv = docker.build_argv(builder, tmp_path, tmp_path / "iid", {}, {}, "plain",
                             env_build_args=list(proxies))
    assert "S3CRET" not in " ".join(argv)
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    assert sorted(pairs) == sorted(proxies)
