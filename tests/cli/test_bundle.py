"""Pure parts of air-gapped bundles: the Dockerfile cut, the offline pip installs, the
collection plan for --pip packages, the hashed requirements, the checks of a bundle directory
(the real collection and offline build are tests/integration/test_corp_bundle.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envbuild.features.bundle import (
    proxy_env_file,
)
from tests.support import run_cli


@pytest.mark.parametrize("value", ["http://u:p$(touch /tmp/pwned)@proxy:3128",
                                   "http://proxy:3128/;rm", "socks5h://a:b%40c@p:1080",
                                   "http://u:p&&x@p:1"])
def test_proxy_env_file_is_sourced_verbatim(tmp_path: Path, value: str) -> None:
    f = tmp_path / "proxy.env"
    f.write_text(proxy_env_file({"https_proxy": value, "HTTPS_PROXY": value}))
    out = subprocess.run(["sh", "-c", '. "$0"; printf %s "$https_proxy"', str(f)],
                         capture_output=True, text=True, check=True).stdout
    assert out == value and not Path("/tmp/pwned").exists()


# --- the bundle command refuses bad input before any engine work -------------------------------

def test_bundle_takes_no_conda(tmp_path: Path) -> None:
    r = run_cli("bundle", "--target", "cpu", "--conda", "ffmpeg", "--out", str(tmp_path / "b"))
    assert r.returncode == 2 and "--conda" in r.stderr, r.stderr
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("args", [["--pip", "numpy; rm -rf /"], ["--pip", "x @ https://e.com/x.whl"],
                                  ["--pip", "ok", "--pip-index-url", "ftp://x/simple"],
                                  ["--pip", "ok", "--pip-extra-index-url", "not a url"]])
def test_bad_pip_input_refused_before_any_build(tmp_path: Path, args: list[str]) -> None:
    wh = tmp_path / "wh"
    wh.mkdir()
    (wh / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"w")
    r = run_cli("bundle", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11",
                "--os", "debian12", "--wheelhouse", str(wh), *args, "--out",
                str(tmp_path / "b"), env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert not (tmp_path / "b").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["wh"]


def test_bundle_without_a_wheelhouse_and_no_engine_is_exit_3(tmp_path: Path) -> None:
    """No --wheelhouse is no longer refused; with no engine it is exit 3, nothing written."""
    r = run_cli("bundle", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11",
                "--os", "debian12", "--out", str(tmp_path / "b"),
                env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [["--torch-index-kind", "conda"],
                                  ["--torch-index-url", "ftp://x/whl/cpu"],
                                  ["--torch-index-url", "http://x/simple", "--torch-index-kind",
                                   "pypi"]])
def test_bad_torch_index_input_refused_before_any_build(tmp_path: Path, args: list[str]) -> None:
    r = run_cli("bundle", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11",
                "--os", "debian12", *args, "--out", str(tmp_path / "b"),
                env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert r.returncode in (1, 2), r.stderr  # malformed: 2; a cpu build PyPI lacks: 1
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []
