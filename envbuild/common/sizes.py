"""A size as a user types it (8g, 64MiB, 1048576) in bytes: the one parser of byte sizes."""

from __future__ import annotations

import re

from envbuild.common.errors import UsageError

_SIZE = re.compile(r"^(\d{1,18})\s*(|k|m|g|kb|mb|gb|kib|mib|gib|b)$", re.IGNORECASE)
# Binary units, as Docker reads --shm-size (RAMInBytes: 1g = 1 GiB, "gb" too)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def size_bytes(text: str, flag: str) -> int:
    """The bytes `text` names; a UsageError naming `flag` when it is no size."""
    m = _SIZE.match(text.strip())
    if not m:
        raise UsageError(f"{flag} {text[:40]!r} is not a size", "e.g. 1M, 64MiB, 1G or 1048576")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def docker_size(n: int) -> str:
    """`n` bytes as `docker run --shm-size` spells them: the largest of g, m, k that divides it
    (binary, as Docker reads them), else the plain number of bytes."""
    for unit, scale in (("g", 1 << 30), ("m", 1 << 20), ("k", 1 << 10)):
        if n and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)
