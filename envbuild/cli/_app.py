"""The typer application object shared by the command modules."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import click
import typer

app = typer.Typer(
    name="envbuild",
    help="Resolve, render, build and validate GPU/ML environments (CUDA, ROCm, CPU, Apple MPS).",
    no_args_is_help=True,
    # typer's own completion options are flags whenever shellingham is installed: the shell is
    # detected and `--show-completion zsh` printed the bash script of a bash parent. command()
    # adds options that take the shell as an optional value instead.
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

SHELLS = ("bash", "zsh", "fish", "powershell", "pwsh")


def _shell(value: str) -> str:
    """The shell named, or (no value) the shell this runs under."""
    from envbuild.common.errors import UsageError

    if not value:
        try:
            import shellingham  # type: ignore[import-untyped]

            value = shellingham.detect_shell()[0]
        except Exception:  # not installed, or no shell found among the parents
            raise UsageError("cannot tell which shell this is",
                             f"name it: --show-completion {' | '.join(SHELLS)}") from None
    if value not in SHELLS:
        raise UsageError(f"no completion for the shell {value[:40]!r}",
                         f"shells: {', '.join(SHELLS)}")
    return value


def _show_completion(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from typer._completion_shared import get_completion_script

    shell = _shell(value)
    sys.stdout.write(get_completion_script(prog_name="envbuild", complete_var="_ENVBUILD_COMPLETE",
                                           shell=shell) + "\n")
    ctx.exit(0)


def _install_completion(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if value is None or ctx.resilient_parsing:
        return
    from typer._completion_shared import install

    shell, path = install(shell=_shell(value), prog_name="envbuild",
                          complete_var="_ENVBUILD_COMPLETE")
    sys.stdout.write(f"{shell} completion installed in {path}; it takes effect in a new shell\n")
    ctx.exit(0)


def _only(name: str) -> typer.Typer:
    """`app` with only the command or group `name`: typer reads every command's signature to
    build the click group (2 ms for doctor beside explain), and a run needs only its own."""
    import copy

    def named(info: Any) -> str | None:
        return info.name or (typer.main.get_command_name(info.callback.__name__)
                             if info.callback is not None else None)

    only = copy.copy(app)
    only.registered_commands = [c for c in app.registered_commands if named(c) == name]
    only.registered_groups = [g for g in app.registered_groups if g.name == name]
    return only if only.registered_commands or only.registered_groups else app


def command(only: str | None = None) -> click.Command:
    """The click command of `app`, with `--install-completion` / `--show-completion [SHELL]`;
    with `only`, of just that command (the one being run)."""
    from typer._completion_classes import completion_init

    completion_init()  # typer's completion classes answer `_ENVBUILD_COMPLETE=complete_<shell>`
    cmd = typer.main.get_command(app if only is None else _only(only))
    metavar = "[" + "|".join(SHELLS[:3]) + "]"
    cmd.params += [
        click.Option(["--install-completion"], is_flag=False, flag_value="", default=None,
                     metavar=metavar, expose_value=False, is_eager=True,
                     callback=_install_completion,
                     help="Install completion for SHELL (default: the current shell)."),
        click.Option(["--show-completion"], is_flag=False, flag_value="", default=None,
                     metavar=metavar, expose_value=False, is_eager=True,
                     callback=_show_completion,
                     help="Print the completion script for SHELL (default: the current shell)."),
    ]
    return cmd


def _print_version(value: bool) -> None:
    if value:
        from envbuild import __version__

        sys.stdout.write(f"envbuild {__version__}\n")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option(
        "--version", "-V", help="Print the envbuild version and exit.", is_eager=True,
        callback=_print_version)] = False,
) -> None:
    """Resolve, render, build and validate GPU/ML environments (CUDA, ROCm, CPU, Apple MPS)."""


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False) + "\n")


def say(text: str = "") -> None:
    sys.stdout.write(text + "\n")


def warn(text: str) -> None:
    sys.stderr.write(text + "\n")
