"""ext.load / ext.kernel (issue 23): the validator's checks of the spec's --with extensions, run
for real (the validator script, this host's torch) against installed distributions made here:
a package with its dist-info, the version, the Requires-Dist on torch and the native-library
state each check reads. What a real extension does in a real image is the integration test's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.validator import by_id, host_spec, run_validator


def _dist(site: Path, name: str, version: str, requires_torch: str, body: str) -> None:
    module = name.replace("-", "_")
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text(body)
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + (f"Requires-Dist: torch{requires_torch}\n"
                                      if requires_torch else ""))


def _run(tmp: Path, extensions: list[dict[str, str]], *args: str,
         spec: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
    site = tmp / "site"
    env = {**os.environ, "PYTHONPATH": str(site)}
    rc, report, _, stderr = run_validator(
        tmp / "run", spec or host_spec(extensions=extensions), "--only", "ext", *args, env=env,
        timeout=300)
    assert report is not None, stderr
    return rc, report


def _xformers(tmp: Path, *, version: str = "0.0.32.post2", requires: str | None = None,
              loaded: bool = True) -> list[dict[str, str]]:
    torch = host_spec()["torch"]
    _dist(tmp / "site", "xformers", version, f"=={torch}" if requires is None else requires,
          f"_has_cpp_library = {loaded}\n"
          "class _cpp_lib:\n    _cpp_library_load_exception = 'undefined symbol: _ZN3c10'\n")
    return [{"name": "xformers", "version": "0.0.32.post2", "where": "pypi",
             "install": "xformers==0.0.32.post2", "module": "xformers"}]


def test_without_extensions_both_checks_skip(tmp_path: Path) -> None:
    rc, report = _run(tmp_path, [])
    checks = by_id(report)
    assert rc == 0 and checks["ext.load"]["status"] == "skip"
    assert checks["ext.kernel"]["status"] == "skip"


def test_a_loading_extension_of_the_resolved_version_passes(tmp_path: Path) -> None:
    rc, report = _run(tmp_path, _xformers(tmp_path))
    check = by_id(report)["ext.load"]
    assert rc == 0 and check["status"] == "pass", check
    assert "xformers 0.0.32.post2 (C++ library loaded)" in check["detail"]


@pytest.mark.parametrize(("how", "kw", "says"), [
    ("its C++ library did not load", {"loaded": False}, "undefined symbol"),
    ("it requires another torch", {"requires": "==1.0.0"}, "requires torch==1.0.0"),
    ("another version is installed", {"version": "0.0.31"}, "0.0.31 is installed"),
])
def test_an_extension_that_cannot_work_here_fails_and_says_why(
        tmp_path: Path, how: str, kw: dict[str, Any], says: str) -> None:
    rc, report = _run(tmp_path, _xformers(tmp_path, **kw))
    check = by_id(report)["ext.load"]
    assert rc == 1 and check["status"] == "fail", how
    assert says in check["detail"] and check["remediation"]


def test_a_missing_extension_fails(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    rc, report = _run(tmp_path, [{"name": "xformers", "version": "0.0.32.post2",
                                  "where": "pypi", "install": "x", "module": "xformers"}])
    assert rc == 1 and "xformers" in by_id(report)["ext.load"]["detail"]


def test_a_replaced_torch_is_named(tmp_path: Path) -> None:
    ext = _xformers(tmp_path, requires="")
    spec = host_spec(extensions=ext, torch="2.0.0")
    rc, report = _run(tmp_path, ext, spec=spec)
    assert rc == 1 and "an extension replaced it" in by_id(report)["ext.load"]["detail"]


def test_bitsandbytes_without_the_resolved_cuda_library_fails(tmp_path: Path) -> None:
    _dist(tmp_path / "site", "bitsandbytes", "0.50.2", ">=2.4,<3", "")
    (tmp_path / "site" / "bitsandbytes" / "libbitsandbytes_cpu.so").write_bytes(b"")
    rc, report = _run(tmp_path, [{"name": "bitsandbytes", "version": "0.50.2", "where": "pypi",
                                  "install": "bitsandbytes==0.50.2", "cuda": "13.0",
                                  "module": "bitsandbytes"}])
    check = by_id(report)["ext.load"]
    assert rc == 1 and "libbitsandbytes_cuda130.so is not in the installed wheel" in \
        check["detail"]


def test_the_kernel_check_needs_a_gpu(tmp_path: Path) -> None:
    ext = _xformers(tmp_path)
    rc, report = _run(tmp_path, ext)
    assert by_id(report)["ext.kernel"]["status"] == "skip"
    rc, report = _run(tmp_path, ext, "--require-gpu")
    assert rc == 1 and by_id(report)["ext.kernel"]["status"] == "fail"
