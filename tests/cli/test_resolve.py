"""The resolver on the shipped matrix: table-driven specs, errors, and properties."""

from __future__ import annotations

import json

import pytest

from envbuild.matrix import Matrix
from tests.support import run_cli


def test_cli_json_error_shape() -> None:
    r = run_cli("resolve", "--torch", "2.8", "--cuda", "11.8", "--json")
    assert r.returncode == 1
    data = json.loads(r.stdout)
    assert set(data) == {"error"}
    assert data["error"]["message"].startswith("torch 2.8 has no CUDA 11.x wheel")
    assert data["error"]["alternatives"]
    assert "Traceback" not in r.stderr


def test_cli_malformed_exit_2_no_traceback() -> None:
    r = run_cli("resolve", "--cuda", "12.2.2.2.2")
    assert r.returncode == 2
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    r = run_cli("resolve", "--bogus-option")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_cli_resolve_json(matrix: Matrix) -> None:
    r = run_cli("resolve", "--cuda", "12.2", "--json")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)
    for key in ("target", "torch", "torchvision", "torchaudio", "python", "variant", "torch_cuda",
                "cuda_image", "cudnn", "nccl", "base_image", "index_url", "min_driver", "archs",
                "trace"):
        assert key in spec
    assert spec["archs"][:2] == ["sm_50", "sm_60"]


@pytest.mark.parametrize("driver", ["５３５.１０４.０５", "٥٣٥.١٠٤.٠٥", "５３５"])
def test_cli_full_width_driver_exit_2(driver: str) -> None:
    r = run_cli("resolve", "--driver", driver)
    assert r.returncode == 2, r.stdout
    assert r.stderr.startswith("error: ") and "hint: " in r.stderr and "ASCII" in r.stderr
    assert "Traceback" not in r.stderr
