"""Proxies for the build: from --proxy or the environment, both spellings, validated, redacted,
and on the docker command line as names only (the values travel in the client's environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import run_cli


@pytest.mark.parametrize("cmd", ["make", "build"])
def test_cli_bad_proxy_exit_2_secret_not_echoed(cmd: str, tmp_path: Path) -> None:
    args = ["make", "--target", "cpu"] if cmd == "make" else ["build", str(tmp_path)]
    r = run_cli(*args, "--proxy", "http://alice:S3CRET@proxy:3128 ")
    assert r.returncode == 2 and r.stderr.startswith("error: "), r.stderr
    assert "S3CRET" not in r.stderr + r.stdout and "Traceback" not in r.stderr
    r = run_cli(*args, env={"HTTPS_PROXY": "http://alice:S3CRET@proxy:3128\n"})
    assert r.returncode == 2 and "S3CRET" not in r.stderr + r.stdout, r.stderr
