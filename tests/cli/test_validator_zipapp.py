"""The artifact images carry: one deterministic zipapp of envbuild/validator/, which agrees with
the package (same checks, same verdicts) and runs without the rest of envbuild."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from envbuild.validator import judges, zipapp
from tests.support.validator import FIXTURES, V

SPEC_JUDGES = ["judge_torch_version", "judge_torchvision_version", "judge_torchaudio_version",
               "judge_torchvision", "judge_torchaudio", "judge_flavor", "judge_cuda_version",
               "judge_cudnn", "judge_nccl", "judge_rocm_version", "judge_archs", "judge_spec_gpus"]
DEVICE_JUDGES = ["judge_device_count", "judge_device_properties", "judge_arch_coverage"]
VERDICTS = r"""
def verdicts(judges, paths):
    import json
    out = {}
    for path in paths:
        with open(path) as fh:
            data = json.load(fh)
        spec, facts = data["spec"], data["facts"]
        row = {n: getattr(judges, n)(spec, facts) for n in SPEC_JUDGES}
        row.update({n: getattr(judges, n)(facts, False, spec.get("target"))
                    for n in DEVICE_JUDGES})
        out[path] = {n: [o.status, o.detail] for n, o in row.items()}
    return out
"""
AGREE = f"SPEC_JUDGES = {SPEC_JUDGES!r}\nDEVICE_JUDGES = {DEVICE_JUDGES!r}\n" + VERDICTS + r"""
import json, sys
from envbuild.validator import checks, judges, rules
assert "zip" in type(rules.__loader__).__name__.lower(), type(rules.__loader__)
print(json.dumps({"ids": list(checks.CHECK_IDS), "file": rules.__file__,
                  "verdicts": verdicts(judges, sys.argv[1:])}))
"""


def _in_process_verdicts(paths: list[str]) -> dict[str, dict[str, list[str]]]:
    scope: dict[str, Any] = {"SPEC_JUDGES": SPEC_JUDGES, "DEVICE_JUDGES": DEVICE_JUDGES}
    exec(VERDICTS, scope)
    result: dict[str, dict[str, list[str]]] = scope["verdicts"](judges, paths)
    return result


def test_shipped_zipapp_and_package_agree(tmp_path: Path) -> None:
    """The zipapp, imported in an isolated interpreter (no repo, no site envbuild), has the
    package's check ids and gives the package's verdicts on every recorded fixture."""
    pyz = tmp_path / "validator.pyz"
    pyz.write_bytes(zipapp.build())
    fixtures = [str(p) for p in sorted(FIXTURES.glob("*_*.json"))]
    code = f"import sys; sys.path.insert(0, {str(pyz)!r})\n" + AGREE
    r = subprocess.run([sys.executable, "-I", "-c", code, *fixtures], capture_output=True,
                       text=True, cwd=tmp_path, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    shipped = json.loads(r.stdout)
    assert shipped["file"].startswith(str(pyz))
    assert shipped["ids"] == list(V.CHECK_IDS)
    assert shipped["verdicts"] == _in_process_verdicts(fixtures)
    assert len(shipped["verdicts"]) >= 3 and all(shipped["verdicts"].values())


def test_zipapp_runs_on_python39_without_envbuild(tmp_path: Path) -> None:
    py39 = next((str(p) for p in sorted(Path(sys.base_prefix).parent.glob(
        "3.9*/bin/python3.9"))), None)
    pyz = tmp_path / "validator.pyz"
    pyz.write_bytes(zipapp.build())
    for python in filter(None, [sys.executable, py39]):
        r = subprocess.run([python, "-I", str(pyz), "--only", "facts.python,shm.size", "--json"],
                           capture_output=True, text=True, cwd=tmp_path, timeout=120,
                           check=False)
        assert r.returncode == 0, (python, r.stderr)
        assert [c["id"] for c in json.loads(r.stdout)["checks"]] == ["facts.python", "shm.size"]
