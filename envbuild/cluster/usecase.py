"""The use cases behind `envbuild cluster validate | render | collect`: options checked, the
files written, the task logs read and turned into the cluster report. Nothing here prints."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from envbuild.common.errors import UsageError
from envbuild.common.sizes import size_bytes as size_bytes  # its one home; re-exported

if TYPE_CHECKING:
    from envbuild.cluster.render import ClusterOptions

MAX_LOG_BYTES = 64 << 20


def options(image: str, out: Path, **kw: Any) -> ClusterOptions:
    """The checked options; min_bytes / max_bytes are sizes as text (1M, 64MiB)."""
    from envbuild.cluster.render import ClusterOptions, check_options

    kw["min_bytes"] = size_bytes(kw["min_bytes"], "--min-bytes")
    kw["max_bytes"] = size_bytes(kw["max_bytes"], "--max-bytes")
    return check_options(ClusterOptions(image=image, out=out.expanduser().absolute(), **kw))


def validate(image: str, out: Path, *, fabric: str | None,
             on_event: Callable[[str], None] | None = None, **kw: Any) -> dict[str, Any]:
    """Validate `image` on every node of a Slurm allocation: the report."""
    from envbuild.cluster import slurm
    from envbuild.cluster.report import check_fabric

    check_fabric(slurm.load_rules(), fabric)
    o = options(image, out, fabric=fabric, **kw)
    return slurm.validate(o, on_event=on_event or (lambda _s: None))


def render(image: str, out: Path, *, k8s: bool, **kw: Any) -> list[Path]:
    """Write the validation as files without running it: Kubernetes manifests (k8s) or the
    sbatch script and its worker. Files of the same names in `out` are replaced; returns the
    paths written."""
    from envbuild.cluster import render as r
    from envbuild.common.files import write_atomic

    o = options(image, out, **kw)
    if k8s:
        files = r.k8s_manifests(o)
    else:
        files = {"validate.sbatch": r.sbatch_script(o, o.out / "validate.sbatch"),
                 r.WORKER_NAME: r.worker_source()}
    o.out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in files.items():
        write_atomic(o.out / name, text)
        written.append(o.out / name)
    return written


def read_logs(logs: Sequence[Path], stdin: IO[bytes] | None = None) -> str:
    """The first MAX_LOG_BYTES of each log ('-' is `stdin`, by default this process's):
    regular files and pipes, no device."""
    from envbuild.common.boundedio import check_stream, open_log, path_text

    text = []
    for log in logs:
        try:
            if str(log) == "-":
                stdin = stdin or sys.stdin.buffer
                with contextlib.suppress(OSError, ValueError):  # no descriptor: a test's buffer
                    check_stream(stdin.fileno(), "stdin", "task log")  # /dev/zero: refused
                text.append(stdin.read(MAX_LOG_BYTES).decode("utf-8", "replace"))
            else:
                with open_log(log, "task log") as fh:
                    text.append(fh.read(MAX_LOG_BYTES).decode("utf-8", "replace"))
        except OSError as exc:
            raise UsageError(f"cannot read {path_text(log)}: {exc.strerror}",
                             "give readable log files") from None
    return "\n".join(text)


def collect(logs: Sequence[Path], *, nodes: str | None = None, world_size: int | None = None,
            gpus_per_node: int = 0, fabric: str | None = None,
            stdin: IO[bytes] | None = None) -> dict[str, Any]:
    """Turn task logs (one JSON report line per task) into the cluster report; `nodes` (a
    hostlist) names the nodes that should have reported."""
    from envbuild.cluster import report as rep
    from envbuild.cluster.hosts import expand
    from envbuild.cluster.render import check_gpus_per_node
    from envbuild.cluster.slurm import expected_nodes, load_rules

    if world_size is not None and not 1 <= world_size <= 1 << 20:
        raise UsageError(f"--world-size {world_size} is out of range",
                         "give the number of processes of the job, 1 or more")
    check_gpus_per_node(gpus_per_node)
    text = read_logs(logs, stdin)
    rules = load_rules()
    rep.check_fabric(rules, fabric)
    lines = rep.parse_lines(text)
    if not lines:
        raise UsageError("no envbuild cluster report lines in the logs",
                         'each task prints one line starting with {"envbuild_cluster": 1')
    expected = expand(nodes) if nodes else expected_nodes(lines)
    return rep.build(expected, lines, rules=rules, world_size=world_size,
                     fabric=fabric, gpus_per_node=gpus_per_node)
