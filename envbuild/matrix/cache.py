"""A per-user cache of what start-up would otherwise parse again: the matrix that checked clean
(parsing TOML was most of `envbuild resolve`'s start-up) and explain's signature catalogue.

The cache holds the parsed TOML documents as JSON, never a pickle: a cache file that is
corrupt, truncated, of the wrong shape, not owned by this user or writable by others is
ignored (and replaced), so the worst a bad cache can do is cost one TOML parse.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild.matrix.model import FILES

_CACHE_FORMAT = 3  # 3: a header with a zlib checksum (2: with a sha256), then the JSON


def _cache_dir() -> Path:
    import os

    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "envbuild"


def _checksum(data: bytes) -> str:
    """CRC-32 and Adler-32 of the bytes: a cache is private to its user (see _trusted), so the
    checks are against a damaged or stale file, not an attacker, and zlib is a fraction of a
    millisecond where hashlib's OpenSSL load is 3 ms of every start-up."""
    import zlib

    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def _key(*parts: object) -> str:
    from envbuild import __version__

    return _checksum(repr((__version__, *parts)).encode())


def _code_stamp() -> list[tuple[str, int, int]]:
    """Name, size and mtime of the matrix package's own modules: the code that decided the
    cached matrix checked clean. A checker changed since (a new rule) makes a new key, so a
    matrix it would refuse is never served from a cache written before (measured: a rule added
    on a branch passed every local run on a warm cache and failed on a fresh clone)."""
    here = Path(__file__).parent
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in here.glob("*.py"))


def cache_path(d: Path) -> Path | None:
    """The cache file of the matrix in `d`, keyed by every file's name, size and mtime, and by
    the checker's code (_code_stamp)."""
    try:
        stats = sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in d.glob("*.toml"))
        code = _code_stamp()
    except OSError:
        return None
    return _cache_dir() / f"matrix-{_key(str(d.resolve()), stats, code)}.json"


def file_cache_path(kind: str, source: Path) -> Path | None:
    """The cache file of what is derived from one file (kind: its name's prefix), keyed by the
    file's path, size and mtime."""
    try:
        st = source.stat()
    except OSError:
        return None
    return _cache_dir() / f"{kind}-{_key(str(source.resolve()), st.st_size, st.st_mtime_ns)}.json"


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


def read_cached(cache: Path) -> Any:
    """What write_cached stored in `cache`, or None when it is missing, damaged, hostile or
    stale.

    The file is a header line (format, key, the checksum of the rest) and the JSON: the checksum
    is checked over the bytes as read, before they are parsed."""
    import json

    from envbuild.common.boundedio import CACHE_BYTES, read_bytes
    from envbuild.common.errors import UsageError

    if not _trusted(cache):
        return None
    try:
        head, _, body = read_bytes(cache, "envbuild cache", cap=CACHE_BYTES).partition(b"\n")
        header = json.loads(head)
        if not isinstance(header, dict) or header.get("format") != _CACHE_FORMAT \
                or header.get("key") != cache.stem \
                or header.get("checksum") != _checksum(body):
            return None  # another format, another source, or edited after it was written
        return json.loads(body)
    except (OSError, ValueError, UsageError, RecursionError):
        return None  # missing, damaged or hostile: rebuilt from the source


def write_cached(cache: Path, payload: Any) -> None:
    """Cache what was derived from sources that checked clean; any failure leaves no cache."""
    import json

    from envbuild.common.files import write_atomic

    try:
        body = json.dumps(payload, separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return  # a TOML date or time has no JSON form: no cache, same result
    header = json.dumps({"format": _CACHE_FORMAT, "key": cache.stem,
                         "checksum": _checksum(body)}).encode()
    text = header + b"\n" + body
    try:
        cache.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(cache.parent, True):
            return
        write_atomic(cache, text, 0o600)
    except OSError:
        pass  # a read-only home: no cache, same result


SNAPSHOT_KEY = "__envbuild_snapshot__"  # beside the documents: the matrix's snapshot hash


def read_docs(cache: Path) -> tuple[dict[str, Any], str] | None:
    """The TOML documents a clean check cached (file stem -> document) and the matrix's
    snapshot hash computed then, or None."""
    docs = read_cached(cache)
    if not isinstance(docs, dict):
        return None
    snapshot = docs.pop(SNAPSHOT_KEY, None)
    if not isinstance(snapshot, str) or set(docs) != set(FILES) \
            or not all(isinstance(v, dict) for v in docs.values()):
        return None
    return docs, snapshot


def write_docs(cache: Path, docs: Mapping[str, Any], snapshot: str) -> None:
    """Cache the documents of a matrix that checked clean, with its snapshot hash."""
    write_cached(cache, {**docs, SNAPSHOT_KEY: snapshot})
