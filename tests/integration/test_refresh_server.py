"""`envbuild matrix refresh` against recorded answers served from 127.0.0.1 by a real HTTP
server (never the network): the fetches, retries and writes end to end."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from envbuild.common.errors import EXIT_CANNOT_RUN, EnvironmentProblem
from envbuild.common.http import Http
from envbuild.features.refresh import (
    diff_index,
    diff_pypi,
    fetch_index,
    fetch_pypi,
    fetch_tags,
    run_refresh,
)
from envbuild.matrix import Matrix, check, load
from tests.support import refresh as shared
from tests.support.refresh import FIX, MUTATIONS, PYPI, Handler, Route, Server, _mutate, _status

_server = shared._server  # a fixture, shared with the other kind's test_refresh.py
mdir = shared.mdir  # a fixture, shared with the other kind's test_refresh.py
server = shared.server  # a fixture, shared with the other kind's test_refresh.py


def fast_http() -> Http:
    return Http(timeout=5, retries=2, backoff=0)


def refresh(d: Path, server: Server, source: str = "pypi", write: bool = False,
            **kw: Any) -> Any:
    opts: dict[str, Any] = {"pypi_url": server.url, "index_url": f"{server.url}/whl",
                            "registry_url": server.url, "timeout": 5.0, "retries": 2, **kw}
    return run_refresh(source, d, write=write, today="2026-11-22", **opts)


# ------------------------------------------------------------------------------ pure parsers


# ---------------------------------------------------------------------- PyPI end to end


def test_recorded_pypi_agrees_with_the_shipped_matrix(server: Server, matrix: Matrix) -> None:
    http = fast_http()
    facts = fetch_pypi(http, server.url, matrix)
    assert diff_pypi(matrix, facts) == []
    assert facts.latest == "2.15.0"
    # two torch releases have no .metadata file on this index for their first wheels, and the
    # range reads of those 500 MB wheels are not recorded
    assert len(facts.torch) == 26
    assert [u for u in facts.unread if u.startswith("torch ")] == ["torch 2.7.0", "torch 2.14.1"]
    assert (len(facts.companions["torchvision"]), len(facts.companions["torchaudio"])) == (7, 2)
    # bounded: one project JSON, three simple pages, the .metadata tries (6 per release at most)
    assert http.requests == sum(server.hits.values()) < 6 * 90


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m[4][1])
def test_refresh_finds_a_corrupted_pin_and_write_restores_it(
        mutation: Any, mdir: Path, server: Server) -> None:
    file, anchor, old, new, expected = mutation
    original = _mutate(mdir, file, anchor, old, new)
    result = refresh(mdir, server)
    got = [(c.kind, c.field, c.old, c.new) for c in result.changes]
    assert got == [expected]
    assert result.changes[0].applicable and result.remaining
    written = refresh(mdir, server, write=True)
    assert written.written == ["sources.toml", file] and not written.remaining
    after = (mdir / file).read_text()
    # only the corrupted line and that row's source list differ from the original text
    diff = [(a, b) for a, b in zip(original.splitlines(), after.splitlines(), strict=True)
            if a != b]
    assert len(diff) == 1 and diff[0][1].startswith("source = [")
    assert diff[0][1].endswith(', "S-REFRESH-PYPI-2026-11-22"]')
    assert check(mdir) == []
    assert '[source."S-REFRESH-PYPI-2026-11-22"]' in (mdir / "sources.toml").read_text()
    assert refresh(mdir, server).changes == []  # idempotent: the matrix now agrees


def _drop_patch(d: Path, torch: str) -> str:
    text = (d / "torch.toml").read_text()
    start = text.index(f'[[patch]]\ntorch = "{torch}"')
    end = text.index("[[patch]]", start + 5)
    (d / "torch.toml").write_text(text[:start] + text[end:])
    return text


def test_missing_patch_row_is_added_back_from_exact_companion_pins(
        mdir: Path, server: Server) -> None:
    original = tomllib.loads(_drop_patch(mdir, "2.2.1"))
    result = refresh(mdir, server)
    (ch,) = result.changes
    assert (ch.kind, ch.label, ch.applicable) == ("new-patch", "2.2.1", True)
    refresh(mdir, server, write=True)
    doc = tomllib.loads((mdir / "torch.toml").read_text())
    assert [p["torch"] for p in doc["patch"]] == [p["torch"] for p in original["patch"]]
    row = next(p for p in doc["patch"] if p["torch"] == "2.2.1")
    old = next(p for p in original["patch"] if p["torch"] == "2.2.1")
    assert {k: row[k] for k in ("torchvision", "torchaudio", "torchaudio_pinned")} == {
        k: old[k] for k in ("torchvision", "torchaudio", "torchaudio_pinned")}
    assert row["verified"] is True and row["source"] == ["S-REFRESH-PYPI-2026-11-22"]
    assert check(mdir) == []


def test_missing_patch_without_readable_companions_is_for_review(
        mdir: Path, server: Server) -> None:
    _drop_patch(mdir, "2.12.1")
    (ch,) = refresh(mdir, server).changes
    # the index serves no .metadata for torchvision 0.27.1, and torchaudio 2.11.0 has no pin
    assert (ch.kind, ch.label, ch.applicable) == ("new-patch", "2.12.1", False)


def test_vanished_release_and_patch_are_reported_never_written(mdir: Path, server: Server) -> None:
    torch_toml = mdir / "torch.toml"
    text = torch_toml.read_text()
    at = text.index("# One row per torch patch release")
    extra_patch = ('[[patch]]\ntorch = "2.15.1"\ntorchvision = "0.29.2"\ntorchaudio = "2.11.0"\n'
                   'torchaudio_pinned = false\nverified = false\nsource = ["S-PYPI-TORCH"]\n\n')
    end = text.index("# One row per (release, wheel variant)")
    torch_toml.write_text(text[:end] + extra_patch + text[end:])
    assert check(mdir) == []
    result = refresh(mdir, server, write=True)
    assert [(c.kind, c.label) for c in result.changes] == [("vanished-patch", "2.15.1")]
    assert result.written == [] and result.remaining
    assert at > 0 and "2.15.1" in torch_toml.read_text()


# ------------------------------------------------------------------------- TOML line edits


@pytest.mark.parametrize("code", [400, 401, 403, 404, 410, 500, 502, 503, 429])
def test_http_error_status_is_one_clear_error(code: int, server: Server) -> None:
    server.routes["/pypi/torch/json"] = _status(code)
    with pytest.raises(EnvironmentProblem) as exc:
        fetch_pypi(fast_http(), server.url, load())
    assert exc.value.exit_code == EXIT_CANNOT_RUN
    assert f"HTTP {code}" in exc.value.message and "\n" not in exc.value.message
    retried = code >= 500 or code == 429
    assert server.hits["/pypi/torch/json"] == (2 if retried else 1)


@pytest.mark.parametrize("body", [b"", b"{", b"<html>proxy login</html>", b"\xff\xfe\x00",
                                  b"null", b"[]", b'{"info": 3}', b'{"info": {"version": 2}}'])
def test_malformed_project_json_is_one_clear_error(body: bytes, server: Server) -> None:
    server.routes["/pypi/torch/json"] = (200, {"Content-Type": "application/json"}, body)
    with pytest.raises(EnvironmentProblem) as exc:
        fetch_pypi(fast_http(), server.url, load())
    assert exc.value.exit_code == EXIT_CANNOT_RUN
    assert "JSON" in exc.value.message or "info.version" in exc.value.message


def test_retries_back_off_then_succeed(server: Server) -> None:
    answers = iter([_status(503), _status(500)])

    def flaky(_: Handler) -> tuple[int, dict[str, str], bytes]:
        nxt = next(answers, None)
        return nxt if isinstance(nxt, tuple) else (200, {}, b'{"ok": 1}')

    server.routes["/flaky"] = flaky
    slept: list[float] = []
    http = Http(timeout=5, retries=3, backoff=0.5, sleep=slept.append)
    assert http.get(f"{server.url}/flaky").json() == {"ok": 1}
    assert slept == [0.5, 1.0] and server.hits["/flaky"] == 3


def test_timeout_is_retried_then_one_clear_error(server: Server) -> None:
    def slow(_: Handler) -> tuple[int, dict[str, str], bytes]:
        time.sleep(1.0)
        return (200, {}, b"{}")

    server.routes["/pypi/torch/json"] = slow
    with pytest.raises(EnvironmentProblem, match=r"no answer within 0.2 s \(2 tries"):
        fetch_pypi(Http(timeout=0.2, retries=2, backoff=0), server.url, load())


def test_metadata_that_is_not_metadata_is_one_clear_error(server: Server) -> None:
    path = next(p for p in server.routes if p.endswith("torch-2.0.0-cp39-cp39-manylinux1_x86_64"
                                                        ".whl.metadata"))
    server.routes[path] = (200, {}, b"<html>not metadata</html>")
    with pytest.raises(EnvironmentProblem, match="is not wheel metadata"):
        fetch_pypi(fast_http(), server.url, load())


# -------------------------------------------------------------------- PyTorch wheel index


def test_index_diff(server: Server, matrix: Matrix) -> None:
    cu130 = (FIX / "index" / "cu130.html").read_bytes()
    server.routes["/whl/cu130/torch/"] = (200, {"Content-Type": "text/html"}, cu130)
    cu126 = "".join(f'<a href="/whl/cu126/torch-{v.release}.0%2Bcu126-cp311-cp311-manylinux_2_28'
                    f'_x86_64.whl">torch-{v.release}.0+cu126-cp311-cp311-manylinux_2_28_x86_64.whl'
                    f"</a><br/>" for v in matrix.variants if v.tag == "cu126"
                    and v.release != "2.12")
    server.routes["/whl/cu126/torch/"] = (200, {}, cu126.encode())
    pages = fetch_index(fast_http(), f"{server.url}/whl", ["cu130", "cu126", "cu117"])
    assert pages["cu117"] is None  # 404: no index for that tag
    got = {(c.kind, c.label) for c in diff_index(matrix, pages)}
    assert ("new-variant", "2.15/cu130") in got
    assert ("vanished-variant", "2.12/cu126") in got
    assert ("vanished-variant", "2.0/cu117") in got
    assert not any(c.applicable for c in diff_index(matrix, pages))


def test_index_source_through_cli_api(server: Server, mdir: Path) -> None:
    result = refresh(mdir, server, source="pytorch-index")
    # every page 404s on the test server: every variant is reported vanished, none written
    assert result.changes and {c.kind for c in result.changes} == {"vanished-variant"}
    assert result.checked["pytorch-index"]["missing_pages"]


# ------------------------------------------------------------------- registry v2 tag list


def _registry(server: Server, pages: list[list[str]], token: str = "tok") -> None:
    """Docker Hub's flow: 401 + Bearer challenge, anonymous token, paginated tag list."""
    realm = f"{server.url}/token"

    def tags(h: Handler) -> tuple[int, dict[str, str], bytes]:
        if h.headers.get("Authorization") != f"Bearer {token}":
            return (401, {"Www-Authenticate": f'Bearer realm="{realm}",service="registry.test",'
                          'scope="repository:nvidia/cuda:pull"'}, b'{"errors":[]}')
        last = h.path.partition("last=")[2].split("&")[0]
        i = 0 if not last else next(n + 1 for n, p in enumerate(pages) if p[-1] == last)
        headers = {"Content-Type": "application/json"}
        if i + 1 < len(pages):
            headers["Link"] = f'</v2/nvidia/cuda/tags/list?last={pages[i][-1]}&n=1000>; rel="next"'
        return (200, headers, json.dumps({"name": "nvidia/cuda", "tags": pages[i]}).encode())

    def tok(h: Handler) -> tuple[int, dict[str, str], bytes]:
        ok = ("service=registry.test" in h.path
              and "scope=repository%3Anvidia%2Fcuda%3Apull" in h.path)
        return (200, {}, json.dumps({"token": token if ok else "wrong"}).encode())

    server.routes["/v2/nvidia/cuda/tags/list"] = tags
    server.routes["/token"] = tok


def test_registry_token_flow_and_pagination(server: Server) -> None:
    recorded = json.loads((FIX / "registry-tags-distribution-2.8.2.json").read_text())["tags"]
    _registry(server, [recorded[:3], recorded[3:5], recorded[5:]])
    tags = fetch_tags(fast_http(), server.url, "nvidia/cuda")
    assert tags == recorded and server.hits.get(next(p for p in server.hits if "/token" in p)) == 1


def test_registry_without_token_flow(server: Server) -> None:
    body = (FIX / "registry-tags-distribution-2.8.2.json").read_bytes()
    server.routes["/v2/nvidia/cuda/tags/list"] = (200, {}, body)
    assert len(fetch_tags(fast_http(), server.url, "nvidia/cuda")) == 7


@pytest.mark.parametrize("route", [
    (404, {}, (FIX / "registry-404-name-unknown.json").read_bytes()),
    (401, {}, b""),  # no challenge
    (401, {"Www-Authenticate": 'Basic realm="x"'}, b""),
    (200, {}, b'{"name": "nvidia/cuda"}'),
    (200, {}, b"<html>"),
])
def test_registry_errors_are_clear(route: Route, server: Server) -> None:
    server.routes["/v2/nvidia/cuda/tags/list"] = route
    with pytest.raises(EnvironmentProblem) as exc:
        fetch_tags(fast_http(), server.url, "nvidia/cuda")
    assert exc.value.exit_code == EXIT_CANNOT_RUN and "\n" not in exc.value.message


def test_nvidia_tags_source_end_to_end(server: Server, mdir: Path) -> None:
    m = load(mdir)
    every = sorted(f"{i.cuda}-{f}-{i.os}" for i in m.images for f in i.flavors)
    _registry(server, [every[:100], every[100:]])
    result = refresh(mdir, server, source="nvidia-tags")
    assert result.changes == [] and result.checked["nvidia-tags"]["tags"] == len(every)


# ------------------------------------------------- METADATA by HTTP range (no .metadata file)


def _wheel_zip(metadata: str, padding: int) -> bytes:
    import io
    import random
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("torch-2.14.1.dist-info/METADATA", metadata, zipfile.ZIP_DEFLATED)
        z.writestr("torch/big.bin", random.Random(0).randbytes(padding), zipfile.ZIP_STORED)
        z.writestr("torch/x/METADATA", "Name: decoy\n", zipfile.ZIP_DEFLATED)
        z.writestr("torch-2.14.1.dist-info/RECORD", "", zipfile.ZIP_DEFLATED)
    return buf.getvalue()


def _ranged(blob: bytes) -> Route:
    def serve(h: Handler) -> tuple[int, dict[str, str], bytes]:
        import re

        m = re.fullmatch(r"bytes=(\d*)-(\d*)", h.headers.get("Range", ""))
        if not m:
            return (200, {}, blob)
        if not m.group(1):
            start, end = max(0, len(blob) - int(m.group(2))), len(blob) - 1
        else:
            start, end = int(m.group(1)), min(int(m.group(2) or len(blob) - 1), len(blob) - 1)
        return (206, {"Content-Range": f"bytes {start}-{end}/{len(blob)}"}, blob[start:end + 1])
    return serve


def _wheel_path_2141() -> str:
    doc = json.loads((PYPI / "simple-torch.json").read_text())
    return next(f["url"] for f in doc["files"]
                if f["filename"] == "torch-2.14.1-cp310-cp310-manylinux_2_28_x86_64.whl")


REAL_2141 = (PYPI / "metadata" / "torch-2.14.0-cp310-cp310-manylinux_2_28_x86_64.whl.metadata"
             ).read_text().replace("Version: 2.14.0", "Version: 2.14.1")


@pytest.mark.parametrize("padding", [10, 200_000], ids=["directory-in-tail", "directory-apart"])
def test_metadata_read_by_range_when_the_index_has_no_metadata_file(
        padding: int, server: Server, matrix: Matrix) -> None:
    server.routes[_wheel_path_2141()] = _ranged(_wheel_zip(REAL_2141, padding))
    facts = fetch_pypi(fast_http(), server.url, matrix)
    t = next(t for t in facts.torch if t.version == "2.14.1")
    assert t.wheel.endswith("(METADATA read by range)") and "torch 2.14.1" not in facts.unread
    assert (t.pins.cudnn, t.pins.nccl, t.pins.cuda) == ("9.24.0.43", "2.30.7", "13.0")
    assert diff_pypi(matrix, facts) == []
    # the wheel was never downloaded: every request on it was a range
    assert sum(n for p, n in server.hits.items() if p == _wheel_path_2141()) <= 3


def test_range_read_pins_are_compared(server: Server, matrix: Matrix) -> None:
    changed = REAL_2141.replace("nvidia-nccl-cu13==2.30.7", "nvidia-nccl-cu13==2.31.1")
    server.routes[_wheel_path_2141()] = _ranged(_wheel_zip(changed, 10))
    changes = diff_pypi(matrix, fetch_pypi(fast_http(), server.url, matrix))
    assert [(c.label, c.field, c.new) for c in changes] == [("2.14/cu130", "nccl", "2.31.1")]


def test_server_ignoring_range_is_never_downloaded(server: Server, matrix: Matrix) -> None:
    blob = _wheel_zip(REAL_2141, 10)
    server.routes[_wheel_path_2141()] = (200, {}, blob)  # ignores Range: answers the whole file
    facts = fetch_pypi(fast_http(), server.url, matrix)
    assert "torch 2.14.1" in facts.unread


def test_unverified_patch_row_fully_confirmed_is_marked_verified(mdir: Path,
                                                                 server: Server) -> None:
    _mutate(mdir, "torch.toml", 'torch = "2.2.1"', "verified = true", "verified = false")
    (ch,) = refresh(mdir, server).changes
    assert (ch.kind, ch.label, ch.field, ch.applicable) == ("verify", "2.2.1", "verified", True)
    refresh(mdir, server, write=True)
    row = next(p for p in tomllib.loads((mdir / "torch.toml").read_text())["patch"]
               if p["torch"] == "2.2.1")
    assert row["verified"] is True and row["source"][-1] == "S-REFRESH-PYPI-2026-11-22"


def test_unverified_row_not_fully_confirmed_stays_unverified(mdir: Path, server: Server) -> None:
    # 2.15.0's torchvision 0.29.2 requires torch>=2.14.0: no exact pin confirms the pairing
    assert not any(c.kind == "verify" for c in refresh(mdir, server).changes)


def test_all_sources_together(server: Server, mdir: Path) -> None:
    m = load(mdir)
    _registry(server, [sorted(f"{i.cuda}-{f}-{i.os}" for i in m.images for f in i.flavors)])
    cu130 = (FIX / "index" / "cu130.html").read_bytes()
    server.routes["/whl/cu130/torch/"] = (200, {}, cu130)
    result = refresh(mdir, server, source="all", write=True)
    assert set(result.checked) == {"pypi", "pytorch-index", "nvidia-tags", "extensions",
                                   "requests"}
    # only the index disagrees (every other page 404s; cu130 lists 2.15), nothing is writable
    assert {c.source for c in result.changes} == {"pytorch-index"}
    assert ("new-variant", "2.15/cu130") in {(c.kind, c.label) for c in result.changes}
    assert result.written == [] and check(mdir) == []


def test_all_sources_names_the_one_that_failed(server: Server, mdir: Path) -> None:
    with pytest.raises(EnvironmentProblem) as exc:
        refresh(mdir, server, source="all")  # no registry route: 404
    assert "--source nvidia-tags failed" in exc.value.hint
    assert "the matrix is unchanged" in exc.value.hint
    assert not any(p.startswith("/pypi/") for p in server.hits)  # failed before PyPI's reads


def test_project_json_without_cuda_pins_is_not_trusted_for_the_latest(
        server: Server, matrix: Matrix) -> None:
    """PyPI's JSON shows the metadata of one file of the release (a macOS wheel has no CUDA pins):
    then the latest release's Linux wheel metadata is read like any other release."""
    doc = json.loads((PYPI / "project-torch.json").read_text())
    doc["info"]["requires_dist"] = ["filelock", "sympy>=1.13.3"]
    server.routes["/pypi/torch/json"] = (200, {}, json.dumps(doc).encode())
    facts = fetch_pypi(fast_http(), server.url, matrix)
    assert "torch 2.15.0" in facts.unread  # its wheel metadata was not recorded
    assert not any(c.label.startswith("2.15") for c in diff_pypi(matrix, facts))




# -- the CUDA extensions (issue 23): PyPI's releases and the latest wheel's torch requirement ----

def test_extensions_source_agrees_with_the_shipped_matrix(server: Server, mdir: Path) -> None:
    """Recorded answers of 2026-11-28: the latest wheels' Requires-Dist, read from a .metadata
    file (xformers) or by HTTP range from the wheel (vLLM, bitsandbytes, Transformer Engine).
    vLLM 0.33.0's wheel pins torch==2.14.0, though PyPI's project JSON says torch==2.13.0."""
    result = refresh(mdir, server, source="extensions")
    assert result.changes == [] and not result.remaining
    ext = result.checked["extensions"]
    assert ext["vllm"]["torch"] == "==2.14.0" and ext["vllm"]["latest"] == "0.33.0"
    assert ext["xformers"]["torch"] == ">=2.10" and ext["bitsandbytes"]["torch"] == "<3,>=2.4"
    assert "matrix agrees with extensions" in result.lines()[-1]


def test_extensions_source_names_what_the_matrix_lacks_or_says_wrong(server: Server,
                                                                    mdir: Path) -> None:
    """A matrix without xformers 0.0.35 and with vLLM 0.33.0 pinning another torch: both named,
    for review (a release row needs its build record read), never written."""
    text = (mdir / "extensions.toml").read_text()
    blocks = text.split("\n[[release]]\n")
    kept = [b for b in blocks if not b.startswith('extension = "xformers"\nversion = "0.0.35"')]
    assert len(kept) < len(blocks)
    text = "\n[[release]]\n".join(kept).replace(
        'version = "0.33.0"\nplatform = "linux/amd64"\nwhere = "pypi"\ntorch = "==2.14.0"',
        'version = "0.33.0"\nplatform = "linux/amd64"\nwhere = "pypi"\ntorch = "==2.13.0"', 1)
    (mdir / "extensions.toml").write_text(text)
    assert not check(mdir)
    result = refresh(mdir, server, source="extensions", write=True)
    got = {(c.kind, c.label, c.field, c.old, c.new) for c in result.changes}
    assert got == {("new-release", "xformers/0.0.35", "", None, None),
                   ("changed", "vllm/0.33.0/linux/amd64", "torch", "==2.13.0", "==2.14.0")}
    assert not result.written and len(result.remaining) == 2
    assert (mdir / "extensions.toml").read_text() == text
