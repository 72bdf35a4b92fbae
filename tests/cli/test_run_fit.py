"""`envbuild run IMAGE --fit REPORT.json` as a user runs it: a REPORT that is not fit's report is
one line and exit 2 before any engine is asked; the remediation a too-big job gets is an
`envbuild fit` command that, run, says the changed job fits (the preflight's findings themselves:
tests/unit/test_run_fit.py)."""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from envbuild.features import run
from envbuild.features.fit import job_json
from tests.support import ROOT, run_cli
from tests.support.run_fit import FULL, host, preflight, report


def test_a_bad_report_is_one_line_and_exit_2_before_any_engine(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 50_000 + "]" * 50_000)
    for bad in ("/dev/zero", str(tmp_path), str(tmp_path / "none.json"), str(deep)):
        r = run_cli("run", "--fit", bad, "--check", "envbuild/cpu:x", timeout=60,
                    env={"PATH": os.defpath}, cwd=ROOT)
        assert r.returncode == 2, r.stderr
        assert "--fit" in r.stderr and "Traceback" not in r.stderr
        assert len([line for line in r.stderr.splitlines() if line.strip()]) <= 2


def test_the_remediation_resolves(tmp_path: Path) -> None:
    from envbuild.matrix import load

    claim = run.read_fit(report(tmp_path, FULL))
    pre = preflight(load(), host("h100-sxm-recorded"), fit=claim)
    fix = next(f.remediation for f in pre.findings if f.id == "fit.too_big")
    command = re.search(r"`(envbuild fit [^`]+)`", fix)
    assert command is not None, fix
    r = run_cli(*shlex.split(command.group(1))[1:], "--json", cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    answer = json.loads(r.stdout)
    assert answer["gpus"][0]["fits"] is True and answer["job"] != job_json(FULL)
