"""`envbuild matrix check|show`: validate and read the version matrix."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from envbuild.cli._app import app, emit_json, say
from envbuild.cli._options import Json, seconds
from envbuild.common.errors import EXIT_FAILED, UsageError
from envbuild.core.refs import DOCKER_HUB_API

matrix_app = typer.Typer(help="Check and show the version matrix.", no_args_is_help=True)
app.add_typer(matrix_app, name="matrix")

Dir = Annotated[Path | None, typer.Option(
    "--dir", help="Matrix directory to use instead of the shipped one.")]


@matrix_app.command("check")
def check_cmd(
    directory: Dir = None, json: Json = False,
    show_unverified: Annotated[bool, typer.Option(
        "--unverified", help="Also list every row not verified against a primary source.")] = False,
) -> None:
    """Validate schema, cross references and the semantic rules; report ALL problems with file and
    row, and count the rows not verified against a primary source."""
    from envbuild.features.checkup import check_matrix

    checked = check_matrix(directory)
    d, problems, debt = checked.directory, checked.problems, checked.unverified
    if json:
        out: dict[str, object] = {
            "directory": str(d), "ok": not problems,
            "problems": [{"file": p.file, "row": p.row, "message": p.message} for p in problems],
            "unverified_count": len(debt)}
        if show_unverified:
            out["unverified"] = [{"file": f, "row": r, "source": list(s)} for f, r, s in debt]
        emit_json(out)
    else:
        for p in problems:
            say(str(p))
        if show_unverified:
            for f, r, s in debt:
                say(f"unverified  {f}: {r}  ({', '.join(s)})")
        say(f"{len(problems)} problem(s) in {d}" if problems else f"matrix ok: {d}")
        say(f"{len(debt)} unverified row(s) (list them with --unverified)")
    if problems:
        raise typer.Exit(EXIT_FAILED)


TABLES = ("cuda", "torch", "gpus", "rocm", "os", "extensions")


@matrix_app.command("show")
def show_cmd(
    table: Annotated[str, typer.Argument(help="cuda | torch | gpus | rocm | os | extensions")],
    json: Json = False, directory: Dir = None,
) -> None:
    """Print one table of the matrix (unverified facts are marked with *)."""
    from envbuild.matrix import load
    from envbuild.matrix.views import MARK, table_rows, text_rows

    if table not in TABLES:
        raise UsageError(f"unknown table {table!r}", f"choose one of: {', '.join(TABLES)}")
    header, rows = table_rows(load(directory), table)
    if json:  # data only: `verified` is a boolean, the text view's marks stay out
        emit_json([dict(zip(header, r, strict=True)) for r in rows])
        return
    shown, cells = text_rows(header, rows)
    table_cells = [shown, *cells]
    widths = [max(len(row[i]) for row in table_cells) for i in range(len(shown))]
    for i, row in enumerate(table_cells):
        say("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if i == 0:
            say("  ".join("-" * w for w in widths))
    say(f"{MARK} = not verified against a primary source")


Source = Annotated[str, typer.Option(
    "--source", help="pypi | pytorch-index | nvidia-tags | extensions (the PyPI-hosted CUDA "
    "extensions' releases and torch requirements) | all.")]


@matrix_app.command("refresh")
def refresh_cmd(
    source: Source = "all",
    write: Annotated[bool, typer.Option(
        "--write", help="Apply the applicable changes to the TOML files (comments and sources "
        "kept; edited rows cite the refresh source).")] = False,
    check: Annotated[bool, typer.Option(
        "--check", help="Compare only (CI): for every torch release, PyPI's default variant and "
        "its wheel's Requires-Dist pins (CUDA runtime, cuDNN, NCCL) against the matrix; never "
        "writes; exit 1 on any difference. Implies --source pypi unless given.")] = False,
    json: Json = False, directory: Dir = None,
    pypi_url: Annotated[str, typer.Option("--pypi-url", help="PyPI root.")] = "https://pypi.org",
    index_url: Annotated[str | None, typer.Option(
        "--index-url", help="PyTorch wheel index root (default: torch.toml index_base).")] = None,
    registry_url: Annotated[str, typer.Option(
        "--registry-url", help="Registry (HTTP API v2) holding the CUDA images.")
    ] = f"https://{DOCKER_HUB_API}",
    timeout: Annotated[float, seconds("Seconds per request.", low=0.01, high=600.0)
                       ] = 20.0,
    retries: Annotated[int, typer.Option("--retries", min=1, max=10,
                                         help="Tries per request (backoff 0.5 s, doubling).")] = 3,
) -> None:
    """Read facts from PyPI, the PyTorch wheel index, the nvidia/cuda tag list and the CUDA
    extensions' PyPI pages and print how they differ from the matrix; exit 1 while differences
    remain (0 = the matrix agrees)."""
    from envbuild.features.refresh import run_refresh

    if check and write:
        raise UsageError("--check compares only; --write edits the matrix",
                         "drop one of them: --check in CI, --write to apply the differences")
    if check and source == "all":
        source = "pypi"
    from envbuild.features.refresh.run import SOURCES

    if source not in (*SOURCES, "all"):
        raise UsageError(f"unknown source {source!r}",
                         f"choose one of: {', '.join(SOURCES)}, all")
    result = run_refresh(source, directory, write=write, pypi_url=pypi_url, index_url=index_url,
                         registry_url=registry_url, timeout=timeout, retries=retries)
    if json:
        emit_json(result.to_json())
    else:
        for line in result.lines():
            say(line)
    if result.remaining:
        raise typer.Exit(EXIT_FAILED)
