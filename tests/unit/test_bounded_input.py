"""Input that is not bounded (issue #20, class 2), class by class, each generated:

- nesting: TOML and JSON of every nesting mechanism (arrays, inline tables, dotted keys, table
  headers, objects) at depths from 1 to 100,000, exactly at the cap and past it, through the
  parser functions and through every CLI entry point that reads such a file;
- special files (/dev/zero, /dev/urandom, a FIFO without a writer, a directory, a socket, symlinks
  to them) given to every command that reads a file, run as a subprocess with a memory limit and
  a timeout: exit 2, one error line and one hint line, no traceback;
- long and escape-laden values for every value-taking option of every command (enumerated from
  the CLI itself, so a new option is covered), and generated ones for the request's fields: each
  printed error line is bounded and holds no raw control character.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import tomllib
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.boundedio import MAX_DEPTH, TooDeep, parse_json, parse_toml
from envbuild.common.echo import MESSAGE_CHARS, VALUE_CHARS, one_line, shown
from envbuild.common.errors import UsageError
from tests.support.bounded_input import _ESCAPES, MAX_LINE, _dots, _raw_controls

_PIECES = st.sampled_from([*_ESCAPES, "x", "é", "'", '"', "\\", " ", "9", "\U0001f600"])
HOSTILE = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=300),
    st.lists(_PIECES, max_size=3000).map("".join),
    st.integers(1, 12_000).map(lambda n: "9" * n),
    st.builds(lambda a, n: a + "x" * n, st.lists(_PIECES, max_size=20).map("".join),
              st.integers(0, 10_000)),
)


@given(value=HOSTILE)
@settings(max_examples=400, deadline=None)
def test_shown_is_bounded_escaped_and_faithful(value: str) -> None:
    import ast

    from envbuild.common.redact import mask_url, may_hold_login

    out = shown(value)
    if may_hold_login(value):  # what may be a login is masked first (test_secrets owns that)
        value = mask_url(value)
    assert out.isprintable()
    assert len(out) <= VALUE_CHARS + 40
    quoted, cut, rest = out.rpartition("...(") if out.endswith(")") else ("", "", out)
    head = ast.literal_eval(quoted or rest)  # what is shown is the value's start, escaped
    assert value.startswith(head)
    if cut:
        left = int(rest.split()[0])
        assert left == len(value) - len(head) > 0  # and it says how much is left out
    else:
        assert head == value
    if value.isprintable() and len(repr(value)) <= VALUE_CHARS + 2:
        assert out == repr(value)  # a short printable value is shown whole, as repr shows it


@given(value=HOSTILE, prefix=st.sampled_from(["", "error ", "--flag "]))
@settings(max_examples=300, deadline=None)
def test_one_line_is_bounded_and_escaped(value: str, prefix: str) -> None:
    for text in (prefix + value, f"Invalid value for '--nodes': {value!r} is not a valid integer",
                 f"{prefix}{value!r} and {value!r}"):
        out = one_line(text)
        assert out.isprintable() and len(out) <= MESSAGE_CHARS + 40
        assert one_line(out) == out or len(out) > MESSAGE_CHARS  # idempotent on its own output


def test_one_line_keeps_ordinary_messages() -> None:
    for text in ["the user's image isn't here: 'x' is not one of a, b",
                 "--torch '2.99' matches no torch release", "a" * 900]:
        assert one_line(text) == text


# ---- nesting: exact at the cap, cheap far past it, for every mechanism -------------------------

def _depth(value: Any) -> int:
    """Containers nested in value, the outermost counted (without recursion)."""
    best, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            best = max(best, d)
            stack += [(c, d + 1) for c in (v.values() if isinstance(v, dict) else v)]
    return best


# name -> (text of nesting n, the depth the parsed document has)
FAMILIES: dict[str, tuple[str, Callable[[int], str], Callable[[int], int]]] = {
    "json array": ("json", lambda n: "[" * n + "]" * n, lambda n: n),
    "json object": ("json", lambda n: '{"a": ' * n + "1" + "}" * n, lambda n: n),
    "json in strings": ("json", lambda n: '["[{\\"]", ' + "[" * (n - 1) + "0" + "]" * (n - 1)
                        + "]", lambda n: n),
    "toml array": ("toml", lambda n: "x = " + "[" * n + "]" * n, lambda n: n + 1),
    "toml inline table": ("toml", lambda n: "x = " + "{a = " * n + "1" + "}" * n,
                          lambda n: n + 1),
    "toml dotted key": ("toml", lambda n: _dots(n) + " = 1", lambda n: n),
    "toml header": ("toml", lambda n: f"[{_dots(n)}]\nx = 1", lambda n: n + 1),
    "toml array of tables": ("toml", lambda n: f"[[{_dots(n)}]]\nx = 1", lambda n: n + 2),
    "toml inline dotted": ("toml", lambda n: "x = {" + _dots(n) + " = 1}", lambda n: n + 1),
    "toml header and key": ("toml", lambda n: f"[{_dots(n)}]\n{_dots(n)} = 1",
                            lambda n: 2 * n),
    "toml brackets in strings": (
        "toml", lambda n: "s = '[[[['\nt = \"\\\"[{\"\nu = '''[[\n'''\nv = \"\"\"[\\\"\"\"\"\n"
        "# [[[[\nx = " + "[" * n + "]" * n, lambda n: n + 1),
}
DEPTHS = [1, 2, 10, MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, MAX_DEPTH + 2, 100,
          1000, 100_000]


@pytest.mark.parametrize("n", DEPTHS)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_nesting_is_refused_exactly_past_the_cap(family: str, n: int) -> None:
    kind, text_of, depth_of = FAMILIES[family]
    text = text_of(n)
    parse: Callable[[str], Any] = parse_json if kind == "json" else parse_toml
    start = time.monotonic()
    if depth_of(n) <= MAX_DEPTH:
        doc = parse(text)
        assert doc == (json.loads(text) if kind == "json" else tomllib.loads(text))
        assert _depth(doc) == depth_of(n)  # the family's depth formula is right
    else:
        with pytest.raises(TooDeep):
            parse(text)
    assert time.monotonic() - start < 2  # 100,000 dotted keys cost tomllib minutes and GiBs


_key = st.one_of(st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True),
                 st.text(st.sampled_from("a.[]{}#'\"\\= é"), min_size=1, max_size=6))
_str = st.lists(st.sampled_from([*"[]{}#'\".\\=,\n\t ab", "'''", '"""', "é", "\x1b"]),
                max_size=12).map("".join)
_leaf = st.one_of(_str, st.integers(-10**6, 10**6), st.booleans(),
                  st.floats(allow_nan=False, allow_infinity=False))
_values = st.recursive(_leaf, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(_key, kids, max_size=4)), max_leaves=25)


def _toml_str(s: str, style: int) -> str:
    basic = json.dumps(s, ensure_ascii=True).replace("\x7f", "\\u007f")  # TOML: no raw DEL
    if style == 1 and "'" not in s and s.isprintable():
        return f"'{s}'"
    if style == 2:
        return '"""' + basic[1:-1] + '"""'
    if style == 3 and "'''" not in s and not s.endswith("'") and all(
            c.isprintable() or c == "\n" for c in s):
        return "'''" + s + "'''"
    return basic


def _toml(v: Any, style: int) -> str:
    if isinstance(v, str):
        return _toml_str(v, style)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x, style) for x in v) + "]"
    return "{" + ", ".join(f"{_toml_str(k, 0)} = {_toml(x, style)}" for k, x in v.items()) + "}"


def _outcome(parse: Callable[[str], Any], text: str) -> tuple[str, Any]:
    try:
        return "ok", parse(text)
    except tomllib.TOMLDecodeError:
        return "not TOML", None


def _wrap(v: Any, levels: int) -> Any:
    for _ in range(levels):
        v = [v]
    return v


@given(value=_values, style=st.integers(0, 3), extra=st.sampled_from([0, 1, 2]))
@settings(max_examples=300, deadline=None)
def test_strings_full_of_brackets_never_count_and_the_cap_is_exact(value: Any, style: int,
                                                                   extra: int) -> None:
    """Generated documents: the pre-scan agrees with the parsers on strings, comments and keys;
    wrapped to the cap exactly they parse, one level past it they are refused."""
    assert parse_json(json.dumps(value)) == value
    text = f"x = {_toml(value, style)}"
    assert _outcome(parse_toml, text) == _outcome(tomllib.loads, text)
    d = _depth(value)
    at_cap = _wrap(value, MAX_DEPTH - d - 1 + extra)  # x = ... adds the document's own level
    text = f"x = {_toml(at_cap, style)}"
    if extra == 0:
        assert _outcome(parse_toml, text) == _outcome(tomllib.loads, text)
    elif _outcome(tomllib.loads, text)[0] == "ok":
        with pytest.raises(TooDeep):
            parse_toml(text)
    as_json = json.dumps(_wrap(value, MAX_DEPTH - d + extra))
    if extra == 0:
        assert parse_json(as_json) == json.loads(as_json)
    else:
        with pytest.raises(TooDeep):
            parse_json(as_json)


@pytest.mark.parametrize("text", ["x = " + "9" * 5000, "x = 1\ny = [" + "9" * 5000 + "]"])
def test_integer_past_the_digit_limit_is_a_toml_error(text: str) -> None:
    with pytest.raises(tomllib.TOMLDecodeError):
        parse_toml(text)


def test_a_pipe_on_stdin_is_read_up_to_the_stream_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pipe is a stream: its tail is kept in a window, and past STREAM_BYTES it is refused
    (the cap made small here; the real 1 GiB is measured in the report)."""
    import threading

    from envbuild.features.explain import read_log

    def write(fd: int, data: bytes) -> None:
        with contextlib.suppress(BrokenPipeError), os.fdopen(fd, "wb") as out:
            out.write(data)

    for size, refused in ((90_000, False), (110_000, True)):
        r, w = os.pipe()
        data = b"x" * (size - 40) + b"\nRuntimeError: CUDA error: out of memory\n"
        writer = threading.Thread(target=write, args=(w, data))
        writer.start()
        with os.fdopen(r, "rb") as stream:
            if refused:
                with pytest.raises(UsageError, match="read as a stream"):
                    read_log(stream, limit=1 << 15, head=1 << 12, most=100_000)
            else:
                log = read_log(stream, limit=1 << 15, head=1 << 12, most=100_000)
                assert log.cut and log.total_bytes == len(data)
                assert log.text.endswith("out of memory\n")
        writer.join(10)
        assert not writer.is_alive()


# ---- explain's report: the log's terminal escapes never reach the terminal --------------------

@given(noise=st.lists(st.sampled_from([*_ESCAPES, "x", " ", "é"]), max_size=30).map("".join))
@settings(max_examples=100, deadline=None)
def test_matched_line_is_escaped(noise: str) -> None:
    from envbuild.features.explain import explain
    from envbuild.matrix import load

    line = noise.replace("\n", " ").replace("\u2028", " ") + \
        " RuntimeError: CUDA error: no kernel image is available for execution on the device"
    matches = explain(line + "\n", load())
    assert matches
    for m in matches:
        assert not _raw_controls(m.line) and not _raw_controls(m.fix) and len(m.line) <= 240


REQUEST_FIELDS = ("cuda", "rocm", "torch", "python", "driver", "os", "target", "flavor")


@given(field=st.sampled_from([*REQUEST_FIELDS, "gpus", "components"]), value=HOSTILE)
@settings(max_examples=400, deadline=None)
def test_request_errors_echo_values_bounded(field: str, value: str) -> None:
    from envbuild.core.request import Request, parse
    from envbuild.matrix import load

    req = Request(**{field: (value,) if field in ("gpus", "components") else value})
    try:
        parse(req, load())
    except UsageError as exc:
        for text in (exc.message, exc.hint, *exc.alternatives):
            assert len(text) < MAX_LINE and not _raw_controls(text), text[:300]
