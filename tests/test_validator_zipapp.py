"""The artifact images carry: one deterministic zipapp of envbuild/validator/, which agrees with
the package (same checks, same verdicts) and runs without the rest of envbuild."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

from envbuild.render.context import validator_source
from envbuild.validator import judges, zipapp
from tests.test_validator import FIXTURES, PACKAGE_DIR, V


def test_zipapp_is_byte_identical_across_builds(tmp_path: Path) -> None:
    """Same sources, other checkout (other mtimes, umask): same bytes, so the spec hash, the
    build context and the image layer do not move."""
    first = zipapp.build()
    copy = tmp_path / "validator"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for i, path in enumerate(sorted(p for p in copy.rglob("*") if p.is_file())):
        os.utime(path, (1_000_000_000 + i, 1_700_000_000 + i * 7))
        path.chmod(0o600 if i % 2 else 0o755)
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"junk")
    assert zipapp.build(copy) == first == zipapp.build()
    from envbuild.matrix import load
    from envbuild.validator import rules

    m = load()
    data = json.dumps(rules.linux_driver_rule(m.extra["wsl2"]), sort_keys=True).encode()
    assert validator_source(m) == zipapp.build(data={rules.LINUX_DRIVER_DATA: data})
    assert data in validator_source(m)  # the matrix's driver packages travel in the zipapp


def test_zipapp_entries_are_sorted_with_fixed_metadata() -> None:
    with zipfile.ZipFile(io.BytesIO(zipapp.build())) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert "__main__.py" in names and "envbuild/__init__.py" in names
        assert {f"envbuild/validator/{p.relative_to(PACKAGE_DIR).as_posix()}"
                for p in PACKAGE_DIR.rglob("*.py")} <= set(names)
        assert not any(n.endswith(".pyc") for n in names)
        assert {i.date_time for i in infos} == {zipapp.FIXED_TIME}
        assert {i.external_attr >> 16 for i in infos} == {0o100644}
        assert "validator" not in zf.read("envbuild/__init__.py").decode().split('"""')[0]


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
