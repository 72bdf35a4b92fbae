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

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvbuildError
from envbuild.common.redact import mask_url, redact, shown
from tests.conftest import run_cli

# -- generated URL shapes ---------------------------------------------------------------------

_chunk = st.from_regex(r"Zq[A-Za-z0-9]{5,8}", fullmatch=True)
# what a password may hold unencoded (and some percent-escapes of it)
_sep = st.sampled_from([":", "@", "/", "?", "#", " ", "'", '"', "$", "!", "-", ".", "%40", "%2F",
                        "%3A", "%20", "%23", "%3F", "//", "::", "@@"])
_hosts = st.sampled_from(["pypi.example.com", "10.0.0.7", "[::1]", "[2001:db8::7]", "localhost",
                          "mirror-1.corp.example"])
_ports = st.sampled_from(["", ":8443", ":3128", ":1"])
_paths = st.sampled_from(["/simple", "/root/pypi/+simple/", "", "/", "/api/pypi/pypi/simple",
                          "/whl/cu121", "/chan"])
_users = st.sampled_from(["alice", "__token__", "u", "", "oauth2accesstoken"])
SHAPES = ("user:secret", "token", "query", "fragment")


@st.composite
def secrets(draw: st.DrawFn) -> tuple[str, list[str]]:
    """(a password or token, the chunks that make it)."""
    chunks = draw(st.lists(_chunk, min_size=1, max_size=3, unique=True))
    return chunks[0] + "".join(draw(_sep) + c for c in chunks[1:]), chunks


@st.composite
def urls(draw: st.DrawFn, schemes: tuple[str, ...] = ("https://", "http://", "")) -> tuple[
        str, list[str]]:
    """(a URL carrying a secret, the secret's chunks)."""
    secret, chunks = draw(secrets())
    scheme = draw(st.sampled_from(schemes))
    where = draw(_hosts) + draw(_ports) + draw(_paths)
    shape = draw(st.sampled_from(SHAPES))
    if shape == "user:secret":
        url = f"{scheme}{draw(_users)}:{secret}@{where}"
    elif shape == "token":
        url = f"{scheme}{secret}@{where}"
    elif shape == "query":
        key = draw(st.sampled_from(["token=", "private_token=", "x=1&key=", ""]))
        url = f"{scheme}{where}?{key}{secret}"
    else:
        url = f"{scheme}{where}#{secret}"
    return url, chunks


def leaks(chunks: list[str], *texts: str) -> list[str]:
    """The chunks that show in any of texts, in any case."""
    low = [t.lower() for t in texts]
    return [c for c in chunks if any(c.lower() in t for t in low)]


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


# -- every entry point, through the real CLI (in process: many examples) -----------------------

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/envbuild-test.sock",
             "ENVBUILD_DOCKER": "/nonexistent/docker"}


def _cli(argv: list[str]) -> tuple[int, str]:
    """envbuild argv in this process, without a Docker engine: (exit code, stdout + stderr)."""
    from envbuild.cli import run

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, NO_ENGINE), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            rc = run(argv)
        except SystemExit as exc:  # pragma: no cover - run() turns errors into codes
            rc = int(exc.code or 0)
    return rc, out.getvalue() + err.getvalue()


def _files(root: Path) -> str:
    """Every file envbuild wrote under root (not the team file the test wrote)."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*"))
                     if p.is_file() and p.name not in ("validator.pyz", "envbuild.toml"))


def _team_file(root: Path, key: str, value: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "envbuild.toml"
    listed = key in ("pip", "conda", "pip_extra_index_url")
    field = f"{key} = {json.dumps([value] if listed else value)}"  # JSON strings are TOML's
    path.write_text(f'[defaults]\ntarget = "cpu"\nos = "debian12"\n\n[image.app]\n{field}\n',
                    encoding="utf-8")
    return path


# (command, how the URL is given): each a place a user can hand envbuild a URL
ENTRIES = [
    ("render", "--pip-index-url"), ("render", "--torch-index-url"),
    ("render", "--pip-extra-index-url"), ("render", "--conda"), ("render", "--pip @"),
    ("render", "--pip --extra-index-url="), ("render", "--pip -i"),
    ("render", "--json --pip-index-url"), ("make", "--pip-index-url"),
    ("make", "--torch-index-url"), ("make", "--proxy"), ("team", "pip_index_url"),
    ("team", "torch_index_url"), ("team", "pip_extra_index_url"), ("team", "conda"),
    ("team", "pip"),
]


def _argv(command: str, how: str, url: str, root: Path) -> list[str]:
    out = ["--out", str(root / "out")]
    base = ["--target", "cpu", "--os", "debian12", "--torch", "2.13.0", "--pip", "six==1.16.0"]
    if command == "team":
        key = how
        value = f"{url}::numpy" if key == "conda" else f"pkg @ {url}" if key == "pip" else url
        return ["team", "plan", "--file", str(_team_file(root, key, value))]
    flag, _, form = how.partition(" ")
    if flag == "--json":
        return [command, "--json", *base, form, url, *out]
    value = {"--conda": f"{url}::numpy", "--pip": {"@": f"pkg @ {url}", "-i": f"-i {url}",
                                                   "--extra-index-url=": f"--extra-index-url={url}"
                                                   }.get(form, url)}.get(flag, url)
    extra = ["--allow-url"] if form == "@" else []
    if command == "make":
        extra += ["--no-validate"]
    return [command, *base, flag, value, *extra, *out]


@given(url=urls(), entry=st.sampled_from(ENTRIES))
@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_no_entry_point_shows_a_secret(url: tuple[str, list[str]],
                                       entry: tuple[str, str]) -> None:
    value, chunks = url
    with tempfile.TemporaryDirectory(prefix="envbuild-secrets-") as tmp:
        root = Path(tmp)
        argv = _argv(*entry, value, root)
        rc, output = _cli(argv)
        event(f"exit {rc}")  # --hypothesis-show-statistics: refused (2), rendered (0), ...
        assert "Traceback" not in output, output
        assert rc in (0, 1, 2, 3), (rc, output)
        found = leaks(chunks, output, _files(root))
        assert not found, (argv, rc, output)


def test_entries_reach_their_surfaces(tmp_path: Path) -> None:
    """The property above is not vacuous: a clean URL renders, and a login one renders too
    (into a build secret), for every flag that takes an index URL; the login one through a
    team file too; a --conda login is refused."""
    for flag in ("--pip-index-url", "--torch-index-url", "--pip-extra-index-url"):
        for i, url in enumerate(("https://p.example.com/whl/cpu",
                                 "https://alice:ZqSecret1@p.example.com/whl/cpu")):
            root = tmp_path / f"{flag}-{i}"
            rc, output = _cli(_argv("render", flag, url, root))
            assert rc == 0, output
            files = _files(root / "out")
            assert "https://p.example.com/whl/cpu" in files
            assert not leaks(["ZqSecret1"], output, files)
    rc, output = _cli(_argv("team", "pip_index_url",
                            "https://alice:ZqSecret1@p.example.com/whl/cpu", tmp_path / "team"))
    assert rc == 0, output
    rc, output = _cli(_argv("render", "--conda", "https://alice:ZqSecret1@h.example/chan",
                            tmp_path / "conda"))
    assert rc == 2 and "login" in output and "ZqSecret1" not in output


# -- the issue's own examples, as a user runs them (a separate process) -------------------------

@pytest.mark.parametrize(("args", "secret"), [
    (["--conda", "https://user:ZqSecret1@host.example/chan::numpy"], "ZqSecret1"),
    (["--pip-index-url", "user:ZqPW1234@host.example/simple"], "ZqPW1234"),
    (["--pip-index-url", "https://user:ZqPass1 ZqTail99@host.example/simple"], "ZqTail99"),
    (["--pip-index-url", "https://user:ZqPass1 ZqTail99@host.example/simple"], "ZqPass1"),
    (["--pip-index-url", "https://ZqTok/en99@host.example/simple"], "ZqTok"),
    (["--pip-index-url", "https://ZqTok/en99@host.example/simple"], "en99"),
])
def test_issue_examples(tmp_path: Path, args: list[str], secret: str) -> None:
    out = tmp_path / "out"
    r = run_cli("render", "--target", "cpu", *args, "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and "\nhint: " in r.stderr
    assert secret not in r.stdout + r.stderr
    assert not out.exists()


def test_a_conda_login_is_refused_with_the_safe_way(tmp_path: Path) -> None:
    r = run_cli("render", "--target", "cpu", "--conda",
                "https://user:ZqSecret1@host.example/chan::numpy", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert "environment.yml" in r.stderr and "~/.condarc" in r.stderr
    assert "https://***@host.example/chan::numpy" in r.stderr


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
