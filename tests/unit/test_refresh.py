"""`envbuild matrix refresh`: the pure parts (PyPI and index answers parsed, diffs, TOML edits);
tests/integration/test_refresh_server.py serves recorded answers over HTTP."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvironmentProblem, MatrixError
from envbuild.common.http import Http
from envbuild.features.refresh import (
    Change,
    apply_changes,
    diff_tags,
)
from envbuild.features.refresh.diff import parse_index_page, split_tag
from envbuild.features.refresh.facts import (
    parse_metadata,
    parse_simple_files,
    pins_from_requires,
    torch_pin,
)
from envbuild.matrix import Matrix
from envbuild.validator import rules
from tests.support import refresh as shared
from tests.support.refresh import FIX, PYPI

mdir = shared.mdir  # a fixture, shared with the other kind's test_refresh.py


# ------------------------------------------------------------------------------ pure parsers


def _recorded_metadata() -> list[Path]:
    return sorted((PYPI / "metadata").glob("torch-*.metadata"))


@pytest.mark.parametrize("path", _recorded_metadata(), ids=lambda p: p.name.split("-")[1])
def test_recorded_torch_pins_equal_the_matrix_default_variant(path: Path, matrix: Matrix) -> None:
    """Every recorded torch metadata file pins the cuDNN / NCCL / CUDA the matrix gives its
    release's PyPI default variant (old `name (==v)` and new `cuda-toolkit[...]==` forms)."""
    _, reqs = parse_metadata(path.read_text())
    pins = pins_from_requires(reqs)
    release = ".".join(path.name.split("-")[1].split(".")[:2])
    row = next(r for r in matrix.torch if r.version == release)
    assert rules.cuda_tag(pins.cuda) == row.default_variant
    var = next(v for v in matrix.variants if v.release == release and v.tag == row.default_variant)
    assert (pins.cuda, pins.cudnn, pins.nccl) == (var.version, var.cudnn, var.nccl)


def test_latest_release_pins_come_from_the_project_json() -> None:
    info = json.loads((PYPI / "project-torch.json").read_text())["info"]
    pins = pins_from_requires(info["requires_dist"])
    assert (info["version"], pins.cuda, pins.cuda_full, pins.cudnn, pins.nccl) == (
        "2.15.0", "13.2", "13.2.2", "9.26.0.51", "2.30.7")


@pytest.mark.parametrize(("reqs", "expected"), [
    (["torch (==2.0.0)"], "2.0.0"),
    (["numpy", "torch==2.6.0"], "2.6.0"),
    (["torch>=2.14.0"], ""),
    (["torch==2.*"], ""),
    (["torch>=2.1,==2.1.0"], "2.1.0"),
    (["torchvision==0.1"], ""),
    ([], ""),
    (["not a requirement ((", "torch==2.5.1"], "2.5.1"),
])
def test_torch_pin(reqs: list[str], expected: str) -> None:
    assert torch_pin(reqs)[0] == expected


@pytest.mark.parametrize("reqs", [
    ["nvidia-cudnn-cu12>=9", "nvidia-nccl-cu12"],  # no exact pin: nothing claimed
    ["nvidia-cudnn-cu12==9.*"],
    ["cudnn==9.1.0.70", "nccl==2.20.5"],  # look-alike names
    ["(((", "nvidia-nccl-cu12 @ https://x/y.whl"],
])
def test_pins_ignore_anything_but_exact_pins_of_the_real_names(reqs: list[str]) -> None:
    p = pins_from_requires(reqs)
    assert (p.cuda, p.cudnn, p.nccl) == ("", "", "")


def test_simple_page_python_tags_and_filters() -> None:
    doc = json.loads((PYPI / "simple-torch.json").read_text())
    files = parse_simple_files(doc, "http://h/simple/torch/", "torch")
    f213 = [f for f in files if f.version == "2.13.0" and f.linux_x86_64]
    assert sorted({p for f in f213 for p in f.pythons}) == ["3.10", "3.11", "3.12", "3.13", "3.14"]
    assert all(f.url.startswith("http://h/packages/") for f in files)  # relative URLs joined
    assert {f.build for f in files if f.version == "2.10.0"} == {0, 3}


@pytest.mark.parametrize("payload", [[], {}, {"files": 3}, "x", None, {"files": None}])
def test_simple_page_that_is_not_pep691_is_a_clear_error(payload: Any) -> None:
    with pytest.raises(EnvironmentProblem, match="not a PEP 691"):
        parse_simple_files(payload, "http://h/simple/torch/", "torch")


@pytest.mark.parametrize("text", ["", "garbage", "<html><body>proxy login</body></html>",
                                  "Requires-Dist: torch==2.0.0\n"])
def test_metadata_without_headers_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_metadata(text)


# ---------------------------------------------------------------------- PyPI end to end


def test_a_write_that_would_break_the_matrix_writes_nothing(mdir: Path) -> None:
    from envbuild.features.refresh import write_changes

    before = {p.name: p.read_bytes() for p in mdir.glob("*.toml")}
    bad = Change("pypi", "new-patch", "torch.toml", "patch", (("torch", "9.9.0"),),
                 applicable=True, row={"torch": "9.9.0", "torchvision": "1.0.0",
                                       "torchaudio": "9.9.0", "torchaudio_pinned": True})
    with pytest.raises(MatrixError, match="nothing was written"):
        write_changes(mdir, [bad], {"pypi": "S-REFRESH-PYPI-2026-11-22"}, "http://x", "2026-11-22")
    assert {p.name: p.read_bytes() for p in mdir.glob("*.toml")} == before
    assert not list(mdir.glob(".*"))


# ------------------------------------------------------------------------- TOML line edits


@settings(max_examples=60, deadline=None)
@given(value=st.text(min_size=0, max_size=40))
def test_any_string_value_round_trips_through_the_line_edit(value: str) -> None:
    text = ('# a comment that must stay\n[[variant]]\nrelease = "2.1"\ntag = "cu121"\n'
            'cudnn = "8.9.2.26" # trailing note\nsource = ["S-X"]\n\n# tail comment\n'
            '[[variant]]\nrelease = "2.2"\ntag = "cu121"\ncudnn = "1"\n')
    ch = Change("pypi", "changed", "torch.toml", "variant", (("release", "2.1"), ("tag", "cu121")),
                "cudnn", "8.9.2.26", value, applicable=True)
    out = apply_changes(text, [ch], "S-NEW")
    doc = tomllib.loads(out)
    assert doc["variant"][0]["cudnn"] == value
    assert doc["variant"][0]["source"] == ["S-X", "S-NEW"]
    assert doc["variant"][1] == {"release": "2.2", "tag": "cu121", "cudnn": "1"}
    assert "# a comment that must stay" in out and "# tail comment" in out


def test_new_patch_row_goes_in_version_order() -> None:
    text = ('[[patch]]\ntorch = "2.9.1"\ntorchvision = "0.24.1"\n\n'
            '[[patch]]\ntorch = "2.11.0"\ntorchvision = "0.26.0"\n')
    row = {"torch": "2.10.0", "torchvision": "0.25.0", "torchaudio": "2.10.0",
           "torchaudio_pinned": True}
    ch = Change("pypi", "new-patch", "torch.toml", "patch", (("torch", "2.10.0"),),
                applicable=True, row=row, evidence="e")
    doc = tomllib.loads(apply_changes(text, [ch], "S-NEW"))
    assert [p["torch"] for p in doc["patch"]] == ["2.9.1", "2.10.0", "2.11.0"]
    assert doc["patch"][1]["verified"] is True and doc["patch"][1]["source"] == ["S-NEW"]


def test_nothing_listening_is_one_clear_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(EnvironmentProblem, match="unreachable: cannot connect"):
        Http(timeout=1, retries=2, backoff=0).get(f"http://127.0.0.1:{port}/pypi/torch/json")


# -------------------------------------------------------------------- PyTorch wheel index


def test_index_page_parsing() -> None:
    page = parse_index_page((FIX / "index" / "cu130.html").read_text())
    assert sorted(page) == ["cu130"]
    assert "2.15.0" in page["cu130"] and not any("dev" in v for v in page["cu130"])


# ------------------------------------------------------------------- registry v2 tag list


def test_tag_diff(matrix: Matrix) -> None:
    every = {f"{i.cuda}-{f}-{i.os}" for i in matrix.images for f in i.flavors}
    assert diff_tags(matrix, every) == []
    gone = "12.2.2-devel-ubuntu22.04"
    assert gone in every
    newer = "12.2.3-base-ubuntu22.04"  # a newer update of a listed minor
    older = "12.2.0-base-ubuntu22.04"  # history, not news
    changes = diff_tags(matrix, (every - {gone}) | {newer, older, "latest", "13.0.2-base-plan9"})
    assert [(c.kind, c.label) for c in changes] == [
        ("vanished-tag", "12.2.2/ubuntu22.04"), ("new-tag", "12.2.3/ubuntu22.04")]
    assert not any(c.applicable for c in changes)


@pytest.mark.parametrize(("tag", "parts"), [
    ("12.2.2-cudnn8-devel-ubuntu22.04", ("12.2.2", "cudnn8-devel", "ubuntu22.04")),
    ("13.0.2-cudnn-runtime-ubuntu24.04", ("13.0.2", "cudnn-runtime", "ubuntu24.04")),
    ("11.8.0-base-ubi8", ("11.8.0", "base", "ubi8")),
    ("latest", None), ("12.2-base-ubuntu22.04", None), ("12.2.2-base-", None),
    ("12.2.2-weird-ubuntu22.04", None),
])
def test_split_tag(tag: str, parts: tuple[str, str, str] | None, matrix: Matrix) -> None:
    assert split_tag(tag, matrix.meta["cuda"]["image_flavors"]) == parts


# ------------------------------------------------- METADATA by HTTP range (no .metadata file)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=300), size=st.integers(0, 10**9), csize=st.integers(0, 400),
       method=st.sampled_from([0, 8, 12, 99]))
def test_zip_helpers_never_crash_on_garbage(data: bytes, size: int, csize: int,
                                            method: int) -> None:
    from envbuild.common.wheelzip import member as zip_member
    from envbuild.features.refresh.facts import zip_directory_span, zip_metadata_entry

    for blob in (data, b"PK\x05\x06" + data, b"PK\x01\x02" + data, b"PK\x03\x04" + data):
        span = zip_directory_span(blob, size)
        assert span is None or span[0] + span[1] <= size
        zip_metadata_entry(blob)
        out = zip_member(blob, csize, method)
        assert out is None or isinstance(out, bytes)


def test_notes_name_patches_whose_pins_differ_from_the_newest() -> None:
    from envbuild.features.refresh.diff import pypi_notes
    from envbuild.features.refresh.facts import Pins, PypiFacts, TorchFacts

    def tf(v: str, nccl: str) -> TorchFacts:
        return TorchFacts(v, ("3.11",), "", Pins("12.1", "12.1.105", "8.9.2.26", nccl), "w")

    facts = PypiFacts("2.2.2", (tf("2.2.0", "2.19.3"), tf("2.2.1", "2.19.3"),
                                tf("2.2.2", "2.20.5")), {})
    assert pypi_notes(facts) == [
        "torch 2.2.0 pins nccl 2.19.3 (newest 2.20.5); the 2.2 rows follow 2.2.2",
        "torch 2.2.1 pins nccl 2.19.3 (newest 2.20.5); the 2.2 rows follow 2.2.2"]


@pytest.mark.parametrize(("env", "expected"), [
    ({"SSL_CERT_FILE": "FILE"}, "FILE"),
    ({"SSL_CERT_FILE": "FILE", "REQUESTS_CA_BUNDLE": "X"}, True),  # requests reads that itself
    ({"SSL_CERT_FILE": "FILE", "CURL_CA_BUNDLE": "X"}, True),
    ({"SSL_CERT_FILE": "/nonexistent/ca.pem"}, True),
    ({}, True),
])
def test_ca_bundle_from_ssl_cert_file(env: dict[str, str], expected: Any, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.common.http import ca_bundle

    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    for k in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, str(ca) if v == "FILE" else v)
    assert ca_bundle() == (str(ca) if expected == "FILE" else expected)


@pytest.mark.parametrize(("lines", "want"), [
    (["torch>=2.10", "numpy"], ">=2.10"),
    (["numpy", "torch==2.14.0", "torchvision==0.29.0"], "==2.14.0"),
    (["torch<3,>=2.4"], "<3,>=2.4"),
    (["Torch (==2.8.0)"], "==2.8.0"),
    (['torch==2.8.0; platform_system == "Windows"', "torch==2.9.0; platform_system == 'Linux'"],
     "==2.9.0"),
    (['torch; extra == "torch"'], ""),
    (["not a requirement !!", "numpy"], ""),
    ([], ""),
])
def test_the_torch_requirement_on_linux_x86_64(lines: list[str], want: str) -> None:
    from envbuild.features.refresh.facts import torch_requirement

    assert torch_requirement(lines) == want
