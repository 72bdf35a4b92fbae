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
import shutil
import socket
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common import boundedio
from envbuild.common.boundedio import MAX_DEPTH, TooDeep, parse_json, parse_toml
from envbuild.common.echo import MESSAGE_CHARS, VALUE_CHARS, one_line, shown
from envbuild.common.errors import EXIT_USAGE, UsageError
from tests.conftest import ROOT, Cli, run_cli

MAX_LINE = 400  # what one printed error line may be, whatever the input
MEMORY = 1 << 30  # the address space a CLI run gets here: a runaway read dies, not the machine
FIXTURE_FACTS = ROOT / "tests" / "fixtures" / "doctor" / "h100-healthy"


def _raw_controls(text: str, allowed: str = "") -> list[str]:
    return [c for c in text if not c.isprintable() and c not in allowed]


def _bounded_lines(text: str, where: str) -> None:
    for line in text.splitlines():
        assert len(line) < MAX_LINE, (where, len(line), line[:200])
        assert not _raw_controls(line), (where, line[:200])


def _refused(r: Cli, *words: str) -> str:
    """Exit 2, exactly `error: ...` and `hint: ...`, bounded and escaped, no traceback."""
    assert r.returncode == EXIT_USAGE, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr + r.stdout
    lines = r.stderr.splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("hint: "), \
        r.stderr[-2000:]
    _bounded_lines(r.stderr, "stderr")
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# ---- the central echo: every value a message quotes is escaped and capped ---------------------

_ESCAPES = ["\x1b[31m", "\x1b]0;title\x07", "\x1b[2J", "\r", "\x07", "\x08", "\x7f", "\x9b",
            "\u202e", "\u2028", "\t", "\n", "\x00"]
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


def _dots(n: int) -> str:
    return ".".join(["a"] * n)


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


# ---- nesting through every CLI entry point that reads TOML or JSON -----------------------------

def _team(tmp: Path, body: str) -> list[str]:
    f = tmp / "envbuild.toml"
    f.write_text('[image.a]\ntarget = "cpu"\n\n' + body + "\n")
    return ["team", "plan", "--file", str(f)]


def _matrix(tmp: Path, body: str, show: bool) -> list[str]:
    d = tmp / "matrix"
    shutil.copytree(ROOT / "matrix", d)
    with (d / "cuda.toml").open("a") as fh:
        fh.write("\n" + body + "\n")
    return ["matrix", "show", "cuda", "--dir", str(d)] if show else \
        ["matrix", "check", "--dir", str(d)]


def _facts(tmp: Path, nested: str) -> list[str]:
    d = tmp / "facts"
    shutil.copytree(FIXTURE_FACTS, d)
    host = (d / "host.json").read_text()
    (d / "host.json").write_text(host.replace("{", '{"nested": ' + nested + ", ", 1))
    return ["doctor", "--facts", str(d)]


TOML_CLI: dict[str, Callable[[Path, str], list[str]]] = {
    "team plan": _team,
    "matrix check --dir": lambda tmp, body: _matrix(tmp, body, False),
    "matrix show --dir": lambda tmp, body: _matrix(tmp, body, True),
}
TOML_BODIES: dict[str, Callable[[int], str]] = {
    "array": lambda n: "x = " + "[" * n + "]" * n,
    "inline table": lambda n: "x = " + "{a = " * n + "1" + "}" * n,
    "dotted key": lambda n: _dots(n) + " = 1",
    "header": lambda n: f"[{_dots(n)}]\nx = 1",
}


# every mechanism through the team file; the matrix readers share one path: brackets and dots
TOML_CASES = [(c, b) for c in sorted(TOML_CLI) for b in sorted(TOML_BODIES)
              if c == "team plan" or b in ("array", "dotted key")]


@pytest.mark.parametrize("n", [3, 1000, 100_000])
@pytest.mark.parametrize(("command", "body"), TOML_CASES)
def test_deep_toml_at_every_entry_point(tmp_path: Path, command: str, body: str, n: int) -> None:
    r = run_cli(*TOML_CLI[command](tmp_path, TOML_BODIES[body](n)), memory=MEMORY, timeout=120)
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr
    if n > MAX_DEPTH:
        _refused(r, "nested more than 64 levels")
    else:  # the file's own checks speak (an unknown key), not the nesting cap
        assert r.returncode in (1, 2) and "nested more than" not in r.stderr + r.stdout


@pytest.mark.parametrize("n", [3, 1000, 100_000])
@pytest.mark.parametrize("shape", ["array", "object"])
def test_deep_json_in_a_doctor_recording(tmp_path: Path, shape: str, n: int) -> None:
    nested = "[" * n + "]" * n if shape == "array" else '{"a": ' * n + "1" + "}" * n
    r = run_cli(*_facts(tmp_path, nested), memory=MEMORY, timeout=120)
    assert "Traceback" not in r.stderr
    if n > MAX_DEPTH:
        _refused(r, "nested more than 64 levels")
    else:
        assert "nested more than" not in r.stderr and r.returncode in (0, 1), r.stderr


# ---- special files: every command that reads a file --------------------------------------------

KINDS = ("/dev/zero", "/dev/urandom", "fifo", "directory", "socket", "link-zero", "link-fifo",
         "link-directory")
IN_DIR = ("/dev/zero", "/dev/urandom", "fifo", "directory", "socket")  # as a file in a folder


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for s in held:
        s.close()


def _special(kind: str, at: Path, held: list[socket.socket]) -> Path:
    """Make the special file `kind` at `at` (a device there: a symlink to it); return the path
    to pass (a device itself where `at` is only a suggestion, see _direct)."""
    if kind.startswith("/dev/"):
        at.symlink_to(kind)
    elif kind == "fifo":
        os.mkfifo(at)
    elif kind == "directory":
        at.mkdir()
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(at))
        held.append(s)
    else:
        target = at.with_name(at.name + ".target")
        _special({"link-zero": "/dev/zero", "link-fifo": "fifo",
                  "link-directory": "directory"}[kind], target, held)
        if kind == "link-zero":
            target.unlink()
            target = Path("/dev/zero")
        at.symlink_to(target)
    return at


def _direct(kind: str, tmp: Path, held: list[socket.socket]) -> Path:
    """A path argument: a device is given as itself; anything else is made in tmp."""
    return Path(kind) if kind.startswith("/dev/") else _special(kind, tmp / "special", held)


def _context(tmp: Path) -> Path:
    ctx = tmp / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\n")
    return ctx


# entry point -> (tmp, the special's path) -> argv; DIRECT: the path is the argument itself
DIRECT: dict[str, Callable[[Path, Path], list[str]]] = {
    "team plan --file": lambda tmp, p: ["team", "plan", "--file", str(p)],
    "explain --file": lambda tmp, p: ["explain", "--file", str(p)],
    "cluster collect": lambda tmp, p: ["cluster", "collect", str(p)],
    "render --ca-cert": lambda tmp, p: ["render", "--target", "cpu", "--ca-cert", str(p),
                                        "--out", str(tmp / "out")],
    "validate --host --spec": lambda tmp, p: ["validate", "--host", "--spec", str(p)],
}
INSIDE: dict[str, tuple[Callable[[Path], Path], Callable[[Path], list[str]]]] = {
    "team plan: envbuild.lock": (
        lambda tmp: tmp / "envbuild.lock",
        lambda tmp: _team(tmp, "")),
    "team check: envbuild.lock": (
        lambda tmp: tmp / "envbuild.lock",
        lambda tmp: ["team", "check", "--file", _team(tmp, "")[-1]]),
    "matrix check --dir: cuda.toml": (
        lambda tmp: tmp / "m" / "cuda.toml",
        lambda tmp: ["matrix", "check", "--dir", str(tmp / "m")]),
    "matrix show --dir: torch.toml": (
        lambda tmp: tmp / "m" / "torch.toml",
        lambda tmp: ["matrix", "show", "torch", "--dir", str(tmp / "m")]),
    "doctor --facts: host.json": (
        lambda tmp: tmp / "facts" / "host.json",
        lambda tmp: ["doctor", "--facts", str(tmp / "facts")]),
    "doctor --facts: a recorded output": (
        lambda tmp: tmp / "facts" / "nvidia-smi-q-x.xml",
        lambda tmp: ["doctor", "--facts", str(tmp / "facts")]),
    "build CONTEXT: spec.json": (
        lambda tmp: _context(tmp) / "spec.json",
        lambda tmp: ["build", str(tmp / "ctx")]),
    "make --from-bundle: bundle.json": (
        lambda tmp: tmp / "bundle" / "bundle.json",
        lambda tmp: ["make", "--target", "cpu", "--from-bundle", str(tmp / "bundle")]),
}


def _prepare(tmp: Path, where: Path) -> None:
    """The folder the special file goes into, with everything else in it as it should be."""
    if where.parent.name == "m":
        shutil.copytree(ROOT / "matrix", where.parent)
    elif where.parent.name == "facts":
        shutil.copytree(FIXTURE_FACTS, where.parent)
    where.parent.mkdir(parents=True, exist_ok=True)
    if where.exists():
        where.unlink()


# what the error says: the kind, named before a byte is read ...
KIND_WORDS = {"/dev/zero": "is a character device", "/dev/urandom": "is a character device",
              "fifo": "is a FIFO", "directory": "is a directory", "socket": "is a socket",
              "link-zero": "is a character device (through a symlink)",
              "link-fifo": "is a FIFO (named pipe) (through a symlink)",
              "link-directory": "is a directory (through a symlink)"}
# ... except where a stream is a log (a FIFO without a writer is empty; a socket file cannot be
# opened) or the command first checks for a regular file itself
STREAMS = {"fifo": "", "link-fifo": "", "socket": "No such device or address"}
EXPECTED: dict[str, Callable[[str], str]] = {
    "explain --file": lambda k: STREAMS.get(k, KIND_WORDS[k]) or "the error text is empty",
    "cluster collect": lambda k: STREAMS.get(k, KIND_WORDS[k]) or "no envbuild cluster report",
    "render --ca-cert": lambda k: "is a directory, not a file" if "directory" in k else
    KIND_WORDS[k],
    "build CONTEXT: spec.json": lambda k: "is not a rendered build context",
}


def _expected(command: str, kind: str) -> str:
    return EXPECTED.get(command, lambda k: KIND_WORDS[k])(kind)


def _run_special(argv: list[str], tmp: Path) -> Cli:
    return run_cli(*argv, memory=MEMORY, timeout=60, cwd=tmp,
                   env={"DOCKER_HOST": "unix:///nonexistent.sock"})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", sorted(DIRECT))
def test_special_file_as_the_argument(tmp_path: Path, sockets: list[socket.socket],
                                      command: str, kind: str) -> None:
    path = _direct(kind, tmp_path, sockets)
    r = _run_special(DIRECT[command](tmp_path, path), tmp_path)
    _refused(r, _expected(command, kind))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", IN_DIR)
@pytest.mark.parametrize("command", sorted(INSIDE))
def test_special_file_inside_a_folder(tmp_path: Path, sockets: list[socket.socket],
                                      command: str, kind: str) -> None:
    where_of, argv_of = INSIDE[command]
    where = where_of(tmp_path)
    argv = argv_of(tmp_path)  # writes the good files first (a team file, a context)
    _prepare(tmp_path, where)
    _special(kind, where, sockets)
    words = _expected(command, kind)
    _refused(_run_special(argv, tmp_path), words.replace(" (through a symlink)", ""))


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"])
@pytest.mark.parametrize("command", [["explain"], ["cluster", "collect", "-"]])
def test_a_device_on_stdin_is_refused(tmp_path: Path, command: list[str], device: str) -> None:
    with open(device, "rb") as fh:
        r = run_cli(*command, stdin=fh, memory=MEMORY, timeout=60, cwd=tmp_path)
    _refused(r, "stdin: is a character device")


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


@pytest.mark.parametrize("size", [boundedio.CONFIG_BYTES + 1, 10 * boundedio.CONFIG_BYTES])
def test_an_oversized_regular_file_is_refused_before_it_is_read(tmp_path: Path,
                                                                 size: int) -> None:
    f = tmp_path / "envbuild.toml"
    with f.open("wb") as fh:
        fh.truncate(size)  # sparse: nothing is written
    _refused(run_cli("team", "plan", "--file", str(f), memory=MEMORY, timeout=60),
             "a team file is read up to 4 MiB")


@pytest.mark.parametrize("data", [b"\xff\xfe[image.a]", b'[image.a]\ntarget = "cpu\xc3"\n',
                                  b"\x00" * 10])
def test_a_team_file_that_is_not_utf8_is_one_line(tmp_path: Path, data: bytes) -> None:
    f = tmp_path / "envbuild.toml"
    f.write_bytes(data)
    line = _refused(run_cli("team", "plan", "--file", str(f), timeout=60))
    assert "not UTF-8" in line or "not valid TOML" in line


def test_a_big_regular_log_is_read_head_and_tail_only(tmp_path: Path) -> None:
    """explain --file on a 3 GiB sparse log: its head and tail are read, not the middle, within
    the same memory limit as every other run here."""
    f = tmp_path / "train.log"
    with f.open("wb") as fh:
        fh.write(b"torch 2.4.0\n")
        fh.truncate(3 << 30)
        fh.seek(3 << 30)
        fh.write(b"\nRuntimeError: CUDA error: no kernel image is available for execution on "
                 b"the device\n")
    r = run_cli("explain", "--file", str(f), memory=MEMORY, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "no_kernel_image" in r.stdout and "note: the input is" in r.stderr


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


def test_explain_cli_prints_no_raw_escape() -> None:
    text = ("\x1b]0;pwned\x07\x1b[2J RuntimeError: CUDA error: no kernel image is available for "
            "execution on the device\r\n")
    r = run_cli("explain", input_text=text, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "\\x1b]0;pwned\\x07" in r.stdout
    assert not _raw_controls(r.stdout, "\n")


# ---- long and escape-laden values for every value-taking option --------------------------------

def _options() -> list[tuple[tuple[str, ...], str, bool]]:
    """(command path, option or argument name, is an argument) for every value it takes."""
    import click
    import typer

    from envbuild.cli import load_commands
    from envbuild.cli._app import app

    load_commands([])
    out: list[tuple[tuple[str, ...], str, bool]] = []

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                walk(sub, (*path, name))
            return
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.is_flag and not p.hidden:
                out.append((path, p.opts[0], False))
            elif isinstance(p, click.Argument):
                out.append((path, p.name or "", True))

    walk(typer.main.get_command(app), ())
    return out


OPTIONS = _options()
# a value of each class: long, escape-laden, both; NUL-free (argv cannot hold one)
VALUES = {
    "long": "9" * 10_000,
    "escapes": "".join(_ESCAPES[:-1]) * 40 + "x",
    "both": "2.4\x1b[2J\r" + "x" * 10_000,
}


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """In-process runs that start no process, reach no network and write only under tmp."""
    from envbuild.common import http, proc
    from envbuild.common.errors import EXIT_CANNOT_RUN

    def no_process(argv: Any, *a: Any, **kw: Any) -> Any:
        raise proc.ProcessError(f"{argv[0]}: command not found", "test: no process",
                                exit_code=EXIT_CANNOT_RUN)

    def no_network(self: Any, method: str, url: str, *a: Any, **kw: Any) -> Any:
        raise http.Unreachable("test: no network", "offline")

    monkeypatch.setattr(proc, "run", no_process)
    monkeypatch.setattr(proc, "stream", no_process)
    monkeypatch.setattr(proc, "which", lambda name: None)
    monkeypatch.setattr(http.Http, "request", no_network)
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)


def _run_in_process(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    from envbuild.cli import run

    run(argv)
    got = capsys.readouterr()
    return got.out, got.err


@pytest.mark.parametrize("value", sorted(VALUES))
@pytest.mark.parametrize(("path", "name", "argument"), OPTIONS,
                         ids=[f"{' '.join(p)} {n}" for p, n, _ in OPTIONS])
def test_every_option_echoes_a_bounded_escaped_value(
        offline: None, capsys: pytest.CaptureFixture[str], path: tuple[str, ...], name: str,
        argument: bool, value: str) -> None:
    hostile = VALUES[value]
    needs = {("explain",): [], ("matrix", "show"): ["cuda"], ("build",): ["ctx"],
             ("validate",): ["img"], ("cluster", "validate"): ["img"],
             ("cluster", "render"): ["img"], ("cluster", "collect"): ["-"]}
    args = [hostile] if argument else [*needs.get(path, []), f"{name}={hostile}"]
    out, err = _run_in_process([*path, *args], capsys)
    assert "Traceback" not in err
    _bounded_lines(err, f"{' '.join(path)} {name}")
    assert not _raw_controls(out, "\n\t"), out[:300]


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


def test_the_issue_examples() -> None:
    long = "1" * 10_000
    for flag in ("--cuda", "--torch"):
        r = run_cli("resolve", flag, long, timeout=60)
        line = _refused(r)
        assert "(9920 more characters)" in line and len(line) < 200
