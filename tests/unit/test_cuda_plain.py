"""CUDA on a plain OS base, CUDA 13.2+ images, and the alternatives offered when an image is
missing: pure resolution and rendering (the real builds are in
tests/integration/test_cuda_image.py)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from envbuild.common.errors import ConflictError
from envbuild.common.versions import major_of, minor_of, version_key
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix
from envbuild.render.context import RenderOptions, render


def test_torch_2_15_0_resolves_alone(matrix: Matrix) -> None:
    s = resolve(Request(torch="2.15.0"), matrix)
    assert (s.target, s.variant, s.torch_cuda) == ("cuda", "cu132", "13.2")
    assert s.cuda_image is not None and minor_of(s.cuda_image) == "13.2"
    assert s.base_image == f"nvidia/cuda:{s.cuda_image}-base-{s.os}"
    rel = matrix.cuda_release("13.2")
    assert rel is not None and s.min_driver == rel.ga_driver_linux


def test_13x_wheel_on_an_older_image_through_mvc(matrix: Matrix) -> None:
    floor = matrix.compat_floor(13)
    assert floor is not None
    s = resolve(Request(torch="2.15.0", driver=floor.min_driver_linux), matrix)
    assert s.variant == "cu132" and s.cuda_image is not None
    assert version_key(s.cuda_image) < version_key("13.2")
    assert s.min_driver == floor.min_driver_linux


def _plain_cases(m: Matrix) -> list[tuple[str, str]]:
    """(torch X.Y.Z, OS) for every OS and CUDA-default torch release where the OS has no
    nvidia/cuda image of the wheel's CUDA: a plain base."""
    out = []
    for rel in m.torch:
        v = next((v for v in m.variants_of(rel.version) if v.tag == rel.default_variant), None)
        if v is None or v.kind != "cuda" or version_key(rel.version) < version_key("2.4"):
            continue
        cuda = m.cuda_release(v.version)
        imaged = {i.os for i in m.images_for(cuda.image)} if cuda and cuda.image else set()
        patch = max((p.torch for p in m.patches if minor_of(p.torch) == rel.version),
                    key=version_key)
        out += [(patch, o.id) for o in m.oses if o.id not in imaged]
    return out


def test_plain_cases_exist(matrix: Matrix) -> None:
    cases = _plain_cases(matrix)
    assert any(os_id == "debian12" for _, os_id in cases)
    assert len({t for t, _ in cases}) >= 5


def test_every_os_without_an_image_gets_the_plain_base(matrix: Matrix) -> None:
    runtime = matrix.meta["cuda"]["runtime"]
    for torch, os_id in _plain_cases(matrix):
        try:
            s = resolve(Request(target="cuda", torch=torch, os=os_id), matrix)
        except ConflictError as e:  # e.g. no Python that torch supports on that OS: not ours
            assert "nvidia/cuda" not in e.message, (torch, os_id, e.message)
            continue
        info = matrix.os_info(os_id)
        assert info is not None and s.torch_cuda is not None
        assert (s.base_image, s.cuda_image, s.os) == (info.image, None, os_id)
        assert s.require_cuda == f"{major_of(s.torch_cuda)}.0"
        floor = matrix.compat_floor(major_of(s.torch_cuda))
        assert floor is not None
        assert version_key(s.min_driver or "0") >= version_key(floor.min_driver_linux)
        assert any("Saved:" in line and "Left out:" in line for line in s.trace)
        docker = render(s, RenderOptions(), matrix)["Dockerfile"].content
        assert isinstance(docker, str)
        assert f"NVIDIA_REQUIRE_CUDA=cuda>={s.require_cuda}\n" in docker
        for name, value in runtime["env"]:
            assert f"{name}={value}" in docker
        assert f"FROM {info.image}\n" in docker
        assert ":".join(runtime["ld_library_path"]) in docker


def test_nvidia_base_writes_no_require_cuda(matrix: Matrix) -> None:
    s = resolve(Request(torch="2.13.0", os="ubuntu24.04"), matrix)
    assert s.require_cuda is None and "require_cuda" not in s.to_json()
    docker = render(s, RenderOptions(), matrix)["Dockerfile"].content
    assert "NVIDIA_REQUIRE_CUDA" not in docker  # NVIDIA's own, with its brand clauses, stays


_ALT = re.compile(r"^\s+- (?:(without --cuda)|--cuda (\S+)|--os (\S+)|--torch (\S+)"
                  r"|--python (\S+)):")


def _apply(req: Request, line: str) -> Request | None:
    m = _ALT.match(line)
    if m is None:
        return None
    no_cuda, cuda, os_id, torch, python = m.groups()
    if no_cuda:
        return dataclasses.replace(req, cuda=None)
    if cuda:
        return dataclasses.replace(req, cuda=cuda)
    if os_id:
        return dataclasses.replace(req, os=os_id)
    if torch:
        return dataclasses.replace(req, torch=torch)
    return dataclasses.replace(req, python=python)


def _imageless(m: Matrix) -> list[str]:
    return [r.version for r in m.cuda if not r.image]


@pytest.mark.parametrize("extra", [{}, {"torch": "2.15"}, {"torch": "2.14"},
                                   {"driver": "580.65.06"}, {"python": "3.12"}])
def test_missing_image_alternatives_each_resolve(matrix: Matrix, extra: dict[str, str]) -> None:
    """Every alternative offered for a CUDA without an image resolves when applied, and the
    list includes a same-major wheel on an older image or the plain base."""
    assert _imageless(matrix), "the matrix should have a CUDA release without an image"
    for cuda in _imageless(matrix):
        req = Request(cuda=cuda, **extra)  # type: ignore[arg-type]
        with pytest.raises(ConflictError) as info:
            resolve(req, matrix)
        hint = info.value.alternatives
        assert hint, (cuda, extra, info.value.message)
        applied = [a for a in (_apply(req, "  - " + line) for line in hint) if a is not None]
        assert len(applied) == len(hint), hint
        for alt in applied:
            resolve(alt, matrix)  # raises if the suggestion does not resolve
        assert any("--os " in line or "--cuda 13." in line or "without --cuda" in line
                   for line in hint), hint
