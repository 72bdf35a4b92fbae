"""`envbuild explain`: the signature catalogue against real-world logs, versions flowing from the
text through the matrix into the fix, the catalogue's integrity, and the CLI contract."""

from __future__ import annotations

import fnmatch
import io
import json
import re
import tomllib
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.echo import escaped
from envbuild.common.errors import MatrixError
from envbuild.common.logscan import SCAN_FROM, anchor
from envbuild.core import wsl
from envbuild.doctor import evaluate, record
from envbuild.features.explain import (
    DERIVED,
    check_catalogue,
    default_path,
    explain,
    extract,
    load_catalogue,
    parse_catalogue,
    read_log,
)
from envbuild.matrix import Matrix, load
from envbuild.validator import rules
from tests.support import TESTS
from tests.support import explain as shared
from tests.support.doctor import FIXTURES as DOCTOR
from tests.support.explain import FIXTURES, ISSUE20, LOGS, REQUIRED, _sid, training_log

big_log = shared.big_log  # a fixture, shared with the other kind's test_explain.py

SMALL = TESTS / "fixtures" / "doctor" / "matrix"
# the GPU errors of issue 8: at least three real wordings each
GPU_ERRORS = ("cuda_device_side_assert", "tensors_on_different_devices", "nvcc_unsupported_arch",
              "nccl_duplicate_gpu", "cuda_illegal_memory_access", "extension_no_kernel_image",
              "inductor_no_cxx_compiler", "python_headers_missing", "triton_no_c_compiler")


@pytest.fixture(scope="module")
def small() -> Matrix:
    return load(SMALL)


@pytest.mark.parametrize("log", LOGS, ids=[p.stem for p in LOGS])
def test_real_world_log_names_its_signature_first(log: Path, small: Matrix) -> None:
    matches = explain(log.read_text(), small)
    if _sid(log) == "no_match":
        assert matches == []
        return
    assert matches, f"{log.name}: nothing matched"
    assert matches[0].id == _sid(log), [(m.id, m.confidence) for m in matches]
    assert matches[0].fix and "{" not in matches[0].fix
    assert matches[0].line  # the log line that matched is shown to the user


def test_every_signature_has_two_real_world_variants() -> None:
    counts = Counter(_sid(p) for p in LOGS)
    ids = [s.id for s in load_catalogue().signatures]
    assert len(ids) >= 30
    assert set(ids) >= REQUIRED
    thin = {i: counts[i] for i in ids if counts[i] < 2}
    assert thin == {}
    assert {i: counts[i] for i in GPU_ERRORS if counts[i] < 3} == {}
    assert {i: counts[i] for i in ISSUE20 if counts[i] < 3} == {}


def test_one_source_id_per_url() -> None:
    """A page is registered once: signatures.toml [source.*] does not repeat a URL of
    matrix/sources.toml (signatures cite the matrix id, which check_catalogue accepts)."""
    def url(v: dict[str, Any]) -> str:
        return str(v.get("url", "")).rstrip("/")

    ours = tomllib.loads((TESTS.parent / "matrix" / "signatures.toml").read_text())["source"]
    matrix_urls = {url(v): k for k, v in tomllib.loads(
        (TESTS.parent / "matrix" / "sources.toml").read_text())["source"].items()}
    twice = {k: matrix_urls[url(v)] for k, v in ours.items() if url(v) in matrix_urls}
    assert twice == {}
    assert len({url(v) for v in ours.values()}) == len(ours)


def test_catalogue_integrity(matrix: Matrix) -> None:
    cat = load_catalogue()
    assert len({s.id for s in cat.signatures}) == len(cat.signatures)
    assert check_catalogue(cat, set(matrix.sources)) == []
    for s in cat.signatures:
        assert re.fullmatch(r"[a-z][a-z0-9_]*", s.id)
        for src in s.source:
            entry = cat.sources.get(src) or matrix.sources.get(src)
            assert entry and entry.get("url"), src


def test_catalogue_checks_catch_mistakes() -> None:
    doc = tomllib.loads(default_path().read_text())
    doc["signature"].append(dict(doc["signature"][0]))  # duplicate id
    doc["signature"][1] = {**doc["signature"][1], "source": ["nowhere"],
                           "fix": ["needs {no_such_field}"]}
    problems = check_catalogue(parse_catalogue(doc), set())
    assert any("duplicate id" in p for p in problems)
    assert any("'nowhere' is not defined" in p for p in problems)
    assert any("no_such_field" in p for p in problems)
    assert any("last fix template" in p for p in problems)
    assert "cuda_floor" in DERIVED


def test_bad_regex_is_reported() -> None:
    from envbuild.common.errors import MatrixError

    with pytest.raises(MatrixError, match="bad regex"):
        parse_catalogue({"signature": [{"id": "x", "title": "t", "patterns": ["("],
                                        "cause": "c", "fix": "f", "source": ["s"]}]})


# ---------------------------------------------------------------- versions into the fix


def _fix(text: str, m: Matrix, sid: str) -> str:
    return next(x.fix for x in explain(text, m) if x.id == sid)


def test_driver_numbers_flow_into_the_fix(small: Matrix) -> None:
    fix = _fix((FIXTURES / "driver_too_old__1.txt").read_text(), small, "driver_too_old")
    assert fix == ("driver 470.182.03 supports CUDA <= 11.4, and this CUDA 12 wheel needs >= "
                   "525.60.13: install a driver >= 525, or use a CUDA 11.8 wheel (torch <= 2.7, "
                   "cu118), which runs on 470 through minor-version compatibility")


def test_driver_numbers_come_from_the_real_matrix(matrix: Matrix) -> None:
    fix = _fix((FIXTURES / "driver_too_old__1.txt").read_text(), matrix, "driver_too_old")
    floor = matrix.compat_floor(12)
    assert floor is not None and f">= {floor.min_driver_linux}" in fix
    newest_cu118 = max((v.release for v in matrix.variants if v.tag == "cu118"),
                       key=lambda r: tuple(int(x) for x in r.split(".")))
    assert f"torch <= {newest_cu118}, cu118" in fix


def test_driver_api_number_is_decoded(small: Matrix) -> None:
    text = "The NVIDIA driver on your system is too old (found version 12020).\n+cu130"
    fix = _fix(text, small, "driver_too_old")
    assert fix.startswith("this driver supports CUDA <= 12.2, and this CUDA 13 build needs a "
                          "driver >= 580.65.06")


def test_require_cuda_flows(small: Matrix) -> None:
    fix = _fix((FIXTURES / "nvidia_require_cuda__1.txt").read_text(), small, "nvidia_require_cuda")
    assert "CUDA 12.8, i.e. a host driver >= 570.26" in fix
    assert "driver 550.144.03 supports CUDA <= 12.4" in fix
    assert "`envbuild make --target cuda --driver 550.144.03`" in fix  # the resolver's pick


def test_arch_flows(small: Matrix) -> None:
    fix = _fix((FIXTURES / "no_kernel_image__2.txt").read_text(), small, "no_kernel_image")
    assert "compute capability 6.1" in fix and "cu126 (torch 2.14)" in fix
    fix = _fix((FIXTURES / "no_kernel_image__1.txt").read_text(), small, "no_kernel_image")
    assert "12.0" in fix and "cu130" in fix
    fix = _fix("GeForce GTX 780 with CUDA capability sm_35 is not compatible with the current "
               "PyTorch installation.", small, "no_kernel_image")
    assert "no torch wheel envbuild knows has kernels for compute capability 3.5" in fix


def test_library_versions_flow(small: Matrix) -> None:
    fix = _fix((FIXTURES / "cudnn_version_mismatch__2.txt").read_text(), small,
               "cudnn_version_mismatch")
    assert "built with cuDNN 8.5.0 but loaded cuDNN 8.4.1" in fix
    fix = _fix((FIXTURES / "nvjitlink_undefined_symbol__2.txt").read_text(), small,
               "nvjitlink_undefined_symbol")
    assert "nvJitLink >= 12.4" in fix


def test_macos_and_rocm_flow(small: Matrix) -> None:
    fix = _fix((FIXTURES / "mps_unavailable_old_macos__2.txt").read_text(), small,
               "mps_unavailable_old_macos")
    assert "on macOS 13.7.4 the newest torch with MPS is 2.7" in fix
    fix = _fix((FIXTURES / "rocm_no_binary__3.txt").read_text(), small, "rocm_no_binary")
    assert fix == "gfx942 is in the rocm7.2 wheels (torch 2.14): `envbuild make --target rocm " \
        "--rocm 7.2`"


def test_fix_without_versions_is_generic(small: Matrix) -> None:
    fix = _fix("CUDA driver version is insufficient for CUDA runtime version", small,
               "driver_too_old")
    assert "{" not in fix and "envbuild doctor" in fix


def test_matches_are_sorted_by_confidence(small: Matrix) -> None:
    matches = explain((FIXTURES / "nccl_shm_segment__1.txt").read_text(), small)
    assert [m.id for m in matches][:2] == ["nccl_shm_segment", "nccl_unhandled_system_error"]
    assert [m.confidence for m in matches] == sorted((m.confidence for m in matches),
                                                     reverse=True)


def test_no_match(small: Matrix) -> None:
    assert explain("Epoch 3/10: loss=0.41\nSaved checkpoint", small) == []


# ---------------------------------------------------------------- GPU errors (issue 8)


@pytest.mark.parametrize(("log", "needles"), [
    ("cuda_device_side_assert__1", ["num_embeddings", "CUDA_LAUNCH_BLOCKING=1", "on the CPU"]),
    ("cuda_device_side_assert__2", ["labels.max()", "num_classes", "CUDA_LAUNCH_BLOCKING=1"]),
    ("cuda_device_side_assert__5", ["BCEWithLogitsLoss"]),
    ("tensors_on_different_devices__1", ["mat1 of wrapper_CUDA_addmm", "model.to(device)",
                                         "x.to(device)"]),
    ("tensors_on_different_devices__3", ["mat1 is on cpu while the other tensors of "
                                         "wrapper_CUDA_addmm are on cuda:0"]),
    ("tensors_on_different_devices__4", ["input is a torch.cuda.FloatTensor but its weight a "
                                         "torch.FloatTensor", "model.to(device)"]),
    ("nccl_duplicate_gpu__1", ["ranks 3 and 0", "torch.cuda.set_device(int(os.environ"
                               "['LOCAL_RANK']))", "before `init_process_group`"]),
    ("cuda_illegal_memory_access__1", ["CUDA_LAUNCH_BLOCKING=1", "compute-sanitizer"]),
    ("extension_no_kernel_image__3", ["yolo_decode.cu", "TORCH_CUDA_ARCH_LIST"]),
    ("extension_no_kernel_image__5", ["TORCH_CUDA_ARCH_LIST", "--force-reinstall"]),
    ("inductor_no_cxx_compiler__2", ["g++", "CXX", "envbuild make"]),
    ("triton_no_c_compiler__3", ["gcc", "CC", "python3-dev", "envbuild make"]),
    ("python_headers_missing__1", ["python3-dev", "envbuild make"]),
])
def test_gpu_errors_get_their_concrete_fix(log: str, needles: list[str], matrix: Matrix) -> None:
    first = explain((FIXTURES / f"{log}.txt").read_text(), matrix)[0]
    for needle in needles:
        assert needle in first.fix, (needle, first.fix)


def test_nvcc_arch_facts_come_from_the_matrix(matrix: Matrix) -> None:
    """Too new for the toolkit: its first CUDA from gpus.toml (and the nvcc version from the
    log); dropped by the toolkit: the last CUDA that still had it."""
    ampere = matrix.arch("8.6")
    kepler = matrix.arch("3.5")
    assert ampere is not None and kepler is not None and kepler.last_cuda
    fix = _fix((FIXTURES / "nvcc_unsupported_arch__2.txt").read_text(), matrix,
               "nvcc_unsupported_arch")
    assert fix.startswith(f"nvcc 10.2 cannot compile for {ampere.name} (compute capability 8.6)")
    assert f"CUDA >= {ampere.min_cuda}" in fix
    fix = _fix((FIXTURES / "nvcc_unsupported_arch__3.txt").read_text(), matrix,
               "nvcc_unsupported_arch")
    assert f"dropped from nvcc after CUDA {kepler.last_cuda}" in fix
    fix = _fix("nvcc fatal   : Unsupported gpu architecture 'compute_120a'", matrix,
               "nvcc_unsupported_arch")
    blackwell = matrix.arch("12.0")
    assert blackwell is not None and f"CUDA >= {blackwell.min_cuda}" in fix


@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arch=st.one_of(st.from_regex(r"(?:compute|sm|lto)_[0-9]{1,4}[a-z]?", fullmatch=True),
                      st.text(alphabet=st.characters(blacklist_characters="'\n\r"),
                              max_size=30)))
def test_nvcc_any_arch_name_gets_a_complete_fix(arch: str, matrix: Matrix) -> None:
    text = f"nvcc fatal   : Unsupported gpu architecture '{arch}'"
    fix = _fix(text, matrix, "nvcc_unsupported_arch")
    # the log's text comes escaped, its surrounding blanks trimmed (arch "{ " was shown "{")
    assert fix and "{" not in fix.replace(escaped(arch.strip()), "")


@pytest.mark.parametrize("text", [
    # torch itself says it lacks the arch: the wheel, not an extension
    (FIXTURES / "no_kernel_image__2.txt").read_text(),
    # a plain torch call from the user's script: nothing points at an extension
    'Traceback (most recent call last):\n  File "demo.py", line 12, in <module>\n'
    '    y = torch.ones(3, device="cuda") * 2\n'
    "RuntimeError: CUDA error: no kernel image is available for execution on the device\n",
    "THCudaCheck FAIL file=/pytorch/aten/src/THC/THCGeneral.cpp line=383 error=209 : "
    "no kernel image is available for execution on the device\n",
    # an extension in the log, but torch's own warning says torch lacks sm_61
    (FIXTURES / "no_kernel_image__2.txt").read_text()
    + (FIXTURES / "extension_no_kernel_image__3.txt").read_text(),
])
def test_torch_lacking_the_arch_is_not_blamed_on_an_extension(text: str, matrix: Matrix) -> None:
    ids = [m.id for m in explain(text, matrix)]
    assert ids[0] == "no_kernel_image" and "extension_no_kernel_image" not in ids


def test_an_extension_lacking_the_arch_is_named_first(matrix: Matrix) -> None:
    for p in sorted(FIXTURES.glob("extension_no_kernel_image__*.txt")):
        ids = [m.id for m in explain(p.read_text(), matrix)]
        assert ids[:2] == ["extension_no_kernel_image", "no_kernel_image"], p.name


def test_all_of_and_unless_entries() -> None:
    doc = {"signature": [{"id": "x", "title": "t", "cause": "c", "fix": ["f {a}", "f"],
                          "source": ["s"], "unless": ["never here"],
                          "patterns": [["first part", "second (?P<a>\\w+)"]]}]}
    cat = parse_catalogue(doc)
    assert explain("first part only", load(SMALL), cat) == []
    hit = explain("second half\nand the first part", load(SMALL), cat)
    assert [h.fix for h in hit] == ["f half"] and hit[0].line == "and the first part"
    assert explain("first part, second half, never here", load(SMALL), cat) == []
    with pytest.raises(MatrixError, match="empty"):
        parse_catalogue({"signature": [{**doc["signature"][0], "patterns": [[]]}]})


class _Pipe(io.RawIOBase):
    """A non-seekable stream, as stdin is when a log is piped in."""

    def __init__(self, data: bytes, chunk: int) -> None:
        self._data, self._pos, self._chunk = data, 0, chunk

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), self._chunk, len(self._data) - self._pos)
        b[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n


@settings(max_examples=150, deadline=None)
@given(size=st.integers(0, 3000), limit=st.integers(1, 1200), head=st.integers(0, 1200),
       chunk=st.integers(1, 700), seekable=st.booleans())
def test_read_log_keeps_head_and_tail(size: int, limit: int, head: int, chunk: int,
                                      seekable: bool) -> None:
    data = "".join(f"{i:05d}\n" for i in range(size // 6 + 1)).encode()[:size]
    stream: Any = io.BytesIO(data) if seekable else io.BufferedReader(_Pipe(data, chunk), 64)
    got = read_log(stream, limit=limit, head=head)
    assert got.total_bytes == size
    if size <= limit:
        assert not got.cut and got.text == data.decode()
        return
    assert got.cut and got.head_bytes + got.tail_bytes <= limit
    assert data.startswith(got.text[:got.head_bytes].encode())
    assert data.endswith(got.text[len(got.text) - got.tail_bytes:].encode())
    if got.tail_bytes:
        assert got.text.endswith(data.decode()[-got.tail_bytes:])
    assert f"[... envbuild explain: {size - got.head_bytes - got.tail_bytes} bytes" in got.text
    assert json.loads(json.dumps(got.to_json()))["cut"] is True


def test_read_log_never_splits_a_line_or_a_character() -> None:
    data = ("é" * 50 + "\n").encode() * 400
    for stream in (io.BytesIO(data), io.BufferedReader(_Pipe(data, 97), 64)):
        got = read_log(stream, limit=4000, head=1000)
        kept = got.text.split("\n[... envbuild explain:")
        assert "\ufffd" not in got.text
        assert all(line in ("é" * 50, "") for line in kept[0].split("\n"))


def test_the_head_of_a_big_log_still_feeds_versions(big_log: Path, small: Matrix) -> None:
    with big_log.open("rb") as fh:
        log = read_log(fh)
    assert "Driver Version: 470.182.03" in log.text
    fields = extract(log.text, load_catalogue())
    assert fields["driver"] == "470.182.03"


def test_big_texts_match_exactly_as_a_whole_text_search(matrix: Matrix,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The anchor scan only skips work: every fixture, buried in a log or all stacked
    together, gives the same matches, lines and fixes as searching the whole text (the scan
    threshold is lowered so the whole-text reference search stays quick)."""
    from envbuild.common import logscan

    monkeypatch.setattr(logscan, "SCAN_FROM", 4096)
    cat = load_catalogue()
    assert cat.scanner is not None and SCAN_FROM >= 4096
    whole = replace(cat, scan=False)
    texts = [training_log(12_000, p.read_text(), start=q.read_text()).decode()
             for p, q in zip(LOGS, LOGS[1:] + LOGS[:1], strict=True)]
    texts.append("\n".join(p.read_text() + training_log(700, "").decode() for p in LOGS))
    multi_line = (">>> torch.cuda.is_available()\nFalse\n>>> torch.__version__\n'2.5.1+cpu'\n",
                  "GPU0 Tesla K40c which is of cuda capability 3.5.\n    PyTorch no longer "
                  "supports this GPU because it is too old.\n")
    texts += [training_log(6000, m).decode() for m in multi_line]
    for text in texts:
        assert cat.scanner.haystack(text).lines is not None
        assert explain(text, matrix, whole)
        fast = [(m.id, m.fix, m.line, m.confidence) for m in explain(text, matrix, cat)]
        slow = [(m.id, m.fix, m.line, m.confidence) for m in explain(text, matrix, whole)]
        assert fast == slow


@pytest.mark.parametrize(("pattern", "expected"), [
    ("CUDA out of memory", {"cuda out of memory"}),
    (r"\bdriver(?: version)?[ :=]+(?P<d>\d+)", {"driver"}),
    (r"cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE", {"cudaerrornodevice", "cuda_error_no_device"}),
    (r"(?:ab|cd)x", None),  # no literal of 3 characters every match has
    (r"a+b*c?", None),
    (r"Assertion .(?P<x>t >= 0 && t < n_classes). failed", {"t >= 0 && t < n_classes"}),
])
def test_anchor_is_a_literal_every_match_contains(pattern: str,
                                                  expected: set[str] | None) -> None:
    rx = re.compile(pattern, re.IGNORECASE | re.MULTILINE)
    got = anchor(rx)
    assert got == (frozenset(expected) if expected else None)


def test_every_catalogue_regex_has_an_anchor() -> None:
    doc = tomllib.loads(default_path().read_text())
    doc["signature"][0] = {**doc["signature"][0], "patterns": [r"\d+\.\d+"]}
    problems = check_catalogue(parse_catalogue(doc), set())
    assert any("needs a literal" in p for p in problems)


def test_invalid_usage_without_the_reason_points_to_the_duplicate_gpu(matrix: Matrix) -> None:
    first = explain((FIXTURES / "nccl_invalid_usage__2.txt").read_text(), matrix)[0]
    assert first.id == "nccl_invalid_usage" and "NCCL_DEBUG=WARN" in first.fix
    assert "torch.cuda.set_device(int(os.environ['LOCAL_RANK']))" in first.fix
    ids = [m.id for m in explain((FIXTURES / "nccl_duplicate_gpu__1.txt").read_text(), matrix)]
    assert ids == ["nccl_duplicate_gpu"]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(noise=st.lists(st.text(alphabet=st.sampled_from(
    [*"aZ09 _-:.()[]{}*+?\\|^$'\"\t\r\x00", "ß", "İ", "ﬁ", "ſ", "K", "é", "\n", "…"]),
    max_size=60), min_size=1, max_size=40),
       picks=st.lists(st.sampled_from(LOGS), min_size=1, max_size=4))
def test_hostile_big_logs_match_as_a_whole_text_search(noise: list[str], picks: list[Path],
                                                       matrix: Matrix,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Unicode that folds to several characters, control characters and regex syntax in
    the noise: the scan never crashes, never loses a match and never invents one."""
    from envbuild.common import logscan

    monkeypatch.setattr(logscan, "SCAN_FROM", 1024)
    cat = load_catalogue()
    whole = replace(cat, scan=False)
    parts = [p.read_text() for p in picks]
    text = "\n".join(n + "\n" + parts[i % len(parts)] for i, n in enumerate(noise)) * 3
    text = text if len(text) >= 1024 else text + "x\n" * 600
    fast = [(m.id, m.fix, m.line) for m in explain(text, matrix, cat)]
    slow = [(m.id, m.fix, m.line) for m in explain(text, matrix, whole)]
    assert fast == slow


def test_a_character_that_folds_to_two_keeps_the_scan(matrix: Matrix) -> None:
    cat = load_catalogue()
    assert cat.scanner is not None
    text = training_log(SCAN_FROM + 1000, "Straße: CUDA out of memory. Tried to allocate 2 GiB",
                        start="İstanbul\n").decode()
    hay = cat.scanner.haystack(text)
    assert hay.lines is not None
    assert explain(text, matrix)[0].id == "cuda_out_of_memory"


def test_extension_fix_names_the_gpus_arch_when_the_log_has_it(matrix: Matrix) -> None:
    text = ("GPU 0: NVIDIA GeForce RTX 4090, compute capability: 8.9\n"
            + (FIXTURES / "extension_no_kernel_image__3.txt").read_text())
    fix = _fix(text, matrix, "extension_no_kernel_image")
    assert fix.startswith("the kernel in yolo_decode.cu has no code for compute capability 8.9")
    assert 'TORCH_CUDA_ARCH_LIST="8.9" pip install' in fix


@pytest.mark.parametrize(("compiled", "runtime", "want"), [
    ("8902", "8700", "built with cuDNN 8.9.2 but loaded cuDNN 8.7.0"),
    ("90100", "8902", "built with cuDNN 9.1.0 but loaded cuDNN 8.9.2"),
    ("91900", "90100", "built with cuDNN 9.19.0 but loaded cuDNN 9.1.0"),
])
def test_cudnn_version_codes_decode(compiled: str, runtime: str, want: str,
                                    small: Matrix) -> None:
    text = (f"RuntimeError: cuDNN version incompatibility: PyTorch was compiled against "
            f"{compiled} but linked against {runtime}")
    assert want in _fix(text, small, "cudnn_version_mismatch")


# ---------------------------------------------------------------- issue 20: four real messages


def test_issue20_fixtures_cite_where_they_were_copied_from(matrix: Matrix) -> None:
    """Every log of the issue-20 signatures names its thread (provenance.toml): a source id with
    a URL in matrix/sources.toml that its signature cites too."""
    provenance = tomllib.loads((FIXTURES / "provenance.toml").read_text())
    sigs = {s.id: s for s in load_catalogue().signatures}
    logs = [p.name for p in LOGS if _sid(p) in ISSUE20]
    assert len(logs) >= 3 * len(ISSUE20)
    assert sorted(provenance) == sorted(logs)
    for name, source in provenance.items():
        assert (FIXTURES / name).is_file(), name
        assert matrix.sources[source]["url"].startswith("https://"), source
        assert source in sigs[name.split("__")[0]].source, (name, source)


@pytest.mark.parametrize(("log", "needles", "absent"), [
    ("cuda_error_out_of_memory__1", ["nvidia-smi", "set_device", "CUDA_LAUNCH_BLOCKING=1"],
     ["Tried to allocate 2"]),
    ("nccl_unhandled_cuda_error__1", ["failed with 'invalid argument'", "NCCL_P2P_DISABLE=1",
                                      "set_device"], []),
    ("nccl_unhandled_cuda_error__2", ["NCCL_DEBUG=WARN", "NCCL_P2P_DISABLE=1"], []),
    ("nccl_unhandled_cuda_error__3", ["failed with 'unknown error'", "nvidia_uvm"], []),
    ("extension_torch_abi_mismatch__1", ["flash_attn_2_cuda was built", "cxx11abi",
                                         "--no-build-isolation"], []),
    ("extension_torch_abi_mismatch__3", ["transformer_engine_extensions was built"], []),
    ("xformers_torch_mismatch__1", ["built for torch 2.1.0+cu121, this is torch 2.1.0+cu118",
                                    "`envbuild make --torch 2.1.0+cu121`"], []),
    ("xformers_torch_mismatch__2", ["torch 2.2.0+cpu is a CPU-only build",
                                    "`envbuild make --torch 2.2.0+cu121`"], []),
    ("xformers_torch_mismatch__3", ["built for this torch (2.6.0+cu118)",
                                    "XFORMERS_MORE_DETAILS=1"], ["envbuild make"]),
])
def test_issue20_messages_get_their_concrete_fix(log: str, needles: list[str],
                                                 absent: list[str], matrix: Matrix) -> None:
    first = explain((FIXTURES / f"{log}.txt").read_text(), matrix)[0]
    assert first.id == log.split("__")[0]
    for needle in needles:
        assert needle in first.fix, (needle, first.fix)
    for needle in absent:
        assert needle not in first.fix, (needle, first.fix)


def test_the_two_cuda_oom_messages_stay_apart(matrix: Matrix) -> None:
    """PyTorch's caching allocator says 'CUDA out of memory. Tried to allocate'; the CUDA
    runtime's own cudaErrorMemoryAllocation comes as 'CUDA error: out of memory'."""
    for path in LOGS:
        if _sid(path) in ("cuda_out_of_memory", "cuda_error_out_of_memory"):
            ids = [m.id for m in explain(path.read_text(), matrix)]
            assert ids[0] == _sid(path)
            other = ({"cuda_out_of_memory", "cuda_error_out_of_memory"} - {_sid(path)}).pop()
            assert other not in ids, (path.name, ids)


def test_a_cached_catalogue_explains_every_log_as_the_toml_does(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small: Matrix) -> None:
    """The cache keeps the TOML document and each regex's anchor; a catalogue read back from it
    compiles its regexes lazily and must decode every real-world log alike."""
    from envbuild.features import explain as ex

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = tmp_path / "signatures.toml"
    source.write_bytes(default_path().read_bytes())
    ex._load.cache_clear()
    fresh = load_catalogue(source)  # parsed from TOML; writes the cache
    assert list((tmp_path / "envbuild").glob("signatures-*.json"))
    ex._load.cache_clear()
    cached = load_catalogue(source)
    ex._load.cache_clear()
    quiet = load_catalogue(source)
    ex._load.cache_clear()
    assert [s.id for s in cached.signatures] == [s.id for s in fresh.signatures]
    for log in LOGS:
        text = log.read_text()
        assert explain(text, small, cached) == explain(text, small, fresh), log.name
    # a text without any anchor's literal compiles nothing
    assert explain("all quiet", small, quiet) == []
    assert not any("compiled" in rx.__dict__ for sig in quiet.signatures
                   for entry in sig.patterns for rx in entry)


def test_an_edited_or_damaged_catalogue_cache_is_not_used(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.features import explain as ex

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = tmp_path / "signatures.toml"
    source.write_bytes(default_path().read_bytes())
    ex._load.cache_clear()
    load_catalogue(source)
    (cache,) = (tmp_path / "envbuild").glob("signatures-*.json")
    cache.write_bytes(cache.read_bytes().replace(b"cuda", b"CUDA", 1))  # sha256 no longer agrees
    ex._load.cache_clear()
    assert load_catalogue(source).signatures  # read from the TOML again
    source.write_text(source.read_text().split("[[signature]]", 1)[0])  # no signatures left
    ex._load.cache_clear()
    assert load_catalogue(source).signatures == ()  # an edited file is another cache key
    ex._load.cache_clear()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(length=st.integers(81, 6000), template=st.sampled_from([
    "ProductVersion:\t{v}\nRuntimeError: The MPS backend is supported on MacOS 14.0+.",
    "Driver Version: {v}  CUDA Version: 12.2\nCUDA error: no kernel image is available for "
    "execution on the device",
    "NCCL version {v}+cuda12.2\nncclInternalError: Internal check failed.",
]))
def test_a_field_of_absurd_length_never_reaches_a_fix(length: int, template: str,
                                                      small: Matrix) -> None:
    """A pasted version of hundreds or thousands of digits is no value to quote back: explain
    keeps no extracted field over MAX_FIELD characters, and never raises on it."""
    from envbuild.features.explain import MAX_FIELD

    for m in explain(template.format(v="7" * length + ".1"), small):
        assert "7" * (MAX_FIELD + 1) not in m.fix


# ---------------------------------------------------------------- issue 26: WSL2 and Apple MPS

# Every error text of the reference hosts/public-wsl2-macos.md (verbatim; the shared-pool
# message as its thread, pinokiocomputer/pinokio#941, has it) and the signature it must name.
REFERENCE_TEXTS = [
    ("ldconfig: /usr/lib/wsl/lib/libcuda.so.1 is not a symbolic link",
     "wsl_libcuda_not_symlink"),
    ("OSError: libcuda.so: cannot open shared object file: No such file or directory",
     "wsl_libcuda_unversioned"),
    ("nvidia-smi\n\nFailed to initialize NVML: GPU access blocked by the operating system\n",
     "wsl_gpu_access_blocked"),
    ("RuntimeError: MPS backend out of memory (MPS allocated: 7.23 GB, other allocations: 1.54 "
     "GB, max allowed: 9.07 GB). Tried to allocate 896.00 MB on private pool. Use "
     "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may "
     "cause system failure).", "mps_out_of_memory"),
    ("MPS backend out of memory (MPS allocated: 16.00 GB, other allocations: 3.31 GB, max "
     "allowed: 18.13 GB). Tried to allocate 256 bytes on shared pool. Use "
     "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations (may "
     "cause system failure).", "mps_out_of_memory"),
    ("TypeError: Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't "
     "support float64. Please use float32 instead.", "mps_float64_unsupported"),
    ("NotImplementedError: The operator 'aten::_index_put_impl_' is not current implemented for "
     "the MPS device. If you want this op to be added in priority during the prototype phase of "
     "this feature, please comment on https://github.com/pytorch/pytorch/issues/77764. As a "
     "temporary fix, you can set the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use "
     "the CPU as a fallback for this op. WARNING: this will be slower than running natively on "
     "MPS.", "mps_op_not_implemented"),
    ("NotImplementedError: The operator 'aten::upsample_bicubic2d.out' is not currently "
     "implemented for the MPS device.", "mps_op_not_implemented"),
    ("NotImplementedError: The operator 'aten::isin.Tensor_Tensor_out' is not currently "
     "implemented for the MPS device.", "mps_op_not_implemented"),
    ("NotImplementedError: The operator 'aten::index_copy.out' is not currently implemented "
     "for the MPS device.", "mps_op_not_implemented"),
    ("OS: macOS 15.3 (x86_64)\nPython platform: macOS-10.16-x86_64-i386-64bit\n"
     "TypeError: MPS BFloat16 is only supported on MacOS 14 or newer", "mps_x86_python"),
    # pytorch/pytorch#177819: the error verbatim; the OS line in collect_env's form from the
    # thread's facts (macOS 26.3.1, arm64)
    ("OS: macOS 26.3.1 (arm64)\nRuntimeError: The MPS backend is supported on macOS 14.0+. "
     "Current OS version can be queried using `sw_vers`", "mps_unavailable_old_macos"),
    # pytorch/pytorch#146236's error alone, without collect_env's lines
    ("MPS BFloat16 is only supported on MacOS 14 or newer", "mps_bfloat16_unsupported"),
    # pytorch/pytorch#104191 (torch 2.0.1, macOS 14.0 arm64)
    ("TypeError: Trying to convert BFloat16 to the MPS backend but it does not have support for "
     "that dtype.", "mps_bfloat16_unsupported"),
    # sonoisa/arm64-docker-pytorch-tensorflow#3: the session, and the reference's prose form
    (">>> import platform\n>>> platform.platform()\n'Linux-5.15.49-linuxkit-aarch64-with-glibc2.29'"
     "\n>>> import torch\n>>> torch.backends.mps.is_available()\nFalse\n", "mps_linux_container"),
    ("`platform.platform()` is `'Linux-5.15.49-linuxkit-aarch64-with-glibc2.29'`, and "
     "`torch.backends.mps.is_available()` is `False`.", "mps_linux_container"),
    # pytorch/pytorch#177819's own wording of the macOS version
    ("RuntimeError: The MPS backend is supported on macOS 14.0+. Current OS version can be "
     "queried using `sw_vers`\n`sw_vers` reports `macOS 26.3.1`", "mps_unavailable_old_macos"),
]


def test_a_macos_that_meets_every_floor_is_not_told_to_upgrade(matrix: Matrix) -> None:
    """pytorch/pytorch#177819: 'supported on macOS 14.0+' on macOS 26.3.1 is no old macOS;
    pt#139425's 12.7.6 under the same wording is (its torch's floor is higher than it says)."""
    for text, _ in (REFERENCE_TEXTS[-1], REFERENCE_TEXTS[-6]):
        new = _fix(text, matrix, "mps_unavailable_old_macos")
        assert new.startswith("macOS 26.3.1 meets the MPS floor") and "upgrade macOS" not in new
    old = _fix((FIXTURES / "mps_unavailable_old_macos__1.txt").read_text(), matrix,
               "mps_unavailable_old_macos")
    assert "upgrade macOS" in old and "meets the MPS floor" not in old


@pytest.mark.parametrize(("text", "sid"), REFERENCE_TEXTS, ids=[s for _, s in REFERENCE_TEXTS])
def test_reference_wsl_and_mps_texts_name_their_cause(text: str, sid: str,
                                                      matrix: Matrix) -> None:
    matches = explain(text, matrix)
    assert matches and matches[0].id == sid, [m.id for m in matches]
    assert "{" not in matches[0].fix


def test_wsl_gpu_blocked_fix_follows_the_log(matrix: Matrix) -> None:
    """The GPU row of Windows' nvidia-smi (microsoft/WSL#11865) names TCC; the header's
    'TCC/WDDM' column title (microsoft/WSL#10289) does not; a Linux driver package does."""
    blocked = "Failed to initialize NVML: GPU access blocked by the operating system\n"
    tcc = "|   0  NVIDIA L40S                  TCC   |   00000000:61:00.0 Off |        0 |\n"
    wddm = ("| GPU  Name                     TCC/WDDM  | Bus-Id        Disp.A | Volatile |\n"
            "|   0  NVIDIA GeForce GTX 1060 3GB  WDDM  | 00000000:01:00.0  On |      N/A |\n")
    assert _fix(tcc + blocked, matrix, "wsl_gpu_access_blocked").startswith(
        "the GPU runs in TCC mode")
    generic = _fix(wddm + blocked, matrix, "wsl_gpu_access_blocked")
    assert generic.startswith("use only the Windows driver inside WSL") and "-dm WDDM" in generic
    fix = _fix((FIXTURES / "wsl_gpu_access_blocked__2.txt").read_text(), matrix,
               "wsl_gpu_access_blocked")
    assert "`sudo apt-get purge nvidia-utils-510`, then `sudo ldconfig`" in fix


_BLOCKED = "Failed to initialize NVML: GPU access blocked by the operating system\n"
# the driver families of matrix/wsl2.toml, as Ubuntu names them (NNN, -server, -open), and
# packages that are no driver (Docker Engine inside WSL 2 needs the container ones)
_DRIVER_NAMES = st.tuples(
    st.sampled_from(["nvidia-driver", "nvidia-utils", "nvidia-dkms", "nvidia-kernel-common",
                     "nvidia-compute-utils", "nvidia-headless", "nvidia-headless-no-dkms",
                     "libnvidia-compute", "libnvidia-gl", "libnvidia-decode", "libnvidia-encode",
                     "libnvidia-extra", "libnvidia-fbc1", "libnvidia-cfg1", "libnvidia-common"]),
    st.integers(390, 580), st.sampled_from(["", "-server", "-open", "-server-open"])).map(
    lambda t: f"{t[0]}-{t[1]}{t[2]}")
NOT_DRIVERS = ("libnvidia-container1", "libnvidia-container-tools", "nvidia-container-toolkit",
               "nvidia-container-toolkit-base", "libnvidia-container-dev")


def _purged(fix: str) -> list[str]:
    """Every package name a fix tells to purge (the words after `apt-get purge` / `apt purge`
    up to the closing backtick), and every glob it names as a family to purge (the one it names
    as no driver, 'not libnvidia-container*', aside)."""
    fix = fix.replace("not libnvidia-container*", "")
    named = [w for cmd in re.findall(r"apt(?:-get)? purge ([^`]*)`", fix) for w in cmd.split()]
    return named + re.findall(r"\b(?:lib)?nvidia-[\w-]*\*", fix)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=_DRIVER_NAMES, how=st.sampled_from(["apt install {}", "sudo apt-get install -y {}",
                                                 "ii  {}:amd64  535.183.01  amd64  NVIDIA"]))
def test_wsl_blocked_purges_the_driver_package_the_log_names(name: str, how: str,
                                                             matrix: Matrix) -> None:
    """explain purges what the log names when it is a driver package (matrix/wsl2.toml
    driver_packages) with doctor's command, `sudo apt-get purge X`, then `sudo ldconfig`."""
    globs = wsl.driver_globs(matrix)
    assert rules.driver_package(name, globs)
    fix = _fix(how.format(name) + "\n" + _BLOCKED, matrix, "wsl_gpu_access_blocked")
    assert wsl.purge([name]) in fix
    _no_purge_outside_the_driver_families(fix, globs)


@pytest.mark.parametrize("name", NOT_DRIVERS)
def test_wsl_blocked_never_purges_the_container_packages(name: str, matrix: Matrix) -> None:
    """libnvidia-container1 and libnvidia-container-tools are no driver (matrix/wsl2.toml), and
    Docker Engine inside WSL 2 needs them: no advice of explain purges them or a glob that
    takes them (the old `libnvidia-*`)."""
    globs = wsl.driver_globs(matrix)
    assert not rules.driver_package(name, globs)
    for text in (f"apt install {name}\n" + _BLOCKED, _BLOCKED,
                 (FIXTURES / "wsl_gpu_access_blocked__2.txt").read_text()):
        fix = _fix(text, matrix, "wsl_gpu_access_blocked")
        assert name not in _purged(fix)
        _no_purge_outside_the_driver_families(fix, globs)


def _no_purge_outside_the_driver_families(fix: str, globs: list[str]) -> None:
    for word in _purged(fix):
        assert word in globs or rules.driver_package(word, globs), (word, fix)
        assert not any(fnmatch.fnmatchcase(c, word) for c in NOT_DRIVERS), (word, fix)


def test_wsl_blocked_doctor_and_explain_say_the_same(matrix: Matrix, small: Matrix) -> None:
    """One voice: the purge command, the TCC switch and the checklist of explain are doctor's."""
    for m in (matrix, small):
        linux = next(f for f in evaluate.evaluate(record.load(DOCTOR / "wsl2-linux-driver"), m)
                     if f.id == "wsl.linux_driver_installed")
        assert wsl.purge(["nvidia-utils-510"]) in linux.remediation
        assert wsl.purge(["nvidia-utils-510"]) in _fix(
            (FIXTURES / "wsl_gpu_access_blocked__2.txt").read_text(), m, "wsl_gpu_access_blocked")
        blocked = next(f for f in evaluate.evaluate(record.load(DOCTOR / "wsl2-tcc"), m)
                       if f.id == "wsl.gpu_blocked")
        tcc = "|   0  NVIDIA L40S                  TCC   |   00000000:61:00.0 Off |        0 |\n"
        assert wsl.tcc_fix(m) and wsl.tcc_fix(m) in blocked.remediation
        assert wsl.tcc_fix(m) in _fix(tcc + _BLOCKED, m, "wsl_gpu_access_blocked")
        # the recording's kernel (5.15.153.1, an issue form's field) adds evidence, nothing else
        plain = wsl.numbered(wsl.blocked_checklist(m))
        assert plain in _fix(_BLOCKED, m, "wsl_gpu_access_blocked")
        assert wsl.numbered(wsl.blocked_checklist(m, "5.15.153.1")) in blocked.remediation
        assert "`wsl.exe --update`" in plain and "wsl --" not in plain


def _runnable_as_shown(text: str) -> None:
    """WSL's commands are Windows programs: `wsl.exe ...` (which also runs from inside the
    distribution), never a bare `wsl --...`; a placeholder comes with where its value is."""
    assert not re.search(r"`wsl --", text), text
    if "<index>" in text:
        assert "first column" in text, text
    if "<distro>" in text:
        assert "`wsl.exe -l -v`" in text, text


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_every_fix_is_runnable_as_shown(log: Path, matrix: Matrix) -> None:
    for m in explain(log.read_text(), matrix):
        _runnable_as_shown(m.fix)


def test_every_wsl_template_is_runnable_as_shown() -> None:
    for sig in load_catalogue().signatures:
        for template in sig.fix:
            _runnable_as_shown(template)


def test_wsl_blocked_fallback_template_keeps_the_same_commands(matrix: Matrix) -> None:
    """The last template (a matrix without wsl2.toml) keeps doctor's commands."""
    sig = next(s for s in load_catalogue().signatures if s.id == "wsl_gpu_access_blocked")
    last = sig.fix[-1]
    for cmd in ("`sudo apt-get purge`", "`sudo ldconfig`", "`nvidia-smi -i <index> -dm WDDM`",
                "`wsl.exe --update`", "administrator PowerShell"):
        assert cmd in last
    assert "libnvidia-*" not in last and "wsl --" not in last


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(major=st.integers(10, 30), minor=st.integers(0, 9), patch=st.sampled_from(["", ".1", ".12"]),
       verb=st.sampled_from(["reports", "says", "shows", "prints", "gives"]),
       form=st.sampled_from(["`sw_vers` {v} `macOS {m}`", "sw_vers {v}: macOS {m}",
                             "`sw_vers` {v} `{m}`", "sw_vers {v} ProductVersion: {m}"]))
def test_sw_vers_prose_is_read_as_the_macos_version(major: int, minor: int, patch: str, verb: str,
                                                    form: str, matrix: Matrix) -> None:
    """pytorch/pytorch#177819 writes "`sw_vers` reports `macOS 26.3.1`": the macOS field is that
    version exactly, in any of these forms."""
    version = f"{major}.{minor}{patch}"
    text = ("RuntimeError: The MPS backend is supported on macOS 14.0+.\n"
            + form.format(v=verb, m=version))
    cat = load_catalogue()
    assert extract(text, cat).get("macos") == version


_SIZE = st.tuples(st.integers(0, 999), st.integers(0, 99),
                  st.sampled_from(["KB", "MB", "GB", "KiB", "MiB", "GiB"])).map(
    lambda t: f"{t[0]}.{t[1]:02d} {t[2]}")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(allocated=_SIZE, other=_SIZE, cap=_SIZE,
       want=st.one_of(_SIZE, st.integers(1, 4096).map(lambda n: f"{n} bytes")),
       pool=st.sampled_from(["private", "shared"]), prefix=st.sampled_from(["RuntimeError: ", ""]))
def test_mps_oom_any_sizes(allocated: str, other: str, cap: str, want: str, pool: str,
                           prefix: str, matrix: Matrix) -> None:
    text = (f"{prefix}MPS backend out of memory (MPS allocated: {allocated}, other allocations: "
            f"{other}, max allowed: {cap}). Tried to allocate {want} on {pool} pool. Use "
            "PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 to disable upper limit for memory allocations "
            "(may cause system failure).")
    first = explain(text, matrix)[0]
    assert first.id == "mps_out_of_memory"
    assert first.fix.startswith(f"torch asked for {want} more ({pool} pool) with {allocated} "
                                f"held by MPS and {other} by others, past the {cap} cap")


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(op=st.from_regex(r"(?:aten|torchvision|torchaudio)::_?[a-z][a-z0-9_]{0,24}"
                        r"(?:\.[A-Za-z_]{1,20})?", fullmatch=True),
       wording=st.sampled_from(["current", "currently"]),
       tail=st.sampled_from(["", ".", ". If you want this op to be added in priority during the "
                             "prototype phase of this feature, please comment on "
                             "https://github.com/pytorch/pytorch/issues/77764."]))
def test_mps_any_missing_operator(op: str, wording: str, tail: str, matrix: Matrix) -> None:
    text = (f"NotImplementedError: The operator '{op}' is not {wording} implemented for the "
            f"MPS device{tail}")
    first = explain(text, matrix)[0]
    assert first.id == "mps_op_not_implemented"
    assert first.fix.startswith(f"{op} has no MPS kernel in this torch")


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lib=st.from_regex(r"lib(?:cuda|nvidia-ml|nvcuvid|nvoptix|d3d12)\.so(?:\.1){0,2}",
                         fullmatch=True),
       tool=st.sampled_from(["ldconfig", "/sbin/ldconfig.real", "/sbin/ldconfig"]))
def test_wsl_any_copied_driver_library_is_harmless(lib: str, tool: str, matrix: Matrix) -> None:
    matches = explain(f"{tool}: /usr/lib/wsl/lib/{lib} is not a symbolic link", matrix)
    assert [m.id for m in matches] == ["wsl_libcuda_not_symlink"]
    assert matches[0].harmless and matches[0].to_json()["harmless"] is True
    assert matches[0].fix.startswith(f"nothing to fix: /usr/lib/wsl/lib/{lib} works as it is")


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(dtype=st.sampled_from(["Double", "ComplexDouble"]),
       tail=st.sampled_from(["there is no mapping for it.",
                             "it does not have support for that dtype."]))
def test_mps_float64_older_wordings(dtype: str, tail: str, matrix: Matrix) -> None:
    text = f"TypeError: Trying to convert {dtype} to the MPS backend but {tail}"
    assert explain(text, matrix)[0].id == "mps_float64_unsupported"


def test_bfloat16_or_float8_is_not_called_float64(matrix: Matrix) -> None:
    for dtype in ("BFloat16", "Float8_e4m3fn"):
        text = f"Trying to convert {dtype} to the MPS backend but it does not have support for " \
            "that dtype."
        assert "mps_float64_unsupported" not in [m.id for m in explain(text, matrix)]


@pytest.mark.parametrize("error", [p for p in LOGS if _sid(p) not in (
    "no_match", "wsl_libcuda_not_symlink")], ids=lambda p: p.stem)
def test_the_harmless_ldconfig_line_never_comes_first(error: Path, matrix: Matrix) -> None:
    """The warning is printed on every package install, so it sits in logs beside real errors:
    every real error of the corpus still comes first, the warning after them, marked."""
    ldconfig = (FIXTURES / "wsl_libcuda_not_symlink__2.txt").read_text()
    for text in (ldconfig + error.read_text(), error.read_text() + ldconfig):
        matches = explain(text, matrix)
        assert matches[0].id == _sid(error) and not matches[0].harmless
        assert matches[-1].id == "wsl_libcuda_not_symlink" and matches[-1].harmless
        assert matches[0].to_json()["harmless"] is False


def test_harmless_is_a_flag_sorted_last_even_when_more_confident(small: Matrix) -> None:
    doc = {"signature": [
        {"id": "noise", "title": "t", "cause": "c", "fix": "f", "source": ["s"],
         "confidence": 0.99, "harmless": True, "patterns": ["just a warning"]},
        {"id": "real", "title": "t", "cause": "c", "fix": "f", "source": ["s"],
         "confidence": 0.5, "patterns": ["the real error"]}]}
    got = explain("just a warning\nthe real error\n", small, parse_catalogue(doc))
    assert [(m.id, m.harmless) for m in got] == [("real", False), ("noise", True)]
    doc["signature"][0]["harmless"] = "yes"
    with pytest.raises(MatrixError, match="harmless must be true or false"):
        parse_catalogue(doc)
