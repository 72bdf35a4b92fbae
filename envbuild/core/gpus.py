"""GPU lookup by name: one normalisation of product names (what `--gpu` accepts, what nvidia-smi
prints), the index of gpus.toml by it, and an NVIDIA product's compute capability. Pure."""

from __future__ import annotations

import re

from envbuild.common.lazyre import lazy
from envbuild.matrix import Gpu, Matrix

# Brand words a product name may carry or drop: 'NVIDIA GeForce RTX 4090' is 'RTX 4090',
# 'Tesla V100-SXM2-16GB' is 'V100-SXM2-16GB', 'AMD Instinct MI300X' is 'MI300X'.
_BRANDS = lazy(r"\b(?:nvidia|geforce|tesla|amd|radeon|instinct)\b")


def name_key(name: str) -> str:
    """A GPU name reduced to what tells GPUs apart (the one normalisation of GPU names):
    casefolded, hyphens and underscores read as spaces, brand words dropped, spaces collapsed.
    'NVIDIA A100-SXM4-80GB', 'a100 sxm4 80gb' and 'A100_SXM4_80GB' are one key."""
    words = _BRANDS.sub(" ", re.sub(r"[\s_-]+", " ", name.casefold()))
    return re.sub(r"\s+", " ", words).strip()


def gpu_index(matrix: Matrix) -> dict[str, Gpu]:
    """gpus.toml by every spelling `--gpu` accepts: each name and alias as written (casefolded)
    and as name_key reduces it; the first GPU listed keeps a spelling two share."""
    out: dict[str, Gpu] = {}
    for g in matrix.gpus:
        for n in (g.name, *g.aliases):
            out.setdefault(n.casefold(), g)
            out.setdefault(name_key(n), g)
    return out


def lookup(m: Matrix, product: str, vendor: str) -> Gpu | None:
    """The gpus.toml row of a product name (exact, else the longest known name found as whole
    words inside it: 'NVIDIA A100-SXM4-64GB' is an A100)."""
    target = name_key(product)
    best, best_len = None, 0
    for g in m.gpus:
        if g.vendor != vendor:
            continue
        for n in (g.name, *g.aliases):
            k = name_key(n)
            if not k:
                continue
            if k == target:
                return g
            if re.search(rf"(?<!\w){re.escape(k)}(?!\w)", target) and len(k) > best_len:
                best, best_len = g, len(k)
    return best


def gpu_cc(m: Matrix, product: str) -> str:
    """Compute capability of an NVIDIA product name via gpus.toml ('' when unknown)."""
    g = lookup(m, product, "nvidia")
    return g.cc if g is not None else ""


def gpu_gfx(m: Matrix, product: str) -> str:
    """The gfx target of an AMD product name via gpus.toml ('' when unknown)."""
    g = lookup(m, product, "amd")
    return g.gfx if g is not None and g.gfx else ""
