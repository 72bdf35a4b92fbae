"""A per-user cache of a matrix that checked clean: parsing TOML is most of the start-up time
of `envbuild resolve`.

The cache holds the parsed TOML documents as JSON, never a pickle: a cache file that is
corrupt, truncated, of the wrong shape, not owned by this user or writable by others is
ignored (and replaced), so the worst a bad cache can do is cost one TOML parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild.matrix.model import FILES

_CACHE_FORMAT = 1


def cache_path(d: Path) -> Path | None:
    """The cache file of the matrix in `d`, keyed by every file's name, size and mtime."""
    import hashlib
    import os

    from envbuild import __version__

    try:
        stats = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in d.glob("*.toml"))
    except OSError:
        return None
    key = hashlib.sha256(repr((__version__, str(d.resolve()), stats)).encode()).hexdigest()[:20]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envbuild"
    return base / f"matrix-{key}.json"


def _private(path: Path, want_dir: bool) -> bool:
    """This user's own directory / regular file (not a symlink), writable by nobody else."""
    import os
    import stat

    try:
        st = os.lstat(path)
    except OSError:
        return False
    kind_ok = stat.S_ISDIR(st.st_mode) if want_dir else stat.S_ISREG(st.st_mode)
    uid = os.geteuid() if hasattr(os, "geteuid") else st.st_uid
    return kind_ok and not st.st_mode & 0o022 and st.st_uid == uid


def _trusted(path: Path) -> bool:
    """A world-writable XDG_CACHE_HOME must not let another user feed us a matrix."""
    return _private(path.parent, True) and _private(path, False)


def read_docs(cache: Path) -> dict[str, Any] | None:
    """The TOML documents a clean check cached (file stem -> document), or None when the cache
    is missing, damaged, hostile or stale."""
    from envbuild.common.boundedio import CACHE_BYTES, load_json
    from envbuild.common.errors import UsageError

    if not _trusted(cache):
        return None
    try:
        doc = load_json(cache, "matrix cache", cap=CACHE_BYTES)
    except (OSError, ValueError, UsageError):
        return None  # missing, damaged or hostile: rebuilt from the TOML
    if not isinstance(doc, dict) or doc.get("format") != _CACHE_FORMAT \
            or doc.get("key") != cache.stem:
        return None
    docs = doc.get("docs")
    if not isinstance(docs, dict) or set(docs) != set(FILES) \
            or not all(isinstance(v, dict) for v in docs.values()):
        return None
    if doc.get("sha256") != _digest(docs):
        return None  # edited or damaged after a clean check: rebuild (cross_check is not re-run)
    return docs


def _digest(docs: Any) -> str:
    import hashlib
    import json

    blob = json.dumps(docs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def write_docs(cache: Path, docs: Mapping[str, Any]) -> None:
    """Cache the documents of a matrix that checked clean; any failure just leaves no cache."""
    import json

    from envbuild.common.files import write_atomic

    try:
        text = json.dumps({"format": _CACHE_FORMAT, "key": cache.stem, "docs": docs,
                           "sha256": _digest(docs)})
    except (TypeError, ValueError):
        return  # a TOML date or time has no JSON form: no cache, same result
    try:
        cache.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(cache.parent, True):
            return
        write_atomic(cache, text, 0o600)
    except OSError:
        pass  # a read-only home: no cache, same result
