"""`envbuild cluster validate | render | collect`: parsing and dispatch only."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from envbuild.cli._app import app, emit_json, say, warn
from envbuild.cli._options import Junit, seconds
from envbuild.common.errors import UsageError

cluster_app = typer.Typer(help="Validate every node of a cluster allocation (Slurm; Kubernetes "
                               "rendered), measure a multi-node all-reduce, name the bad nodes.",
                          no_args_is_help=True)
app.add_typer(cluster_app, name="cluster")

Image = Annotated[str, typer.Argument(help="The image to validate (built by envbuild), or a "
                                           ".sif for --runtime apptainer.")]
Nodes = Annotated[int, typer.Option("--nodes", "-N", help="Nodes to validate.")]
TasksPerNode = Annotated[int, typer.Option("--ntasks-per-node",
                                           help="All-reduce ranks per node (GPUs: one per GPU).")]
GpusPerNode = Annotated[int, typer.Option("--gpus-per-node", help="GPUs per node (0: CPU, "
                                                                  "gloo).")]
Out = Annotated[Path, typer.Option("--out", help="Directory for the script, the task logs and "
                                                 "the report (shared by the nodes).")]
Timeout = Annotated[float, seconds("Seconds until the job is cancelled and unreported "
                                      "nodes are missing.")]
Only = Annotated[str | None, typer.Option("--only", metavar="ID[,ID]",
                                          help="Run only these validator checks per node.")]
MinBytes = Annotated[str, typer.Option("--min-bytes", help="Smallest all-reduce size (1M).")]
MaxBytes = Annotated[str, typer.Option("--max-bytes", help="Largest all-reduce size (1G; keep "
                                                           "small on CPU).")]
Fabric = Annotated[str | None, typer.Option(
    "--fabric", help="nvlink | xgmi | ib-ndr | ib-hdr | roce | tcp: compare busbw with the floor "
    "matrix/cluster.toml has for it (no row: no verdict).")]
Json = Annotated[bool, typer.Option("--json", help="Print the JSON report.")]


def _emit(report: dict[str, Any], as_json: bool) -> None:
    from envbuild.cluster.report import exit_code, render_text

    if as_json:
        emit_json(report)
    else:
        sys.stdout.write(render_text(report))
    code = exit_code(report)
    if code:
        raise typer.Exit(code)


@cluster_app.command(help="Validate IMAGE on every node of a Slurm allocation: the in-image "
                          "validator per node, then one all-reduce across all tasks.")
def validate(
    image: Image,
    slurm: Annotated[bool, typer.Option("--slurm", help="Run on Slurm (sbatch --wait outside "
                                                        "an allocation, srun inside one).")]
    = False,
    nodes: Nodes = 2, ntasks_per_node: TasksPerNode = 1, gpus_per_node: GpusPerNode = 0,
    partition: Annotated[str | None, typer.Option("--partition", "-p")] = None,
    account: Annotated[str | None, typer.Option("--account", "-A")] = None,
    time_min: Annotated[int, typer.Option("--time", "-t", help="Job time limit, minutes.")] = 30,
    constraint: Annotated[str | None, typer.Option("--constraint", "-C")] = None,
    exclude: Annotated[str | None, typer.Option("--exclude", "-x", help="Hostlist to leave "
                                                                        "out, e.g. n[2,5].")]
    = None,
    runtime: Annotated[str, typer.Option("--runtime", help="docker | apptainer | enroot | "
                                                           "host")] = "docker",
    out: Out = Path("envbuild-cluster"), json_out: Json = False, timeout: Timeout = 1800.0,
    only: Only = None, min_bytes: MinBytes = "1M", max_bytes: MaxBytes = "1G",
    fabric: Fabric = None, junit: Junit = None,
) -> None:
    if not slurm:
        raise UsageError("say where to run: --slurm",
                         "Kubernetes: `envbuild cluster render --k8s IMAGE`, then `envbuild "
                         "cluster collect` on the pods' logs")
    from envbuild.cluster.report import junit_suites
    from envbuild.cluster.usecase import validate as run_validation
    from envbuild.features import junit as ju

    junit = ju.check_path(junit) if junit is not None else None
    with ju.report(junit, "envbuild cluster validate", warn) as record:
        report = run_validation(image, out, fabric=fabric,
                                on_event=lambda s: warn(f"cluster: {s}"), nodes=nodes,
                                ntasks_per_node=ntasks_per_node, gpus_per_node=gpus_per_node,
                                partition=partition, account=account, time_min=time_min,
                                constraint=constraint, exclude=exclude, runtime=runtime,
                                timeout=timeout, only=only, min_bytes=min_bytes,
                                max_bytes=max_bytes)
        record(junit_suites(report))
    _emit(report, json_out)


@cluster_app.command(help="Write the validation as files without running it: an sbatch script "
                          "(--slurm) or Kubernetes manifests (--k8s: indexed Job + headless "
                          "Service, and a JobSet variant).")
def render(
    image: Image,
    k8s: Annotated[bool, typer.Option("--k8s", help="Kubernetes manifests.")] = False,
    slurm: Annotated[bool, typer.Option("--slurm", help="The sbatch script.")] = False,
    nodes: Nodes = 2, ntasks_per_node: TasksPerNode = 1, gpus_per_node: GpusPerNode = 0,
    runtime: Annotated[str, typer.Option("--runtime")] = "docker",
    out: Out = Path("envbuild-cluster"), json_out: Json = False, timeout: Timeout = 1800.0,
    only: Only = None, min_bytes: MinBytes = "1M", max_bytes: MaxBytes = "1G",
) -> None:
    from envbuild.cluster.usecase import render as write_render

    if k8s == slurm:
        raise UsageError("choose one of --k8s and --slurm",
                         "--k8s renders Kubernetes manifests, --slurm a Slurm batch script")
    written = [str(p) for p in write_render(
        image, out, k8s=k8s, nodes=nodes, ntasks_per_node=ntasks_per_node,
        gpus_per_node=gpus_per_node, runtime=runtime, timeout=timeout, only=only,
        min_bytes=min_bytes, max_bytes=max_bytes)]
    if json_out:
        emit_json({"files": written})
    else:
        for w in written:
            say(w)


@cluster_app.command(help="Turn task logs (Kubernetes pod logs, srun output: one JSON report "
                          "line each) into the cluster report. '-' reads stdin.")
def collect(
    logs: Annotated[list[Path], typer.Argument(help="Log files, or - for stdin.")],
    nodes: Annotated[str | None, typer.Option(
        "--nodes", help="Hostlist of the nodes that should have reported (missing ones are "
        "named), e.g. n[1-4].")] = None,
    world_size: Annotated[int | None, typer.Option("--world-size", help="All-reduce ranks "
                                                                        "expected.")] = None,
    gpus_per_node: GpusPerNode = 0, fabric: Fabric = None, json_out: Json = False,
    junit: Junit = None,
) -> None:
    from envbuild.cluster.report import junit_suites
    from envbuild.cluster.usecase import collect as collect_report
    from envbuild.features import junit as ju

    junit = ju.check_path(junit, logs) if junit is not None else None
    with ju.report(junit, "envbuild cluster collect", warn) as record:
        report = collect_report(logs, nodes=nodes, world_size=world_size,
                                gpus_per_node=gpus_per_node, fabric=fabric)
        record(junit_suites(report))
    _emit(report, json_out)

