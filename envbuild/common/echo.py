"""What envbuild may echo of a value it was given: bounded and without terminal escapes. Pure.

Every value a message quotes (an option's value, a key of a file, a line of a log) passes
`shown()`: quoted like repr, control characters and other invisible ones escaped (ESC as \\x1b,
CR as \\r, a bidi override as \\u202e), at most VALUE_CHARS characters of it, then how many more
there were. `one_line()` is the safety net where errors are printed: whatever a message still
holds is escaped and capped the same way, so no error can move the cursor, recolour the terminal,
or fill the screen.
"""

from __future__ import annotations

import re

from envbuild.common.lazyre import lazy
from envbuild.common.redact import mask_url, may_hold_login

VALUE_CHARS = 80  # of one echoed value
MESSAGE_CHARS = 1000  # of one printed error line (message, hint, alternative)
# a quoted value in a message (repr's quotes: not an apostrophe inside a word)
_LONG_QUOTED = lazy(r"(?<!\w)'((?:[^'\\]|\\.){" + str(VALUE_CHARS + 40) + r",}+)'(?!\w)")
_ESCAPE_OR_CHAR = lazy(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|\\.|.", re.S)


def _char(c: str) -> str:
    return c if c.isprintable() else repr(c)[1:-1]


def escaped(text: str) -> str:
    """`text` with every character that is not printable (controls, ESC, CR, LF, format
    characters) written as its Python escape; printable text (any script) is kept."""
    if text.isprintable():
        return text
    return "".join(_char(c) for c in text)


def _cut(text: str, limit: int) -> tuple[str, int]:
    """The longest prefix whose repr fits in `limit` characters (quotes aside), and how many
    characters are left."""
    used, end = 0, len(text)
    for i, c in enumerate(text):
        used += len(repr(c)) - 2
        if used > limit:
            end = i
            break
    while len(repr(text[:end])) - 2 > limit:  # repr escapes a quote when both kinds occur
        end -= 1
    return text[:end], len(text) - end


def _more(n: int) -> str:
    return f"...({n} more character{'s' if n != 1 else ''})"


def shown(value: object, limit: int = VALUE_CHARS) -> str:
    """A value as a message quotes it: repr-quoted and escaped, at most about `limit`
    characters of it, then "...(N more characters)". Other values: their repr, capped."""
    if not isinstance(value, str):
        return capped(escaped(repr(value)), limit)
    if may_hold_login(value):  # masked before it is cut: a cut must not leave a token's head
        value = mask_url(value)
    head, more = _cut(value, limit)
    return repr(head) + (_more(more) if more else "")


def capped(text: str, limit: int) -> str:
    """`text` (already escaped) cut to `limit` characters, saying how many were left out."""
    more = len(text) - limit
    return text if more <= 0 else text[:limit] + _more(more)


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """The edge's safety net for a printed error line: escaped, a quoted value longer than
    VALUE_CHARS shortened (a framework message quoting a whole option value), capped at `limit`."""
    out = escaped(text)
    if len(out) > VALUE_CHARS:
        out = _LONG_QUOTED.sub(_shorten, out)
    return capped(out, limit)


def _shorten(m: re.Match[str]) -> str:
    pieces = _ESCAPE_OR_CHAR.findall(m.group(1))  # never cut inside an escape like \x1b
    kept, used = [], 0
    for p in pieces:
        if used + len(p) > VALUE_CHARS:
            break
        kept.append(p)
        used += len(p)
    return "'" + "".join(kept) + "'" + _more(len(pieces) - len(kept))
