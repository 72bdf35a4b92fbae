"""Small, pure helpers for version strings (CUDA, drivers, torch, Python)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.version import Version



def parse_version(text: str) -> Version | None:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(text)
    except InvalidVersion:
        return None


# A version part longer than this is no real version's: it sorts above every real one (and
# int() of over 4300 digits would raise instead).
_PART_DIGITS = 18


def version_key(text: str) -> tuple[int, ...]:
    """Sort key for dotted numeric versions ("12.2.2", "535.104.05", "3.10"); total for any
    text (a hostile recording's 100,000-digit version included)."""
    parts = []
    for piece in text.split("."):
        m = re.match(r"\d+", piece)
        digits = m.group() if m else "0"
        parts.append(int(digits) if len(digits) <= _PART_DIGITS else 10 ** _PART_DIGITS)
    return tuple(parts)


def minor_of(text: str) -> str:
    """'12.2.2' -> '12.2', '2.5.1+cu121' -> '2.5' (a local label is dropped)."""
    return ".".join(text.partition("+")[0].split(".")[:2])


def major_of(text: str) -> int:
    """'12.2.2' -> 12; also a driver's branch: '580.95.05' -> 580."""
    return int(text.split(".")[0])


def branch_of(driver: str) -> int:
    """A driver's branch: '580.95.05' -> 580."""
    return major_of(driver)


def minor_number(text: str) -> int:
    """The second component as a number: '3.11' -> 11 (a Python's minor)."""
    return int(text.split(".")[1])
