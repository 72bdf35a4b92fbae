"""The SHA-256 of a small text, without OpenSSL's load.

`hashlib` loads OpenSSL's libcrypto on import: 3 ms of a command's start-up, for one 12-digit
spec hash. CPython also builds SHA-256 in (`_sha2` from 3.12, `_sha256` before): the same digest,
slower only on large data, which envbuild hashes with hashlib where it streams files."""

from __future__ import annotations

from collections.abc import Callable
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
