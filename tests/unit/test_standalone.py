"""`--python-source standalone` for real: uv installs CPython into /opt/python in a first stage,
the final image's venv is made from it; uv's download goes through an HTTP proxy with a login.

The stand-in (tests/support/standalone_python.py,
tests/fixtures/standalone/make-cpython.sh): no GitHub here, so no python-build-standalone archive
can be downloaded. The test serves a locally made one:
Debian's CPython relocated into the "install_only" layout (python/bin/python3.11, python/lib/...,
python/include/...), self-contained (its shared libraries beside it, $ORIGIN rpaths), ensurepip
from wheels in the tree. uv gets it through UV_PYTHON_DOWNLOADS_JSON_URL: a download list in uv's
own format naming the archive and its sha256, which uv checks. How the pinned uv (0.13.8) treats
the two ways to point it elsewhere (tried on this machine, 2026-11-23):
- UV_PYTHON_INSTALL_MIRROR replaces only the URL prefix: uv asks for
  `{mirror}/{release}/cpython-{version}%2B{release}-{triple}-install_only_stripped.tar.gz` of the
  release built into uv, and checks the sha256 built into uv (a different archive there fails:
  "Hash mismatch ... Expected ... Computed"). A mirror must be a byte-identical copy: no stand-in
  can pass through it, so for it the tests prove only that the request leaves with that layout.
- UV_PYTHON_DOWNLOADS_JSON_URL replaces uv's list (http(s) URL or file); `sha256` may be null
  (then nothing is checked); an archive with an absolute symlink is refused ("unsafe symbolic-link
  target"). That is what an internal build of the archives needs, and what the tests use.

What the stand-in cannot prove: that a real python-build-standalone archive works in these images
(its static OpenSSL and its own certificate lookup, its stripped build, its sysconfig paths that uv
rewrites on install, its patch release); only that the Dockerfile's stage, uv's download and
install, the copy into the final image, the venv from it and the validator do. It is Debian's
3.11 (the only torch wheels here are cp311), so the final image is checked to hold NO Debian
python at all (/usr/bin/python3*), proving the venv's Python is /opt/python's.

Found by the first real build: the venv was made through a lone symlink /opt/python/python3.11,
so its pyvenv.cfg `home` was /opt/python, where CPython (getpath) finds no standard library and
ensurepip died; the venv is now made from /opt/python/3.11/bin (a link to uv's installation).
"""

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
