"""The one reader of the files envbuild is given or finds on disk: bounded in every dimension.
Pure apart from the read itself.

Files (team files, lock files, matrix TOML, doctor recordings, spec.json, bundle.json, reports,
caches):
- only a regular file is read; a symlink is followed and its target must be one. FIFOs, sockets,
  devices (/dev/zero, /dev/urandom, a terminal) and directories are refused before a byte is read.
  The file is opened non-blocking, so even a FIFO swapped in between the check and the open cannot
  make envbuild wait for a writer; its type is checked again on the open file.
- each kind of file has a stated size cap, checked on the size the file reports and again while
  reading (a file growing under the read is refused at cap + 1 bytes);
- text is strict UTF-8;
- TOML and JSON nest at most MAX_DEPTH levels: the text is scanned before a parser (which recurses,
  and for TOML's dotted keys costs quadratic memory) sees it, and the parsed value is measured
  (TOML nests through table headers and dotted keys too).
Each refusal is a UsageError (exit 2): one line naming the file, and a hint. parse_toml() and
parse_json() apply the nesting cap to texts that are not files (HTTP answers, members of an image
archive, a validator's output): TooDeep, a ValueError, where the parsers' own errors are.

Logs (`explain --file`, `cluster collect`) may be large and need not be files: `open_log()` takes
a regular file (its head and tail are read, see explain.read_log) or a pipe, FIFO or socket (read
as a stream, at most STREAM_BYTES of it); devices and directories are refused. A FIFO is opened
without waiting for a writer: one that has none reads as empty.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from envbuild.common.echo import escaped
from envbuild.common.errors import UsageError
from envbuild.common.lazyre import lazy

CONFIG_BYTES = 4 << 20  # a TOML/JSON file a person writes or envbuild writes (team, matrix, spec)
RECORD_BYTES = 16 << 20  # one recorded command output of `doctor --save`
CACHE_BYTES = 64 << 20  # envbuild's own caches and reports
STREAM_BYTES = 1 << 30  # a log read from a pipe: the tail window is kept, this much is read at most
MAX_DEPTH = 64  # nesting of TOML/JSON values; envbuild's own files need fewer than 6
CHUNK = 1 << 20


class TooDeep(ValueError):
    """A TOML/JSON text nests deeper than MAX_DEPTH (a ValueError, as a parser's error is)."""

    def __init__(self, limit: int = MAX_DEPTH) -> None:
        super().__init__(f"nested more than {limit} levels deep")


def size_text(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            value = n / (1 << shift)
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"


def path_text(path: Path | str) -> str:
    """A path as a message names it: escaped, at most 200 characters."""
    text = escaped(str(path))
    return text if len(text) <= 200 else f"{text[:100]}...{text[-97:]}"


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _not_regular(path: Path, mode: int, what: str, hint: str) -> UsageError:
    via = " (through a symlink)" if os.path.islink(path) else ""
    return UsageError(f"{path_text(path)}: is {kind_of(mode)}{via}, not a regular file",
                      hint or f"give the {what} as a regular file")


def _unreadable(path: Path, exc: OSError,
                hint: str = "check the path and its permissions") -> UsageError:
    return UsageError(f"cannot read {path_text(path)}: {exc.strerror or exc}", hint)


def _too_big(path: Path, size: int | None, what: str, cap: int, hint: str) -> UsageError:
    got = f"{size_text(size)}" if size is not None else f"more than {size_text(cap)}"
    return UsageError(f"{path_text(path)}: {got}; a {what} is read up to {size_text(cap)}",
                      hint or f"is it the right file? a {what} is far smaller")


def regular_file(path: Path, what: str, hint: str = "") -> os.stat_result:
    """The stat of `path` (symlinks followed) if it is a regular file; UsageError otherwise.
    A missing file raises FileNotFoundError, for the caller's own message."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _unreadable(path, exc) from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode, what, hint)
    return st


def read_bytes(path: Path, what: str, *, cap: int = CONFIG_BYTES, hint: str = "") -> bytes:
    """The whole of a regular file of at most `cap` bytes (see the module's rules).
    FileNotFoundError is raised as it is; every other refusal is a UsageError."""
    st = regular_file(path, what, hint)
    if st.st_size > cap:
        raise _too_big(path, st.st_size, what, cap, hint)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise _unreadable(path, exc) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped after the check
            raise _not_regular(path, mode, what, hint)
        chunks, got = [], 0
        while got <= cap:
            chunk = os.read(fd, min(CHUNK, cap + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > cap:
            raise _too_big(path, None, what, cap, hint)
        return b"".join(chunks)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    finally:
        os.close(fd)


def decode(data: bytes, path: Path, what: str) -> str:
    """Strict UTF-8, or a UsageError naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path_text(path)}: not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                         f"offset {exc.start})", f"save the {what} as UTF-8") from None


def read_text(path: Path, what: str, *, cap: int = CONFIG_BYTES, hint: str = "") -> str:
    return decode(read_bytes(path, what, cap=cap, hint=hint), path, what)


# ---------------------------------------------------------------- nesting

# Where nesting can change: brackets; a dot (a dotted key or header: one level each; a float's
# dot over-counts by one); what ends a dotted run. Strings and comments are skipped by find().
# No backtracking regex: a hostile text costs one pass.
_TOML_STOPS = lazy(r"[\"'#\[\]{}.=,\n]")
_JSON_STOPS = lazy(r'["\[\]{}]')


# the body of a basic string (possessive: no backtracking), up to its closing quote(s)
_BASIC_BODY = lazy(r'(?:[^"\\\n]++|\\[\s\S])*+')
_JSON_BODY = lazy(r'(?:[^"\\]++|\\[\s\S])*+')
_ML_BODY = lazy(r'(?:[^"\\]++|\\[\s\S]|"(?!""))*+')


def _string_end(text: str, i: int, triple: bool, toml: bool) -> int:
    """Index after the basic string whose body starts at `i`."""
    body = (_ML_BODY if triple else _BASIC_BODY if toml else _JSON_BODY).match(text, i)
    end = body.end() if body is not None else i
    if not text.startswith('"', end):
        return end  # unterminated: the parser will say so
    if not triple:
        return end + 1
    close = end + 3
    while close < len(text) and close - end < 5 and text[close] == '"':
        close += 1  # """a"""" is a" (up to two quotes before the closing three)
    return close


def _literal_end(text: str, i: int, triple: bool) -> int:
    if triple:
        j = text.find("\'\'\'", i)
        if j < 0:
            return len(text)
        end = j + 3
        while end < len(text) and end - j < 5 and text[end] == "'":
            end += 1
        return end
    j, nl = text.find("'", i), text.find("\n", i)
    return len(text) if j < 0 and nl < 0 else j + 1 if nl < 0 or 0 <= j < nl else nl


def _too_deep_text(text: str, limit: int, toml: bool) -> None:
    """Raise TooDeep where the text nests past `limit` (brackets; for TOML also dotted runs)."""
    stops = _TOML_STOPS if toml else _JSON_STOPS
    depth = dots = 0
    i = 0
    while (m := stops.search(text, i)) is not None:
        t, i = m.group(), m.end()
        if t == '"':
            triple = text.startswith('""', i)
            i = _string_end(text, i + 2 if triple else i, triple, toml)
        elif t == "'":
            triple = text.startswith("''", i)
            i = _literal_end(text, i + 2 if triple else i, triple)
        elif t == "#":
            nl = text.find("\n", i)
            i = len(text) if nl < 0 else nl
        elif t in "[{":
            depth, dots = depth + 1, 0
            if depth > limit:
                raise TooDeep(limit)
        elif t in "]}":
            depth, dots = max(depth - 1, 0), 0
        elif t == ".":
            dots += 1
            if depth + dots > limit:
                raise TooDeep(limit)
        else:  # = , newline: a dotted run ends
            dots = 0


def _value_depth_ok(value: Any, limit: int) -> None:
    """Measured without recursion: the parsed value nests at most `limit` containers."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        children = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if children is None:
            continue
        if d > limit:
            raise TooDeep(limit)
        stack.extend((c, d + 1) for c in children if isinstance(c, dict | list))


def parse_toml(text: str, limit: int = MAX_DEPTH) -> dict[str, Any]:
    """tomllib.loads, nesting bounded: TooDeep (a ValueError) past `limit`; any other error is a
    TOMLDecodeError (an integer of more than 4300 digits included)."""
    import tomllib  # here, not at the top: a cached matrix needs no TOML parser

    _too_deep_text(text, limit, toml=True)
    try:
        doc = tomllib.loads(text)
    except RecursionError:
        raise TooDeep(limit) from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as exc:
        raise tomllib.TOMLDecodeError(str(exc)) from None
    _value_depth_ok(doc, limit)
    return doc


def parse_json(text: str | bytes, limit: int = MAX_DEPTH) -> Any:
    """json.loads, nesting bounded: TooDeep past `limit`; a ValueError for anything invalid."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")  # UnicodeDecodeError: a ValueError
    # json's C decoder guards its own recursion (RecursionError, never a crash), so the whole text
    # parses first and the value's depth is measured after: no pass over the text in Python (the
    # matrix cache is read on every command)
    try:
        value = json.loads(text)
    except RecursionError:
        raise TooDeep(limit) from None
    _value_depth_ok(value, limit)
    return value


def parse_json_prefix(text: str, limit: int = MAX_DEPTH) -> tuple[Any, int]:
    """json's raw_decode (the JSON value at the start of text, and where it ends), nesting
    bounded: TooDeep past `limit` (the text after the value is scanned too)."""
    _too_deep_text(text, limit, toml=False)
    try:
        return json.JSONDecoder().raw_decode(text)
    except RecursionError:
        raise TooDeep(limit) from None


def _too_deep(path: Path, what: str, exc: TooDeep) -> UsageError:
    return UsageError(f"{path_text(path)}: {exc}; a {what} is read up to {MAX_DEPTH} levels",
                      "flatten it: no envbuild file nests more than a few tables or lists")


def load_toml(path: Path, what: str, *, cap: int = CONFIG_BYTES, hint: str = "") -> dict[str, Any]:
    """A TOML file, read and parsed within the bounds. A syntax error is a TOMLDecodeError, for
    the caller's own message; FileNotFoundError as it is; every other refusal a UsageError."""
    text = read_text(path, what, cap=cap, hint=hint)
    try:
        return parse_toml(text)
    except TooDeep as exc:
        raise _too_deep(path, what, exc) from None


def load_json(path: Path, what: str, *, cap: int = CONFIG_BYTES, hint: str = "") -> Any:
    """A JSON file, read and parsed within the bounds. A syntax error is a ValueError
    (json.JSONDecodeError); FileNotFoundError as it is; every other refusal a UsageError."""
    text = read_text(path, what, cap=cap, hint=hint)
    try:
        return parse_json(text)
    except TooDeep as exc:
        raise _too_deep(path, what, exc) from None


# ---------------------------------------------------------------- logs


def open_log(path: Path, what: str = "log", hint: str = "") -> BinaryIO:
    """A log to read: a regular file, or a pipe, FIFO or socket (a stream: see check_stream).
    Devices and directories are refused; a FIFO is opened without waiting for a writer."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _unreadable(path, exc, f"give a readable {what} file") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode)
            or stat.S_ISSOCK(st.st_mode)):
        raise _not_a_log(path, st.st_mode, what, hint, os.path.islink(path))
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise _unreadable(path, exc, f"give a readable {what} file") from None
    try:
        check_stream(fd, path, what, hint)
        os.set_blocking(fd, True)  # opened without waiting; now a writer's data is waited for
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def check_stream(fd: int, name: Path | str, what: str = "log", hint: str = "") -> bool:
    """Whether fd is a regular file (True) or a stream: a pipe, FIFO or socket (False);
    a UsageError for anything else (a device such as /dev/zero, a directory)."""
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        return True
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return False
    raise _not_a_log(name, mode, what, hint)


def _not_a_log(name: Path | str, mode: int, what: str, hint: str,
               link: bool = False) -> UsageError:
    via = " (through a symlink)" if link else ""
    return UsageError(f"{path_text(name)}: is {kind_of(mode)}{via}, not a {what}",
                      hint or f"give the {what} as a file, or pipe it on stdin")


def too_long_stream(name: Path | str, what: str = "log",
                    hint: str = "pipe only its end: tail -c 8M LOG | envbuild explain",
                    ) -> UsageError:
    return UsageError(f"{path_text(name)}: more than {size_text(STREAM_BYTES)} read as a stream; "
                      f"a {what} is read up to that", hint)
