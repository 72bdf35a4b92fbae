"""The tag `build` gives an image, computed once for every place that names it: `build` itself,
the `apptainer.def` of `render --format apptainer` (which bootstraps from that local image) and
the `--tag` help of build and make.

The tag names the whole build input: the spec and a hash of the build context (the rendered
files and the wheelhouse's wheel names and sizes), so two different inputs never share a
default tag. Pure apart from `context_hash` and `wheel_sizes`, which read a directory.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.core import platforms

if TYPE_CHECKING:
    from envbuild.core.spec import Spec

# What `default_tag` returns, for help texts (tests/*/test_formats.py hold the two together).
DEFAULT_TAG_FORMAT = "envbuild/<target>:torch<X.Y.Z>[-<variant>]-py<X.Y>-<12 hex>"
WHEELHOUSE = "wheelhouse"
# Files of a rendered context the image never reads: not build inputs, so not hashed
# (apptainer.def names the tag, which cannot depend on itself; the manifest lists the others).
NOT_INPUTS = frozenset({"apptainer.def", ".envbuild-manifest.json"})


def inputs_hash(files: Iterable[tuple[str, bytes]], wheels: Iterable[tuple[str, int]]) -> str:
    """16 hex of the build input: (relative path, content) of each file, (name, size) of each
    wheelhouse file (sizes, not contents: wheels are large and named by version)."""
    entries: list[tuple[str, bytes]] = [
        (rel, hashlib.sha256(data).digest()) for rel, data in files if rel not in NOT_INPUTS]
    entries += [(f"{WHEELHOUSE}/{name}", str(size).encode()) for name, size in wheels]
    h = hashlib.sha256()
    for rel, digest in sorted(entries):
        h.update(rel.encode() + b"\0")
        h.update(digest)
    return h.hexdigest()[:16]


def files_hash(files: Mapping[str, str | bytes], wheels: Iterable[tuple[str, int]]) -> str:
    """inputs_hash of rendered files ({path: content}) before they are written."""
    return inputs_hash(((rel, c.encode() if isinstance(c, str) else c)
                        for rel, c in files.items()), wheels)


def context_hash(context: Path) -> str:
    """inputs_hash of a rendered context on disk (the wheelhouse as write_tree links it)."""
    files: list[tuple[str, bytes]] = []
    wheels: list[tuple[str, int]] = []
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        rel = path.relative_to(context).as_posix()
        if rel.startswith(f"{WHEELHOUSE}/"):
            wheels.append((rel.split("/", 1)[1], path.stat().st_size))
        else:
            files.append((rel, path.read_bytes()))
    return inputs_hash(files, wheels)


def wheel_sizes(wheelhouse: Path | None) -> tuple[tuple[str, int], ...]:
    """(name, size) of each file write_tree links from a --wheelhouse into the context."""
    if wheelhouse is None:
        return ()
    return tuple((p.name, p.stat().st_size) for p in sorted(wheelhouse.iterdir()) if p.is_file())


def default_tag(spec: Spec, chash: str) -> str:
    """DEFAULT_TAG_FORMAT for a spec and the hash of its build context: readable, and the hex
    names the whole build input (the spec hash and the context hash, so --pip, --apt, --conda,
    --base-image and the wheelhouse too)."""
    digest = hashlib.sha256(f"{spec.hash}\0{chash}".encode()).hexdigest()[:12]
    variant = "" if spec.variant == spec.target else f"-{spec.variant}"
    # an image for another platform than linux/amd64 says so (the hex differs already)
    arch = platforms.tag_suffix(spec.platform)
    return f"envbuild/{spec.target}:torch{spec.torch}{variant}-py{spec.python}{arch}-{digest}"
