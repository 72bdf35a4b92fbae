"""Unbounded input through the CLI (issue #20, class 2): each class of
tests/unit/test_bounded_input.py given to the commands that read it:
one line, exit 2, nothing written."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from envbuild.common import boundedio
from envbuild.common.boundedio import MAX_DEPTH
from envbuild.common.errors import EXIT_USAGE
from tests.support import FIXTURES, ROOT, Cli, run_cli
from tests.support.bounded_input import _ESCAPES, _bounded_lines, _dots, _raw_controls

MEMORY = 1 << 30  # the address space a CLI run gets here: a runaway read dies, not the machine
FIXTURE_FACTS = FIXTURES / "doctor" / "h100-healthy"


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


def test_explain_cli_prints_no_raw_escape() -> None:
    text = ("\x1b]0;pwned\x07\x1b[2J RuntimeError: CUDA error: no kernel image is available for "
            "execution on the device\r\n")
    r = run_cli("explain", input_text=text, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "\\x1b]0;pwned\\x07" in r.stdout
    assert not _raw_controls(r.stdout, "\n")


def test_the_issue_examples() -> None:
    long = "1" * 10_000
    for flag in ("--cuda", "--torch"):
        r = run_cli("resolve", flag, long, timeout=60)
        line = _refused(r)
        assert "(9920 more characters)" in line and len(line) < 200


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


# ---- numbers: every int and float option refuses what is not a number in its range ------------

def _number_options() -> list[tuple[tuple[str, ...], str]]:
    """(command path, option) for every option taking a number or a duration."""
    import click
    import typer

    from envbuild.cli import load_commands
    from envbuild.cli._app import app
    from envbuild.cli._options import SecondsType

    load_commands([])
    out: list[tuple[tuple[str, ...], str]] = []

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                walk(sub, (*path, name))
            return
        out.extend((path, p.opts[0]) for p in cmd.params if isinstance(p, click.Option)
                   and isinstance(p.type, (click.types.FloatParamType,
                                           click.types.IntParamType, SecondsType)))

    walk(typer.main.get_command(app), ())
    return out


NUMBER_OPTIONS = _number_options()
NOT_NUMBERS = ["nan", "inf", "-inf", "1e999", "-1", "-0.5", "1e-300", "abc", "0x", ""]


def test_every_duration_is_a_seconds_option() -> None:
    """No float option is left a plain float: each is a SecondsType (finite, above 0)."""
    import click

    from envbuild.cli._options import SecondsType

    assert any(o == "--timeout" for _, o in NUMBER_OPTIONS)
    for path, opt in NUMBER_OPTIONS:
        import typer

        from envbuild.cli._app import app
        cmd: Any = typer.main.get_command(app)
        for word in path:
            cmd = cmd.commands[word]
        p = next(q for q in cmd.params if q.opts[0] == opt)
        assert not isinstance(p.type, click.types.FloatParamType), (path, opt)
        if opt == "--timeout":
            assert isinstance(p.type, SecondsType), (path, opt)


@pytest.mark.parametrize("value", NOT_NUMBERS)
@pytest.mark.parametrize(("path", "name"), NUMBER_OPTIONS,
                         ids=[f"{' '.join(p)} {n}" for p, n in NUMBER_OPTIONS])
def test_every_number_option_refuses_what_is_not_a_number_in_range(
        offline: None, capsys: pytest.CaptureFixture[str], path: tuple[str, ...], name: str,
        value: str) -> None:
    """NaN, infinity, negative and non-numeric values are exit 2 and one error line, before
    anything runs (a NaN timeout once made every measurement fail at once)."""
    from envbuild.cli import run

    Path("task.log").write_text("")  # in the offline fixture's folder
    needs = {("validate",): ["img"], ("cluster", "validate"): ["img", "--slurm"],
             ("cluster", "render"): ["img", "--slurm"], ("cluster", "collect"): ["task.log"],
             ("make",): ["--cuda", "12.2"], ("fit",): ["--config", "c.json"]}
    rc = run([*path, *needs.get(path, []), f"{name}={value}"])
    err = capsys.readouterr().err
    assert rc == EXIT_USAGE, (value, err)
    assert "Traceback" not in err
    assert err.startswith("error: ") and name in err, err
    assert len(err.splitlines()) == 2, err  # the error and its hint
