"""Readable, pure table views of the matrix for `envbuild matrix show`.

table_rows gives data only (`verified` is a boolean, variant tags are plain tags with the
unverified ones listed apart): what `--json` prints. text_rows adds the display marks of the
text view (`*` for a fact not verified against a primary source).
"""

from __future__ import annotations

from typing import Any

from envbuild.matrix.model import Matrix

MARK = "*"  # text view only: not verified against a primary source


def table_rows(m: Matrix, table: str) -> tuple[list[str], list[list[Any]]]:
    if table == "cuda":
        images: dict[str, list[str]] = {}
        for i in m.images:
            images.setdefault(i.cuda, []).append(i.os)
        return (["cuda", "latest", "driver_linux_ga", "driver_linux_latest", "image", "image_os",
                 "eol", "verified"],
                [[r.version, r.latest, r.ga_driver_linux, r.driver_linux, r.image,
                  images.get(r.image, []), r.eol, r.verified] for r in m.cuda])
    if table == "torch":
        rows = []
        for r in m.torch:
            patches = m.patches_of(r.version)
            variants = m.variants_of(r.version)
            arm = [w for w in m.platforms if w.release == r.version and w.platform == "linux/arm64"]
            rows.append([r.version, r.released, [p.torch for p in patches],
                         [p.torchvision for p in patches], list(r.python),
                         [v.tag for v in variants], [v.tag for v in variants if not v.verified],
                         [w.tag for w in arm], [w.tag for w in arm if not w.verified],
                         r.default_variant, r.mps_min_macos, r.verified])
        return (["torch", "released", "patches", "torchvision", "python", "variants",
                 "unverified_variants", "arm64", "unverified_arm64", "pypi_default", "mps_macos",
                 "verified"], rows)
    if table == "extensions":  # one line per extension version and platform
        return (["extension", "version", "platform", "where", "torch", "python", "cuda",
                 "archs", "verified"],
                [[r.extension, r.version, r.platform, r.where,
                  r.torch or "-".join(dict.fromkeys(r.torch_minors[:1] + r.torch_minors[-1:])),
                  list(r.python) or (f">={r.python_min}" if r.python_min else ""),
                  r.variant or list(r.cuda) or [x.cuda for x in m.extension_libraries
                                                if (x.extension, x.version, x.platform)
                                                == (r.extension, r.version, r.platform)],
                  list(r.archs), r.verified] for r in m.extension_releases])
    if table == "gpus":
        return (["gpu", "vendor", "arch", "aliases", "memory_gb", "device_gb", "verified"],
                [[g.name, g.vendor, g.cc or g.gfx, list(g.aliases), g.memory_gb or None,
                  g.device_memory_gb or None, g.verified] for g in m.gpus])
    if table == "rocm":
        wheels: dict[str, list[str]] = {}
        for v in m.variants:
            if v.kind == "rocm":
                wheels.setdefault(v.version, []).append(v.release)
        return (["rocm", "base_image", "os", "gfx", "torch_wheels", "verified"],
                [[r.version, r.base_image, list(r.os), list(r.gfx), wheels.get(r.version, []),
                  r.verified] for r in m.rocm])
    return (["os", "family", "python", "extra_python", "glibc", "image", "verified"],
            [[o.id, o.family, o.python, list(o.extra_python), o.glibc, o.image,
              o.verified] for o in m.oses])


def text_rows(header: list[str], rows: list[list[Any]]) -> tuple[list[str], list[list[str]]]:
    """The text view of table_rows: lists joined with commas, `verified` as yes or `*`, and the
    unverified tags of a column X marked in place from its `unverified_X` column (dropped)."""
    cols = [i for i, h in enumerate(header) if not h.startswith("unverified_")]
    out = []
    for row in rows:
        data = dict(zip(header, row, strict=True))
        cells = []
        for i in cols:
            name, value = header[i], row[i]
            marked = set(data.get(f"unverified_{name}", ()))
            if name == "verified":
                cells.append("yes" if value else MARK)
            elif f"unverified_{name}" in data:
                cells.append(",".join(t + (MARK if t in marked else "") for t in value))
            else:
                cells.append(_cell(value))
        out.append(cells)
    return [header[i] for i in cols], out


def _cell(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return "" if value is None else str(value)
