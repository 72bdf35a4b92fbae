"""Command-line edge: parsing, dispatch and the one place errors become exit codes."""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable

import click
from click import exceptions as click_exc

from envbuild.cli._app import command, emit_json
from envbuild.common.errors import EXIT_INTERRUPTED, EXIT_USAGE, EnvbuildError

# Each module adds its commands to `app` on import. Only the module of the command being run is
# imported (`envbuild resolve` never loads the build stack); help and unknown commands load all.
COMMANDS: dict[str, str] = {
    "resolve": "resolve_cmd", "render": "render_cmd", "build": "build_cmd",
    "validate": "build_cmd", "make": "build_cmd", "doctor": "doctor_cmd",
    "explain": "doctor_cmd", "matrix": "matrix_cmd", "team": "team_cmd",
    "cluster": "cluster_cmd", "bundle": "bundle_cmd", "fleet": "fleet_cmd", "plan": "fleet_cmd",
    "run": "run_cmd", "verify": "verify_cmd", "fit": "fit_cmd",
}
_MODULE_ORDER = ("build_cmd", "bundle_cmd", "cluster_cmd", "doctor_cmd", "fit_cmd", "fleet_cmd",
                 "matrix_cmd",
                 "render_cmd", "resolve_cmd", "run_cmd", "team_cmd", "verify_cmd")


def _command_name(argv: list[str]) -> str | None:
    """The subcommand argv names (the first word that is not an option), if any."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg
    return None


def load_commands(argv: list[str]) -> None:
    """Import the command module(s) argv needs: one for a known command, all otherwise."""
    import importlib

    name = _command_name(argv)
    wanted = [COMMANDS[name]] if name in COMMANDS else list(_MODULE_ORDER)
    for module in wanted:
        importlib.import_module(f"envbuild.cli.{module}")


def _wants_json(argv: list[str], cmd: click.Command | None = None) -> bool:
    """--json among envbuild's own options: not in `run IMAGE -- CMD --json`, nor, for a command
    that takes no option after its first argument (`run IMAGE CMD --json`), after that word."""
    words = argv[:argv.index("--")] if "--" in argv else argv
    name = _command_name(words)
    sub = cmd.commands.get(name) if isinstance(cmd, click.Group) and name else None
    if name and sub is not None and not sub.context_settings.get("allow_interspersed_args", True):
        words = _before_first_argument(words, words.index(name), sub)
    return "--json" in words


def _before_first_argument(words: list[str], at: int, sub: click.Command) -> list[str]:
    """The words before words[at] (the subcommand's name), then its options up to its first
    argument, without the values they take: the rest belongs to that argument (a started
    program's own words)."""
    takes_value = {n for p in sub.params if isinstance(p, click.Option) and not p.is_flag
                   and not p.count for n in (*p.opts, *p.secondary_opts)}
    out, i = words[:at + 1], at + 1
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        out.append(words[i])
        i += 2 if words[i] in takes_value else 1
    return out


def _fail(err: EnvbuildError, as_json: bool) -> int:
    from envbuild.common.echo import (
        one_line,  # every error passes here: each line escaped and capped
    )
    from envbuild.common.redact import redact  # ... and no URL credential is echoed

    def clean(text: str) -> str:
        return one_line(redact(text))

    err = EnvbuildError(clean(err.message), clean(err.hint),
                        [clean(a) for a in err.alternatives], err.exit_code, err.fixes)
    if as_json:
        emit_json({"error": {"message": err.message, "hint": err.hint,
                             "alternatives": err.alternatives, "fixes": err.fixes}})
    else:
        sys.stderr.write(f"error: {err.message}\n")
        if err.hint:
            sys.stderr.write(f"hint: {err.hint}\n")
        for alt in err.alternatives:
            sys.stderr.write(f"  - {alt}\n")
    return err.exit_code


def run(argv: list[str], started: Callable[[], None] | None = None) -> int:
    """The command argv names, run; its exit code. `started` is called once the command is
    built, before it runs (the entry point turns garbage collection back on)."""
    as_json = _wants_json(argv)
    try:
        load_commands(argv)
        name = _command_name(argv)
        cmd = command(name if name in COMMANDS else None)
        as_json = _wants_json(argv, cmd)
        if started is not None:
            started()
        rc = cmd.main(args=argv, prog_name="envbuild", standalone_mode=False)
        if isinstance(rc, int):  # click returns Exit codes instead of raising without standalone
            return rc
    except EnvbuildError as err:
        return _fail(err, as_json)
    except click_exc.NoArgsIsHelpError:
        return 0
    except click_exc.UsageError as err:
        return _fail(EnvbuildError(err.format_message(), _help_hint(err.ctx, argv), [],
                                   EXIT_USAGE), as_json)
    except click_exc.Exit as err:
        return int(getattr(err, "exit_code", 0))
    except (KeyboardInterrupt, click_exc.Abort):
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except click_exc.ClickException as err:
        return _fail(EnvbuildError(err.format_message(), _help_hint(None, argv), [],
                                   err.exit_code), as_json)
    except BrokenPipeError:
        _stdout_gone()
        return 0
    except OSError as err:  # a path no file system takes, wherever it was first looked at
        if err.errno not in (errno.ENAMETOOLONG, errno.ELOOP):
            raise
        from envbuild.common.boundedio import path_text

        hint = "give a shorter path" if err.errno == errno.ENAMETOOLONG else \
            "the path has a symlink loop; give another"
        return _fail(EnvbuildError(f"{path_text(err.filename or '')}: {err.strerror}", hint, [],
                                   EXIT_USAGE), as_json)
    except SystemExit as exc:  # typer turns EPIPE into sys.exit(1)
        if isinstance(exc.__context__, BrokenPipeError):
            _stdout_gone()
            return 0
        raise
    return 0


def _help_hint(ctx: click.Context | None, argv: list[str]) -> str:
    """Where the options of the command that failed to parse are listed."""
    if ctx is not None and ctx.command_path != "envbuild":
        return f"see `{ctx.command_path} --help`"
    name = _command_name(argv)
    return f"see `envbuild {name} --help`" if name in COMMANDS else "see `envbuild --help`"


def _stdout_gone() -> None:
    """The reader left (`envbuild matrix show torch | head`): that is not an error. Point stdout
    at /dev/null so the interpreter's final flush cannot fail ("Exception ignored ...")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main(started: Callable[[], None] | None = None) -> None:
    rc = run(sys.argv[1:], started)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()
    sys.exit(rc)
