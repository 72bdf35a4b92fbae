"""Pure rendering of a cluster validation: the sbatch script, each runtime's per-task command
lines, and the Kubernetes manifests. Nothing here runs anything."""

from __future__ import annotations

import re
import shlex
import sys
from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from envbuild import __version__
from envbuild.cluster.hosts import expand
from envbuild.common.errors import UsageError
from envbuild.common.record import record
from envbuild.common.resources import templates_dir
from envbuild.core import refs

RUNTIMES = ("docker", "apptainer", "enroot", "host")
WORKER_NAME = "envbuild_cluster_worker.py"
_IMAGE = re.compile(r"^/?[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}$", re.ASCII)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", re.ASCII)
_CHECKS = re.compile(r"^[a-z0-9_.]+(,[a-z0-9_.]+)*$", re.ASCII)
_PATH = re.compile(r"^/[A-Za-z0-9._/+-]{0,400}$", re.ASCII)
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.&|!*\[\]():-]{1,200}$", re.ASCII)


@record
class ClusterOptions:
    image: str
    out: Path
    nodes: int = 2
    ntasks_per_node: int = 1
    gpus_per_node: int = 0
    partition: str | None = None
    account: str | None = None
    time_min: int = 30
    constraint: str | None = None
    exclude: str | None = None
    runtime: str = "docker"
    timeout: float = 1800.0
    only: str | None = None
    min_bytes: int = 1 << 20
    max_bytes: int = 1 << 30
    iters: int = 5
    job_name: str = "envbuild-validate"
    python: str = sys.executable
    fabric: str | None = None


MAX_GPUS_PER_NODE = 64


def check_gpus_per_node(n: int) -> None:
    if not 0 <= n <= MAX_GPUS_PER_NODE:
        raise UsageError(f"--gpus-per-node {n} is out of range", f"0 to {MAX_GPUS_PER_NODE}")


def check_options(o: ClusterOptions) -> ClusterOptions:
    """Every value that reaches a script or a manifest, checked: bad input is a usage error."""
    if not _IMAGE.fullmatch(o.image) or ".." in o.image:
        raise UsageError(f"bad image reference {o.image[:80]!r}",
                         "use name[:tag] or name@sha256:..., or a .sif path for apptainer")
    if o.runtime not in RUNTIMES:
        raise UsageError(f"unknown runtime {o.runtime!r}", f"one of {', '.join(RUNTIMES)}")
    for label, n, top in (("--nodes", o.nodes, 4096), ("--ntasks-per-node", o.ntasks_per_node, 64),
                          ("--time", o.time_min, 7 * 24 * 60)):
        if not 1 <= n <= top:
            raise UsageError(f"{label} {n} is out of range", f"1 to {top}")
    check_gpus_per_node(o.gpus_per_node)
    for label, v in (("--partition", o.partition), ("--account", o.account),
                     ("--job-name", o.job_name)):
        if v is not None and not _NAME.fullmatch(v):
            raise UsageError(f"bad {label} {v[:60]!r}", "letters, digits, '.', '_' and '-'")
    if o.constraint is not None and not _CONSTRAINT.fullmatch(o.constraint):
        raise UsageError(f"bad --constraint {o.constraint[:60]!r}",
                         "Slurm feature names joined by & | and brackets")
    if o.exclude:
        expand(o.exclude)
    if o.only is not None and not _CHECKS.fullmatch(o.only):
        raise UsageError(f"bad --only {o.only[:60]!r}", "check ids separated by commas, "
                         "e.g. facts.torch,numerics.matmul")
    if not (0 < o.min_bytes <= o.max_bytes <= 1 << 34) or o.min_bytes % 4 or o.max_bytes % 4:
        raise UsageError("bad all-reduce sizes", "1 MiB to 1 GiB by default; multiples of 4 "
                         "bytes, min <= max <= 16 GiB")
    if not 0 < o.timeout <= 7 * 24 * 3600:
        raise UsageError(f"--timeout {o.timeout} is out of range", "seconds, > 0")
    text = str(o.out)
    if not _PATH.fullmatch(text) or not o.out.is_absolute():
        raise UsageError(f"bad --out {text[:60]!r}", "an absolute directory path of letters, "
                         "digits and . _ - + / (it goes into #SBATCH lines unquoted)")
    return o


@cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())),
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, autoescape=False)
    env.filters["shq"] = lambda v: shlex.quote(str(v))
    return env


def worker_source() -> str:
    return Path(__file__).with_name("worker.py").read_text()


def _join(argv: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def _worker_args(o: ClusterOptions, mode: str) -> list[str]:
    args = [mode, "--timeout", str(int(o.timeout))]
    if mode in ("allreduce", "pod"):
        args += ["--min-bytes", str(o.min_bytes), "--max-bytes", str(o.max_bytes),
                 "--iters", str(o.iters)]
    if mode in ("node", "pod") and o.only:
        args += ["--validator-arg=--only", f"--validator-arg={o.only}"]
    return args


def task_argv(o: ClusterOptions, step: str) -> list[str]:
    """What one Slurm task runs in `step` ("node" or "allreduce") for the chosen runtime."""
    worker = str(o.out / WORKER_NAME)
    if o.runtime in ("docker", "host"):  # envbuild's agent on the node drives docker / python
        argv = [o.python, "-m", "envbuild.cluster.agent", step, "--runtime", o.runtime,
                "--image", o.image, "--timeout", str(int(o.timeout))]
        if step == "node" and o.only:
            argv += ["--only", o.only]
        if step == "allreduce":
            argv += ["--min-bytes", str(o.min_bytes), "--max-bytes", str(o.max_bytes),
                     "--iters", str(o.iters)]
        return argv
    if o.runtime == "apptainer":
        sif = o.image if o.image.endswith(".sif") else str(o.out / "image.sif")
        return ["apptainer", "exec", *(["--nv"] if o.gpus_per_node else []), "--bind",
                str(o.out), sif, "python", worker, *_worker_args(o, step)]
    # enroot through pyxis: srun itself starts the container
    return ["python", worker, *_worker_args(o, step)]


def srun_container_flags(o: ClusterOptions) -> list[str]:
    if o.runtime != "enroot":
        return []
    return [f"--container-image={o.image}", f"--container-mounts={o.out}:{o.out}"]


def sbatch_script(o: ClusterOptions, script: Path) -> str:
    o = check_options(o)
    pyx = srun_container_flags(o)
    node_cmd = _join([*pyx, *task_argv(o, "node")])
    allreduce_cmd = _join([*pyx, *task_argv(o, "allreduce")])
    rendezvous = _join([o.python, "-m", "envbuild.cluster.agent", "rendezvous"])
    return _env().get_template("cluster.sbatch.j2").render(
        o=o, version=__version__, script=shlex.quote(str(script)), node_cmd=node_cmd,
        allreduce_cmd=allreduce_cmd, rendezvous_cmd=rendezvous,
        port_expr="$((20000 + SLURM_JOB_ID % 20000))")


def srun_argv(o: ClusterOptions, step: str) -> list[str]:
    """Inside an allocation: the srun command of one step (the controller runs it directly)."""
    o = check_options(o)
    per = 1 if step == "node" else o.ntasks_per_node
    log = str(o.out / ("node-%t.log" if step == "node" else "allreduce-%t.log"))
    return ["srun", f"--nodes={o.nodes}", f"--ntasks-per-node={per}",
            f"--kill-on-bad-exit={0 if step == 'node' else 1}", f"--output={log}",
            *srun_container_flags(o), *task_argv(o, step)]


def k8s_name(image: str) -> str:
    base = re.sub(r"[^a-z0-9-]+", "-", refs.short_name(image).lower()).strip("-")
    return f"envbuild-validate-{base}"[:52].rstrip("-")


def k8s_manifests(o: ClusterOptions, *, port: int = 29500,
                  shm: str = "16Gi") -> dict[str, str]:
    """{filename: YAML}: the indexed Job (+ headless Service + ConfigMap) and the JobSet."""
    o = check_options(o)
    name = k8s_name(o.image)
    labels: dict[str, Any] = {"app.kubernetes.io/name": "envbuild-cluster-validate",
                              "app.kubernetes.io/managed-by": "envbuild"}
    command = ["python", "/envbuild/worker.py", *_worker_args(o, "pod")]
    common = {"o": o, "version": __version__, "labels": labels, "command": command,
              "worker_source": worker_source(), "port": port, "shm": shm}
    env = _env()
    job = env.get_template("cluster-k8s-job.yaml.j2").render(
        **common, name=name, subdomain=name, master_addr=f"{name}-0.{name}")
    jobset = env.get_template("cluster-k8s-jobset.yaml.j2").render(
        **common, name=name, subdomain=name, master_addr=f"{name}-workers-0-0.{name}")
    return {"job.yaml": job, "jobset.yaml": jobset}
