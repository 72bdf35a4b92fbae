"""`envbuild fleet collect` (a fleet.toml from real sources) and `envbuild plan` (what moving
the team's environment does to every node group of the fleet)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envbuild.cli._app import app, emit_json, say, warn
from envbuild.cli._options import Json
from envbuild.common.errors import EXIT_FAILED, UsageError

if TYPE_CHECKING:
    from envbuild.features.fleet import Planned

fleet_app = typer.Typer(help="A fleet description (fleet.toml): node groups, each with a GPU "
                        "model, a driver, a node count, an OS, a platform and optionally a "
                        "Slurm partition or a Kubernetes node selector. `envbuild plan` reads it.",
                        no_args_is_help=True)
app.add_typer(fleet_app, name="fleet")


@fleet_app.command("collect")
def collect_cmd(
    doctor: Annotated[list[Path] | None, typer.Option(
        "--doctor", help="A host's `envbuild doctor --json` report (the host is named after the "
        "file). Repeatable.")] = None,
    slurm: Annotated[bool, typer.Option(
        "--slurm", help="This host's Slurm cluster: `scontrol show node -o`, the GPU model from "
        "each node's typed GPU GRES (gpu:TYPE:N), the driver from a driver-VERSION feature.")]
    = False,
    kubectl: Annotated[list[Path] | None, typer.Option(
        "--kubectl", help="A recorded `kubectl get nodes -o json` with NVIDIA GPU feature "
        "discovery's labels (nvidia.com/gpu.product, nvidia.com/cuda.driver.major ...). "
        "Repeatable.")] = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Write fleet.toml here (default: print it).")] = None,
    json: Json = False,
) -> None:
    """Build a fleet description from real sources: machines alike (GPU, driver, GPUs per node,
    OS, platform, partition) become one node group. Exit 3 when a source cannot be read."""
    from envbuild.common.files import write_atomic
    from envbuild.core.fleet import dump
    from envbuild.features.fleet import check_written, collect, dump_json
    from envbuild.matrix import load

    m = load()
    fleet = collect(m, doctor or (), slurm, kubectl or ())
    text = dump(fleet)
    check_written(text, m)
    if out is not None:
        write_atomic(out, text)
    if json:
        emit_json({**dump_json(fleet), "written": str(out) if out else None})
        return
    if out is None:
        say(text.rstrip("\n"))
    else:
        say(f"fleet     {out}: {len(fleet.groups)} groups, "
            f"{sum(g.count for g in fleet.groups)} nodes")
    for n in fleet.notes:
        warn(f"note: {n}")


To = Annotated[list[str], typer.Option(
    "--to", help="What changes: torch==2.15, cuda 13.2, python 3.14 (the version may follow as "
    "its own word), or a changed team file (new/envbuild.toml). Repeatable.")]


@app.command("plan")
def plan_cmd(
    to: To,
    words: Annotated[list[str] | None, typer.Argument(
        hidden=True, help="The version after a `--to KEY`.")] = None,
    fleet: Annotated[Path, typer.Option(
        "--fleet", help="The fleet description (fleet.toml, `envbuild fleet collect`).")]
    = Path("fleet.toml"),
    file: Annotated[Path | None, typer.Option(
        "--file", "-f", help="The current team file (default ./envbuild.toml when there is "
        "one); the lock diff is against the lock next to it.")] = None,
    markdown: Annotated[bool, typer.Option(
        "--markdown", help="Print a pull-request comment (Markdown).")] = False,
    json: Json = False,
) -> None:
    """For every node group of the fleet: works as is, needs a driver >= N (with its branch),
    loses the GPU (no kernel for its arch: the release that dropped it), or loses its Python;
    then the smallest set of images found that covers the fleet, and the team lock's diff.
    Exit 1 when a group has no image (it loses its GPU or its Python, and no image from before
    the change resolves for it)."""
    from envbuild.features.fleet import plan
    from envbuild.matrix import load

    if json and markdown:
        raise UsageError("--json and --markdown are two outputs: give one",
                         "--json for machines, --markdown for a pull-request comment")
    planned = plan(load(), fleet, to, words or (), file)
    if json:
        emit_json(planned.to_json())
    elif markdown:
        say("\n".join(_markdown(planned)))
    else:
        say("\n".join(_text(planned)))
    if planned.plan.failed:
        raise typer.Exit(EXIT_FAILED)


def _rows(p: Planned) -> list[tuple[str, ...]]:
    from envbuild.core.fleet_plan import image_of

    rows: list[tuple[str, ...]] = [("group", "gpu", "nodes", "driver", "verdict", "image")]
    for j in p.plan.judged:
        img = image_of(p.plan, j.group.name)
        rows.append((j.group.name, j.group.gpu, str(j.group.count), j.group.driver or "?",
                     j.text, img.name if img else "NONE"))
    return rows


def _text(p: Planned) -> list[str]:
    rows = _rows(p)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 2)]
    image = max(24, *(len(r[-1]) for r in rows))
    lines = [f"plan: {', '.join(p.changes)}", ""]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:-2], widths, strict=True))
                     + f"  {r[-1]:<{image}}  {r[-2]}".rstrip())
    lines += ["", "images (each covers the groups named):"]
    for i in p.plan.images:
        lines.append(f"  {i.name:<24} {'kept' if i.kept else 'new '}  {', '.join(i.groups)}")
        lines.append(f"    {i.to_json()['command']}")
    lines += _uncovered(p)
    lines += [f"note: {n}" for n in p.plan.notes]
    lines += ["", _lock_head(p)] + [f"  {k}: {d}" for k, ds in p.lock_changes.items() for d in ds]
    return lines


def _uncovered(p: Planned) -> list[str]:
    from envbuild.core.fleet_plan import uncovered_text

    return [f"NOT COVERED: {uncovered_text(p.plan, g)}" for g in p.plan.uncovered]


def _lock_head(p: Planned) -> str:
    where = str(p.lock) if p.lock else "no team file: the images above are the new lock"
    return f"lock      {where}" + (": no change" if not p.lock_changes else ":")


def _markdown(p: Planned) -> list[str]:
    rows = _rows(p)
    lines = [f"### envbuild plan: {', '.join(p.changes)}", "",
             "| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
    lines += ["", "**Images** (the smallest set found that covers the fleet):", ""]
    for i in p.plan.images:
        lines.append(f"- `{i.name}` ({'kept' if i.kept else 'new'}) for {', '.join(i.groups)}: "
                     f"`{i.to_json()['command']}`")
    lines += [f"- **{u}**" for u in _uncovered(p)]
    lines += [f"- note: {n}" for n in p.plan.notes]
    lines += ["", f"**Lock** {_lock_head(p).removeprefix('lock').strip()}", ""]
    lines += [f"- `{k}`: {d}" for k, ds in p.lock_changes.items() for d in ds]
    return lines
