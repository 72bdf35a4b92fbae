"""The GPU <-> driver edge: every architecture's driver window, at its boundaries."""

from __future__ import annotations

import pytest

from tests.support import run_cli


@pytest.mark.parametrize(("gpu", "driver", "says"), [
    ("RTX 5090", "560.35.03", "older than the branches from R570"),
    ("GTX 1080", "590.44.01", "to R580 that drive Pascal GPUs"),
    ("Tesla K80", "535.104.05", "newer than the branches up to R470"),
    ("H100", "515.48.07", "older than the branches from R520"),
])
def test_driver_outside_the_window_is_an_impossible_host(gpu: str, driver: str, says: str) -> None:
    r = run_cli("resolve", "--gpu", gpu, "--driver", driver)
    assert r.returncode == 1, r.stdout + r.stderr
    assert says in r.stderr and "Traceback" not in r.stderr
