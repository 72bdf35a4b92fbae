"""wsl.environment: the validator inside a container (or a venv) on WSL2, judged on recorded
WSL2 facts (tests/fixtures/doctor/wsl2-*, the doctor's recordings of real WSL2 hosts)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envbuild.matrix import load
from tests.support import FIXTURES, ROOT
from tests.support.validator import V

RULE = V.linux_driver_rule(load().extra["wsl2"])

DOCTOR = FIXTURES / "doctor"
WSL_KERNEL = "Linux version 5.15.167.4-microsoft-standard-WSL2 (root@1a2b) #1 SMP"


def facts_from_doctor(name: str) -> dict[str, Any]:
    """The facts the validator gathers, from a doctor recording of the same machine."""
    d = DOCTOR / name
    host = json.loads((d / "host.json").read_text())
    kernel = (d / "osrelease.txt").read_text().strip()
    return {"dxg": "/dev/dxg" in host.get("devices", {}),
            "wsl_lib": host.get("dirs", {}).get(V.WSL_LIB), "kernel": kernel,
            "mounts": [], "ld_library_path": "",
            "libcuda": V.parse_ldconfig((d / "ldconfig-p.txt").read_text()),
            "driver_packages": V.driver_packages((d / "dpkg-l.txt").read_text(),
                                                 RULE["driver_packages"])}


def test_recorded_healthy_wsl2_passes_with_notes() -> None:
    out = V.wsl2_verdict(facts_from_doctor("wsl2-healthy"))
    assert out.status == "pass", out.detail
    assert "/usr/lib/wsl/lib" in out.detail and "pinned" in out.detail
    notes = " ".join(out.evidence["notes"])
    assert "NCCL_P2P_DISABLE=1" in notes and "NCCL_SHM_DISABLE=1" in notes


def test_nccl_advice_is_one_fact_for_validator_and_doctor() -> None:
    """The validator cannot read the matrix: its NCCL advice is matrix/wsl2.toml [nccl] advice
    verbatim, and doctor's wsl.limits (which reads the matrix) gives the same text."""
    from envbuild.doctor import evaluate, record
    from envbuild.validator.judges import wsl2

    m = load()
    assert m.extra["wsl2"]["nccl"]["advice"] == wsl2.NCCL_ADVICE
    notes = V.wsl2_verdict(facts_from_doctor("wsl2-healthy")).evidence["notes"]
    assert any(n.endswith(wsl2.NCCL_ADVICE) for n in notes)
    limits = next(f for f in evaluate.evaluate(record.load(DOCTOR / "wsl2-healthy"), m)
                  if f.id == "wsl.limits")
    assert wsl2.NCCL_ADVICE in limits.remediation and "--ipc=host" not in limits.remediation


def test_recorded_wsl2_with_a_linux_driver_fails() -> None:
    facts = facts_from_doctor("wsl2-linux-driver")  # microsoft/WSL#9166: nvidia-utils-510
    assert facts["driver_packages"] == ["nvidia-utils-510"]
    out = V.wsl2_verdict(facts)
    assert out.status == "fail" and "nvidia-utils-510" in out.detail
    assert "apt-get purge" in out.remediation


@pytest.mark.parametrize("name", ["h100-healthy", "cpu-host-docker", "mi300x", "pascal-gtx1080"])
def test_not_wsl2_skips(name: str) -> None:
    d = DOCTOR / name
    host = json.loads((d / "host.json").read_text())
    kernel = (d / "osrelease.txt").read_text() if (d / "osrelease.txt").exists() else ""
    facts = {"dxg": "/dev/dxg" in host.get("devices", {}),
             "wsl_lib": host.get("dirs", {}).get(V.WSL_LIB), "kernel": kernel, "mounts": []}
    out = V.wsl2_verdict(facts)
    assert out.status == "skip" and out.reason


@pytest.mark.parametrize(("sign", "value"), [
    ("dxg", True), ("wsl_lib", ["libcuda.so.1"]), ("mounts", ["/usr/lib/wsl/drivers"]),
    ("kernel", WSL_KERNEL), ("kernel", "5.10.102.1-Microsoft-standard-WSL2"),
])
def test_each_sign_detects_wsl2(sign: str, value: object) -> None:
    facts: dict[str, Any] = {"dxg": False, "wsl_lib": None, "kernel": "6.1.0-13-amd64",
                             "mounts": []}
    assert V.is_wsl2(facts) == []
    facts[sign] = value
    assert V.is_wsl2(facts)


def _wsl(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"dxg": True, "wsl_lib": ["libcuda.so", "libcuda.so.1"],
                            "kernel": WSL_KERNEL, "mounts": ["/usr/lib/wsl/lib"],
                            "ld_library_path": "", "libcuda": ["/usr/lib/wsl/lib/libcuda.so.1"],
                            "driver_packages": []}
    base.update(kw)
    return base


@pytest.mark.parametrize(("facts", "status", "words"), [
    (_wsl(), "pass", "libcuda from /usr/lib/wsl/lib"),
    (_wsl(wsl_lib=None, mounts=[]), "fail", "no libcuda in /usr/lib/wsl/lib"),
    (_wsl(wsl_lib=["libd3d12.so"]), "fail", "no libcuda"),
    (_wsl(libcuda=[]), "warn", "not on the loader path"),
    (_wsl(libcuda=[], ld_library_path="/usr/local/cuda/lib64:/usr/lib/wsl/lib"), "pass", "WSL2"),
    (_wsl(libcuda=["/usr/lib/wsl/lib/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"]),
     "fail", "Linux NVIDIA driver"),
    (_wsl(libcuda=["/usr/local/cuda/compat/libcuda.so.1", "/usr/lib/wsl/lib/libcuda.so.1"]),
     "pass", "WSL2"),
    (_wsl(driver_packages=["libnvidia-compute-550:amd64"]), "fail", "libnvidia-compute-550"),
])
def test_wsl2_verdicts(facts: dict[str, Any], status: str, words: str) -> None:
    out = V.wsl2_verdict(facts)
    assert out.status == status and words in out.detail, out.detail


@pytest.mark.parametrize(("package", "driver"), [
    ("nvidia-driver-535", True), ("nvidia-driver-580-open", True),
    ("libnvidia-compute-550:amd64", True), ("nvidia-utils-535", True), ("cuda-drivers", True),
    ("cuda-drivers-580", True), ("nvidia-dkms-535", True),
    ("nvidia-container-toolkit", False), ("libnvidia-container1:amd64", False),
    ("cuda-toolkit-13-0", False), ("nvidia-cuda-runtime-cu12", False), ("libcudnn9-cuda-12", False),
])
def test_driver_packages_in_dpkg_formats(package: str, driver: bool) -> None:
    dpkg_l = f"ii  {package}  1.0-1  amd64  something\nrc  nvidia-driver-470  1  amd64  gone\n"
    status = (f"Package: {package}\nStatus: install ok installed\nVersion: 1\n\n"
              "Package: nvidia-driver-470\nStatus: deinstall ok config-files\n")
    assert V.driver_packages(dpkg_l, RULE["driver_packages"]) == ([package] if driver else [])
    assert V.driver_packages(status, RULE["driver_packages"]) == ([package] if driver else [])


def test_this_host_is_not_wsl2() -> None:
    facts = V.wsl2_facts(run_ldconfig=False)
    assert V.wsl2_verdict(facts).status == ("skip" if not V.is_wsl2(facts) else
                                            V.wsl2_verdict(facts).status)


@pytest.mark.parametrize("layout", ["wheel", "checkout", "none", "broken"])
def test_validate_host_finds_the_driver_list_wherever_envbuild_is(tmp_path: Path,
                                                                   layout: str) -> None:
    """`envbuild validate --host` runs the validator from envbuild's own package: installed, the
    matrix is envbuild/_data/matrix; in a checkout, matrix/ at the top. Neither there (or a
    broken file): empty lists, never an exception (the WSL2 check would fail on a clean host)."""
    from envbuild.validator.host import driver_rule_near

    validator = tmp_path / "envbuild" / "validator"
    validator.mkdir(parents=True)
    shipped = (ROOT / "matrix" / "wsl2.toml").read_text()
    where = {"wheel": tmp_path / "envbuild" / "_data" / "matrix", "checkout": tmp_path / "matrix",
             "broken": tmp_path / "matrix"}.get(layout)
    if where is not None:
        where.mkdir(parents=True)
        (where / "wsl2.toml").write_text(shipped if layout != "broken" else "[[x\n")
    rule = driver_rule_near(validator)
    if layout in ("wheel", "checkout"):
        assert rule == RULE and rule["driver_packages"] and rule["forbidden_packages"]
    else:
        assert rule == {"driver_packages": [], "forbidden_packages": []}
