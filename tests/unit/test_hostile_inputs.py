"""Hostile and careless input, class by class: URLs, credentials, package names, users, bases.

Each class is generated (parametrized products or hypothesis), not a single example; the CLI
tests prove the whole path: exit 2, a one-line error, nothing written, no secret echoed.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EXIT_USAGE, UsageError
from envbuild.common.redact import redact
from envbuild.core.packages import apt_package, conda_spec, pip_requirement
from envbuild.core.request import Request, parse
from envbuild.matrix import Matrix
from envbuild.render.context import image_reference, index_url, system_users, user_name

SHELL_SPECIALS = [*";$`|&<>(){}'\"\\", " ", "\t", "\n", "\r", "\x0b", "\x00", "\x1b", "\x7f",
                  "\u00a0", "é", "\u2028", "\uff1b"]
BASES = ["https://p.example/simple", "http://10.0.0.1:8080/pypi/simple/",
         "https://u:tok@mirror.example.com/root/pypi/+simple"]


def _injected() -> list[str]:
    """Each special character at the end, in the path, in the host and in the userinfo."""
    out = []
    for base, c in itertools.product(BASES, SHELL_SPECIALS):
        scheme, rest = base.split("://", 1)
        host, _, path = rest.partition("/")
        out += [base + c + "touch${IFS}/tmp/pwned", f"{scheme}://{host}/{c}{path}",
                f"{scheme}://{host}{c}x/{path}", f"{scheme}://a{c}b:pw@{host.split('@')[-1]}/"]
    return out


INJECTED = _injected()


@pytest.mark.parametrize("value", INJECTED)
def test_url_with_a_shell_special_character_is_refused(value: str) -> None:
    with pytest.raises(UsageError) as info:
        index_url(value, "--pip-index-url")
    assert info.value.exit_code == EXIT_USAGE
    assert "\n" not in info.value.message and "tok" not in info.value.message


@pytest.mark.parametrize("value", [
    "file:///etc/passwd", "ftp://p.example/simple", "https://", "https:///simple",
    "p.example/simple",
    "javascript:alert(1)", "https://p.example:99999/simple", "https://p.example:x/simple",
    "https://p.example/%zz/simple", "https://p.example/simple%", "HTTPS//p.example", "",
    "https://p.example/" + "a" * 2001,
])
def test_url_that_is_not_http_with_a_host_is_refused(value: str) -> None:
    with pytest.raises(UsageError):
        index_url(value, "--torch-index-url")


@pytest.mark.parametrize("value", [
    "https://p.example/simple?token=SECRET", "https://p.example/simple?", "https://p.example/#x",
    "https://p.example/simple?a=1&token=SECRET", "https://u:p@p.example/simple?token=SECRET",
])
def test_query_or_fragment_is_refused_with_the_fix(value: str) -> None:
    with pytest.raises(UsageError) as info:
        index_url(value, "--pip-index-url")
    assert "image history" in info.value.message and "__token__:TOKEN@" in info.value.hint
    assert "SECRET" not in info.value.message + info.value.hint


_host = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,3}", fullmatch=True)
# no '@' in an index URL's path: it would be a login's (tests/unit/test_secrets.py)
_path = st.from_regex(r"(/[A-Za-z0-9._~+!*,=:-]{0,12}){0,5}/?", fullmatch=True)
_cred = st.from_regex(r"[A-Za-z0-9._~-]{1,20}", fullmatch=True)


@given(scheme=st.sampled_from(["http", "https"]), host=_host, path=_path,
       port=st.none() | st.integers(1, 65535), user=st.none() | _cred, pw=st.none() | _cred)
@settings(max_examples=300, deadline=None)
def test_valid_urls_are_accepted_without_their_credentials(
        scheme: str, host: str, path: str, port: int | None, user: str | None,
        pw: str | None) -> None:
    auth = f"{user}{':' + pw if pw else ''}@" if user else ""
    netloc = host + (f":{port}" if port else "")
    clean, creds = index_url(f"{scheme}://{auth}{netloc}{path}", "--pip-index-url")
    assert clean == f"{scheme}://{netloc}{path}"
    assert creds == bool(user)


_secret = st.from_regex(r"[A-Za-z0-9]{4,20}[A-Za-z][A-Za-z0-9]{3}", fullmatch=True)


@given(user=_cred, secret=_secret, scheme=st.sampled_from(["ftp", "https", "http", "git+https"]),
       host=_host, path=_path, cut=st.integers(10, 200))
@settings(max_examples=300, deadline=None)
def test_redact_never_shows_userinfo_or_query(user: str, secret: str, scheme: str, host: str,
                                               path: str, cut: int) -> None:
    for url in (f"{scheme}://{user}:{secret}@{host}{path}", f"{scheme}://{secret}@{host}{path}",
                f"{scheme}://{host}{path}?token={secret}", f"{scheme}://{host}{path}#{secret}"):
        for text in (url, f"error: --flag {url!r} is bad", f"x {url} y {url}"):
            assert secret not in redact(text)
    # a message cut before the @ (value[:60]) still hides a user:password
    assert secret not in redact(f"{scheme}://{user}:{secret}@{host}{path}"[:cut])
    if "/t/" not in path:  # conda's /t/<token>/ path is a token too (test_secrets)
        assert redact(f"https://{host}{path}") == f"https://{host}{path}"


# ---- packages, users, base images, versions -------------------------------------------------

@pytest.mark.parametrize("value", ["python3-", "curl-", "libgl1-", "g++-", "python3.11-venv-",
                                   "curl=7.88.1-", "x", "-curl", "--purge", "curl/bookworm",
                                   "curl:amd64", "Curl", "cürl", "curl\n"])
def test_apt_names_apt_would_misread_are_refused(value: str) -> None:
    with pytest.raises(UsageError, match="--apt"):
        apt_package(value)


@pytest.mark.parametrize("value", ["g++", "c++", "libstdc++6", "curl", "python3.11-venv",
                                   "curl=7.88.1-10+deb12u5", "libc6=2.36-9+deb12u4", "tzdata=1",
                                   "vim=2:9.0.1378-2"])
def test_apt_names_that_exist_stay_accepted(value: str) -> None:
    assert apt_package(value) == value


@pytest.mark.parametrize("value", sorted(system_users()))
def test_system_users_are_refused(value: str) -> None:
    with pytest.raises(UsageError, match="system account"):
        user_name(value)


@pytest.mark.parametrize("value", ["root", "envbuild", "alice", "dev_1", "ml-user"])
def test_ordinary_users_and_root_are_accepted(value: str) -> None:
    assert user_name(value) == value


def test_system_users_cover_the_families_named_in_the_issue() -> None:
    assert {"nobody", "daemon", "bin", "www-data", "_apt", "adm", "operator"} <= system_users()
    assert "root" not in system_users()


@pytest.mark.parametrize("value", ["scratch", "scratch:latest", "library/scratch",
                                   "docker.io/library/scratch", "docker.io/library/scratch:latest"])
def test_scratch_base_is_refused_with_the_reason(value: str) -> None:
    with pytest.raises(UsageError, match="no shell"):
        image_reference(value)


@pytest.mark.parametrize("value", ["ubuntu:２２.04", "ubuntu:22.04\n", "ubuntu:22.04 ", "úbuntu",
                                   "ubuntu:22.04;id", "ubuntu@sha256:" + "0" * 63])
def test_image_references_are_ascii_and_whole(value: str) -> None:
    with pytest.raises(UsageError):
        image_reference(value)


@pytest.mark.parametrize(("field", "value"), [
    ("python", "3.１１"), ("python", "3.11\n"), ("python", "3.١١"),
    ("driver", "５３５.１０４.０５"),
    ("driver", "535\n"), ("cuda", "１２.2"), ("cuda", "12.2\n"), ("rocm", "6.٢"),
    ("torch", "２.5"),
])
def test_versions_are_ascii_digits_only(matrix: Matrix, field: str, value: str) -> None:
    with pytest.raises(UsageError):
        parse(Request(**{field: value}), matrix)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["conda-forge/label/dev::numpy", "numpy[version='>=1.26']",
                                   "conda-forge::numpy[version='>=1.26,<2']", "numpy>=1.26",
                                   "ffmpeg=6.1", "blas * mkl"])
def test_conda_accepts_the_matchspec_grammar(value: str) -> None:
    assert conda_spec(value) == value


@pytest.mark.parametrize("value", ["numpy>>=1.26", "numpy=>1", "numpy >=1 ; rm", "$(id)",
                                   "numpy[version=>=1]]", "numpy && id"])
def test_conda_refuses_what_is_not_a_matchspec(value: str) -> None:
    with pytest.raises(UsageError, match="--conda"):
        conda_spec(value)


@pytest.mark.parametrize("value", [
    "pkg @ https://bob:SECRET@p.example/pkg.whl", "pkg @ https://SECRET@p.example/pkg.whl",
    "pkg @ https://p.example/pkg.whl?token=SECRET", "pkg @ https://p.example/pkg.whl#SECRET",
])
def test_direct_urls_with_credentials_are_refused(value: str) -> None:
    with pytest.raises(UsageError) as info:
        pip_requirement(value, allow_url=True)
    assert "SECRET" not in info.value.message + info.value.hint


@pytest.mark.parametrize("value", [
    "pkg @ https://p.example/pkg-1.0-py3-none-any.whl#sha256=" + "a" * 64,
    "pkg @ https://p.example/pkg.tar.gz#egg=pkg", "pkg @ https://p.example/r.zip#subdirectory=a/b",
])
def test_direct_urls_with_pip_fragments_stay_accepted(value: str) -> None:
    assert pip_requirement(value, allow_url=True).startswith("pkg @ https://p.example/")


# ---- environment.yml: every valid spec survives a YAML round trip ---------------------------

_name = st.from_regex(r"[A-Za-z][A-Za-z0-9._-]{0,10}[A-Za-z0-9]", fullmatch=True).filter(
    lambda n: n.lower() not in ("torch", "torchvision", "torchaudio"))
_marker_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"),
                                     exclude_characters="\"\\\u2028\u2029\x85"), max_size=12)
_tricky = st.sampled_from(["a: b", " #", "#", ": ", "- x", "'", "[1]", "{a}", "&x", "*x", "!x",
                           "%x", "@x", "`x`", "? x", "|", ">", "yes", "null", "~", "1e3"])


@st.composite
def _pip_req(draw: st.DrawFn) -> str:
    name = draw(_name)
    spec = draw(st.sampled_from(["", "<2", ">=1.0,<3", "==1.2.3", "~=2.1", "!=1.5"]))
    extras = draw(st.sampled_from(["", "[socks]", "[a,b]"]))
    text = draw(st.one_of(_marker_text, _tricky))
    marker = draw(st.sampled_from(["", f'; os_name == "{text}"', f'; sys_platform != "{text}"',
                                   f'; python_version >= "3.10" and os_name == "{text}"']))
    return pip_requirement(f"{name}{extras}{spec}{marker}")


_conda = st.sampled_from(["numpy>=1.26", "conda-forge::ffmpeg", "conda-forge/label/dev::numpy",
                          "numpy[version='>=1.26']", "blas * mkl", "ffmpeg=6.1", "numpy #x",
                          "cuda-nvcc=12.1", "numpy 1.26.*"]).map(conda_spec)


@given(pips=st.lists(_pip_req(), max_size=5), condas=st.lists(_conda, max_size=4))
@settings(max_examples=150, deadline=None)
def test_environment_yml_round_trips(pips: list[str], condas: list[str]) -> None:
    import yaml

    from envbuild.render.context import RenderOptions, render

    m, spec = _cpu_spec()
    text = render(spec, RenderOptions(pip=tuple(pips), conda=tuple(condas)), m)[
        "environment.yml"].content
    env = yaml.safe_load(text)
    deps = env["dependencies"]
    assert deps[:2] == [f"python={spec.python}", "pip"]
    assert deps[2:-1] == condas
    pip_section = deps[-1]["pip"]
    assert pip_section[-len(pips):] == pips if pips else True
    assert all(isinstance(x, str) for x in pip_section)
    assert env["name"] == f"envbuild-{spec.hash}"


_CPU: list[object] = []


def _cpu_spec() -> tuple[Matrix, object]:
    if not _CPU:
        from envbuild.core.resolve import resolve
        from envbuild.matrix import load

        m = load()
        _CPU.extend([m, resolve(Request(target="cpu", os="debian12"), m)])
    return _CPU[0], _CPU[1]  # type: ignore[return-value]


@pytest.mark.parametrize("req", ['numpy; os_name == "a: b"', 'numpy; os_name == " #"',
                                 "numpy; os_name == 'x\"y'"])
def test_environment_yml_keeps_the_issue_examples(req: str) -> None:
    import yaml

    from envbuild.render.context import RenderOptions, render

    m, spec = _cpu_spec()
    valid = pip_requirement(req)
    env = yaml.safe_load(render(spec, RenderOptions(pip=(valid,)), m)["environment.yml"].content)  # type: ignore[arg-type]
    assert env["dependencies"][-1]["pip"][-1] == valid
