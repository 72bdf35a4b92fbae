"""A regex compiled at its first use: module-level patterns that most runs never use (the
redactor's, the bounded reader's depth scanners) cost no start-up time.

`lazy(pattern, flags)` stands in for `re.compile(pattern, flags)`: the same methods and
attributes, forwarded to the compiled pattern once it is needed."""

from __future__ import annotations

import re
from typing import Any


class LazyPattern:
    __slots__ = ("_compiled", "_flags", "_pattern")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._pattern, self._flags = pattern, flags
        self._compiled: re.Pattern[str] | None = None

    @property
    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(self._pattern, self._flags)
        return self._compiled

    def __getattr__(self, name: str) -> Any:  # search, match, sub, finditer, pattern, ...
        return getattr(self.compiled, name)


def lazy(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """re.compile(pattern, flags), done at the first use."""
    return LazyPattern(pattern, flags)  # type: ignore[return-value]
