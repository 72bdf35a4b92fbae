"""An inspected --base-image (pure): the probe's output parsed, the OS matched against
os.toml's os_release, and the resolver rendering for the real base (the engine side runs in
tests/integration/test_cuda_image.py and test_bases.py)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "/proc/self/mem", "/nonexistent",
                                     "/"])
def test_probe_output_is_bounded_for_special_os_release_files(special: str) -> None:
    """The probe run by sh with os-release pointing at special files: it ends, under the cap."""
    import subprocess

    from envbuild.core.base_facts import PROBE_MAX, probe_script

    p = subprocess.run(["sh", "-c", probe_script(special, special)], capture_output=True,
                       timeout=30)
    assert len(p.stdout) <= PROBE_MAX
    assert b"@@bash=" in p.stdout
