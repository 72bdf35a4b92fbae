"""`envbuild doctor --collect-env` as a user runs it: a file, stdin, text, JSON and Markdown,
exit codes, and hostile input (one line, exit 2, no traceback)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.support import ROOT, run_cli

FIXTURES = ROOT / "tests" / "fixtures" / "collect_env"
RTX5090 = FIXTURES / "pt150733-sm120-rtx5090d-cu126" / "report.txt"
HEALTHY = FIXTURES / "pt110792-healthy-4x-rtx3090-1.13" / "report.txt"


def _one_line_error(r) -> None:  # type: ignore[no-untyped-def]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.strip().startswith("error:"), r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.startswith("error:")]) == 1


def test_a_broken_report_names_its_cause_and_exits_1() -> None:
    r = run_cli("doctor", "--collect-env", str(RTX5090))
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("envbuild doctor --collect-env: the report in ")
    first = next(ln for ln in lines if ln.startswith("  ERROR"))
    assert "torch.arch_missing" in first
    assert "Recommended for that host:" in r.stdout and "--gpu sm_120" in r.stdout
    assert "Without envbuild, in that Python:\n  pip install torch==" in r.stdout
    assert "Not judged from the report:" in r.stdout


def test_a_healthy_report_exits_0_and_says_what_it_could_not_judge() -> None:
    r = run_cli("doctor", "--collect-env", str(HEALTHY))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ERROR" not in r.stdout and "Not judged from the report:" in r.stdout


def test_stdin_and_the_file_give_the_same_json() -> None:
    from_file = run_cli("doctor", "--collect-env", str(RTX5090), "--json")
    from_stdin = run_cli("doctor", "--collect-env", "-", "--json",
                         input_text=RTX5090.read_text())
    a, b = json.loads(from_file.stdout), json.loads(from_stdin.stdout)
    assert a["findings"] == b["findings"] and a["recommendation"] == b["recommendation"]
    assert b["source"]["name"] == "stdin"


def test_the_json_is_doctors_with_the_reports_facts() -> None:
    out = json.loads(run_cli("doctor", "--collect-env", str(RTX5090), "--json").stdout)
    host = json.loads(run_cli("doctor", "--json", "--facts", str(
        ROOT / "tests" / "fixtures" / "doctor" / "h100-healthy")).stdout)
    assert set(host) <= set(out)  # doctor's keys, and the report's on top
    assert {"source", "report", "cause", "unjudged", "pip_install"} <= set(out)
    assert set(out["findings"][0]) == set(host["findings"][0])
    assert out["cause"] == "arch_not_in_wheel" == out["findings"][0]["cause"]
    assert out["recommendation"]["argv"][:2] == ["envbuild", "make"]


def test_markdown_is_a_reply_with_the_facts_quoted() -> None:
    r = run_cli("doctor", "--collect-env", str(RTX5090), "--markdown")
    assert r.returncode == 1
    md = r.stdout
    assert md.startswith("**envbuild doctor** on this `collect_env` report")
    assert "**Cause (`arch_not_in_wheel`):**" in md
    assert "Nvidia driver version: 570.124.04" in md
    assert md.count("```") % 2 == 0
    assert "```sh\nenvbuild make --target cuda --driver 570.124.04 --gpu sm_120\n```" in md


@pytest.mark.parametrize("payload", [
    "GPU 0: [click me](https://evil.example/x) ![img](https://evil.example/i.png) <img src=x>",
    "```\n# closing the fence from inside",
    "\x1b]0;pwned\x07 NVIDIA \x1b[31mRTX\x1b[0m",
])
def test_markdown_keeps_a_hostile_value_inert(payload: str, tmp_path: Path) -> None:
    """A value from the paste cannot close a fence, make a link or an image, or reach the
    terminal as an escape."""
    text = RTX5090.read_text().replace("NVIDIA GeForce RTX 5090 D", payload.replace("\n", " "))
    p = tmp_path / "env.txt"
    p.write_text(text)
    md = run_cli("doctor", "--collect-env", str(p), "--markdown").stdout
    assert "\x1b" not in md and "\x07" not in md
    fences = [ln for ln in md.splitlines() if ln.startswith("```")]
    assert len(fences) % 2 == 0 and all(re.fullmatch(r"```(text|sh)?", f) for f in fences)
    # outside the fenced blocks (where Markdown is not rendered) nothing is live
    prose = "\n".join(part for i, part in enumerate(re.split(r"(?m)^```.*$", md)) if i % 2 == 0)
    assert not re.search(r"(?<!\\)\]\(", prose) and not re.search(r"(?<!\\)<img", prose)
    assert "evil.example" in md or "evil.example" not in payload  # shown, only inert


@pytest.mark.parametrize(("args", "says"), [
    (["--collect-env", "/dev/zero"], "not a collect_env report"),
    (["--collect-env", "/"], "a directory"),
    (["--collect-env", "/nonexistent/env.txt"], "env.txt"),
    (["--markdown"], "--markdown goes with --collect-env"),
    (["--collect-env", "x", "--cuda", "12.4"], "--collect-env judges a report"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    r = run_cli("doctor", *args)
    _one_line_error(r)
    assert says in r.stderr


def test_a_huge_or_empty_or_reportless_input_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"PyTorch version: 2.5.1\n" + b"A" * (2 << 20))
    _one_line_error(run_cli("doctor", "--collect-env", str(big)))
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    _one_line_error(run_cli("doctor", "--collect-env", str(empty)))
    noise = tmp_path / "noise.txt"
    noise.write_bytes(os.urandom(5000))
    _one_line_error(run_cli("doctor", "--collect-env", str(noise)))
    # a huge stream on stdin is read only up to the cap (a child with 1 GiB of address space)
    r = run_cli("doctor", "--collect-env", "-", input_text="x" * (3 << 20),
                memory=1 << 30)
    _one_line_error(r)


def test_help_documents_the_option() -> None:
    r = run_cli("doctor", "--help")
    assert "--collect-env" in r.stdout and "--markdown" in r.stdout


TOKENS = ["<details", "<summary ", "> ", "```", "GPU 0: ", "[pip3] torch==", "[conda] pytorch ",
          "PyTorch version: ", "found version 11040", "sm_120 is not compatible", "9" * 50,
          "\uff1a", 'handle_0 INTERNAL ASSERT FAILED at "',
          "libtorch_cuda.so: undefined symbol: nccl",
          "Could not load library libcudnn_a.so.8. Error: /x"]


@pytest.mark.parametrize("token", TOKENS)
@pytest.mark.parametrize("shape", ["one line", "many lines"])
def test_a_megabyte_of_one_token_ends_quickly(token: str, shape: str, tmp_path: Path) -> None:
    """A hang guard over generated pathological inputs (every regex of the parser sees ~1 MiB of
    the token it reacts to): the run ends well inside the timeout, with exit 0, 1 or 2 and no
    traceback. Speed itself is measured in `make bench`, not here."""
    head = "PyTorch version: 2.5.1+cu124\nOS: Ubuntu 22.04 (x86_64)\nIs CUDA available: False\n"
    sep = "" if shape == "one line" else "\n"
    body = (token + sep) * ((1 << 20) // (len(token.encode()) + len(sep)) - 64)
    p = tmp_path / "env.txt"
    p.write_text(head + body)
    r = run_cli("doctor", "--collect-env", str(p), "--json", timeout=120)
    assert r.returncode in (0, 1, 2), r.stderr
    assert "Traceback" not in r.stderr
