"""CLI conventions: --help everywhere, lazy heavy imports, clean errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import ROOT, run_cli

COMMANDS = [[], ["resolve"], ["render"], ["build"], ["validate"], ["make"], ["matrix"],
            ["matrix", "check"], ["matrix", "show"], ["doctor"], ["explain"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_everywhere(cmd: list[str]) -> None:
    r = run_cli(*cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert "Usage" in r.stdout


def test_startup_imports_no_heavy_modules() -> None:
    code = ("import sys; from envbuild.cli import run; rc = run(['resolve', '--cuda', '12.2', "
            "'--json']); heavy = [m for m in ('torch', 'docker', 'requests', 'jinja2') "
            "if m in sys.modules]; print('HEAVY', heavy, rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    assert p.stdout.strip().endswith("HEAVY [] 0")


def test_python_dash_m_and_unknown_command() -> None:
    r = run_cli("frobnicate")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_broken_matrix_is_a_clean_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    bad = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", bad)
    (bad / "torch.toml").write_text((bad / "torch.toml").read_text() + "\n[[variant]\n")
    r = run_cli("matrix", "check", "--dir", str(bad))
    assert r.returncode == 1
    assert "torch.toml: -: not valid TOML" in r.stdout
