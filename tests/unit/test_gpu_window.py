"""The GPU <-> driver edge: every architecture's driver window, at its boundaries."""

from __future__ import annotations

import pytest

from envbuild.common.errors import ConflictError
from envbuild.common.versions import version_key
from envbuild.core.gpu_window import branch_of, fleet, window
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix

# (arch cc, newest driver that still drives it, oldest that does not) — one row per boundary
LAST_BRANCH = [("3.5", "470.256.02", "520.61.05"), ("3.7", "470.256.02", "525.60.13"),
               ("5.0", "580.95.05", "590.44.01"), ("5.2", "580.95.05", "590.44.01"),
               ("6.0", "580.95.05", "590.44.01"), ("6.1", "580.95.05", "590.44.01"),
               ("7.0", "580.95.05", "595.45.04")]
# (arch cc, its first driver (GA of min_cuda), one just older)
FIRST_DRIVER = [("9.0", "520.61.05", "515.48.07"), ("10.0", "570.26", "560.35.05"),
                ("12.0", "570.26", "565.57.01"), ("8.9", "520.61.05", "515.65.01")]


@pytest.mark.parametrize(("cc", "inside", "outside"), LAST_BRANCH)
def test_last_branch(matrix: Matrix, cc: str, inside: str, outside: str) -> None:
    w = window(matrix, cc, f"sm_{cc}")
    assert w is not None and w.last_branch is not None
    assert w.admits(inside) and not w.admits(outside) and w.too_new(outside)


@pytest.mark.parametrize(("cc", "inside", "outside"), FIRST_DRIVER)
def test_first_driver(matrix: Matrix, cc: str, inside: str, outside: str) -> None:
    w = window(matrix, cc, f"sm_{cc}")
    assert w is not None and w.first_driver == inside
    assert w.admits(inside) and w.too_old(outside)


@pytest.mark.parametrize("cc", ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"])
def test_current_archs_have_no_ceiling(matrix: Matrix, cc: str) -> None:
    w = window(matrix, cc, cc)
    assert w is not None and w.last_branch is None and w.admits("615.00")


def test_fleet_intersection(matrix: Matrix) -> None:
    fw = fleet([window(matrix, "12.0", "5090"), window(matrix, "6.1", "1080")])
    assert fw.first_driver == "570.26" and fw.last_branch == 580 and not fw.empty()
    assert fleet([window(matrix, "12.0", "5090"), window(matrix, "3.7", "K80")]).empty()


def _gpus(spec_gpus: tuple[str, ...], **kw: str) -> Request:
    return Request(gpus=spec_gpus, **kw)  # type: ignore[arg-type]


def test_k80_gets_an_image_r470_runs(matrix: Matrix) -> None:
    spec = resolve(_gpus(("Tesla K80",)), matrix)
    assert spec.max_driver == "470"
    assert branch_of(spec.min_driver or "") <= 470
    assert "sm_37" in spec.archs
    assert any("R470" in line for line in spec.trace)


def test_blackwell_needs_a_cuda_12_8_wheel(matrix: Matrix) -> None:
    with pytest.raises(ConflictError, match=r"needs a CUDA >= 12\.8 wheel"):
        resolve(_gpus(("RTX 5090",), cuda="12.6"), matrix)
    spec = resolve(_gpus(("RTX 5090",)), matrix)
    assert version_key(spec.torch_cuda or "") >= version_key("12.8")
    assert version_key(spec.min_driver or "") >= version_key("570.26")


def test_pascal_and_blackwell_fleet(matrix: Matrix) -> None:
    """No wheel in the matrix has cubins for both sm_60 and sm_120 on a CUDA >= 12.8 toolkit: the
    cu124 answer of old (Blackwell through compute_90 PTX) is refused, with alternatives."""
    with pytest.raises(ConflictError) as err:
        resolve(_gpus(("RTX 5090", "GTX 1080")), matrix)
    assert err.value.alternatives


def test_no_driver_for_kepler_and_blackwell(matrix: Matrix) -> None:
    with pytest.raises(ConflictError, match="no driver drives both"):
        resolve(_gpus(("K80", "RTX 5090")), matrix)


def test_max_driver_keeps_old_hashes_stable(matrix: Matrix) -> None:
    spec = resolve(Request(cuda="12.2"), matrix)
    assert spec.max_driver is None and "max_driver" not in spec.identity()
