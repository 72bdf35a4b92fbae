"""TOML values and keys written by hand (tomllib reads TOML; nothing in the stdlib writes it):
the lock file and matrix edits. Pure."""

from __future__ import annotations

import json
import re
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def key(k: str) -> str:
    """A bare key when it can be one, else a quoted one."""
    return k if _BARE_KEY.fullmatch(k) else value(k)


def value(v: Any, multiline: bool = False) -> str:
    """A TOML value: booleans, numbers, strings, lists (one item per line when `multiline`) and
    tables (inline, keys sorted)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return json.dumps(v)
    if isinstance(v, str):
        if any(0xD800 <= ord(c) <= 0xDFFF for c in v):
            raise ValueError(f"{v!r} is not valid Unicode text")
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list | tuple):
        if not multiline:
            return "[" + ", ".join(value(x) for x in v) + "]"
        if not v:
            return "[]"
        return "[\n" + "".join(f"    {value(x, multiline)},\n" for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{key(k)} = {value(x, multiline)}"
                                for k, x in sorted(v.items())) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")
