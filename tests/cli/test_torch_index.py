"""A PyPI-like torch index: the PyPI default variant pinned without its local tag, any other
variant refused before a build; the URL-shape guess and its --torch-index-kind override."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import run_cli


@pytest.mark.parametrize("args", [
    ["--target", "cpu", "--torch", "2.13"],
    ["--target", "cuda", "--cuda", "12.6", "--torch", "2.13"],
    ["--target", "rocm", "--torch", "2.13"],
])
@pytest.mark.parametrize("cmd", ["render", "make"])
def test_cli_refuses_before_anything(tmp_path: Path, args: list[str], cmd: str) -> None:
    out = tmp_path / "ctx"
    r = run_cli(cmd, *args, "--torch-index-url", "https://u:SECRET@pypi.example.com/simple",
                "--out", str(out))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("error: ") and "hint: " in r.stderr
    assert "Traceback" not in r.stderr and "SECRET" not in r.stderr + r.stdout
    assert not out.exists()
    # the same request with the PyTorch layout declared is accepted (render only: no build)
    if cmd == "render":
        r = run_cli(cmd, *args, "--torch-index-url", "https://pypi.example.com/simple",
                    "--torch-index-kind", "pytorch", "--out", str(out))
        assert r.returncode == 0, r.stderr
        assert "+" in (out / "requirements.txt").read_text().split("\n", 2)[2]


@pytest.mark.parametrize("bad", ["PyPI", "conda", "", "pytorch;rm"])
def test_cli_unknown_kind_exit_2(tmp_path: Path, bad: str) -> None:
    r = run_cli("render", "--target", "cpu", "--torch-index-kind", bad, "--out",
                str(tmp_path / "x"))
    assert r.returncode == 2 and r.stderr.startswith("error: "), r.stderr
    assert not (tmp_path / "x").exists()
