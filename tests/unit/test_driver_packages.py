"""The NVIDIA Linux driver packages have one home, matrix/wsl2.toml, and every rule that looks
for them reads it: the doctor's wsl.linux_driver_installed and the validator's wsl.environment
(which gets the list inside its zipapp)."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from envbuild.matrix import load
from envbuild.validator import judges, rules

SAMPLE = [
    ("nvidia-driver-535", True), ("nvidia-driver-580-open", True), ("nvidia-headless-550", True),
    ("libnvidia-compute-550:amd64", True), ("nvidia-utils-535", True), ("cuda-drivers", True),
    ("cuda-drivers-580", True), ("nvidia-dkms-535", True), ("nvidia-kernel-common-535", True),
    ("libnvidia-gl-550", True), ("xserver-xorg-video-nvidia-535", True),
    ("nvidia-container-toolkit", False), ("libnvidia-container1:amd64", False),
    ("cuda-toolkit-13-0", False), ("nvidia-cuda-runtime-cu12", False), ("libcudnn9-cuda-12", False),
]


def _rule() -> dict[str, list[str]]:
    return rules.linux_driver_rule(load().extra["wsl2"])


def test_the_list_is_in_the_matrix_with_its_source() -> None:
    table = load().extra["wsl2"]["do_not_install_linux_driver"]
    assert table["driver_packages"] and table["forbidden_packages"] and table["source"]
    assert _rule() == {"driver_packages": table["driver_packages"],
                       "forbidden_packages": table["forbidden_packages"]}


@pytest.mark.parametrize(("package", "driver"), SAMPLE)
def test_doctor_and_validator_read_the_same_list(package: str, driver: bool) -> None:
    from envbuild.doctor import checks_host

    globs = _rule()["driver_packages"]
    assert rules.driver_package(package, globs) is driver
    assert judges.driver_packages(f"ii  {package}  1  amd64  x\n", globs) == (
        [package] if driver else [])
    assert checks_host.rules is rules  # the doctor's check goes through the same function


def test_the_rendered_validator_carries_the_list() -> None:
    from envbuild.render.context import validator_source

    with zipfile.ZipFile(io.BytesIO(validator_source(load()))) as zf:
        carried = json.loads(zf.read(f"envbuild/validator/{rules.LINUX_DRIVER_DATA}"))
    assert carried == _rule()


def test_the_wsl2_verdict_names_the_forbidden_packages() -> None:
    facts = {"dxg": True, "wsl_lib": ["libcuda.so.1"], "kernel": "microsoft", "mounts": [],
             "libcuda": [], "driver_packages": ["nvidia-driver-535"], "ld_library_path": ""}
    out = judges.wsl2_verdict(facts, _rule()["forbidden_packages"])
    assert out.status == "fail"
    assert all(p in out.remediation for p in _rule()["forbidden_packages"])
