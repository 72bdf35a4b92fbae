"""CLI conventions: --help everywhere, lazy heavy imports, clean errors."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import ROOT, run_cli

COMMANDS = [[], ["resolve"], ["render"], ["build"], ["validate"], ["make"], ["matrix"],
            ["matrix", "check"], ["matrix", "show"], ["doctor"], ["explain"]]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_everywhere(cmd: list[str]) -> None:
    r = run_cli(*cmd, "--help")
    assert r.returncode == 0, r.stderr
    assert "Usage" in r.stdout


def test_startup_imports_no_heavy_modules() -> None:
    code = ("import sys; from envbuild.cli import run; rc = run(['resolve', '--cuda', '12.2', "
            "'--json']); heavy = [m for m in ('torch', 'docker', 'requests', 'jinja2') "
            "if m in sys.modules]; print('HEAVY', heavy, rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    assert p.stdout.strip().endswith("HEAVY [] 0")


def test_python_dash_m_and_unknown_command() -> None:
    r = run_cli("frobnicate")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_broken_matrix_is_a_clean_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    bad = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", bad)
    (bad / "torch.toml").write_text((bad / "torch.toml").read_text() + "\n[[variant]\n")
    r = run_cli("matrix", "check", "--dir", str(bad))
    assert r.returncode == 1
    assert "torch.toml: -: not valid TOML" in r.stdout


def test_version_flag() -> None:
    from envbuild import __version__

    for flag in ("--version", "-V"):
        r = run_cli(flag)
        assert r.returncode == 0 and r.stdout == f"envbuild {__version__}\n", r.stderr


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_script_and_completions(shell: str) -> None:
    r = run_cli("--show-completion", shell,
                env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert r.returncode == 0, r.stderr
    assert "_ENVBUILD_COMPLETE" in r.stdout
    # what the installed script asks for: the commands that start with "ma"
    env = {"_ENVBUILD_COMPLETE": "complete_bash", "COMP_WORDS": "envbuild ma", "COMP_CWORD": "1"}
    done = run_cli(env=env)
    assert done.returncode == 0 and done.stdout.split() == ["make", "matrix"]
    opts = run_cli(env={**env, "COMP_WORDS": "envbuild make --ta", "COMP_CWORD": "2"})
    assert "--target" in opts.stdout.split()


# What each shell's script of typer's completion starts its definition with.
SCRIPT_MARK = {"bash": "complete -o default -F _envbuild_completion envbuild",
               "zsh": "#compdef envbuild", "fish": "complete --command envbuild",
               "powershell": "Register-ArgumentCompleter", "pwsh": "Register-ArgumentCompleter"}


@pytest.mark.parametrize("shell", sorted(SCRIPT_MARK))
@pytest.mark.parametrize("form", ["separate", "equals"])
def test_show_completion_prints_the_named_shells_script(shell: str, form: str) -> None:
    """The shell named wins over the detected one (this test runs under a bash or sh parent,
    which typer's flag-only option printed whatever was asked)."""
    args = ["--show-completion", shell] if form == "separate" else [f"--show-completion={shell}"]
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert SCRIPT_MARK[shell] in r.stdout
    assert all(m not in r.stdout for s, m in SCRIPT_MARK.items()
               if m != SCRIPT_MARK[shell]), r.stdout[:200]


def test_zsh_completion_answers_with_zsh_items() -> None:
    env = {"_ENVBUILD_COMPLETE": "complete_zsh", "_TYPER_COMPLETE_ARGS": "envbuild ma"}
    r = run_cli(env=env)
    assert r.returncode == 0 and '"make":' in r.stdout and '"matrix":' in r.stdout


@pytest.mark.parametrize("spelling", ["CPU", "Cpu", " cpu", "cPu "])
def test_target_names_are_case_insensitive(spelling: str) -> None:
    import json

    r = run_cli("resolve", "--target", spelling, "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["target"] == "cpu"


@pytest.mark.parametrize(("cmd", "flag"), [
    (["render", "--target", "cpu", "--out", "OUT"], "--ca-cert"),
    (["make", "--target", "cpu", "--no-validate"], "--ca-cert"),
    (["build", "CTX"], "--ca-cert"), (["build", "CTX"], "--netrc")])
def test_secret_flags_given_a_directory(cmd: list[str], flag: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    argv = [str(tmp_path / "out") if a == "OUT" else str(tmp_path) if a == "CTX" else a
            for a in cmd]
    r = run_cli(*argv, flag, str(tmp_path))
    assert r.returncode == 2, r.stderr
    assert f"error: {flag} {tmp_path}: is a directory, not a file" in r.stderr
    assert "hint: " in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()


PIPED = [["matrix", "show", t] for t in ("torch", "cuda", "gpus", "rocm", "os")] + [
    ["matrix", "show", "torch", "--json"], ["resolve", "--cuda", "12.2"], ["--help"],
    ["render", "--all", "--target", "cpu", "--json", "--out", "OUT"]]


@pytest.mark.parametrize("cmd", PIPED, ids=lambda c: " ".join(c))
@pytest.mark.parametrize("reader", ["head -n 1", "true"])
def test_reader_leaving_the_pipe_is_not_an_error(cmd: list[str], reader: str,
                                                 tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`envbuild matrix show torch | head` exits 0: no traceback, no 'Exception ignored'."""
    import shlex

    argv = [str(tmp_path / "out") if a == "OUT" else a for a in cmd]
    line = (f"{shlex.quote(sys.executable)} -m envbuild {shlex.join(argv)} "
            f"2>{tmp_path}/err | (sleep 0.2; {reader} >/dev/null); echo ${{PIPESTATUS[0]}}")
    p = subprocess.run(["bash", "-c", line], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    err = (tmp_path / "err").read_text()
    assert p.stdout.strip() == "0", err
    assert "Traceback" not in err and "Exception ignored" not in err and "Broken" not in err
