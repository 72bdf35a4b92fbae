"""Helpers shared by the matrix_rules tests and others (moved out of test_matrix_rules.py)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from tests.support import ROOT

# (id, file, regex matching exactly once, replacement, fragment the problem text must contain)
MUTATIONS: list[tuple[str, str, str, str, str]] = [
    ("floor-below-previous-major-ga", "cuda.toml",
     r'(major = 12\nmin_driver_linux = )"525\.60\.13"', r'\1"515.00.00"',
     "[[compat]] (major='12'): min_driver_linux 515.00.00 is not above the GA driver"),
    ("floor-above-own-ga", "cuda.toml",
     r'(major = 13\nmin_driver_linux = )"580\.65\.06"', r'\1"581.00.00"',
     "[[release]] (version='13.0'): ga_driver_linux 580.65.06 is below the CUDA 13 floor"),
    ("ga-driver-below-floor", "cuda.toml",
     r'(version = "12\.4"\nlatest = "12\.4\.1"\nga_driver_linux = )"550\.54\.14"', r'\1"455.23.05"',
     "[[release]] (version='12.4'): ga_driver_linux 455.23.05 is below the CUDA 12 floor"),
    ("ga-driver-out-of-order", "cuda.toml",
     r'(version = "12\.4"\nlatest = "12\.4\.1"\nga_driver_linux = )"550\.54\.14"', r'\1"560.00.01"',
     "[[release]] (version='12.5'): ga_driver_linux 555.42.02 is older than CUDA 12.4's"),
    ("driver-below-ga", "cuda.toml",
     r'(ga_driver_windows = "551\.61"\ndriver_linux = )"550\.54\.15"', r'\1"550.00.01"',
     "[[release]] (version='12.4'): driver_linux 550.00.01 is older than its GA driver"),
    ("arch-newer-than-toolkit", "torch.toml",
     r'(release = "2\.11"\ntag = "cu126"\nkind = "cuda"\nversion = "12\.6"\ncudnn = "[^"]*"\n'
     r'nccl = "[^"]*"\nsass = \[)"5\.0"', r'\1"10.0"',
     "[[variant]] (release='2.11', tag='cu126'): sass 10.0 needs CUDA >= 12.8"),
    ("arch-dropped-by-toolkit", "torch.toml",
     r'(release = "2\.11"\ntag = "cu130"\nkind = "cuda"\nversion = "13\.0"\ncudnn = "[^"]*"\n'
     r'nccl = "[^"]*"\nsass = \[)"7\.5"', r'\1"6.0", "7.5"',
     "[[variant]] (release='2.11', tag='cu130'): sass 6.0 was dropped after CUDA 12.9"),
    ("arch-min-cuda-raised", "gpus.toml",
     r'(cc = "9\.0"\nname = "Hopper"\nmin_cuda = )"11\.8"', r'\1"13.0"',
     "sass 9.0 needs CUDA >= 13.0"),
    ("arch-last-before-first", "gpus.toml",
     r'(cc = "3\.5"\nname = "Kepler"\nmin_cuda = "5\.0"\nlast_cuda = )"11\.8"', r'\1"4.0"',
     "[[arch]] (cc='3.5'): last_cuda 4.0 is before min_cuda 5.0"),
    ("unknown-gfx-in-variant", "torch.toml",
     r'(tag = "rocm6\.3"\nkind = "rocm"\nversion = "6\.3"\n(?:[a-z]+ = [^\n]*\n)*?gfx = \[)',
     r'\1"gfx9999", ', "gfx target 'gfx9999' is not a known gfx"),
    ("unknown-gfx-in-rocm", "rocm.toml", r'"gfx942"', '"gfx943"',
     "gfx target 'gfx943' is not a known gfx"),
    ("python-gap", "torch.toml",
     r'(version = "2\.5"\nreleased = "2024-10"\npython = \[)"3\.9", "3\.10", ', r'\1"3.9", ',
     "[[release]] (version='2.5'): Python range has a gap between 3.9 and 3.11"),
    ("python-dropped-then-back", "torch.toml",
     r'(version = "2\.5"\nreleased = "2024-10"\npython = \[)"3\.9", ', r'\1',
     "[[release]] (version='2.6'): Python 3.9 comes back after an earlier release dropped it"),
    ("variant-tag-back", "torch.toml",
     r'(release = "2\.9"\ntag = )"cu126"(\nkind = "cuda"\nversion = )"12\.6"', r'\1"cu118"\2"11.8"',
     "comes back after an earlier release dropped it"),
    ("default-variant-not-a-variant", "torch.toml",
     r'(version = "2\.5"\nreleased = "2024-10"\npython = \[[^\]]*\]\ndefault_variant = )"cu124"',
     r'\1"cu126"', "default_variant 'cu126' is not one of its variants"),
    ("unknown-image-flavor", "cuda.toml",
     r'(cuda = "11\.8\.0"\nos = "rockylinux8"\nflavors = \["base", )', r'\1"cudnn7-runtime", ',
     "flavor 'cudnn7-runtime' is not one NVIDIA publishes"),
    ("image-os-not-shipped-for-line", "cuda.toml",
     r'(cuda = "11\.7\.1"\nos = )"ubuntu22\.04"', r'\1"ubuntu24.04"',
     "NVIDIA shipped ubuntu24.04 images for CUDA 12.5.1 to now, not 11.7.1"),
    ("latest-not-an-update", "cuda.toml",
     r'(version = "12\.4"\nlatest = )"12\.4\.1"', r'\1"12.5.1"',
     "latest '12.5.1' is not a 12.4 update"),
    ("release-date-order", "torch.toml",
     r'(version = "2\.5"\nreleased = )"2024-10"', r'\1"2023-01"',
     "[[release]] (version='2.5'): released 2023-01 is before 2.4's"),
    ("companion-order", "torch.toml",
     r'(torch = "2\.6\.0"\ntorchvision = )"0\.21\.0"', r'\1"0.12.0"',
     "[[patch]] (torch='2.6.0'): torchvision 0.12.0 is older than torch"),
]


def _mutated(tmp_path: Path, file: str, pattern: str, repl: str) -> Path:
    d = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", d)
    text = (d / file).read_text()
    new, n = re.subn(pattern, repl, text, count=1)
    assert n == 1 and new != text, f"mutation did not apply to {file}: {pattern}"
    (d / file).write_text(new)
    return d

