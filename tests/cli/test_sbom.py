"""The SBOM probe run as it runs in an image (its own process, `python -I -c SOURCE DIR`), here
with this host's Python: rpm through a stand-in `rpm` on PATH, pip reports as pip writes them,
and hostile metadata capped; and the CLI's one-line usage errors for a bad --sbom / --out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envbuild.core import sbom
from envbuild.engine import image_facts
from envbuild.engine.sbom_probe import MARKER
from tests.support import run_cli

RPM = """#!/bin/sh
if [ "$1" = "-qa" ]; then
  printf 'python3.11\\t(none)\\t3.11.7\\t1.el9_4\\tx86_64\\tPython\\n'
  printf 'openssl-libs\\t1\\t3.0.7\\t27.el9\\tx86_64\\tASL 2.0\\n'
  printf 'gpg-pubkey\\t(none)\\t8483c65d\\t5ccc5b19\\t(none)\\tpubkey\\n'
  printf 'a line that is not a package\\n'
  exit 0
fi
if [ "$1" = "-qf" ]; then printf 'python3.11'; exit 0; fi
exit 1
"""


def probe(tmp_path: Path, env: dict[str, str] | None = None,
          arg: str | None = None) -> dict[str, Any]:
    argv = [sys.executable, *image_facts.probe_argv()[1:-1], arg or str(tmp_path / "reports")]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})})
    assert p.returncode == 0, p.stderr
    # a line of its own, then one JSON line: what the host reads after the last marker
    assert p.stdout.startswith(f"\n{MARKER}\n") and p.stdout.count("\n") == 3
    assert image_facts.probe_output(p.stdout) == json.loads(p.stdout.split("\n")[2])
    return dict(json.loads(p.stdout.split("\n")[2]))


def pip_report(install: list[dict[str, Any]]) -> str:
    """A pip installation report (format version 1, as pip >= 22.2 writes it)."""
    return json.dumps({"version": "1", "pip_version": "23.0.1", "install": install,
                       "environment": {"platform_machine": "x86_64"}})


def test_the_probe_reads_rpm_pip_reports_and_this_venv(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "rpm").write_text(RPM)
    (bin_dir / "rpm").chmod(0o755)
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "pip-report-torch.json").write_text(pip_report([
        {"metadata": {"name": "torch", "version": "2.13.0+cpu", "description": "x" * 100_000},
         "download_info": {"url": "file:///run/envbuild/wheelhouse/torch-2.13.0%2Bcpu-cp311-"
                                  "cp311-manylinux_2_28_x86_64.whl",
                           "archive_info": {"hash": "sha256=" + "a" * 64,
                                            "hashes": {"sha256": "a" * 64}}},
         "requested": True},
        {"metadata": {"name": "sympy", "version": "1.14.0"},  # pip 22.2's: the legacy hash only
         "download_info": {"url": "https://files.example/sympy-1.14.0-py3-none-any.whl",
                           "archive_info": {"hash": "sha256=" + "b" * 64}}},
        {"metadata": {"name": "mine", "version": "0.1"},
         "download_info": {"url": "file:///src/mine", "dir_info": {}}}]))
    (reports / "pip-report-user.json").write_text("{not json")
    raw = probe(tmp_path, {"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert [r["name"] for r in raw["rpm"]] == ["python3.11", "openssl-libs"]  # pubkey, junk out
    assert raw["rpm"][1] == {"name": "openssl-libs", "epoch": "1", "version": "3.0.7",
                             "release": "27.el9", "arch": "x86_64", "license": "ASL 2.0"}
    assert raw["rpm"][0]["epoch"] == ""  # (none)
    torch, sympy, mine = raw["pip_reports"][0]["install"]
    assert (torch["sha256"], sympy["sha256"], mine["sha256"]) == ("a" * 64, "b" * 64, "")
    assert torch["requested"] and mine["kind"] == "dir"
    assert raw["pip_reports"][1] == {"step": "user", "error": "unreadable"}
    # the venv this Python runs: its distributions with their exact versions
    from importlib.metadata import version

    dists = {d["name"].lower(): d["version"] for d in raw["dists"]}
    assert dists["cyclonedx-python-lib"] == version("cyclonedx-python-lib")
    assert raw["python"]["version"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}.")
    f = sbom.facts(raw)
    assert [w.file for w in f.wheels][:1] == ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64"
                                              ".whl"]
    assert any("pip report of step user" in n for n in f.notes)


def test_the_probe_caps_what_it_prints(tmp_path: Path) -> None:
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "pip-report-big.json").write_text(pip_report([
        {"metadata": {"name": "n" * 50_000, "version": "1"},
         "download_info": {"url": "u" * 50_000, "archive_info": {"hashes": {"sha256": "x" * 500}}}}
        for _ in range(50)]))
    raw = probe(tmp_path, {"PATH": "/nonexistent"})  # no rpm at all
    assert raw["rpm"] is None and raw["rpm_error"] == ""
    installed = raw["pip_reports"][0]["install"]
    assert all(len(w["name"]) <= 1024 and len(w["url"]) <= 2048 and len(w["sha256"]) <= 64
               for w in installed)
    assert len(json.dumps(raw)) < 1 << 20


def test_a_bad_sbom_or_out_dir_is_a_one_line_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "a-file"
    f.write_text("x")
    r = run_cli("make", "--target", "cpu", "--torch", "2.13.0", "--no-validate", "--sbom", str(f))
    assert r.returncode == 2 and "is a file" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "hint" in r.stderr
    team = tmp_path / "envbuild.toml"
    team.write_text('[image.a]\ntarget = "cpu"\ntorch = "2.13.0"\n')
    r = run_cli("team", "build", "--file", str(team), "--out", str(f))
    assert r.returncode == 2 and "is a file" in r.stderr, r.stderr
    (tmp_path / "envbuild-out").write_text("x")  # the default, next to the team file
    r = run_cli("team", "build", "--file", str(team))
    assert r.returncode == 2 and "envbuild-out" in r.stderr, r.stderr


def test_sbom_needs_an_image_built_here(tmp_path: Path) -> None:
    r = run_cli("make", "--from-bundle", str(tmp_path), "--sbom", str(tmp_path / "o"))
    assert r.returncode == 2 and "--from-bundle" in r.stderr, r.stderr
    r = run_cli("make", "--target", "mps", "--torch", "2.13.0", "--sbom", str(tmp_path / "o"),
                "--out", str(tmp_path / "mps"))
    assert r.returncode == 2 and "native" in r.stderr, r.stderr
    assert not (tmp_path / "mps").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize(("direct_url", "kind"), [
    ('{"url": "file:///opt/envbuild/ext-wheels/ext-1.0-cp311-cp311-linux_x86_64.whl", '
     '"archive_info": {"hashes": {"sha256": "' + "a" * 64 + '"}}}', "archive"),
    ('{"url": "https://bob:SECRET@git.example/ext.git", "vcs_info": {"vcs": "git", '
     '"commit_id": "' + "b" * 40 + '"}}', "vcs"),
    ('{"url": "file:///home/alice/src/ext", "dir_info": {"editable": true}}', "dir"),
    ("not json", "archive"), ("[1]", "archive"), ('{"url": "' + "x" * 70_000 + '"}', "archive"),
    (None, ""),  # from an index: no direct_url.json
])
def test_the_probe_lists_the_distributions_and_how_each_came(tmp_path: Path,
                                                              direct_url: str | None,
                                                              kind: str) -> None:
    """`--dists` (the team lock's package list): every distribution, one installed by path (a
    compiled extension's wheel) too, and how it came, never its URL (a path, a login)."""
    site = tmp_path / "site"
    info = site / "ext-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ext\nVersion: 1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(direct_url)
    argv = [sys.executable, "-c", image_facts.probe_source(), "--dists"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(site)})
    assert p.returncode == 0, p.stderr
    raw = image_facts.probe_output("== CUDA ==\n" + p.stdout)
    assert set(raw) == {"format", "dists"}
    ext = next(d for d in raw["dists"] if d["name"] == "ext")
    assert ext == {"name": "ext", "version": "1.0", "direct": kind}
    assert "SECRET" not in p.stdout and "alice" not in p.stdout and "ext-wheels" not in p.stdout
