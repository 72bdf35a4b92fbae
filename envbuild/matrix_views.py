"""Readable, pure table views of the matrix for `envbuild matrix show`."""

from __future__ import annotations

from typing import Any

from envbuild.matrix import Matrix


def _v(verified: bool) -> str:
    return "" if verified else "*"


def table_rows(m: Matrix, table: str) -> tuple[list[str], list[list[Any]]]:
    if table == "cuda":
        images: dict[str, list[str]] = {}
        for i in m.images:
            images.setdefault(i.cuda, []).append(i.os)
        return (["cuda", "latest", "driver_linux_ga", "driver_linux_latest", "image", "image_os",
                 "eol", "verified"],
                [[r.version, r.latest, r.ga_driver_linux, r.driver_linux, r.image,
                  images.get(r.image, []), r.eol, _v(r.verified) or "yes"] for r in m.cuda])
    if table == "torch":
        rows = []
        for r in m.torch:
            patches = m.patches_of(r.version)
            variants = [v.tag + _v(v.verified) for v in m.variants_of(r.version)]
            rows.append([r.version, r.released, [p.torch for p in patches],
                         [p.torchvision for p in patches], r.python, variants,
                         r.default_variant, r.mps_min_macos, _v(r.verified) or "yes"])
        return (["torch", "released", "patches", "torchvision", "python", "variants",
                 "pypi_default", "mps_macos", "verified"], rows)
    if table == "gpus":
        return (["gpu", "vendor", "arch", "aliases", "memory_gb", "verified"],
                [[g.name, g.vendor, g.cc or g.gfx, list(g.aliases), g.memory_gb or None,
                  _v(g.verified) or "yes"] for g in m.gpus])
    if table == "rocm":
        wheels: dict[str, list[str]] = {}
        for v in m.variants:
            if v.kind == "rocm":
                wheels.setdefault(v.version, []).append(v.release)
        return (["rocm", "base_image", "os", "gfx", "torch_wheels", "verified"],
                [[r.version, r.base_image, list(r.os), list(r.gfx), wheels.get(r.version, []),
                  _v(r.verified) or "yes"] for r in m.rocm])
    return (["os", "family", "python", "extra_python", "glibc", "image", "verified"],
            [[o.id, o.family, o.python, list(o.extra_python), o.glibc, o.image,
              _v(o.verified) or "yes"] for o in m.oses])
