"""The platform an image is for (linux/amd64, linux/arm64): parsed, defaulted to the host's, and
the matrix as that platform sees it.

The [[variant]] rows of torch.toml are the linux/amd64 facts. For another platform,
`on_platform` gives a Matrix whose variants are that platform's wheels ([[platform]] rows: only
the variants published there, with that platform's arch list, verified only if both rows are),
whose releases' PyPI default is what a plain `pip install torch` gives there, and whose CUDA
images are those published for it; the resolver runs on it unchanged.
"""

from __future__ import annotations

import dataclasses
from functools import cache

from envbuild.common.echo import shown
from envbuild.common.errors import UsageError
from envbuild.matrix import Matrix, Variant

AMD64 = "linux/amd64"
# What users and tools call the two: Docker's names, uname -m, Debian's.
ALIASES = {"amd64": AMD64, "x86_64": AMD64, "linux/x86_64": AMD64, "x86-64": AMD64,
           "arm64": "linux/arm64", "aarch64": "linux/arm64", "linux/aarch64": "linux/arm64",
           "arm64/v8": "linux/arm64", "linux/arm64/v8": "linux/arm64"}


# The machine name in wheel platform tags (manylinux_2_28_aarch64) of each platform.
WHEEL_MACHINES = {AMD64: "x86_64", "linux/arm64": "aarch64"}
# manylinux's oldest glibc tags: manylinux2014 is glibc 2.17 (PEP 599/600).
_MANYLINUX_FIRST = 17


def wheel_platforms(platform: str, glibc: str) -> list[str]:
    """pip's --platform values for binary wheels that run on `platform` with this glibc: every
    manylinux_2_N tag from 2.17 up to it, and manylinux2014 (pip takes no range: a wheel is
    chosen only if one of its tags is listed). Without a known glibc, manylinux2014 alone."""
    machine = WHEEL_MACHINES[platform]
    top = int(glibc.split(".")[1]) if glibc.count(".") == 1 else _MANYLINUX_FIRST
    return [*(f"manylinux_2_{n}_{machine}" for n in range(top, _MANYLINUX_FIRST - 1, -1)),
            f"manylinux2014_{machine}"]


def foreign(platform: str | None) -> bool:
    """A platform other than linux/amd64, the one every spec had before --platform (None and ''
    mean that one): it shows in tags, the trace and the Dockerfile's stages."""
    return bool(platform) and platform != AMD64


def tag_suffix(platform: str | None) -> str:
    """What an image tag adds for its platform: '-arm64' for linux/arm64, '' for linux/amd64."""
    return "-" + str(platform).rsplit("/", 1)[-1] if foreign(platform) else ""


def known(m: Matrix) -> tuple[str, ...]:
    """torch.toml [meta] platforms: the first is the [[variant]] rows' own."""
    return m.platform_names


def parse(text: str, m: Matrix) -> str:
    """`--platform` as Docker writes it (linux/arm64), or a machine name (aarch64, x86_64)."""
    import difflib

    raw = text.strip().lower()
    value = ALIASES.get(raw, raw)
    names = known(m)
    if value not in names:
        close = difflib.get_close_matches(raw, [*names, *ALIASES], n=3, cutoff=0.5)
        raise UsageError(f"--platform {shown(text)} is not one of {', '.join(names)}",
                         "e.g. --platform linux/arm64 (Grace, GB10, Graviton) or linux/amd64; "
                         "leave it out for this host's", [ALIASES.get(c, c) for c in close])
    return value


@cache
def host() -> str:
    """This host's platform (a Mac's Docker runs linux/arm64 images too)."""
    import platform

    machine = platform.machine().lower()
    return ALIASES.get(machine, AMD64)


def on_platform(m: Matrix, platform: str) -> Matrix:
    """The matrix as `platform` sees it (the matrix itself for linux/amd64)."""
    if platform == AMD64:
        return m
    variants: list[Variant] = []
    pypi: dict[str, str] = {}
    for v in m.variants:
        w = m.platform_wheel(v.release, v.tag, platform)
        if w is None:
            continue
        if w.where in ("pypi", "both"):
            pypi[v.release] = v.tag
        variants.append(dataclasses.replace(
            v, sass=w.sass, ptx=w.ptx, verified=v.verified and w.verified,
            source=tuple(dict.fromkeys((*v.source, *w.source))), note=w.note or v.note))
    releases = tuple(dataclasses.replace(r, default_variant=pypi.get(r.version, r.default_variant))
                     for r in m.torch)
    arch = platform.rsplit("/", 1)[-1]
    images = tuple(dataclasses.replace(i, flavors=tuple(f for f in i.flavors
                                                         if f not in i.amd64_only))
                   for i in m.images if arch in i.platforms)
    return dataclasses.replace(m, variants=tuple(variants), torch=releases, images=images)


def index_of(m: Matrix, release: str, tag: str, platform: str) -> str | None:
    """PyPI's simple index when `platform`'s wheels of this variant are on PyPI only (the
    PyTorch index may not carry them), else None (the variant's own index)."""
    if platform == AMD64:
        return None
    w = m.platform_wheel(release, tag, platform)
    if w is not None and w.where == "pypi":
        return str(m.meta.get("torch", {}).get("pypi_index", "")) or None
    return None
