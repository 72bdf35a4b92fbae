"""The matrix's integrity: rows well formed, sorted and unique, every reference between rows and
files resolved; then the semantic rules (`matrix.rules`). Each part is a pure function
Matrix -> problems naming the row; `cross_check` runs them in the order they report.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from envbuild.common.echo import shown
from envbuild.common.versions import major_of, minor_of, parse_version, version_key
from envbuild.matrix.model import (
    DEVICE_MEMORY_BASES,
    TABLES,
    Gpu,
    Matrix,
    Problem,
    Variant,
    WheelPlatform,
    where,
)
from envbuild.matrix.rules import semantic_check
from envbuild.validator.rules import cuda_tag

WHERE = ("pypi", "index", "both")
# A driver-reported total (memory_mib) against the marketing GB: seen 1.006 (T4, ECC on) to 1.073
# (RTX 4090); outside this band the figure is for another model or mistyped.
MIB_PER_GB = (0.95, 1.15)  # [[platform]] where: PyPI, index_base/<tag>, or both


def _sources(m: Matrix) -> list[Problem]:
    """Every row cites at least one source, each defined in sources.toml."""
    p: list[Problem] = []
    for stem, table, _cls, attr in TABLES:
        for row in getattr(m, attr):
            for sid in row.source:
                if sid not in m.sources:
                    p.append(Problem(f"{stem}.toml", where(table, row),
                                     f"source {sid!r} is not defined in sources.toml"))
            if not row.source:
                p.append(Problem(f"{stem}.toml", where(table, row), "no source given"))
    return p


def _sorted_unique(rows: Iterable[Any], key: Callable[[Any], Any], file: str,
                   table: str) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[Any] = set()
    previous: Any = None
    for row in rows:
        k = key(row)
        if k in seen:
            problems.append(Problem(file, where(table, row), "duplicate row"))
        elif previous is not None and k < previous:
            problems.append(Problem(file, where(table, row),
                                    "out of order (rows are sorted oldest first)"))
        seen.add(k)
        previous = k
    return problems


def _order(m: Matrix) -> list[Problem]:
    """Each table is sorted oldest first, without duplicate rows."""
    def vk(attr: str) -> Callable[[Any], Any]:
        return lambda r: version_key(getattr(r, attr))

    return (_sorted_unique(m.cuda_compat, lambda r: r.major, "cuda.toml", "compat")
            + _sorted_unique(m.cuda, vk("version"), "cuda.toml", "release")
            + _sorted_unique(m.images, lambda r: (version_key(r.cuda), r.os), "cuda.toml",
                             "image")
            + _sorted_unique(m.compat_packages, lambda r: (version_key(r.cuda), r.arch),
                             "cuda.toml", "compat_package")
            + _sorted_unique(m.torch, vk("version"), "torch.toml", "release")
            + _sorted_unique(m.patches, vk("torch"), "torch.toml", "patch")
            + _sorted_unique(m.variants, lambda r: (version_key(r.release), r.kind, r.tag),
                             "torch.toml", "variant")
            + _sorted_unique(m.archs, vk("cc"), "gpus.toml", "arch")
            + _sorted_unique(m.rocm, vk("version"), "rocm.toml", "release"))


def _gpu_names(m: Matrix) -> list[Problem]:
    """A GPU name or alias (any case) names one GPU."""
    p: list[Problem] = []
    names: dict[str, str] = {}
    for g in m.gpus:
        for n in (g.name, *g.aliases):
            k = n.casefold()
            if k in names:
                p.append(Problem("gpus.toml", where("gpu", g),
                                 f"name {n!r} also used by {names[k]!r}"))
            names[k] = g.name
    return p


def _not_versions(values: Iterable[tuple[str, str]]) -> list[str]:
    return [f"{name}: {shown(value)} is not a version" for name, value in values
            if value and parse_version(value) is None]


def _each_row(rows: Iterable[Any], file: str, table: str,
              messages: Callable[[Any], Iterable[str]]) -> list[Problem]:
    """A Problem naming the row for every message `messages` gives about it, rows in order."""
    return [Problem(file, where(table, row), msg) for row in rows for msg in messages(row)]


def _cuda_releases(m: Matrix) -> list[Problem]:
    def messages(r: Any) -> Iterator[str]:
        yield from _not_versions([("version", r.version), ("latest", r.latest),
                                  ("ga_driver_linux", r.ga_driver_linux)])
        if r.latest and not r.latest.startswith(r.version + "."):
            yield f"latest {r.latest!r} is not a {r.version} update"
        if m.compat_floor(major_of(r.version)) is None:
            yield "no [[compat]] floor for this CUDA major"
        if r.image and not m.images_for(r.image):
            yield f"image {r.image!r} has no [[image]] rows"

    return _each_row(m.cuda, "cuda.toml", "release", messages)


def _cuda_images(m: Matrix) -> list[Problem]:
    def messages(i: Any) -> Iterator[str]:
        if m.cuda_release(minor_of(i.cuda)) is None:
            yield f"CUDA {i.cuda} is not a known [[release]]"
        if m.os_info(i.os) is None:
            yield f"os {i.os!r} is not defined in os.toml"
        if not i.flavors:
            yield "no flavors"
        arches = {p.rsplit("/", 1)[-1] for p in m.platform_names}
        yield from (f"platform {a!r} is not one of {', '.join(sorted(arches))} (torch.toml "
                    "[meta] platforms)" for a in i.platforms if a not in arches)
        yield from (f"amd64_only {f!r} is not one of its flavors" for f in i.amd64_only
                    if f not in i.flavors)

    return _each_row(m.images, "cuda.toml", "image", messages)


def _torch_releases(m: Matrix) -> list[Problem]:
    def messages(t: Any) -> Iterator[str]:
        tags = {v.tag for v in m.variants_of(t.version)}
        if t.default_variant not in tags:
            yield f"default_variant {t.default_variant!r} is not one of its variants"
        if not m.patches_of(t.version):
            yield "no [[patch]] rows for this release"
        if "cpu" not in tags:
            yield "no cpu variant"
        if not t.python:
            yield "no Python versions"

    return _each_row(m.torch, "torch.toml", "release", messages)


def _torch_patches(m: Matrix) -> list[Problem]:
    def messages(pt: Any) -> Iterator[str]:
        if m.torch_release(pt.release) is None:
            yield f"torch {pt.release} is not a [[release]]"
        yield from _not_versions([("torch", pt.torch), ("torchvision", pt.torchvision),
                                  ("torchaudio", pt.torchaudio)])

    return _each_row(m.patches, "torch.toml", "patch", messages)


def _cuda_variant(m: Matrix, v: Variant) -> list[str]:
    out = []
    if m.cuda_release(v.version) is None:
        out.append(f"CUDA {v.version!r} is not a [[release]] in cuda.toml")
    if v.tag != cuda_tag(v.version):
        out.append(f"tag {v.tag!r} does not match CUDA {v.version}")
    if not v.sass:
        out.append("a CUDA variant needs its sass arch list")
    out += [f"arch {cc!r} is not in gpus.toml" for cc in (*v.sass, *v.ptx) if m.arch(cc) is None]
    return out


def _rocm_variant(m: Matrix, v: Variant) -> list[str]:
    out = []
    if m.rocm_release(v.version) is None:
        out.append(f"ROCm {v.version!r} is not a [[release]] in rocm.toml")
    if v.tag != "rocm" + v.version:
        out.append(f"tag {v.tag!r} does not match ROCm {v.version}")
    return out


def _variant_kind(m: Matrix, v: Variant) -> list[str]:
    if v.kind == "cuda":
        return _cuda_variant(m, v)
    if v.kind == "rocm":
        return _rocm_variant(m, v)
    if v.kind == "cpu":
        return [] if v.tag == "cpu" else ["a cpu variant has tag 'cpu'"]
    return [f"kind {v.kind!r} is not cuda, rocm or cpu"]


def _variants(m: Matrix) -> list[Problem]:
    def messages(v: Variant) -> list[str]:
        known = m.torch_release(v.release) is not None
        return ([] if known else [f"torch {v.release} is not a [[release]]"]) + _variant_kind(m, v)

    return _each_row(m.variants, "torch.toml", "variant", messages)


def _platforms(m: Matrix) -> list[Problem]:
    """[[platform]] rows: a known release variant, a known platform and place, the arch list a
    CUDA build needs; one row per (release, tag, platform)."""
    known = m.platform_names
    seen: set[tuple[str, str, str]] = set()

    def messages(w: WheelPlatform) -> Iterator[str]:
        key = (w.release, w.tag, w.platform)
        if key in seen:
            yield "a second row for this release, tag and platform"
        seen.add(key)
        v = next((x for x in m.variants_of(w.release) if x.tag == w.tag), None)
        if v is None:
            yield f"torch {w.release} has no [[variant]] {w.tag!r}"
        if w.platform not in known[1:]:
            yield (f"platform {w.platform!r} is not one of {', '.join(known[1:])} ([meta] "
                   f"platforms; {known[0]} is the [[variant]] rows)")
        if w.where not in WHERE:
            yield f"where {w.where!r} is not one of {', '.join(WHERE)}"
        if v is not None and v.kind == "cuda" and not w.sass:
            yield "a CUDA build needs its sass arch list"
        if v is not None and v.kind != "cuda" and (w.sass or w.ptx):
            yield f"a {v.kind} build has no CUDA arch list"
        yield from (f"arch {cc!r} is not in gpus.toml" for cc in (*w.sass, *w.ptx)
                    if m.arch(cc) is None)

    return _each_row(m.platforms, "torch.toml", "platform", messages)


MIN_MEMORY_GB = 0.5  # no GPU envbuild knows has less (the smallest, a Jetson Nano, has 2 GB)
FAMILIES = ("jetson",)  # gpus.toml family


def _system(g: Gpu) -> Iterator[str]:
    """family and per_system: a Jetson is named so and is one GPU in its system."""
    if g.family and g.family not in FAMILIES:
        yield f"family {g.family!r} is not one of {', '.join(FAMILIES)}"
    if g.name.startswith("Jetson ") != (g.family == "jetson"):
        yield "a Jetson row (and only one) has family = \"jetson\""
    if g.family == "jetson" and g.per_system != 1:
        yield "a Jetson is one GPU in its system: per_system = 1"
    if isinstance(g.per_system, bool) or not 0 <= g.per_system <= 64:
        yield f"per_system {g.per_system!r} is not 0 (not said) to 64"


def _device_memory(g: Gpu) -> Iterator[str]:
    """device_memory_gb and its basis go together: one device of a module has less than the
    module's memory_gb, the smallest of a row's variants no more than its memory_gb."""
    if g.device_memory_basis and g.device_memory_basis not in DEVICE_MEMORY_BASES:
        yield (f"device_memory_basis {g.device_memory_basis!r} is not one of "
               f"{', '.join(DEVICE_MEMORY_BASES)}")
    if bool(g.device_memory_gb) != bool(g.device_memory_basis):
        yield ("device_memory_gb and device_memory_basis go together: the figure one device "
               "has, and why it is not memory_gb")
    for key in ("memory_gb", "device_memory_gb"):
        gb = getattr(g, key)
        if not math.isfinite(gb) or 0 < gb < MIN_MEMORY_GB:
            yield f"{key} {gb!r} is not a memory size (finite, {MIN_MEMORY_GB:g} GB or more)"
            return
    if g.device_memory_gb < 0:
        yield f"device_memory_gb {g.device_memory_gb:g} is negative"
    elif g.device_memory_gb and not g.memory_gb:
        yield "device_memory_gb without memory_gb"
    elif g.device_memory_basis == "module" and g.device_memory_gb >= g.memory_gb > 0:
        yield (f"device_memory_gb {g.device_memory_gb:g} is not less than the module's "
               f"{g.memory_gb:g} GB (memory_gb)")
    elif g.device_memory_basis == "variants" and g.device_memory_gb > g.memory_gb > 0:
        yield (f"device_memory_gb {g.device_memory_gb:g} is more than memory_gb "
               f"{g.memory_gb:g}: it is the smallest variant")


def _gpus(m: Matrix) -> list[Problem]:
    def messages(g: Any) -> Iterator[str]:
        if g.vendor == "nvidia" and m.arch(g.cc) is None:
            yield f"compute capability {g.cc!r} is not an [[arch]]"
        if g.vendor == "amd" and not g.gfx.startswith("gfx"):
            yield "an AMD GPU needs its gfx target"
        if g.vendor not in ("nvidia", "amd"):
            yield f"vendor {g.vendor!r} is not nvidia or amd"
        yield from _device_memory(g)
        yield from _system(g)
        gb, key = (g.device_memory_gb, "device_memory_gb") if g.device_memory_gb else \
            (g.memory_gb, "memory_gb")
        if g.memory_mib and not (MIB_PER_GB[0] <= g.memory_mib * 2**20 / (gb * 1e9 or 1)
                                 <= MIB_PER_GB[1]):
            yield (f"memory_mib {g.memory_mib} does not look like the {gb:g} GB of "
                   f"{key} (a typo, or another model's figure)")

    return _each_row(m.gpus, "gpus.toml", "gpu", messages)


def _rocm_oses(m: Matrix) -> list[Problem]:
    return [Problem("rocm.toml", where("release", r), f"os {os_id!r} is not defined in os.toml")
            for r in m.rocm for os_id in r.os if m.os_info(os_id) is None]


def _oses(m: Matrix) -> list[Problem]:
    return _each_row(m.oses, "os.toml", "os", lambda o: _not_versions(
        [("python", o.python)] + [("extra_python", x) for x in o.extra_python]))


EXTENSION_KINDS = {  # kind -> the [[release]] fields a row of that kind must fill
    "built": ("variant",), "libs": ("cuda_match",),
    "asset": ("torch_minors", "python", "cuda", "abi", "asset", "tag"), "build": (),
}


def _extensions(m: Matrix) -> list[Problem]:
    """Each extension's kind is known; each release names a known extension and platform, has
    the fields its kind judges by, a torch specifier that parses and archs by sm_/compute_ name;
    a `libs` release has [[library]] rows."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    f = "extensions.toml"
    p: list[Problem] = []
    kinds = {e.name: e.kind for e in m.extensions}
    for e in m.extensions:
        if e.kind not in EXTENSION_KINDS:
            p.append(Problem(f, where("extension", e), f"kind {e.kind!r} is not one of "
                             f"{', '.join(EXTENSION_KINDS)}"))
    libs = {(x.extension, x.version, x.platform) for x in m.extension_libraries}
    for r in m.extension_releases:
        def bad(message: str, row: Any = r) -> None:
            p.append(Problem(f, where("release", row), message))
        kind = kinds.get(r.extension)
        if kind is None:
            bad(f"extension {r.extension!r} has no [[extension]] row")
            continue
        if r.platform not in m.platform_names:
            bad(f"platform {r.platform!r} is not one of {', '.join(m.platform_names)}")
        for name in EXTENSION_KINDS.get(kind, ()):
            if not getattr(r, name):
                bad(f"a {kind} extension's release needs {name}")
        try:
            SpecifierSet(r.torch)
        except InvalidSpecifier:
            bad(f"torch {shown(r.torch)} is not a version specifier")
        for a in (*r.archs, *r.ptx):
            if not a.startswith(("sm_", "compute_")):
                bad(f"arch {shown(a)} is not an sm_/compute_ name")
        if kind == "libs" and (r.extension, r.version, r.platform) not in libs:
            bad("a libs extension's release needs [[library]] rows")
    for x in m.extension_libraries:
        if kinds.get(x.extension) != "libs":
            p.append(Problem(f, where("library", x), f"{x.extension!r} is not a libs extension"))
    return p


def _memory(m: Matrix) -> list[Problem]:
    """memory.toml (when present): every table cites defined sources and says if verified."""
    p: list[Problem] = []
    for name, table in m.extra.get("memory", {}).items():
        if not isinstance(table, dict):
            p.append(Problem("memory.toml", name, "a top-level value; every fact is in a table"))
            continue
        sources = table.get("source")
        if not isinstance(sources, list) or not sources:
            p.append(Problem("memory.toml", f"[{name}]", "no source given"))
        else:
            p += [Problem("memory.toml", f"[{name}]", f"source {sid!r} is not defined in "
                          "sources.toml") for sid in sources if sid not in m.sources]
        if not isinstance(table.get("verified"), bool):
            p.append(Problem("memory.toml", f"[{name}]", "verified = true|false is missing"))
    return p


PARTS: tuple[Callable[[Matrix], list[Problem]], ...] = (
    _sources, _order, _gpu_names, _cuda_releases, _cuda_images, _torch_releases,
    _torch_patches, _variants, _platforms, _gpus, _rocm_oses, _oses, _extensions, _memory,
)


def cross_check(m: Matrix) -> list[Problem]:
    """Every integrity problem of a parsed matrix, then every semantic one."""
    p: list[Problem] = []
    for part in PARTS:
        p += part(m)
    return p + semantic_check(m)
