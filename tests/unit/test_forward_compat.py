"""NVIDIA's forward compatibility (--forward-compat): resolved only for the GPUs and driver
branches NVIDIA supports, refused for the others with the reason, rendered from the recorded
redistributable (sha256, size), installed by the image's script from a served stand-in archive."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import ConflictError, UsageError
from envbuild.common.resources import templates_dir
from envbuild.common.versions import version_key
from envbuild.core import redist
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix, load
from envbuild.render.context import RenderOptions, render
from tests.support.forward_compat import MANIFEST

H100_R535 = Request(forward_compat=True, driver="535.104.05", gpus=("H100",), torch="2.13.0")


def test_h100_on_r535_gets_the_newest_wheel_through_forward_compat(matrix: Matrix) -> None:
    s = resolve(H100_R535, matrix)
    pkg = redist.package(matrix, s.forward_compat or "")
    assert (s.variant, s.torch_cuda, s.require_cuda) == ("cu130", "13.0", "13.0")
    assert "535" in pkg.host_branches and s.min_driver == "535.104.05"
    assert s.cuda_image is None and any("forward-compatibility" in t for t in s.trace)
    without = resolve(Request(driver="535.104.05", gpus=("H100",)), matrix)
    assert without.torch_cuda is not None and without.torch_cuda.startswith("12.")


def test_a_driver_that_runs_the_wheel_natively_needs_no_compat(matrix: Matrix) -> None:
    s = resolve(Request(forward_compat=True, driver="580.65.06", gpus=("H100",)), matrix)
    assert s.forward_compat is None and s.cuda_image is not None


def _not_supported(m: Matrix) -> list[str]:
    fc = m.meta["cuda"]["forward_compat"]
    allowed = set(fc["gpus"]) | {g.name for g in m.gpus if g.family == "jetson"}
    return [g.name for g in m.gpus if g.vendor == "nvidia" and g.name not in allowed
            and g.cc and version_key(g.cc) >= version_key("7.5")]


def test_every_gpu_outside_nvidias_list_is_refused_saying_why(matrix: Matrix) -> None:
    names = _not_supported(matrix)
    assert "RTX 4090" in names and "RTX 5090" in names
    for name in names:  # R575: inside every one's driver window, older than the 13.x floor
        with pytest.raises(ConflictError) as info:
            resolve(Request(forward_compat=True, driver="575.57.08", gpus=(name,),
                            torch="2.13.0"), matrix)
        assert "data-center GPUs" in info.value.message and name in info.value.message
        assert "804" in info.value.message and info.value.hint


@settings(deadline=None)  # each example resolves the whole matrix: seconds on a loaded box
@given(branch=st.integers(min_value=525, max_value=579))
def test_only_the_branches_a_package_serves(branch: int) -> None:
    m = load()
    served = {b for c in m.compat_packages if c.cuda.startswith("13.") for b in c.host_branches}
    req = Request(forward_compat=True, driver=f"{branch}.20.01", gpus=("A100",), torch="2.13.0",
                  cuda="13.0")
    if str(branch) in served:
        s = resolve(req, m)
        assert str(branch) in redist.package(m, s.forward_compat or "").host_branches
    else:
        with pytest.raises(ConflictError):
            resolve(req, m)


def test_render_writes_brands_and_the_recorded_archive(matrix: Matrix) -> None:
    s = resolve(H100_R535, matrix)
    pkg = redist.package(matrix, s.forward_compat or "")
    files = render(s, RenderOptions(), matrix)
    docker = files["Dockerfile"].content
    assert isinstance(docker, str)
    for branch in pkg.host_branches:
        assert f"brand=tesla,driver>={branch},driver<{int(branch) + 1}" in docker
    assert pkg.sha256 in docker and str(pkg.size) in docker and pkg.path in docker
    assert files["install-cuda-compat.py"].content == \
        (templates_dir() / "install-cuda-compat.py").read_text()


def test_recorded_manifest_agrees_with_the_matrix(matrix: Matrix) -> None:
    e = redist.entry(json.loads(MANIFEST.read_text()))
    pkg = next(c for c in matrix.compat_packages if c.redist == "13.2.2"
               and c.arch == "linux-x86_64")
    assert (e["version"], e["relative_path"], e["sha256"], e["size"]) == \
        (pkg.version, pkg.path, pkg.sha256, pkg.size)
    sbsa = redist.entry(json.loads(MANIFEST.read_text()), "linux-sbsa")
    assert sbsa["sha256"] == next(c.sha256 for c in matrix.compat_packages
                                  if c.redist == "13.2.2" and c.arch == "linux-sbsa")


@pytest.mark.parametrize("field,value", [
    ("sha256", "0" * 63), ("sha256", "G" * 64), ("relative_path", "../../etc/passwd"),
    ("relative_path", "cuda_compat/x/$(id).tar.xz"), ("size", "-1"), ("size", "12e3")])
def test_hostile_manifest_values_are_refused(field: str, value: str) -> None:
    doc = json.loads(MANIFEST.read_text())
    doc["cuda_compat"]["linux-x86_64"]["cuda13.x"][field] = value
    with pytest.raises(ValueError):
        redist.entry(doc)


def test_forward_compat_is_for_cuda_only(matrix: Matrix) -> None:
    with pytest.raises(UsageError):
        resolve(Request(forward_compat=True, target="cpu", driver="535.104.05"), matrix)
