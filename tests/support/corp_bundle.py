"""Helpers shared by the corp_bundle tests and others (moved out of test_corp_bundle.py)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.support import IN_CI


def _unshare() -> list[str]:
    exe = shutil.which("unshare")
    if exe is None or subprocess.run([exe, "-n", "true"], capture_output=True).returncode:
        msg = "unshare -n is not available (util-linux, root)"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)
    return [exe, "-n"]

