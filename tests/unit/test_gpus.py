"""One normalisation of GPU names (envbuild.core.gpus.name_key): `--gpu` and the doctor's
nvidia-smi lookup accept every spelling either accepted when each had its own."""

from __future__ import annotations

import pytest

from envbuild.core import gpus
from envbuild.core.request import parse_gpu
from envbuild.matrix import Matrix

# What `--gpu` accepted (a leading brand word dropped, then spaces, hyphens and underscores as
# one space) and what the doctor accepted (the words 'nvidia ', 'geforce ', 'amd ' anywhere,
# whitespace collapsed), each as (spelling, the GPU it names).
REQUEST_SPELLINGS = [
    ("H100", "H100"), ("h100", "H100"), ("NVIDIA H100", "H100"), ("nvidia h100 pcie", "H100"),
    ("GeForce RTX 4090", "RTX 4090"), ("NVIDIA GeForce RTX 4090", "RTX 4090"),
    ("rtx_4090", "RTX 4090"), ("rtx-4090", "RTX 4090"), ("Tesla T4", "T4"), ("tesla v100", "V100"),
    ("A100-SXM4-80GB", "A100"), ("a100 sxm4 80gb", "A100"), ("A100_SXM4_80GB", "A100"),
    ("AMD Instinct MI300X", "MI300X"), ("instinct mi300x", "MI300X"), ("amd mi300x", "MI300X"),
]
DOCTOR_SPELLINGS = [
    ("NVIDIA H100 80GB HBM3", "9.0"), ("NVIDIA GeForce GTX 1080 Ti", "6.1"),
    ("NVIDIA A100-SXM4-80GB", "8.0"), ("Tesla V100-SXM2-16GB", "7.0"),
    ("NVIDIA  GeForce   RTX 4090", "8.9"), ("nvidia geforce rtx 4090 laptop gpu", "8.9"),
    ("NVIDIA H100 PCIe", "9.0"), ("NVIDIA L40S", "8.9"), ("NVIDIA A10G", "8.6"),
]


@pytest.mark.parametrize(("spelling", "name"), REQUEST_SPELLINGS)
def test_gpu_flag_spellings(matrix: Matrix, spelling: str, name: str) -> None:
    if not any(g.name == name for g in matrix.gpus):
        pytest.skip(f"{name} is not in gpus.toml")
    assert parse_gpu(spelling, matrix).label == name


@pytest.mark.parametrize(("product", "cc"), DOCTOR_SPELLINGS)
def test_nvidia_smi_names(matrix: Matrix, product: str, cc: str) -> None:
    assert gpus.gpu_cc(matrix, product) == cc


def test_every_name_and_alias_is_its_own_key(matrix: Matrix) -> None:
    index = gpus.gpu_index(matrix)
    for g in matrix.gpus:
        for n in (g.name, *g.aliases):
            for spelling in (n, n.upper(), f"NVIDIA {n}", n.replace(" ", "_"),
                             n.replace("-", " ")):
                found = index.get(spelling.casefold()) or index.get(gpus.name_key(spelling))
                assert found is not None and found.cc == g.cc and found.gfx == g.gfx, spelling
            if g.vendor == "nvidia":
                assert gpus.gpu_cc(matrix, n) == g.cc, n


@pytest.mark.parametrize(("name", "key"), [
    ("NVIDIA GeForce RTX 4090", "rtx 4090"), ("Tesla V100-SXM2-16GB", "v100 sxm2 16gb"),
    ("  AMD  Radeon  RX 7900 XTX ", "rx 7900 xtx"), ("a100_sxm4-80gb", "a100 sxm4 80gb"),
    ("AMD Instinct MI300X", "mi300x"), ("RTX 6000 Ada Generation", "rtx 6000 ada generation"),
])
def test_name_key(name: str, key: str) -> None:
    assert gpus.name_key(name) == key
