"""The SHA-256 of a small text, without OpenSSL's load.

`hashlib` loads OpenSSL's libcrypto on import: 3 ms of a command's start-up, for one 12-digit
spec hash. CPython also builds SHA-256 in (`_sha2` from 3.12, `_sha256` before): the same digest,
slower only on large data, which envbuild hashes with hashlib where it streams files (a
directory's digest, `tree_digest`)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any


def _builtin() -> Callable[[bytes], Any]:
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]  # CPython >= 3.12
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found]  # 3.11
        except ImportError:  # another Python: the OpenSSL one
            from hashlib import sha256
    return sha256  # type: ignore[no-any-return]


def sha256_hex(data: bytes) -> str:
    """hashlib.sha256(data).hexdigest(), for data of a few kilobytes."""
    return str(_builtin()(data).hexdigest())


def tree_digest(root: Path, exclude: Collection[str] = ()) -> str:
    """A deterministic SHA-256 (hex) of a directory's files: each regular file's path relative to
    `root` (POSIX, sorted), whether it is executable, its size and its bytes; a symlink by its
    target text. Directories count only through their files; `exclude` names top-level entries
    left out (a build context's linked wheelhouse, hashed wheel by wheel elsewhere). Streamed
    through hashlib: a context may hold large files."""
    import hashlib
    import os
    import stat

    h = hashlib.sha256(b"envbuild-tree-v1\0")
    entries: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in exclude]
            filenames = [f for f in filenames if f not in exclude]
        links = [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]
        for name in [*filenames, *links]:  # a linked directory is not walked into
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            entries.append((rel.replace(os.sep, "/"), os.path.join(dirpath, name)))
    for rel, path in sorted(entries):
        st = os.lstat(path)
        key = rel.encode("utf-8", "surrogateescape")
        if stat.S_ISLNK(st.st_mode):
            target = os.readlink(path).encode("utf-8", "surrogateescape")
            h.update(b"L" + len(key).to_bytes(8, "big") + key + len(target).to_bytes(8, "big")
                     + target)
            continue
        if not stat.S_ISREG(st.st_mode):
            continue
        kind = b"X" if st.st_mode & 0o111 else b"F"
        h.update(kind + len(key).to_bytes(8, "big") + key + st.st_size.to_bytes(8, "big"))
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()
