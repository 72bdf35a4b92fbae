"""Image size before the build: a pure estimate per layer from facts the caller gathers.

The facts (a base image's compressed size, index file sizes, wheel contents) come from
envbuild/engine/sizefetch.py (network, wheelhouse) or from recordings in the tests; this module only
adds them up with the size model in matrix/sizes.toml. Nothing here does I/O.

Model, and why: an image stores installed bytes, not wheel bytes. A wheel is a zip; its central
directory lists every member's uncompressed size, which is exactly what pip writes to
site-packages (RECORD lists the same files). pip then compiles bytecode for every .py file (its
default), which we add as a measured ratio of the .py bytes. So the torch stack is counted from
the central directories of exactly the pinned files and the dependencies pip would choose; a
flat wheel -> installed ratio (also data) is only the fallback when a central directory cannot
be read. Layers under the base (Python, compilers) are measured data per OS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from typing import Any

from envbuild.common.record import record
from envbuild.core.spec import Spec

MB = 1_000_000


@record
class BaseFact:
    """The base image: its compressed size (registry manifest) or its size on disk (local)."""

    reference: str
    compressed: int | None = None
    on_disk: int | None = None
    how: str = ""  # where the number came from, or why there is none


@record
class WheelFact:
    """One file pip would install: its size in the index, and (when read) its zip contents."""

    project: str
    filename: str
    size: int | None
    unpacked: int | None = None  # sum of the central directory's uncompressed sizes
    py_bytes: int | None = None  # the .py members' uncompressed bytes (pip compiles them)
    why_unknown: str = ""


@record
class Row:
    layer: str
    bytes: int | None  # on disk; None = unknown
    how: str
    compressed: int | None = None  # what is downloaded, where known

    def to_json(self) -> dict[str, Any]:
        return {"layer": self.layer, "bytes": self.bytes, "compressed": self.compressed,
                "how": self.how}


@record
class SizeEstimate:
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def total(self) -> int:
        """The sum of the known rows (see `complete`)."""
        return sum(r.bytes for r in self.rows if r.bytes is not None)

    @property
    def complete(self) -> bool:
        return all(r.bytes is not None for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        return {"total_bytes": self.total, "complete": self.complete,
                "unknown": [r.layer for r in self.rows if r.bytes is None],
                "rows": [r.to_json() for r in self.rows], "notes": list(self.notes)}


def model(sizes: Mapping[str, Any]) -> Mapping[str, Any]:
    return dict(sizes.get("model", {}))


def installed_bytes(w: WheelFact, sizes: Mapping[str, Any]) -> tuple[int | None, str]:
    """Installed bytes of one wheel, and how they were counted."""
    m = model(sizes)
    if w.unpacked is not None:
        pyc = round(float(m.get("pyc_per_py_byte", 0.0)) * (w.py_bytes or 0))
        return w.unpacked + pyc, "central directory"
    if w.size is not None:
        return round(w.size * float(m.get("installed_per_wheel_byte", 1.0))), "wheel x ratio"
    return None, w.why_unknown or "size unknown"


def _wheels_row(layer: str, wheels: Sequence[WheelFact], sizes: Mapping[str, Any],
                empty: str) -> Row:
    if not wheels:
        return Row(layer, 0, empty)
    total, compressed, ways, unknown = 0, 0, set(), []
    for w in wheels:
        b, way = installed_bytes(w, sizes)
        if b is None:
            unknown.append(f"{w.project} ({way})")
            continue
        total += b
        compressed += w.size or 0
        ways.add(way)
    names = ", ".join(sorted({w.project for w in wheels}))
    if unknown:
        return Row(layer, None, f"unknown: {'; '.join(unknown)}", compressed or None)
    how = (f"{len(wheels)} wheels ({names}): {compressed / MB:.1f} MB in the index; installed = "
           + (" + ".join(sorted(ways)).replace("central directory",
                                                "zip central directory + bytecode")))
    return Row(layer, total, how, compressed)


def _base_row(spec: Spec, base: BaseFact | None, sizes: Mapping[str, Any]) -> Row:
    ref = base.reference if base else (spec.base_image or "")
    if base is not None and base.on_disk is not None:
        return Row(f"base image {ref}", base.on_disk, base.how or "local image, on disk")
    if base is not None and base.compressed is not None:
        ratio = float(model(sizes).get("base_unpack_ratio", 1.0))
        return Row(f"base image {ref}", round(base.compressed * ratio),
                   f"{base.how}: {base.compressed / MB:.1f} MB compressed x {ratio} "
                   "(sizes.toml base_unpack_ratio)", base.compressed)
    return Row(f"base image {ref}", None,
               f"unknown: {base.how if base and base.how else 'not looked up'}")


def _os_row(spec: Spec, sizes: Mapping[str, Any]) -> Row:
    layer = dict(sizes.get("os_layer", {}))
    value = layer.get(spec.os)
    if isinstance(value, int) and not isinstance(value, bool):
        return Row("OS packages (Python, headers, compilers)", value,
                   f"measured for {spec.os} (sizes.toml os_layer)")
    return Row("OS packages (Python, headers, compilers)", None,
               f"unknown: no measurement for {spec.os} in sizes.toml")


def estimate(spec: Spec, *, base: BaseFact | None, torch_wheels: Sequence[WheelFact],
             torch_unresolved: Sequence[str] = (), user_wheels: Sequence[WheelFact] = (),
             user_unresolved: Sequence[str] = (),
             sizes: Mapping[str, Any]) -> SizeEstimate:
    """Per-layer estimate of the image on disk (what `docker image inspect` reports)."""
    m = model(sizes)
    rows = [_base_row(spec, base, sizes), _os_row(spec, sizes),
            Row("Python venv (pip)", int(m.get("venv_bytes", 0)),
                "measured (sizes.toml venv_bytes)"),
            _wheels_row("torch stack", torch_wheels, sizes, "no wheels")]
    if torch_unresolved:
        rows[-1] = Row("torch stack", None, f"unknown: {'; '.join(torch_unresolved)}")
    user = _wheels_row("user packages", user_wheels, sizes, "none")
    if user_unresolved:
        user = Row("user packages", None,
                   f"unknown: not resolved to one file ({'; '.join(user_unresolved)})")
    rows.append(user)
    rows.append(Row("envbuild files", int(m.get("envbuild_files_bytes", 0)), "validator, spec"))
    return SizeEstimate(tuple(rows), tuple(duplicates(spec, sizes)))


def duplicates(spec: Spec, sizes: Mapping[str, Any]) -> list[str]:
    """What a CUDA runtime/devel/cudnn base stores a second time next to the wheel's nvidia-*."""
    if spec.target != "cuda" or spec.flavor in (None, "base"):
        return []
    data = dict(sizes.get("cuda_duplicates", {}))
    libs = dict(data.get("libraries", {}))
    names = list(data.get("runtime", []))
    if "cudnn" in (spec.base_image or ""):
        names += list(data.get("cudnn", []))
    out = []
    for n in names:
        lib = libs.get(n, {})
        out.append(f"{n}: {int(lib.get('bytes', 0)) / MB:.0f} MB ({lib.get('wheel', '?')} wheel)")
    total = sum(int(libs.get(n, {}).get("bytes", 0)) for n in names)
    return [f"the {spec.flavor} image duplicates what the torch wheel's nvidia-* packages bring: "
            f"{total / MB:.0f} MB ({data.get('basis', 'wheel sizes')}: {'; '.join(out)})"]


def describe(est: SizeEstimate) -> list[str]:
    """Human lines: one per layer, then the total."""
    lines = []
    for r in est.rows:
        size = "unknown" if r.bytes is None else f"{r.bytes / MB:,.0f} MB"
        lines.append(f"  {r.layer:<44} {size:>10}  {r.how}")
    total = f"{est.total / MB:,.0f} MB"
    lines.append(f"  {'total (on disk)':<44} {total:>10}"
                 + ("" if est.complete else "  (lower bound: some layers unknown)"))
    lines.extend(f"  note: {n}" for n in est.notes)
    return lines


def beside(est: SizeEstimate, real: int | None) -> dict[str, Any]:
    """The estimate next to the built image's real size (make's summary and --json)."""
    out: dict[str, Any] = {"estimate": est.to_json(), "real_bytes": real}
    if real:
        out["error_pct"] = round(100.0 * (est.total - real) / real, 1)
    return out
