"""Size estimate: recorded index and registry payloads served from a local HTTP server.

tests/fixtures/size/ holds real payloads recorded on 2026-11-22: PyPI's PEP 691 JSON for sympy,
mpmath and filelock (trimmed to a few files), their PEP 658 .metadata files and the tails of the
wheels from the central directory on (gzip); the torch 2.13.0+cpu wheel's METADATA and central
directory (from the wheelhouse: the PyTorch index is not reachable here, so its HTML page is
written below in that index's format, without sizes, as it serves them); the manifest of
local/debian:bookworm as a local docker-registry returned it after a docker push.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.engine.sizefetch import (
    base_fact,
    gather,
)
from envbuild.matrix import Matrix
from tests.support import size as shared
from tests.support.size import MANIFEST_LAYERS, _Server

server = shared.server  # a fixture of tests/support/size.py

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


# ------------------------------------------------------------------ hostile wheels


# ------------------------------------------------------------------ the pure estimate


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


