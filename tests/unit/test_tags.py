"""One default tag (envbuild.core.tags.default_tag): the apptainer.def that `render --format
apptainer` writes bootstraps from exactly the tag `build` gives the image of the same context,
for requests drawn from the matrix's own rows, every container target (no Docker: `build` runs
its cache path against a stub engine that already holds the image)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvbuildError
from envbuild.core import tags, targets
from envbuild.core.request import Request
from envbuild.matrix import Matrix, load

_M: list[Matrix] = []


def _matrix() -> Matrix:
    if not _M:
        _M.append(load())
    return _M[0]


def _requests() -> list[Request]:
    """A request per (container target, torch release, CUDA/ROCm version) the matrix lists."""
    m = _matrix()
    out = []
    for v in m.variants:
        t = next((t for t in targets.REGISTRY.values() if t.container and t.wheel_kind == v.kind
                  and t.name == v.kind), None)
        if t is None or v.status != "stable":
            continue
        out.append(Request(target=t.name, torch=v.release,
                           cuda=v.version if t.name == "cuda" else None,
                           rocm=v.version if t.name == "rocm" else None))
    return out


class _Image:
    id = "sha256:" + "0" * 64


def _tag_build_gives(context: Path, mp: pytest.MonkeyPatch) -> str:
    from envbuild.engine import build, docker

    mp.setattr(docker, "find_images", lambda labels: [_Image()])
    mp.setattr(docker, "image_tags", lambda image: [])
    mp.setattr(docker, "tag", lambda image_id, ref: None)
    result = build.build(context, env={})
    assert result.cached
    return result.tag


def _from_line(text: str) -> str:
    return next(line.split(":", 1)[1].strip() for line in text.splitlines()
                if line.startswith("From:"))


def test_the_matrix_gives_every_container_target() -> None:
    assert {r.target for r in _requests()} == {t.name for t in targets.REGISTRY.values()
                                               if t.container}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_apptainer_def_names_the_tag_build_gives(data: st.DataObject) -> None:
    from envbuild.render.context import write_tree
    from envbuild.render.pipeline import ContextInputs, prepare

    reqs = _requests()
    target = data.draw(st.sampled_from(sorted({r.target for r in reqs})))
    req = data.draw(st.sampled_from([r for r in reqs if r.target == target]))
    try:
        p = prepare(req, ContextInputs(apptainer=True, torch_index_kind="pytorch"), _matrix())
    except EnvbuildError:
        assume(False)  # a row the resolver refuses (no image for it): nothing to build
        return
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        ctx = Path(tmp) / "ctx"
        write_tree(p.files, ctx)
        named = _from_line((ctx / "apptainer.def").read_text())
        assert named == _tag_build_gives(ctx, mp)
        assert named == tags.default_tag(p.spec, tags.context_hash(ctx))
