"""A job's memory measured (issue 28, "will it fit"): the standalone probe
envbuild/validator/memprobe.py run once, in the image that would run the job (its venv's Python,
the image's ENTRYPOINT replaced, no network, the entry file's directory mounted read-only, the
output read bounded) or on this host (this interpreter, through envbuild/common/proc.py). Only
what follows the probe's last MARKER line is parsed, as untrusted JSON: the caller checks it."""

from __future__ import annotations

import json
import sys
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild.common import proc
from envbuild.common.boundedio import TooDeep, path_text, regular_file
from envbuild.common.errors import EXIT_CANNOT_RUN, EnvbuildError, UsageError
from envbuild.engine import docker
from envbuild.engine.image_facts import probe_output
from envbuild.render.context import VENV
from envbuild.validator import memprobe

ENTRY_DIR = "/opt/envbuild-fit"  # where the entry file's directory is mounted in the container
OUTPUT_LIMIT = 1 << 20  # the probe prints one short line; the model's chatter is cut at this


def probe_source() -> str:
    return Path(memprobe.__file__).read_text(encoding="utf-8")


def probe_argv(python: str, job: Mapping[str, Any]) -> list[str]:
    """The probe's command line: `python` isolated (-I: no PYTHONPATH, no user site), the
    probe's source, the job as one JSON argument (UsageError when it is longer than one
    argument may be: a config.json of over 128 KiB)."""
    text = json.dumps(job, separators=(",", ":"))
    if len(text.encode()) > memprobe.MAX_JOB:
        raise UsageError(f"the job is {len(text.encode()) >> 10} KiB as JSON; the probe takes "
                         f"at most {memprobe.MAX_JOB >> 10} KiB",
                         "give a config.json without its large tables (id2label and the like)")
    return [python, "-I", "-c", probe_source(), text]


def entry_function(job: Mapping[str, Any]) -> str:
    """FN of the job's {"model": {"entry": "FILE.py:FN"}}; UsageError when it names none."""
    model = job.get("model")
    spec = model.get("entry") if isinstance(model, Mapping) else None
    _, sep, name = spec.rpartition(":") if isinstance(spec, str) else ("", "", "")
    if not sep or not name.isidentifier():
        raise UsageError("the entry must be FILE.py:FUNCTION",
                         "name the function that returns (model, inputs), e.g. train.py:build")
    return name


def entry_file(path: Path) -> Path:
    """`path`, absolute, when it is a regular file; UsageError otherwise (a FIFO, a directory,
    a missing file)."""
    hint = "give the Python file that defines the entry function"
    try:
        regular_file(path, "Python file (--entry)", hint)
    except FileNotFoundError:
        raise UsageError(f"{path_text(path)}: no such file", hint) from None
    except ValueError:  # a NUL in the path
        raise UsageError(f"{path_text(path)}: not a file name", hint) from None
    return path.absolute()


class ProbeRunError(EnvbuildError):
    """The probe's run timed out, died or printed no answer (not an error the probe answered:
    that is core.memory.ProbeError); exit 3."""

    def __init__(self, message: str, hint: str, timed_out: bool = False) -> None:
        super().__init__(message, hint, [], EXIT_CANNOT_RUN)
        self.timed_out = timed_out


def in_container(job: Mapping[str, Any], entry: Path | None) -> tuple[dict[str, Any],
                                                                      dict[str, Path]]:
    """The job as the container sees it, and its read-only mounts: the entry file's directory at
    ENTRY_DIR (its sibling modules import), the entry's path rewritten to it."""
    out = dict(job)
    if entry is None:
        return out, {}
    fn = entry_function(job)
    path = entry_file(entry).resolve()
    out["model"] = {"entry": f"{ENTRY_DIR}/{path.name}:{fn}"}
    return out, {ENTRY_DIR: path.parent}


def measure_in_image(ref: str, job: Mapping[str, Any], entry: Path | None, timeout: float, *,
                     target: str = "cpu", gpus: bool = False,
                     platform: str | None = None) -> dict[str, Any]:
    """The probe's answer for `job` from one run in the image `ref` (a dict, unchecked: an
    {"error": ...} answer too); ProbeRunError when the run timed out, printed too much, exited
    non-zero or printed no answer."""
    inside, mounts = in_container(job, entry)
    argv = probe_argv(f"{VENV}/bin/python", inside)
    run = docker.run_container(ref, argv[1:], entrypoint=argv[:1], target=target, gpus=gpus,
                               timeout=timeout,
                               labels={docker.LABEL_ROLE: "fit", "io.envbuild.image": ref},
                               platform=platform, network=False, output_limit=OUTPUT_LIMIT,
                               read_only_mounts=mounts)
    hint = (f"check `docker run --rm --entrypoint {VENV}/bin/python {ref} -c 'import torch'`; "
            "an image envbuild did not build may have no venv there (or leave out --image to "
            "measure with this host's Python)")
    if run.timed_out:
        raise ProbeRunError(f"measuring the step in {ref} did not finish within {timeout:.0f} s",
                            "give it more time (--timeout), or a smaller model to try with",
                            timed_out=True)
    if run.truncated:
        raise ProbeRunError(f"measuring the step in {ref} printed more than "
                            f"{OUTPUT_LIMIT >> 20} MiB", "make the model's code print less")
    return _answer(run.output, run.exit_code, f"in {ref}", hint)


def measure_here(job: Mapping[str, Any], timeout: float) -> dict[str, Any]:
    """The probe's answer for `job` from one run with this interpreter (its torch, its
    transformers); the entry's path made absolute first. ProbeRunError as measure_in_image."""
    job = dict(job)
    model = job.get("model")
    if isinstance(model, Mapping) and isinstance(model.get("entry"), str):
        fn = entry_function(job)
        job["model"] = {"entry": f"{entry_file(Path(model['entry'].rpartition(':')[0]))}:{fn}"}
    tail = _Tail(OUTPUT_LIMIT)
    try:
        code = proc.stream(probe_argv(sys.executable, job), tail.add, timeout=timeout)
    except proc.ProcessError as exc:
        raise ProbeRunError(f"measuring the step here failed: {exc.message}",
                            "give it more time (--timeout), or a smaller model to try with",
                            timed_out=exc.timed_out) from None
    return _answer(tail.text(), code, "here",
                   f"is torch installed for {sys.executable}? pip install 'envbuild[host]'; "
                   "or measure in an image (--image)")


class _Tail:
    """The last `limit` characters of a run's output, line by line (never all of it)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.lines: deque[str] = deque()
        self.size = 0

    def add(self, line: str) -> None:
        line = line[: self.limit]
        self.lines.append(line)
        self.size += len(line) + 1
        while self.size > self.limit and len(self.lines) > 1:
            self.size -= len(self.lines.popleft()) + 1

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _answer(output: str, exit_code: int, where: str, hint: str) -> dict[str, Any]:
    try:
        data = probe_output(output, memprobe.MARKER) if exit_code == 0 else None
    except (ValueError, TooDeep, RecursionError):
        data = None
    if not isinstance(data, dict):
        text = output.strip()
        tail = " ".join(text[-300:].split()) if text else "no output"
        raise ProbeRunError(f"measuring the step {where} failed (exit {exit_code}): {tail}",
                            hint)
    return data
