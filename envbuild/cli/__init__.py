"""Command-line edge: parsing, dispatch and the one place errors become exit codes."""

from __future__ import annotations

import os
import sys

from click import exceptions as click_exc

# Each module adds its commands to `app` on import.
from envbuild.cli import build_cmd as _build_cmd  # noqa: F401
from envbuild.cli import bundle_cmd as _bundle_cmd  # noqa: F401
from envbuild.cli import cluster_cmd as _cluster_cmd  # noqa: F401
from envbuild.cli import doctor_cmd as _doctor_cmd  # noqa: F401
from envbuild.cli import matrix_cmd as _matrix_cmd  # noqa: F401
from envbuild.cli import render_cmd as _render_cmd  # noqa: F401
from envbuild.cli import resolve_cmd as _resolve_cmd  # noqa: F401
from envbuild.cli._app import app, emit_json
from envbuild.errors import EXIT_INTERRUPTED, EXIT_USAGE, EnvbuildError


def _wants_json(argv: list[str]) -> bool:
    return "--json" in argv


def _fail(err: EnvbuildError, as_json: bool) -> int:
    from envbuild.redact import redact  # every error passes here: no URL credential is echoed

    err = EnvbuildError(redact(err.message), redact(err.hint),
                        [redact(a) for a in err.alternatives], err.exit_code)
    if as_json:
        emit_json({"error": {"message": err.message, "hint": err.hint,
                             "alternatives": err.alternatives}})
    else:
        sys.stderr.write(f"error: {err.message}\n")
        if err.hint:
            sys.stderr.write(f"hint: {err.hint}\n")
        for alt in err.alternatives:
            sys.stderr.write(f"  - {alt}\n")
    return err.exit_code


def run(argv: list[str]) -> int:
    as_json = _wants_json(argv)
    try:
        rc = app(args=argv, prog_name="envbuild", standalone_mode=False)
        if isinstance(rc, int):  # click returns Exit codes instead of raising without standalone
            return rc
    except EnvbuildError as err:
        return _fail(err, as_json)
    except click_exc.NoArgsIsHelpError:
        return 0
    except click_exc.UsageError as err:
        hint = "see `envbuild --help`"
        if err.ctx is not None:
            hint = f"see `{err.ctx.command_path} --help`"
        return _fail(EnvbuildError(err.format_message(), hint, [], EXIT_USAGE), as_json)
    except click_exc.Exit as err:
        return int(getattr(err, "exit_code", 0))
    except (KeyboardInterrupt, click_exc.Abort):
        sys.stderr.write("interrupted\n")
        return EXIT_INTERRUPTED
    except click_exc.ClickException as err:
        return _fail(EnvbuildError(err.format_message(), "", [], err.exit_code), as_json)
    except BrokenPipeError:
        _stdout_gone()
        return 0
    except SystemExit as exc:  # typer turns EPIPE into sys.exit(1)
        if isinstance(exc.__context__, BrokenPipeError):
            _stdout_gone()
            return 0
        raise
    return 0


def _stdout_gone() -> None:
    """The reader left (`envbuild matrix show torch | head`): that is not an error. Point stdout
    at /dev/null so the interpreter's final flush cannot fail ("Exception ignored ...")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def main() -> None:
    rc = run(sys.argv[1:])
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_gone()
    sys.exit(rc)
