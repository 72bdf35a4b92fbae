"""The controller: submit the validation to Slurm (or run its steps inside an allocation), wait
with a time limit, cancel on timeout or Ctrl-C, and turn the task logs into the cluster report.
Processes through envbuild.common.proc only; the container backstop through
envbuild.engine.docker."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import replace
from pathlib import Path
from typing import Any

from envbuild.cluster import report as rep
from envbuild.cluster.agent import ROLE, RUN_ENV
from envbuild.cluster.hosts import expand
from envbuild.cluster.render import (
    WORKER_NAME,
    ClusterOptions,
    check_options,
    sbatch_script,
    srun_argv,
    worker_source,
)
from envbuild.common import proc
from envbuild.common.errors import EXIT_CANNOT_RUN, EnvbuildError, EnvironmentProblem, UsageError
from envbuild.common.files import write_atomic


def load_rules() -> rep.ClusterRules:
    import tomllib

    from envbuild.common.boundedio import load_toml
    from envbuild.common.errors import MatrixError
    from envbuild.common.resources import matrix_dir

    path = matrix_dir() / "cluster.toml"
    try:
        return rep.rules_from_toml(load_toml(path, "matrix file"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixError(f"cannot read {path}: {exc}") from None


def _require(tool: str) -> None:
    if proc.which(tool) is None:
        raise EnvironmentProblem(f"{tool} not found: this is not a Slurm submit host",
                                 "run on a login node of the cluster (or `make slurm` for the "
                                 "test cluster); `envbuild cluster render` writes the script only")


def collect_dir(out: Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    from envbuild.common.boundedio import CACHE_BYTES, open_log

    for log in sorted(out.glob("*.log")):  # the first CACHE_BYTES of each; no FIFO or device
        with suppress(OSError, UsageError), open_log(log, "task log") as fh:
            lines += rep.parse_lines(fh.read(CACHE_BYTES).decode("utf-8", "replace"))
    return lines


def expected_nodes(lines: list[dict[str, Any]]) -> list[str]:
    for x in lines:
        if x.get("kind") == "job" and x.get("nodelist"):
            return expand(str(x["nodelist"]))
    return []


TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
            "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def _submit(script: Path, env: dict[str, str], cwd: Path) -> str:
    r = proc.run(["sbatch", "--parsable", str(script)], timeout=120, check=False, env=env,
                 cwd=cwd)
    job_id = r.stdout.strip().split(";")[0]
    if not r.ok or not job_id.isdigit():
        raise EnvironmentProblem(
            f"sbatch could not submit the job: {(r.stderr.strip() or r.stdout.strip() or '?')}"
            [-300:], "check the partition/account/constraint, and that slurmctld answers (sinfo)")
    return job_id


def job_state(scontrol_show_job: str) -> tuple[str | None, str | None]:
    """(JobState, Reason) from `scontrol show job -o ID`."""
    m = re.search(r"\bJobState=(\S+)", scontrol_show_job)
    why = re.search(r"\bReason=(\S+)", scontrol_show_job)
    return (m.group(1) if m else None), (why.group(1) if why else None)


def _wait(job_id: str, deadline: float, never: tuple[str, ...]) -> None:
    """Like `sbatch --wait`, without its backoff (it polls ever more slowly, up to half a
    minute): the job state every half second until it ends; a ProcessError at the deadline;
    a pending job that can never start is an EnvironmentProblem (the caller cancels it)."""
    while True:
        r = proc.run(["scontrol", "show", "job", "-o", job_id], timeout=30, check=False)
        if r.ok:
            state, reason = job_state(r.stdout)
        elif "invalid job id" in (r.stderr + r.stdout).lower():
            state, reason = None, None  # the controller forgot it: it ended long ago
        else:  # slurmctld busy or restarting: that says nothing about the job, ask again
            state, reason = "UNKNOWN", None
        if state is None or state in TERMINAL:  # gone from the controller: ended long ago
            return
        if state == "PENDING" and reason in never:
            raise EnvironmentProblem(
                f"job {job_id} can never start ({reason}): cancelled",
                "the request does not fit the partition or account: check --nodes, "
                "--exclude, --partition, --constraint, --time (sinfo shows what exists)")
        if time.monotonic() > deadline:
            raise proc.ProcessError(f"job {job_id} did not finish within the time limit",
                                    "raise --timeout, or check the job with squeue/sacct",
                                    exit_code=EXIT_CANNOT_RUN)
        time.sleep(0.5)


def _gone(name: str, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        r = proc.run(["squeue", "-h", "--name", name, "-o", "%i"], timeout=30, check=False)
        if r.ok and not r.stdout.strip():
            return True
        time.sleep(0.5)
    return False


def _cancel(name: str, run_id: str, in_allocation: bool) -> None:
    """scancel the job (by its unique name), wait until the queue has forgotten it, then remove
    any container of this run the engine here still has (the agents remove their own on
    SIGTERM; this is the backstop for a node whose agent was SIGKILLed)."""
    if not in_allocation:
        with suppress(proc.ProcessError):
            proc.run(["scancel", "--name", name], timeout=30, check=False)
            _gone(name, 30)
    with suppress(EnvbuildError, ImportError):
        from envbuild.engine import docker

        docker.remove_containers({docker.LABEL_ROLE: ROLE, "io.envbuild.cluster-run": run_id})


def validate(o: ClusterOptions, *, on_event: Callable[[str], None] = lambda s: None,
             rules: rep.ClusterRules | None = None) -> dict[str, Any]:
    """Run the validation on Slurm and return the cluster report."""
    o = check_options(o)
    rules = rules or load_rules()
    _require("srun")
    in_allocation = bool(os.environ.get("SLURM_JOB_ID"))
    run_id = secrets.token_hex(4)
    name = f"{o.job_name}-{run_id}"
    o = replace(o, job_name=name)
    o.out.mkdir(parents=True, exist_ok=True)
    for old in o.out.glob("*.log"):  # a rerun into the same --out must not read stale lines
        old.unlink()
    write_atomic(o.out / WORKER_NAME, worker_source())
    env = {**os.environ, RUN_ENV: run_id}
    deadline = time.monotonic() + o.timeout
    note = None
    t0 = time.monotonic()
    try:
        if in_allocation:
            nodelist = os.environ.get("SLURM_JOB_NODELIST", "")
            write_atomic(o.out / "job.log", json.dumps(
                {rep.MARK: 1, "kind": "job", "job_id": os.environ.get("SLURM_JOB_ID"),
                 "nodelist": nodelist}) + "\n")
            for step in ("node", "allreduce"):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise proc.ProcessError("step did not finish in time",
                                            "raise --timeout, or check the job with sacct",
                                            exit_code=EXIT_CANNOT_RUN)
                on_event(f"srun step {step}")
                step_env = dict(env)
                if step == "allreduce":
                    from envbuild.cluster.agent import rendezvous
                    from envbuild.cluster.hosts import master_port

                    step_env["MASTER_ADDR"] = rendezvous()
                    step_env.setdefault("MASTER_PORT", str(master_port(
                        os.environ.get("SLURM_JOB_ID"))))
                proc.run(srun_argv(o, step), timeout=left, check=False, env=step_env,
                         cwd=o.out)
        else:
            _require("sbatch")
            script = o.out / "validate.sbatch"
            text = sbatch_script(o, script)
            write_atomic(script, text, 0o755)
            job_id = _submit(script, env, o.out)
            on_event(f"sbatch {script}: job {job_id} ({name})")
            _wait(job_id, deadline, rules.never_start_reasons)
    except proc.ProcessError as exc:
        if "did not finish" not in exc.message:
            raise
        note = (f"timed out after {o.timeout:.0f} s: job {name} cancelled, nodes that had not "
                "reported are missing")
        on_event(note)
        _cancel(name, run_id, in_allocation)
    except BaseException:  # Ctrl-C: nothing left in the queue, then the interrupt goes on
        _cancel(name, run_id, in_allocation)
        raise
    else:
        _cancel(name, run_id, in_allocation)
    lines = collect_dir(o.out)
    nodes = expected_nodes(lines)
    world = o.nodes * o.ntasks_per_node
    result = rep.build(nodes, lines, rules=rules, world_size=world, fabric=o.fabric,
                       gpus_per_node=o.gpus_per_node, note=note)
    result["job"] = {"name": name, "seconds": round(time.monotonic() - t0, 3),
                     "out": str(o.out), "in_allocation": in_allocation}
    return result
