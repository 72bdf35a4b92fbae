"""`--python-source standalone`, the pure parts: the uv variables passed to the build and the
rendered stages. The builds, and what the stand-in proves: tests/integration/test_standalone.py."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.engine.build import ENV_BUILD_ARGS, env_build_args

STANDALONE_ARGS = "ARG UV_PYTHON_INSTALL_MIRROR\nARG UV_PYTHON_DOWNLOADS_JSON_URL\n"
JSON_URL = "http://mirror.corp:8080/python/downloads.json"


# --- passing the two uv variables to the build (no engine) -------------------------------------

@pytest.mark.parametrize("name", ENV_BUILD_ARGS)
def test_declared_and_set_is_passed(name: str) -> None:
    env = {name: JSON_URL, "OTHER": "x"}
    assert env_build_args(f"FROM x AS python\n{STANDALONE_ARGS}RUN true\n", env) == {
        name: JSON_URL}


@pytest.mark.parametrize("dockerfile", [
    "FROM x\nRUN true\n",
    "FROM x\n# ARG UV_PYTHON_INSTALL_MIRROR\nENV ARG=UV_PYTHON_DOWNLOADS_JSON_URL\n"])
def test_not_declared_not_passed(dockerfile: str) -> None:
    """An OS-Python Dockerfile declares neither: nothing passed (no unused-arg warning), even a
    bad value is ignored."""
    env = {n: "not a url" for n in ENV_BUILD_ARGS}
    assert env_build_args(dockerfile, env) == {}


def test_empty_is_unset() -> None:
    assert env_build_args(STANDALONE_ARGS, {n: "" for n in ENV_BUILD_ARGS}) == {}


_GOOD = ["https://mirror.corp/python", "http://10.0.0.1:8080/pbs/", "https://u:p%40ss@h/x.json",
         "http://[fd00::1]:80/d.json", "https://h/releases/download?x=1"]
_BAD = ([f"https://m{c}x/python" for c in " \t\n\r\x00\x1b\x7f\"'`\\"]
        + [f"https://mirror/{c}" for c in " \n\"'`\\"]
        + ["file:///srv/downloads.json", "/srv/downloads.json", "downloads.json", "ftp://h/x",
           "https://", "http:///x", "mirror.corp/python", "javascript:alert(1)",
           "https://h/" + "a" * 2001])


@pytest.mark.parametrize("value", _GOOD)
@pytest.mark.parametrize("name", ENV_BUILD_ARGS)
def test_good_urls_pass(name: str, value: str) -> None:
    assert env_build_args(STANDALONE_ARGS, {name: value}) == {name: value}


@pytest.mark.parametrize("value", _BAD)
@pytest.mark.parametrize("name", ENV_BUILD_ARGS)
def test_bad_urls_refused_secret_not_echoed(name: str, value: str) -> None:
    secret = "S3CRETtok"
    value = value.replace("://", f"://bob:{secret}@", 1) if "://" in value else value
    with pytest.raises(UsageError) as e:
        env_build_args(STANDALONE_ARGS, {name: value})
    assert name in e.value.message and secret not in str(e.value.message) + str(e.value.hint)


@given(st.text(max_size=60).map(lambda t: "https://mirror.corp/" + t)
       | st.text(max_size=60))
@settings(max_examples=400, deadline=None)
def test_any_value_is_refused_or_a_clean_url(value: str) -> None:
    """Generated values: what passes is an http(s) URL with a host and no whitespace, quote,
    backslash or control character; everything else is a UsageError (never another error)."""
    from urllib.parse import urlsplit
    for name in ENV_BUILD_ARGS:
        try:
            got = env_build_args(STANDALONE_ARGS, {name: value})
        except UsageError:
            continue
        if not value:
            assert got == {}
            continue
        assert got == {name: value}
        assert urlsplit(value).scheme in ("http", "https") and urlsplit(value).hostname
        assert not any(c.isspace() or c in "\"'`\\" or ord(c) < 32 or ord(c) == 127
                       for c in value), value
