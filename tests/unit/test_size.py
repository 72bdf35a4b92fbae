"""Size estimate: recorded index and registry payloads served from a local HTTP server.

tests/fixtures/size/ holds real payloads recorded on 2026-11-22: PyPI's PEP 691 JSON for sympy,
mpmath and filelock (trimmed to a few files), their PEP 658 .metadata files and the tails of the
wheels from the central directory on (gzip); the torch 2.13.0+cpu wheel's METADATA and central
directory (from the wheelhouse: the PyTorch index is not reachable here, so its HTML page is
written below in that index's format, without sizes, as it serves them); the manifest of
local/debian:bookworm as a local docker-registry returned it after a docker push.
"""

from __future__ import annotations

import gzip
import json
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
from tests.support import size as shared
from tests.support.size import FIX, MANIFEST_LAYERS, TORCH, _Server

server = shared.server  # a fixture, shared with the other kind's test_size.py

# zipfile over the real wheel (wheelhouse), 2026-11-22: members' uncompressed bytes, .py bytes.
TORCH_UNPACKED, TORCH_PY = 699_298_109, 47_710_914


def _cpu_spec(matrix: Matrix) -> Any:
    return resolve(Request(target="cpu", torch="2.13.0", python="3.11", os="debian12",
                           components=("torch",)), matrix)


def _index_manifest() -> bytes:
    return json.dumps({"schemaVersion": 2,
                       "mediaType": "application/vnd.oci.image.index.v1+json",
                       "manifests": [
                           {"digest": "sha256:" + "a" * 64, "size": 1,
                            "platform": {"os": "linux", "architecture": "arm64"}},
                           {"digest": "sha256:" + "b" * 64, "size": 1,
                            "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()


# ------------------------------------------------------------------ wheels and indexes

def test_recorded_torch_central_directory_counts_every_member() -> None:
    tail = gzip.decompress((FIX / f"{TORCH}.tail.gz").read_bytes())
    assert central_directory_sizes(tail) == (TORCH_UNPACKED, TORCH_PY)


def test_torch_stack_from_recorded_indexes(server: tuple[str, _Server], matrix: Matrix) -> None:
    host, _ = server
    spec = _cpu_spec(matrix)
    est = gather(spec, matrix.extra["sizes"], base_image=f"{host}/library/debian:bookworm",
                 torch_index=f"http://{host}/pt", user_index=f"http://{host}/pypi",
                 pip=["sympy==1.13.3", "numpy>=2"])
    rows = {r.layer.split(" ")[0]: r for r in est.rows}
    torch_row = rows["torch"]
    # torch (HTML index: size by a range request; central directory by two range requests),
    # sympy 1.14.0 (the newest >=1.13.3), mpmath 1.3.0 (sympy's <1.4), filelock (newest)
    for name in ("torch", "sympy", "mpmath", "filelock"):
        assert name in torch_row.how
    assert "1.13.3" not in torch_row.how
    pyc = float(matrix.extra["sizes"]["model"]["pyc_per_py_byte"])
    assert torch_row.bytes is not None
    assert torch_row.bytes > TORCH_UNPACKED + round(pyc * TORCH_PY)
    assert torch_row.compressed and torch_row.compressed > 191_794_682
    # deps the recording lacks are named, not silently dropped; filelock has no PEP 658 file
    assert any("networkx" in n for n in est.notes)
    assert any("filelock: dependencies not read" in n for n in est.notes)
    # user packages: an exact pin is counted (sympy 1.13.3 is a separate file), a range is not
    assert rows["user"].bytes is None and "numpy>=2" in rows["user"].how


def test_user_packages_counted_when_all_pinned(server: tuple[str, _Server],
                                               matrix: Matrix) -> None:
    host, _ = server
    est = gather(_cpu_spec(matrix), matrix.extra["sizes"], base_image=f"{host}/x/y:z",
                 torch_index=f"http://{host}/pt", user_index=f"http://{host}/pypi",
                 pip=["mpmath==1.3.0"])
    user = next(r for r in est.rows if r.layer == "user packages")
    assert user.bytes == 0 and user.how == "none"  # mpmath is already in the torch stack
    est = gather(_cpu_spec(matrix), matrix.extra["sizes"], base_image=f"{host}/x/y:z",
                 torch_index=f"http://{host}/nothing", user_index=f"http://{host}/pypi",
                 pip=["sympy==1.13.3"])
    user = next(r for r in est.rows if r.layer == "user packages")
    assert user.bytes is not None and user.bytes > 6_189_483 and "sympy" in user.how
    torch_row = next(r for r in est.rows if r.layer == "torch stack")
    assert torch_row.bytes is None and "torch==2.13.0+cpu" in torch_row.how


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

def test_registry_manifest_with_token_and_index(server: tuple[str, _Server]) -> None:
    host, state = server
    state.registry = {
        "/v2/library/debian/manifests/bookworm": (200, {}, _index_manifest()),
        f"/v2/library/debian/manifests/sha256:{'b' * 64}":
            (200, {}, json.dumps(MANIFEST_LAYERS).encode())}
    fact = base_fact(f"{host}/library/debian:bookworm")
    assert fact.compressed == sum(x["size"] for x in MANIFEST_LAYERS["layers"])
    assert "linux/amd64" in fact.how


@pytest.mark.parametrize(("payload", "why"), [
    ((500, {}, b""), "HTTP 500"),
    ((200, {}, b"not json"), "unreadable"),
    ((200, {}, b"[1, 2]"), "unreadable"),
    ((200, {}, json.dumps({"schemaVersion": 2}).encode()), "without layers"),
    ((200, {}, json.dumps({"layers": [{"size": "big"}]}).encode()), "unreadable"),
    ((200, {}, json.dumps({"manifests": []}).encode()), "no linux/amd64"),
    ((200, {}, json.dumps({"manifests": [{"platform": "x"}]}).encode()), "unreadable"),
])
def test_hostile_registry_answers_are_unknown(server: tuple[str, _Server],
                                              payload: tuple[int, dict[str, str], bytes],
                                              why: str) -> None:
    host, state = server
    state.registry = {"/v2/library/debian/manifests/bookworm": payload}
    fact = base_fact(f"{host}/library/debian:bookworm")
    assert fact.compressed is None and why in fact.how


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


_JSON = {"Content-Type": "application/vnd.pypi.simple.v1+json"}


@pytest.mark.parametrize("payload", [
    (200, _JSON, b"{not json"),
    (200, _JSON, b"[]"),
    (200, _JSON, json.dumps({"files": [{"url": "x"}]}).encode()),
    (200, _JSON, json.dumps({"files": [{"filename": 5, "url": None}]}).encode()),
    (200, _JSON, json.dumps({"files": "all of them"}).encode()),
    (200, _JSON, json.dumps({"files": [{"filename": "torch-2.13.0+cpu-cp311-cp311-"
                                        "manylinux_2_28_x86_64.whl", "url": "/nowhere",
                                        "size": "huge", "requires-python": ">=3.oops"}]}).encode()),
    (200, {"Content-Type": "text/html"}, b"<a href='javascript:alert(1)'>x</a><a>"),
    (200, {"Content-Type": "text/html"}, bytes(range(256)) * 10),
    (500, {}, b""),
])
def test_hostile_index_pages_are_unknown(server: tuple[str, _Server], matrix: Matrix,
                                         payload: tuple[int, dict[str, str], bytes]) -> None:
    host, state = server
    state.override = {"/bad/torch/": payload}
    try:
        est = gather(_cpu_spec(matrix), matrix.extra["sizes"], base_image=f"{host}/x/y:z",
                     torch_index=f"http://{host}/bad", user_index=f"http://{host}/bad")
    finally:
        state.override = {}
    torch_row = next(r for r in est.rows if r.layer == "torch stack")
    assert torch_row.bytes is None or torch_row.bytes >= 0
    assert not est.complete


def test_a_relative_wheelhouse_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make --wheelhouse .work/wheelhouse` (relative, as the README types it) crashed the size
    estimate with a traceback after the build ("relative path can't be expressed as a file URI")."""
    from envbuild.engine.sizefetch import Lookup

    (tmp_path / "wh").mkdir()
    (tmp_path / "wh" / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    files = Lookup([], wheelhouse=Path("wh")).files("torch")
    assert len(files) == 1 and files[0].url.startswith("file:///")
