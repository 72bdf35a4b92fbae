"""Helpers shared by the bounded_input tests and others (moved out of test_bounded_input.py)."""

from __future__ import annotations

MAX_LINE = 400  # what one printed error line may be, whatever the input


def _raw_controls(text: str, allowed: str = "") -> list[str]:
    return [c for c in text if not c.isprintable() and c not in allowed]


def _bounded_lines(text: str, where: str) -> None:
    for line in text.splitlines():
        assert len(line) < MAX_LINE, (where, len(line), line[:200])
        assert not _raw_controls(line), (where, line[:200])


def _dots(n: int) -> str:
    return ".".join(["a"] * n)

# ---- the central echo: every value a message quotes is escaped and capped ---------------------

_ESCAPES = ["\x1b[31m", "\x1b]0;title\x07", "\x1b[2J", "\r", "\x07", "\x08", "\x7f", "\x9b",
            "\u202e", "\u2028", "\t", "\n", "\x00"]
