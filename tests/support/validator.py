"""Helpers shared by the validator tests and others (moved out of test_validator.py)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import pkgutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from envbuild.validator import zipapp
from tests.support import ROOT, TESTS

PACKAGE_DIR = ROOT / "envbuild" / "validator"
PEAKS_TOML = ROOT / "matrix" / "peaks.toml"
FIXTURES = TESTS / "fixtures" / "validator"


def _load_validator() -> ModuleType:
    """One namespace with every module of the validator package (rules, judges, the checks,
    the supervisor...), as the tests address them."""
    merged = ModuleType("envbuild_validator_under_test")
    for info in pkgutil.iter_modules([str(PACKAGE_DIR)]):
        if info.name == "__main__":
            continue
        module = importlib.import_module(f"envbuild.validator.{info.name}")
        merged.__dict__.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    return merged


def _build_zipapp() -> Path:
    """The artifact images carry, built once per test session: the subprocess tests run it."""
    out = Path(tempfile.mkdtemp(prefix="envbuild-validator-test-")) / "validator.pyz"
    out.write_bytes(zipapp.build())
    return out


V = _load_validator()
VALIDATOR_PATH = _build_zipapp()


def _torch_version() -> str:
    torch = pytest.importorskip("torch")
    return str(torch.__version__)


def host_spec(**overrides: Any) -> dict[str, Any]:
    version = _torch_version()
    spec: dict[str, Any] = {
        "target": "cpu", "torch": version.split("+")[0], "torchvision": None, "torchaudio": None,
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "variant": V.local_tag(version) or "cpu", "torch_cuda": None, "rocm": None,
        "cuda_image": None, "cudnn": None, "nccl": None, "archs": [], "gpus": [],
        "os": "ubuntu22.04", "base_image": "ubuntu:22.04", "min_driver": None,
    }
    spec.update(overrides)
    return spec


def peaks_data() -> dict[str, Any]:
    with PEAKS_TOML.open("rb") as fh:
        return tomllib.load(fh)


def run_validator(tmp: Path, spec: dict[str, Any] | None, *args: str,
                  python: list[str] | None = None, env: dict[str, str] | None = None,
                  script: Path = VALIDATOR_PATH, timeout: float = 120,
                  ) -> tuple[int, dict[str, Any] | None, str, str]:
    tmp.mkdir(parents=True, exist_ok=True)
    argv = [*(python or [sys.executable]), str(script)]
    if spec is not None:
        spec_path = tmp / "spec.json"
        spec_path.write_text(json.dumps(spec))
        argv += ["--spec", str(spec_path)]
    out = tmp / "report.json"
    argv += ["--out", str(out), *args]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp,
                          env={**os.environ, **(env or {})}, check=False)
    report = json.loads(out.read_text()) if out.exists() else None
    return proc.returncode, report, proc.stdout, proc.stderr


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in report["checks"]}

