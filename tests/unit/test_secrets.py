"""Secrets (issue #20, class 3): a login or token in a URL never shows, whatever the URL's shape.

The URLs are generated: with and without a scheme; a userinfo whose password holds ':' '@' '/'
'?' '#' spaces, quotes or percent-escapes; user-only tokens; tokens in a query or fragment;
IPv6 hosts and ports; conda `channel::package` specs and conda `/t/<token>/` paths; pip direct
URLs and pip's own `--extra-index-url` / `-i` option forms. A secret is made of distinctive
chunks (`Zq...`) joined by those characters: no chunk may show anywhere, in any case (a password
masked up to its first '/' whose tail still shows fails, and so does a token lower-cased into a
host name), in stdout, stderr, the JSON error, the files written (Dockerfile, environment.yml,
requirements, constraints, apptainer.def, spec.json, the team lock) and the build context
`make --out` keeps.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvbuildError
from envbuild.common.redact import mask_url, redact, shown
from tests.support.secrets import (
    leaks,
    urls,
)

# -- the masking functions themselves (fast: many examples) ------------------------------------

@given(url=urls(), limit=st.integers(8, 120))
@settings(max_examples=600, deadline=None)
def test_mask_url_hides_every_chunk(url: tuple[str, list[str]], limit: int) -> None:
    value, chunks = url
    assert not leaks(chunks, mask_url(value), shown(value, limit, url=True))
    # a message that quotes the value as envbuild's do, even unmasked: the last line of defence
    for message in (f"--pip-index-url {value!r} is not an http(s) URL with a host",
                    f"error: {value!r}: bad; hint: see {value!r}", repr(value)):
        assert not leaks(chunks, redact(message)), message


@given(url=urls(schemes=("https://", "http://", "git+https://", "ftp://")))
@settings(max_examples=400, deadline=None)
def test_redact_free_text_hides_scheme_urls(url: tuple[str, list[str]]) -> None:
    """Unquoted free text (a log line): a URL with a scheme, its password or token holding no
    whitespace or quote (which would end the URL in prose; envbuild quotes what it echoes)."""
    value, chunks = url
    if any(c in value for c in " '\""):
        value = value.replace(" ", "").replace("'", "").replace('"', "")
    for text in (value, f"Looking in indexes: {value}", f"GET {value} -> 401 (x)",
                 f"{value}\n{value}"):
        assert not leaks(chunks, redact(text)), text


@pytest.mark.parametrize("text", [
    "https://pypi.example.com/simple", "http://10.0.0.1:8080/pypi/simple/",
    "https://[::1]:8443/simple", "git+https://github.com/org/repo@v1.0",
    "conda-forge::numpy", "numpy>=1.26; python_version >= '3.10'", "ubuntu@sha256:" + "a" * 64,
    "registry.example.com:5000/mirror/ubuntu:22.04", "bob@example.com",
    "hint: e.g. https://pypi.example.com/simple (a login: https://USER:TOKEN@host/simple)",
    "give a token as the URL's user part instead: https://__token__:TOKEN@host/simple",
    "an '@' after the host", "localhost:8080/simple",
])
def test_what_holds_no_secret_stays_as_it_is(text: str) -> None:
    """The masking must not eat what the user needs to read: hosts, paths, placeholders."""
    assert redact(text) == text


_CONDA_TOKENS = [
    "https://host.example/t/ZqSecret1/chan::numpy",
    "https://host.example/chan?token=ZqSecret1::numpy",
    "numpy[channel='https://u:ZqSecret1@host.example/chan']",
    "numpy[url='https://u:ZqSecret1@host.example/x/linux-64/numpy-1.0-0.conda']",
]
_PIP_LOGINS = [
    "pkg @ https://u:ZqSecret1/x@host.example/pkg-1.0-py3-none-any.whl",
    "pkg @ https://ZqSecret1/x@host.example/pkg-1.0-py3-none-any.whl",
    "pkg @ git+https://ZqSecret1/x@github.com/org/repo@v1",
    "pkg @ git+https://ZqSecret1/x@github.com/org/repo",
    "pkg @ u:ZqSecret1@host.example/pkg.whl",
    "pkg @ https://u:ZqSecret1?x@host.example/pkg.whl",
]


@pytest.mark.parametrize(("field", "spec"), [*(("conda", s) for s in _CONDA_TOKENS),
                                             *(("pip", s) for s in _PIP_LOGINS)])
def test_logins_in_any_package_spec_form_are_refused(field: str, spec: str) -> None:
    """conda specs with a token in any form, and pip direct URLs with a login in any place
    (even with --allow-url): refused, and the refusal never shows the secret."""
    from envbuild.core.packages import conda_spec, pip_requirement

    with pytest.raises(EnvbuildError) as info:
        conda_spec(spec) if field == "conda" else pip_requirement(spec, allow_url=True)
    said = info.value.message + info.value.hint
    # the pip message masks itself; the conda one is masked at the CLI edge (redact)
    assert "ZqSecret1" not in (redact(said) if field == "conda" else said)


@pytest.mark.parametrize("spec", [
    "pkg @ git+https://github.com/org/repo@v1.0", "pkg @ git+https://github.com/org/repo@main",
    "pkg @ git+https://github.com/org/repo@release/2.x", "pkg @ file:///wheels/pkg.whl",
    "pkg @ https://[::1]:8443/pkg-1.0-py3-none-any.whl",
])
def test_direct_urls_without_a_login_stay_accepted(spec: str) -> None:
    from envbuild.core.packages import pip_requirement

    assert pip_requirement(spec, allow_url=True) == spec


@pytest.mark.parametrize("value", [
    "https://u:123/ZqSecret1@host.example/simple", "https://host.example/@scope/simple",
    "https://u:p?ZqSecret1@host.example/simple",
])
def test_an_at_after_the_host_is_refused(value: str) -> None:
    from envbuild.render.context import index_url

    with pytest.raises(EnvbuildError) as info:
        index_url(value, "--pip-index-url")
    assert "after the host" in info.value.message and "%2F" in info.value.hint
    assert "ZqSecret1" not in info.value.message + info.value.hint


# -- the netrc secret the logins go to ----------------------------------------------------------

# what an index URL takes raw in a login, and percent-escapes of the rest (shell specials too)
_login_char = st.sampled_from([*"abcXYZ019-._~!*+,=", "%40", "%2F", "%3A", "%3F", "%23", "%25",
                               "%27", "%24", "%26", "%3B", "%C3%A9"])
_login = st.lists(_login_char, min_size=1, max_size=8).map("".join)


@given(logins=st.lists(st.tuples(_login, st.none() | _login), min_size=1, max_size=3),
       hosts=st.permutations(["a.example", "b.example:8443", "10.0.0.9"]))
@settings(max_examples=200, deadline=None)
def test_logins_reach_the_netrc_whole(logins: list[tuple[str, str | None]],
                                      hosts: list[str]) -> None:
    """Every index login, user-only tokens and percent-escapes included, comes back from the
    netrc secret as pip reads it (Python's netrc), host by host; one entry cannot break the
    next (a user-only token once wrote `password` with nothing after it)."""
    import netrc
    from urllib.parse import unquote

    from envbuild.render.pipeline import ContextInputs, render_options

    urls = [f"https://{u}{':' + p if p is not None else ''}@{h}/simple"
            for (u, p), h in zip(logins, hosts, strict=False)]
    ci = ContextInputs(pip_index_url=urls[0], torch_index_url=urls[1] if len(urls) > 1 else None,
                       pip_extra_index_urls=tuple(urls[2:]))
    _, secrets = render_options(ci)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "netrc"
        path.write_text(secrets.contents["netrc"], encoding="utf-8")
        path.chmod(0o600)
        parsed = netrc.netrc(str(path)).hosts
    for (user, password), host in zip(logins, hosts, strict=False):
        login, _, secret = parsed[host.split(":")[0]]
        assert (login, secret) == (unquote(user), unquote(password or "")), \
            secrets.contents["netrc"]
