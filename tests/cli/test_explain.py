"""`envbuild explain`: the signature catalogue against real-world logs, versions flowing from the
text through the matrix into the fix, the catalogue's integrity, and the CLI contract."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.features.explain import (
    MAX_LOG_BYTES,
    explain,
)
from envbuild.matrix import Matrix
from tests.support import explain as shared
from tests.support import run_cli
from tests.support.explain import FIXTURES, ISSUE20, LOGS, _sid

big_log = shared.big_log  # a fixture, shared with the other kind's test_explain.py

# ---------------------------------------------------------------- CLI


def test_cli_json_shape() -> None:
    r = run_cli("explain", "--json", "--file", str(FIXTURES / "nccl_shm_segment__1.txt"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert list(doc) == ["matches", "input"] and len(doc["matches"]) >= 2
    size = (FIXTURES / "nccl_shm_segment__1.txt").stat().st_size
    assert doc["input"] == {"bytes": size, "cut": False, "kept_head_bytes": size,
                            "kept_tail_bytes": 0}
    for m in doc["matches"]:
        assert list(m) == ["id", "title", "cause", "fix", "confidence", "harmless"]
        assert isinstance(m["confidence"], float) and 0 < m["confidence"] <= 1
    confidences = [m["confidence"] for m in doc["matches"]]
    assert confidences == sorted(confidences, reverse=True)


def test_cli_text_argument() -> None:
    r = run_cli("explain", "RuntimeError: operator torchvision::nms does not exist")
    assert r.returncode == 0
    assert r.stdout.startswith("1. torchvision_operator_missing: ")
    assert "   fix:     install torch, torchvision and torchaudio together" in r.stdout


def test_cli_stdin() -> None:
    r = run_cli("explain", input_text=(FIXTURES / "cuda_out_of_memory__2.txt").read_text())
    assert r.returncode == 0 and "cuda_out_of_memory" in r.stdout
    assert "2.87 GiB on a 14.76 GiB GPU" in r.stdout


def test_cli_no_match_exits_1() -> None:
    r = run_cli("explain", "everything is fine")
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith("no known failure signature matched; ")
    r = run_cli("explain", "--json", "everything is fine")
    assert r.returncode == 1 and json.loads(r.stdout)["matches"] == []


def test_cli_empty_input_is_a_usage_error(tmp_path: Path) -> None:
    r = run_cli("explain", "   ")
    assert r.returncode == 2 and r.stderr.startswith("error: the error text is empty")
    r = run_cli("explain", input_text="")
    assert r.returncode == 2
    r = run_cli("explain", "--file", str(tmp_path / "missing.log"))
    assert r.returncode == 2 and "cannot read" in r.stderr


def test_cli_finds_the_error_at_the_end_of_a_big_log(big_log: Path) -> None:
    data = big_log.read_bytes()
    for args, stdin in ((["--file", str(big_log)], None), ([], data.decode())):
        r = run_cli("explain", *args, input_text=stdin)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith("1. nccl_duplicate_gpu: ")
        assert "ranks 3 and 0 both use the GPU at PCI bus f000" in r.stdout
        assert r.stderr.startswith(f"note: the input is {len(data) / (1 << 20):.1f} MiB: read "
                                   "its first 1.0 MiB and its last 7.0 MiB")
        j = run_cli("explain", "--json", *args, input_text=stdin)
        doc = json.loads(j.stdout)
        assert doc["matches"][0]["id"] == "nccl_duplicate_gpu"
        assert doc["input"]["cut"] is True and doc["input"]["bytes"] == len(data)
        assert doc["input"]["kept_head_bytes"] + doc["input"]["kept_tail_bytes"] \
            <= MAX_LOG_BYTES


_SUGGESTED = re.compile(r"`envbuild ([^`]+)`")


def _resolves(command: str) -> tuple[int, str]:
    """Run a suggested `envbuild make|render|resolve ...` through the resolver (as resolve, in
    this process), returning its exit code and stderr."""
    import contextlib
    import shlex

    from envbuild.cli import run

    words = shlex.split(command)
    assert words[0] in ("make", "render", "resolve"), command
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = run(["resolve", *[w for w in words[1:] if w not in ("--json", "-q")]])
    return rc, err.getvalue()


@pytest.mark.parametrize("log", [p for p in LOGS if _sid(p) in ISSUE20], ids=lambda p: p.stem)
def test_issue20_suggested_commands_are_accepted(log: Path, matrix: Matrix) -> None:
    for match in explain(log.read_text(), matrix):
        for command in _SUGGESTED.findall(match.fix):
            if command.split()[0] in ("make", "render", "resolve"):
                assert _resolves(command) == (0, ""), (log.name, command)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_xformers_suggests_only_torch_builds_envbuild_resolves(data: st.DataObject,
                                                               matrix: Matrix) -> None:
    """xFormers' message over generated torch builds: every real patch x variant of the matrix,
    and builds it does not have (another patch, a variant of another release, unknown ones).
    A suggested `envbuild make --torch X+TAG` must resolve; none is suggested otherwise."""
    rel = data.draw(st.sampled_from(matrix.torch))
    patch = data.draw(st.sampled_from([p.torch for p in matrix.patches_of(rel.version)]
                                      + ["1.13.1", "9.9.9", f"{rel.version}.99"]))
    tags = sorted({v.tag for v in matrix.variants})
    tag = data.draw(st.sampled_from([*tags, "cu999", "rocm0.1"]))
    have = data.draw(st.sampled_from(["cpu", "cu118", "cu121", "cu130"]))
    text = ("WARNING[XFORMERS]: xFormers can't load C++/CUDA extensions. xFormers was built for:\n"
            f"    PyTorch {patch}+{tag} with CUDA 1201 (you have {patch}+{have})\n")
    match = explain(text, matrix)[0]
    assert match.id == "xformers_torch_mismatch"
    suggested = _SUGGESTED.findall(match.fix)
    known = any(p.torch == patch for p in matrix.patches_of(rel.version)) and \
        tag in {v.tag for v in matrix.variants_of(rel.version)}
    if tag == have:
        assert "built for this torch" in match.fix and not suggested
    for command in suggested:
        assert _resolves(command) == (0, ""), command
    if known and tag != have:
        assert suggested == [f"make --torch {patch}+{tag}"], match.fix


def test_cli_says_a_harmless_message_is_harmless() -> None:
    """The WSL ldconfig warning (issue 26): named, marked harmless in text and JSON, exit 0,
    with a note that the error, if any, is elsewhere; beside a real error, the error first."""
    ldconfig = (FIXTURES / "wsl_libcuda_not_symlink__1.txt").read_text()
    r = run_cli("explain", input_text=ldconfig)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("1. wsl_libcuda_not_symlink: ")
    assert "(harmless, confidence 0.90)" in r.stdout.splitlines()[0]
    assert "   fix:     nothing to fix" in r.stdout
    assert r.stderr.startswith("note: only harmless messages matched")
    doc = json.loads(run_cli("explain", "--json", input_text=ldconfig).stdout)
    assert [(m["id"], m["harmless"]) for m in doc["matches"]] == [
        ("wsl_libcuda_not_symlink", True)]
    both = ldconfig + (FIXTURES / "wsl_gpu_access_blocked__2.txt").read_text()
    r = run_cli("explain", input_text=both)
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.startswith("1. wsl_gpu_access_blocked: ")
    assert "2. wsl_libcuda_not_symlink: " in r.stdout
    doc = json.loads(run_cli("explain", "--json", input_text=both).stdout)
    assert [m["id"] for m in doc["matches"]] == ["wsl_gpu_access_blocked",
                                                 "wsl_libcuda_not_symlink"]
    assert doc["matches"][0]["harmless"] is False and doc["matches"][1]["harmless"] is True
