"""`team ci`'s inputs, generated: any --install value is refused (exit 2) or written so that the
shell hands pip exactly that value, and is something pip installs envbuild from; any team-file
path is refused or named exactly in every command; each registry host gets secrets of its own."""

from __future__ import annotations

import re
import shlex
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from ruamel.yaml import YAML

from envbuild.common.errors import EXIT_USAGE, UsageError
from envbuild.features import team_ci
from tests.support.pipelines import argv_of, dry_parse, envbuild_lines

TEAM = '[defaults]\nregistry = "ghcr.io/acme/ml"\ntarget = "cpu"\n\n[image.cpu]\n'
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

# What a shell, YAML or a GitHub expression could read as more than a word of text.
HOSTILE = st.sampled_from(["'", '"', "$", "`", "\\", "$(id)", "${{ secrets.X }}", "{{", ";",
                           "|", "&", "\n", "\r", "\t", "\x00", "\x1b[31m", " ", "  ", "#", "*",
                           "?", "~", "!", "-", "--", "@", ":", "..", ".", "/", "\u202e", "é",
                           "\ufeff", "%", "[", "]", "{", "}", ",", "<", ">", "="])
PIECES = st.one_of(HOSTILE, st.text(string.ascii_letters + string.digits, min_size=1,
                                    max_size=6))
HOSTILE_TEXT = st.one_of(st.text(max_size=30),
                         st.lists(PIECES, min_size=1, max_size=8).map("".join))
VERSION = st.from_regex(r"[0-9]{1,2}(\.[0-9]{1,2}){0,2}", fullmatch=True)
NAME = st.sampled_from(["envbuild", "EnvBuild", "envbuild[cuda]", "envbuild[a,b]"])
REF = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True)
HOST = st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z]{2,5}){1,2}", fullmatch=True)
GOOD_SPECS = st.one_of(
    st.tuples(NAME, st.sampled_from(["==", ">=", "<", "!="]), VERSION).map("".join),
    st.tuples(NAME, VERSION).map(lambda t: f"{t[0]}~={t[1]}.0"),  # ~= needs two parts
    st.tuples(NAME, HOST, REF, REF).map(lambda t: f"{t[0]} @ git+https://{t[1]}/{t[2]}/"
                                        f"envbuild@{t[3]}"),
    st.tuples(HOST, REF).map(lambda t: f"git+https://{t[0]}/org/envbuild.git@{t[1]}"),
    st.tuples(HOST, VERSION).map(lambda t: f"https://{t[0]}/envbuild-{t[1]}-py3-none-any.whl"),
    VERSION.map(lambda v: f"dist/envbuild-{v}-py3-none-any.whl"))


@pytest.fixture(scope="module")
def team_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("repo")
    (root / ".git").mkdir()
    (root / "envbuild.toml").write_text(TEAM)
    return root / "envbuild.toml"


def installed(text: str) -> list[str]:
    """What each `pip install` line of the pipeline hands pip, as the shell reads it."""
    doc = YAML(typ="safe").load(text)
    out = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        elif isinstance(node, str) and "pip install" in node:
            words = shlex.split(node)
            assert words[-3:-1] == ["pip", "install"] or words[-2:-1] == ["install"], node
            out.append(words[-1])

    walk(doc)
    return out


def pip_gets(spec: str) -> str:
    """What kind of thing pip is handed: a requirement of envbuild, a URL, a wheel path."""
    assert not spec.startswith("-")
    if re.match(r"(git\+)?https://", spec):
        return "url"
    if spec.endswith(".whl") and " " not in spec:
        assert not spec.startswith("/") and ".." not in spec.split("/")
        return "wheel"
    assert Requirement(spec).name.lower() == "envbuild"
    return "requirement"


@SETTINGS
@given(spec=GOOD_SPECS)
def test_an_install_spec_is_written_as_the_shell_hands_it_to_pip(team_file: Path,
                                                                 spec: str) -> None:
    for provider in team_ci.PROVIDERS:
        p = team_ci.render(provider, team_file, spec)
        assert installed(p.text) == [spec] * (3 if provider == "github" else 2)
        assert p.install == spec


@SETTINGS
@given(spec=HOSTILE_TEXT)
@example(spec="envbuild==0.1.0 --index-url https://evil.example")
@example(spec="-e .")
@example(spec="envbuild @ https://evil.example/x.whl?token=T")
@example(spec="git+https://user:token@github.com/o/envbuild")
@example(spec="envbuild ; python_version > '3'")
def test_any_install_value_is_refused_or_reaches_pip_as_given(team_file: Path,
                                                              spec: str) -> None:
    try:
        p = team_ci.render("gitlab", team_file, spec)
    except UsageError as exc:
        assert exc.exit_code == EXIT_USAGE
        assert exc.message.startswith("--install ") and "\n" not in exc.message
        assert "e.g. --install 'envbuild @ git+https://" in exc.hint
        return
    assert installed(p.text) == [spec, spec]
    pip_gets(spec)
    assert not set(spec) & set("'\"$`\\\n\r\t\x00{}")


def test_the_hint_s_example_is_accepted(team_file: Path) -> None:
    with pytest.raises(UsageError) as info:
        team_ci.render("github", team_file, None)
    (spec,) = re.findall(r"--install '([^']+)'", info.value.hint)[:1]
    assert spec == "envbuild @ git+https://github.com/ORG/envbuild@v0.1.0"
    assert installed(team_ci.render("github", team_file, spec).text) == [spec] * 3


# -- team-file paths ---------------------------------------------------------------------------
@SETTINGS
@given(folder=st.lists(HOSTILE_TEXT.filter(lambda s: s and "/" not in s and "\x00" not in s
                                           and len(s.encode()) < 200),
                       min_size=1, max_size=2))
@example(folder=[".ci"])
@example(folder=["-x"])
@example(folder=["@x"])
@example(folder=["a b"])
@example(folder=["${{ github.token }}"])
def test_any_team_file_path_is_refused_or_named_exactly(tmp_path_factory: pytest.TempPathFactory,
                                                        folder: list[str]) -> None:
    assume(all(f not in (".", "..") for f in folder))
    root = tmp_path_factory.mktemp("repo")
    (root / ".git").mkdir()
    where = root.joinpath(*folder)
    try:
        where.mkdir(parents=True)
    except OSError:  # a name this file system does not take
        assume(False)
    (where / "envbuild.toml").write_text(TEAM)
    rel = "/".join([*folder, "envbuild.toml"])
    safe = bool(re.fullmatch(r"[A-Za-z0-9_.][A-Za-z0-9._+@/-]*", rel))
    for provider in team_ci.PROVIDERS:
        try:
            p = team_ci.render(provider, where / "envbuild.toml",
                               "envbuild @ git+https://github.com/ORG/envbuild@v0.1.0")
        except UsageError as exc:
            assert not safe, rel
            assert exc.message.startswith("the team file ") and exc.exit_code == EXIT_USAGE
            assert "\n" not in exc.message and "\x1b" not in exc.message
            continue
        assert safe, rel
        assert p.team == rel
        for line in envbuild_lines(YAML(typ="safe").load(p.text)):
            argv = argv_of(line)
            dry_parse(argv)
            assert argv[argv.index("--file") + 1] in (rel, team_ci.BASE_DIR[provider] + "/" + rel)


# -- registry logins ---------------------------------------------------------------------------
@given(hosts=st.lists(st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,12}[a-z0-9])?(:[0-9]{1,5})?",
                                    fullmatch=True), min_size=1, max_size=6, unique=True))
@example(hosts=["a-b.io", "a.b.io", "ghcr.io"])
def test_each_host_gets_secrets_of_its_own(hosts: list[str]) -> None:
    got = team_ci.slugs(hosts)
    assert sorted(got) == sorted(hosts)
    assert len(set(got.values())) == len(hosts)  # one pair of secrets per host
    for host, slug in got.items():
        assert re.fullmatch(r"[A-Z0-9_]+", slug)
        assert slug.startswith(team_ci.secret_slug(host))
    assert team_ci.slugs(reversed(hosts)) == got  # deterministic


def test_the_slugs_of_known_hosts() -> None:
    assert team_ci.slugs(["registry.example.com:5000", "ghcr.io", "[::1]:5000"]) == {
        "registry.example.com:5000": "REGISTRY_EXAMPLE_COM_5000", "ghcr.io": "GHCR_IO",
        "[::1]:5000": "1_5000"}
    clash = team_ci.slugs(["a-b.io", "a.b.io"])
    assert re.fullmatch(r"A_B_IO_[0-9A-F]{6}", clash["a-b.io"])
    assert clash["a-b.io"] != clash["a.b.io"]
    gh = team_ci.logins("github", ["ghcr.io", "r.io"])
    assert [(x.user, x.password, x.own) for x in gh] == [
        ("github.actor", "GITHUB_TOKEN", True),
        ("ENVBUILD_REGISTRY_R_IO_USER", "ENVBUILD_REGISTRY_R_IO_PASSWORD", False)]
    assert not any(x.own for x in team_ci.logins("gitlab", ["ghcr.io"]))


def test_a_host_the_shell_would_glob_is_quoted(tmp_path: Path) -> None:
    """[::1]:5000 unquoted is a glob pattern (a file named 1 or : would replace it)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "envbuild.toml").write_text(TEAM.replace("ghcr.io/acme/ml", "[::1]:5000/ml"))
    p = team_ci.render("gitlab", tmp_path / "envbuild.toml",
                       "envbuild @ git+https://github.com/ORG/envbuild@v0.1.0")
    logins = [ln.strip() for ln in p.text.splitlines() if "docker login" in ln]
    assert logins and all(ln.endswith("--password-stdin '[::1]:5000'") for ln in logins)
    assert "if [ \"${CI_REGISTRY:-}\" = '[::1]:5000' ]; then" in p.text
    assert [x.user for x in p.logins] == ["ENVBUILD_REGISTRY_1_5000_USER"]
