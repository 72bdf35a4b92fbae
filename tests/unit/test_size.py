"""Size estimate, the pure parts: the estimate from known facts, hostile payloads parsed, the
report beside the real size. Recorded answers over HTTP: tests/integration/test_size_server.py."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.core.size import BaseFact, WheelFact, beside, describe, duplicates, estimate
from envbuild.engine.sizefetch import (
    Response,
    Unreachable,
    base_fact,
    central_directory_sizes,
    exact_pins,
    gather,
    http_get,
    split_reference,
    wheel_contents_remote,
)
from envbuild.matrix import Matrix
from tests.support.size import FIX, TORCH

# zipfile over the real wheel (wheelhouse), 2026-11-22: members' uncompressed bytes, .py bytes.
TORCH_UNPACKED, TORCH_PY = 699_298_109, 47_710_914


def _cpu_spec(matrix: Matrix) -> Any:
    return resolve(Request(target="cpu", torch="2.13.0", python="3.11", os="debian12",
                           components=("torch",)), matrix)


# ------------------------------------------------------------------ wheels and indexes

def test_recorded_torch_central_directory_counts_every_member() -> None:
    tail = gzip.decompress((FIX / f"{TORCH}.tail.gz").read_bytes())
    assert central_directory_sizes(tail) == (TORCH_UNPACKED, TORCH_PY)


def test_offline_is_unknown_never_an_error(matrix: Matrix) -> None:
    est = gather(_cpu_spec(matrix), matrix.extra["sizes"],
                 base_image="127.0.0.1:9/library/debian:bookworm",
                 torch_index="http://127.0.0.1:9/pt", user_index="http://127.0.0.1:9/pypi")
    assert not est.complete
    unknown = {r.layer: r.how for r in est.rows if r.bytes is None}
    assert any("offline or unreachable" in how for how in unknown.values())
    assert "torch stack" in unknown
    assert "lower bound" in describe(est)[-1 - len(est.notes)]


# ------------------------------------------------------------------ registries


@pytest.mark.parametrize(("ref", "expected"), [
    ("ubuntu:22.04", ("https://registry-1.docker.io/v2", "library/ubuntu", "22.04")),
    ("rocm/dev-ubuntu-22.04:6.2-complete",
     ("https://registry-1.docker.io/v2", "rocm/dev-ubuntu-22.04", "6.2-complete")),
    ("nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
     ("https://nvcr.io/v2", "nvidia/cuda", "12.4.1-base-ubuntu22.04")),
    ("127.0.0.1:5000/mirror/debian", ("http://127.0.0.1:5000/v2", "mirror/debian", "latest")),
    ("debian@sha256:" + "c" * 64,
     ("https://registry-1.docker.io/v2", "library/debian", "sha256:" + "c" * 64)),
])
def test_split_reference(ref: str, expected: tuple[str, str, str]) -> None:
    assert split_reference(ref) == expected


@given(st.text(max_size=80))
@settings(max_examples=200, deadline=None)
def test_any_reference_is_a_fact_or_unknown(ref: str) -> None:
    def no_network(url: str, headers: Any) -> Response:
        raise Unreachable("no network in this test", "offline")
    fact = base_fact(ref, no_network)
    assert fact.compressed is None and fact.how


# ------------------------------------------------------------------ hostile wheels

@given(st.binary(max_size=4096), st.integers(min_value=1, max_value=1 << 40))
@settings(max_examples=300, deadline=None)
def test_hostile_wheel_tails_never_crash(blob: bytes, total: int) -> None:
    def fetch(url: str, headers: Any) -> Response:
        return Response(206, {}, blob)
    try:
        unpacked, py = wheel_contents_remote(fetch, "http://x/w.whl", total)
    except Unreachable:
        return
    assert unpacked >= py >= 0


def test_http_get_refuses_other_schemes() -> None:
    for url in ("file:///etc/passwd", "ftp://x/y", "gopher://x", "/relative"):
        with pytest.raises(Unreachable):
            http_get(url, {})


@pytest.mark.parametrize(("line", "pinned"), [
    ("numpy==2.1.0", True), ("NumPy == 2.1.0", True), ("numpy==2.*", False),
    ("numpy>=2", False), ("numpy", False), ("numpy==2.1.0,<3", False),
    ("pkg @ https://example.com/p.whl", False), ("not a requirement!!", False),
])
def test_only_exact_pins_are_estimated(line: str, pinned: bool) -> None:
    got, other = exact_pins([line])
    assert bool(got) is pinned and bool(other) is not pinned


# ------------------------------------------------------------------ the pure estimate

def test_estimate_rows_and_beside(matrix: Matrix) -> None:
    sizes = matrix.extra["sizes"]
    spec = _cpu_spec(matrix)
    wheel = WheelFact("torch", TORCH, 191_794_682, TORCH_UNPACKED, TORCH_PY)
    est = estimate(spec, base=BaseFact("d", compressed=49_883_633, how="manifest"),
                   torch_wheels=[wheel], sizes=sizes)
    assert est.complete
    base = est.rows[0]
    assert base.bytes == round(49_883_633 * float(sizes["model"]["base_unpack_ratio"]))
    fallback = estimate(spec, base=None, torch_wheels=[WheelFact("torch", TORCH, 100)],
                        sizes=sizes)
    assert fallback.rows[3].bytes == round(100 * sizes["model"]["installed_per_wheel_byte"])
    assert not fallback.complete and fallback.rows[0].bytes is None
    side = beside(est, est.total)
    assert side["error_pct"] == 0.0 and side["estimate"]["total_bytes"] == est.total


def test_unknown_os_layer(matrix: Matrix) -> None:
    spec = resolve(Request(target="cpu", torch="2.9.1", os="ubuntu24.04"), matrix)
    est = estimate(spec, base=None, torch_wheels=[], sizes=matrix.extra["sizes"])
    assert est.rows[1].bytes is None and "ubuntu24.04" in est.rows[1].how


@pytest.mark.parametrize(("flavor", "dup"), [("base", False), ("runtime", True),
                                               ("devel", True)])
def test_cuda_flavors_name_their_duplicates(matrix: Matrix, flavor: str, dup: bool) -> None:
    spec = resolve(Request(cuda="12.4", torch="2.6.0", flavor=flavor), matrix)
    lines = duplicates(spec, matrix.extra["sizes"])
    assert bool(lines) is dup
    if dup:
        assert "cublas" in lines[0] and "nccl" in lines[0] and " MB" in lines[0]


def test_a_relative_wheelhouse_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make --wheelhouse .work/wheelhouse` (relative, as the README types it) crashed the size
    estimate with a traceback after the build ("relative path can't be expressed as a file URI")."""
    from envbuild.engine.sizefetch import Lookup

    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    files = Lookup([], wheelhouse=Path("wh")).files("torch")
    assert len(files) == 1 and files[0].url.startswith("file:///")
