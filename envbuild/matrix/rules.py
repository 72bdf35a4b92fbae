"""Semantic rules over the matrix: facts that follow from how these products are made.

`matrix.crosscheck` proves the rows are well formed and reference each other; these rules catch
rows that are well formed but wrong (a driver floor below the previous major's GA drivers, an arch
in a wheel built by a toolkit that cannot compile it, a Python a release drops and the next one
brings back). Each rule is a pure function Matrix -> problems naming the row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from typing import Any

from envbuild.common.versions import major_of, version_key
from envbuild.matrix.model import TABLES, Matrix, Problem, where


def _row(table: str, **key: str) -> str:
    return f"[[{table}]] (" + ", ".join(f"{k}={v!r}" for k, v in key.items()) + ")"


def mvc_floors(m: Matrix) -> list[Problem]:
    """A major's floor is above every GA driver of the previous major, and no release of the major
    ships a GA driver below its own floor."""
    out: list[Problem] = []
    for c in m.cuda_compat:
        label = _row("compat", major=str(c.major))
        floor = version_key(c.min_driver_linux)
        previous = [r for r in m.cuda if major_of(r.version) == c.major - 1]
        for r in previous:
            if r.ga_driver_linux and version_key(r.ga_driver_linux) >= floor:
                out.append(Problem("cuda.toml", label,
                                   f"min_driver_linux {c.min_driver_linux} is not above the GA "
                                   f"driver {r.ga_driver_linux} of CUDA {r.version}"))
        for r in m.cuda:
            if major_of(r.version) == c.major and r.ga_driver_linux \
                    and version_key(r.ga_driver_linux) < floor:
                out.append(Problem("cuda.toml", where("release", r),
                                   f"ga_driver_linux {r.ga_driver_linux} is below the CUDA "
                                   f"{c.major} floor {c.min_driver_linux}"))
    return out


def driver_order(m: Matrix) -> list[Problem]:
    """GA drivers never go down as CUDA goes up; a release's recommended driver is >= its GA."""
    out: list[Problem] = []
    previous: Any = None
    for r in m.cuda:
        label = where("release", r)
        if not r.ga_driver_linux:
            continue
        if previous is not None and version_key(r.ga_driver_linux) < version_key(
                previous.ga_driver_linux):
            out.append(Problem("cuda.toml", label,
                               f"ga_driver_linux {r.ga_driver_linux} is older than CUDA "
                               f"{previous.version}'s {previous.ga_driver_linux}"))
        if r.driver_linux and version_key(r.driver_linux) < version_key(r.ga_driver_linux):
            out.append(Problem("cuda.toml", label,
                               f"driver_linux {r.driver_linux} is older than its GA driver "
                               f"{r.ga_driver_linux}"))
        previous = r
    return out


def variant_archs(m: Matrix) -> list[Problem]:
    """A CUDA X.Y wheel holds only archs that toolkit X.Y can compile (min_cuda <= X.Y <= last)."""
    out: list[Problem] = []
    for v in m.variants:
        if v.kind != "cuda" or not v.version:
            continue
        have = version_key(v.version)
        for kind, ccs in (("sass", v.sass), ("ptx", v.ptx)):
            for cc in ccs:
                a = m.arch(cc)
                if a is None:
                    continue  # cross_check reports unknown archs
                if version_key(a.min_cuda) > have:
                    out.append(Problem("torch.toml", where("variant", v),
                                       f"{kind} {cc} needs CUDA >= {a.min_cuda}, the wheel is "
                                       f"CUDA {v.version}"))
                elif a.last_cuda and version_key(a.last_cuda) < have:
                    out.append(Problem("torch.toml", where("variant", v),
                                       f"{kind} {cc} was dropped after CUDA {a.last_cuda}, the "
                                       f"wheel is CUDA {v.version}"))
    for a in m.archs:
        if a.last_cuda and version_key(a.last_cuda) < version_key(a.min_cuda):
            out.append(Problem("gpus.toml", _row("arch", cc=a.cc),
                               f"last_cuda {a.last_cuda} is before min_cuda {a.min_cuda}"))
    return out


def known_gfx(m: Matrix) -> set[str]:
    extra = m.meta.get("gpus", {}).get("extra_gfx", [])
    return {g.gfx for g in m.gpus if g.gfx} | {str(x) for x in extra}


def gfx_targets(m: Matrix) -> list[Problem]:
    known = known_gfx(m)
    out: list[Problem] = []
    for v in m.variants:
        for gfx in v.gfx:
            if gfx not in known:
                out.append(Problem("torch.toml", where("variant", v),
                                   f"gfx target {gfx!r} is not a known gfx (gpus.toml [[gpu]] "
                                   "gfx or [meta] extra_gfx)"))
    for r in m.rocm:
        for gfx in r.gfx:
            if gfx not in known:
                out.append(Problem("rocm.toml", where("release", r),
                                   f"gfx target {gfx!r} is not a known gfx"))
    return out


def _gaps(present: Sequence[bool]) -> bool:
    """True when the True entries are not one contiguous run."""
    idx = [i for i, p in enumerate(present) if p]
    return bool(idx) and idx[-1] - idx[0] + 1 != len(idx)


def torch_python(m: Matrix) -> list[Problem]:
    """A release's Pythons are consecutive minors; no Python is dropped and then brought back."""
    out: list[Problem] = []
    for t in m.torch:
        minors = sorted(version_key(p) for p in t.python)
        for a, b in pairwise(minors):
            if a[0] != b[0] or b[1] != a[1] + 1:
                out.append(Problem("torch.toml", where("release", t),
                                   f"Python range has a gap between {a[0]}.{a[1]} and "
                                   f"{b[0]}.{b[1]}"))
    pythons = sorted({p for t in m.torch for p in t.python}, key=version_key)
    for py in pythons:
        present = [py in t.python for t in m.torch]
        if _gaps(present):
            back = _return_after_gap(present)
            out.append(Problem("torch.toml", where("release", m.torch[back]),
                               f"Python {py} comes back after an earlier release dropped it"))
    return out


def _return_after_gap(present: Sequence[bool]) -> int:
    seen_gap = False
    started = False
    for i, p in enumerate(present):
        if p and started and seen_gap:
            return i
        if p:
            started = True
        elif started:
            seen_gap = True
    return len(present) - 1


def variant_tags(m: Matrix) -> list[Problem]:
    """A variant tag a release dropped does not come back later."""
    out: list[Problem] = []
    tags = sorted({v.tag for v in m.variants})
    for tag in tags:
        present = [any(v.tag == tag for v in m.variants_of(t.version)) for t in m.torch]
        if _gaps(present):
            back = m.torch[_return_after_gap(present)].version
            out.append(Problem("torch.toml", _row("variant", release=back, tag=tag),
                               f"variant {tag} comes back after an earlier release dropped it"))
    return out


def torch_order(m: Matrix) -> list[Problem]:
    """Release dates and companion versions grow with torch."""
    out: list[Problem] = []
    for a, b in pairwise(m.torch):
        if b.released < a.released:
            out.append(Problem("torch.toml", where("release", b),
                               f"released {b.released} is before {a.version}'s {a.released}"))
    for pa, pb in pairwise(m.patches):
        if version_key(pb.torchvision) < version_key(pa.torchvision):
            out.append(Problem("torch.toml", where("patch", pb),
                               f"torchvision {pb.torchvision} is older than torch {pa.torch}'s "
                               f"{pa.torchvision}"))
    return out


def images(m: Matrix) -> list[Problem]:
    """Flavors from the known set; an image's OS is one NVIDIA shipped for that CUDA line."""
    meta = m.meta.get("cuda", {})
    flavors = set(meta.get("image_flavors", []))
    lines: dict[str, Any] = dict(meta.get("os_lines", {}))
    out: list[Problem] = []
    for i in m.images:
        label = where("image", i)
        for f in i.flavors:
            if flavors and f not in flavors:
                out.append(Problem("cuda.toml", label, f"flavor {f!r} is not one NVIDIA publishes "
                                   f"({', '.join(sorted(flavors))})"))
        line = lines.get(i.os)
        if line is None:
            out.append(Problem("cuda.toml", label,
                               f"NVIDIA ships no nvidia/cuda images for {i.os} ([meta.os_lines])"))
            continue
        first, last = str(line[0]), str(line[1])
        have = version_key(i.cuda)
        if have < version_key(first) or (last and have > version_key(last)):
            out.append(Problem("cuda.toml", label,
                               f"NVIDIA shipped {i.os} images for CUDA {first} to "
                               f"{last or 'now'}, not {i.cuda}"))
    return out


RULES: tuple[Callable[[Matrix], list[Problem]], ...] = (
    mvc_floors, driver_order, variant_archs, gfx_targets, torch_python, variant_tags,
    torch_order, images,
)


def semantic_check(m: Matrix) -> list[Problem]:
    out: list[Problem] = []
    for rule in RULES:
        out += rule(m)
    return out


def unverified(m: Matrix) -> list[tuple[str, str, tuple[str, ...]]]:
    """(file, row, sources) for every row not verified against a primary source."""
    rows: list[tuple[str, str, tuple[str, ...]]] = []
    for stem, table, _cls, attr in TABLES:
        for row in getattr(m, attr):
            if not row.verified:
                rows.append((f"{stem}.toml", where(table, row), tuple(row.source)))
    return rows
