"""The formats agree (issue #20, class 1, "formats disagree"): generated requests, every format.

- Which index serves what: the Dockerfile, environment.yml and setup-macos.sh install torch from
  the torch index and the user's packages from the user's index (envbuild.render.context.Indexes).
- apptainer.def bootstraps from the image `build` makes of the same directory: its From: is the
  tag `build` gives (envbuild.core.tags.default_tag), from the local Docker engine.
- `make --help` / `build --help` state the tag format default_tag follows.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.core import tags
from envbuild.core.request import Request
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix, load
from envbuild.render.context import RenderOptions, render
from tests.support import GOLDEN
from tests.support.formats import PipCall, _environment_yml, _parse

_SPECS: dict[str, Spec] = {}
REQUESTS = {
    "cpu": Request(target="cpu", os="debian12", torch="2.13.0"),
    "cuda": Request(cuda="12.8", torch="2.7.1"),
    "rocm": Request(rocm="6.2", torch="2.5.1"),
    "mps": Request(target="mps", torch="2.9.1"),
    "cpu-slim": Request(target="cpu", os="debian12", torch="2.13.0",
                        components=("torch",)),
}


_M: list[Matrix] = []


def _matrix() -> Matrix:
    if not _M:
        _M.append(load())
    return _M[0]


def _spec(name: str) -> Spec:
    if name not in _SPECS:
        from envbuild.core.resolve import resolve

        _SPECS[name] = resolve(REQUESTS[name], _matrix())
    return _SPECS[name]


# -- which index serves what --------------------------------------------------------------------

_index = st.sampled_from([None, "https://pypi.corp.example/simple", "http://10.0.0.5:8080/simple",
                          "https://pypi.org/simple"])
_torch_index = st.sampled_from([None, "https://mirror.example/whl/{v}",
                                "http://mirror.local:8081/pytorch/whl/{v}"])
_extras = st.lists(st.sampled_from(["https://extra.example/simple",
                                    "http://extra.local:3141/root/simple"]),
                   max_size=2, unique=True)
_pips = st.lists(st.sampled_from(["numpy<2", "six==1.16.0", "requests[socks]>=2"]), max_size=2,
                 unique=True)


def _pip_line(text: str, requirements: str) -> PipCall | None:
    """The pip call of a Dockerfile RUN or a shell script that installs `requirements`."""
    for line in text.splitlines():
        parts = re.split(r"pip\"? install ", line, maxsplit=1)
        if len(parts) == 2 and requirements in line:
            return _parse(shlex.split(parts[1]))
    return None


@given(name=st.sampled_from(["cpu", "cuda", "rocm", "mps"]), pip=_pips, team_pip=_pips,
       user_index=_index, torch_index=_torch_index, extras=_extras)
@settings(max_examples=120, deadline=None)
def test_every_format_takes_each_package_from_the_same_index(
        name: str, pip: list[str], team_pip: list[str], user_index: str | None,
        torch_index: str | None, extras: list[str]) -> None:
    matrix = _matrix()
    spec = _spec(name)
    if name == "mps":
        team_pip = []  # team images are container images
    opts = RenderOptions(
        pip=tuple(pip), team_pip=tuple(team_pip), pip_index_url=user_index,
        torch_index_url=torch_index.format(v=spec.variant) if torch_index else None,
        pip_extra_index_urls=tuple(extras))
    files = render(spec, opts, matrix)
    want_torch = opts.torch_index_url or spec.index_url
    want_user = user_index or "https://pypi.org/simple"
    if name == "mps":
        script = str(files["setup-macos.sh"].content)
        torch_call = _pip_line(script, "requirements.txt\"")
        user_call = _pip_line(script, "user-requirements.txt")
    else:
        dockerfile = str(files["Dockerfile"].content)
        torch_call = _pip_line(dockerfile, "/opt/envbuild/requirements.txt")
        user_call = _pip_line(dockerfile, "/opt/envbuild/user-requirements.txt")
        team_call = _pip_line(dockerfile, "/opt/envbuild/team-requirements.txt")
        assert (team_call is None) == (not team_pip)
        if team_call is not None:
            assert user_call is None or team_call == user_call
            user_call = user_call or team_call
    assert torch_call is not None
    assert user_call is not None or (not pip and name != "mps")
    # the image (or the Mac): two pip calls, each its own index
    assert torch_call.index == want_torch
    assert torch_call.extras == extras
    if user_call is not None:
        assert user_call.index == want_user
        assert user_call.extras == extras
    # environment.yml: one pip call; the user's index first when it has user packages
    env_call, reqs = _environment_yml(str(files["environment.yml"].content))
    user_packages = bool(pip or team_pip)
    if user_packages:
        assert env_call.index == want_user
        assert want_torch == want_user or want_torch in env_call.extras
    else:
        assert env_call.index == want_torch
    assert set(extras) <= {env_call.index, *env_call.extras}
    # every plain-http index is trusted for its host, in every format
    for call in (torch_call, user_call, env_call):
        if call is None:
            continue
        for url in (call.index, *call.extras):
            if url.startswith("http://"):
                assert url.split("/")[2] in call.trusted, (url, call)
    # and every format installs the same packages: the exact torch builds, then the user's
    assert reqs[:len(reqs) - len(team_pip) - len(pip)] == \
        [line for line in str(files["requirements.txt"].content).splitlines()
         if not line.startswith("#")]
    assert reqs[len(reqs) - len(team_pip) - len(pip):] == [*team_pip, *pip]


# -- apptainer.def and the tag build gives --------------------------------------------------------

class _Image:
    id = "sha256:" + "0" * 64


def _tag_build_gives(context: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run envbuild.engine.build.build on the context with an engine that already holds an image of
    it (the cache path: no Docker needed): the tag it gives that image."""
    from envbuild.engine import build, docker

    given: list[tuple[str, str]] = []
    monkeypatch.setattr(docker, "find_images", lambda labels: [_Image()])
    monkeypatch.setattr(docker, "image_tags", lambda image: [])
    monkeypatch.setattr(docker, "tag", lambda image_id, ref: given.append((image_id, ref)))
    result = build.build(context, env={})
    assert result.cached and given == [(_Image.id, result.tag)]
    return result.tag


@given(name=st.sampled_from(["cpu", "cuda", "rocm", "cpu-slim"]), pip=_pips,
       apt=st.lists(st.sampled_from(["curl", "git"]), max_size=1),
       conda=st.lists(st.sampled_from(["ffmpeg"]), max_size=1),
       wheels=st.lists(st.sampled_from(["a-1.0-py3-none-any.whl", "b-2.0-py3-none-any.whl"]),
                       max_size=2, unique=True))
@settings(max_examples=25, deadline=None)
def test_apptainer_def_bootstraps_from_the_image_build_makes(
        name: str, pip: list[str], apt: list[str], conda: list[str], wheels: list[str]) -> None:
    import tempfile

    from envbuild.render.context import write_tree
    from envbuild.render.pipeline import ContextInputs, prepare

    m = _matrix()
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        wheelhouse = None
        if wheels:
            wheelhouse = Path(tmp) / "wheels"
            wheelhouse.mkdir()
            for i, w in enumerate(wheels):
                (wheelhouse / w).write_bytes(b"x" * (i + 1))
        ci = ContextInputs(pip=tuple(pip), apt=tuple(apt), conda=tuple(conda),
                           wheelhouse=wheelhouse, apptainer=True, torch_index_kind="pytorch")
        p = prepare(REQUESTS[name], ci, m)
        ctx = Path(tmp) / "ctx"
        write_tree(p.files, ctx, links={"wheelhouse": wheelhouse} if wheelhouse else {})
        header = _apptainer_header((ctx / "apptainer.def").read_text())
        assert header["Bootstrap"] == "docker-daemon"
        assert header["From"] == _tag_build_gives(ctx, mp)
        assert header["From"] == tags.default_tag(p.spec, tags.context_hash(ctx))


def _apptainer_header(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("%"):
            break
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def test_apptainer_golden_names_a_tag_build_can_give() -> None:
    """The golden apptainer.def's From: has the default tag's form (not an old format)."""
    text = (GOLDEN / "cuda-fleet-apptainer" / "apptainer.def")
    header = _apptainer_header(text.read_text())
    assert header["Bootstrap"] == "docker-daemon"
    assert re.fullmatch(_format_regex(), header["From"]), header["From"]


# -- the tag format the help states -------------------------------------------------------------

_PLACEHOLDERS = {"<target>": "(?:cpu|cuda|rocm|mps)", "<X.Y.Z>": r"\d+\.\d+\.\d+",
                 "<variant>": r"(?:cu|rocm)[0-9.]+", "<X.Y>": r"3\.\d+", "<12 hex>": "[0-9a-f]{12}"}


def _format_regex() -> str:
    """DEFAULT_TAG_FORMAT as a regex: <...> placeholders, [...] optional parts (an unknown
    placeholder is a KeyError: a new one must be described here too)."""
    parts = re.split(r"(<[^>]*>|\[|\])", tags.DEFAULT_TAG_FORMAT)
    special = {"[": "(?:", "]": ")?", **_PLACEHOLDERS}
    return "".join(special[p] if p in special or p.startswith("<") else re.escape(p)
                   for p in parts)


@pytest.mark.parametrize("name", sorted(REQUESTS))
def test_default_tag_has_the_stated_format(name: str) -> None:
    spec = _spec(name)
    tag = tags.default_tag(spec, "0" * 16)
    assert re.fullmatch(_format_regex(), tag), (tags.DEFAULT_TAG_FORMAT, tag)
    assert (f"-{spec.variant}-" in tag) == (spec.variant != spec.target)
