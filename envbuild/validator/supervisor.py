"""The validator's supervisor and CLI: stdlib checks run here, torch checks in a worker
subprocess with a deadline each, so a hang or a crash fails one check and the report is still
written."""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import platform
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, NoReturn

from .checks import _BY_ID, CheckDef, select_checks
from .context import Options, TorchContext
from .dist import dist_child
from .files import write_atomic
from .judges import (
    EMULATION_NOT_RUN,
    EXIT_CANNOT_RUN,
    SCHEMA_VERSION,
    TARGETS,
    VALIDATOR_VERSION,
    Outcome,
    _err,
    _gpu_present,
    _sanitize,
    exit_code_for,
    failed,
    gpu_less,
    load_peaks,
    make_check,
    not_run_emulated,
    summarize,
)
from .procs import exit_with_parent, kill_tree, self_argv

# Test hook: "hang:CHECK_ID" or "crash:CHECK_ID" (comma separated) makes the worker hang or die
# in that check, so the supervisor's time limits and crash recovery are exercised for real.
FAULT_ENV = "ENVBUILD_VALIDATOR_FAULT"

IMPORT_TIMEOUT_S = 180.0  # a cold `import torch` from an overlay filesystem can take a minute
BETWEEN_CHECKS_S = 30.0
GRACE_S = 5.0
MAX_WORKER_RESTARTS = 4




# ---------------------------------------------------------------------------------------------
# Worker process


def _parse_faults(text: str | None) -> dict[str, str]:
    faults: dict[str, str] = {}
    for item in (text or "").split(","):
        kind, _, cid = item.strip().partition(":")
        if kind in ("hang", "crash") and cid:
            faults[cid] = kind
    return faults


def _inject(kind: str) -> None:
    if kind == "hang":
        time.sleep(3600)
    elif os.name == "posix":
        os.kill(os.getpid(), signal.SIGSEGV)
    else:
        os.abort()


def run_torch_check(defn: CheckDef, ctx: TorchContext) -> dict[str, Any]:
    t0 = time.monotonic()
    assert defn.torch is not None
    if ctx.import_error is not None:
        fix = ("torch does not import: install the torch wheel the spec names "
               f"({ctx.spec.get('torch') or 'any'}, variant {ctx.spec.get('variant') or '?'}) "
               "into this interpreter" if defn.id == "facts.torch"
               else "torch does not import (see facts.torch); fix that first")
        outcome = failed(fix, ctx.import_error, {"error": ctx.import_error,
                                                 "python": sys.executable})
    else:
        try:
            outcome = defn.torch(ctx)
        except Exception as e:
            tb = traceback.format_exc().strip().splitlines()
            outcome = failed("the check raised an unexpected error; see evidence.traceback",
                             _err(e), {"error": _err(e), "traceback": tb[-12:]})
    return make_check(defn.id, defn.title, outcome, time.monotonic() - t0)


def _worker_main() -> int:
    exit_with_parent()
    cfg = json.load(sys.stdin)
    sys.stdout.flush()
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever torch or a library prints must not corrupt the protocol channel

    def emit(event: dict[str, Any]) -> None:
        proto.write(json.dumps(_sanitize(event), allow_nan=False) + "\n")
        proto.flush()

    opts = Options(**cfg["options"])
    ctx = TorchContext(cfg["spec"], cfg.get("peaks"), opts)
    t0 = time.monotonic()
    ctx.import_torch()
    emit({"event": "ready", "torch_error": ctx.import_error,
          "import_s": round(time.monotonic() - t0, 3)})
    faults = _parse_faults(os.environ.get(FAULT_ENV))
    for cid in cfg["checks"]:
        emit({"event": "start", "id": cid})
        if cid in faults:
            _inject(faults[cid])
        emit({"event": "result", "check": run_torch_check(_BY_ID[cid], ctx)})
    emit({"event": "facts", "facts": ctx.facts})
    emit({"event": "done"})
    return 0


# ---------------------------------------------------------------------------------------------
# Supervisor


def _pump(stream: IO[bytes], events: queue.Queue[dict[str, Any] | None]) -> None:
    for raw in stream:
        try:
            event = json.loads(raw.decode("utf-8", "replace"))
        except ValueError:
            continue
        if isinstance(event, dict):
            events.put(event)
    events.put(None)


def _death(proc: subprocess.Popen[bytes], stderr_tail: str) -> dict[str, Any]:
    rc = proc.returncode
    sig = None
    if rc is not None and rc < 0:
        with contextlib.suppress(ValueError):
            sig = signal.Signals(-rc).name
    return {"returncode": rc, "signal": sig, "stderr_tail": stderr_tail}


class _StderrTail:
    """Keeps the last bytes a child writes to stderr (a pipe, drained by a thread: no temp
    files, so a read-only /tmp does not stop the validator)."""

    def __init__(self, stream: IO[bytes], limit: int = 4000) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._limit = limit
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: IO[bytes]) -> None:
        for chunk in iter(lambda: stream.read1(4096) if hasattr(stream, "read1")
                          else stream.read(4096), b""):
            self._chunks.append(chunk)
            self._size += len(chunk)
            while self._size > self._limit and len(self._chunks) > 1:
                self._size -= len(self._chunks.popleft())

    def text(self) -> str:
        self._thread.join(timeout=2)
        return b"".join(self._chunks)[-self._limit:].decode("utf-8", "replace")


@dataclass
class _Watch:
    current: str | None = None  # the check the worker is in
    ready: bool = False  # torch import attempted
    problem: str | None = None  # None (done), "timeout" or "exit"
    limit: float = 0.0
    started: float = 0.0


def _follow_worker(proc: subprocess.Popen[bytes], pending: list[CheckDef],
                   results: dict[str, dict[str, Any]], facts: dict[str, Any],
                   scale: float) -> _Watch:
    """Read the worker's events until it is done, dies, or misses a deadline. Finished checks
    go to results and leave pending (in place)."""
    w = _Watch(limit=IMPORT_TIMEOUT_S * scale, started=time.monotonic())
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, events), daemon=True).start()
    deadline = w.started + w.limit
    while True:
        try:
            event = events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            w.problem = "timeout"
            return w
        if event is None:
            w.problem = "exit"
            return w
        kind = event.get("event")
        now = time.monotonic()
        if kind == "ready":
            w.ready = True
            deadline = now + BETWEEN_CHECKS_S * scale
        elif kind == "start":
            w.current = str(event.get("id"))
            w.started = now
            w.limit = _BY_ID[w.current].timeout_s * scale
            deadline = now + w.limit + GRACE_S * min(1.0, scale)
        elif kind == "result":
            check = event["check"]
            results[check["id"]] = check
            pending[:] = [d for d in pending if d.id != check["id"]]
            w.current = None
            deadline = now + BETWEEN_CHECKS_S * scale
        elif kind == "facts":
            facts.update(event.get("facts") or {})
        elif kind == "done":
            # Let it exit on its own (EOF), but not forever: CUDA teardown can hang.
            with contextlib.suppress(queue.Empty):
                while events.get(timeout=10) is not None:
                    pass
            return w


def run_torch_checks(defs: Sequence[CheckDef], spec: dict[str, Any],
                     peaks: dict[str, Any] | None, opts: Options) -> tuple[list[dict[str, Any]],
                                                                           dict[str, Any]]:
    """Run torch checks in worker subprocesses; a check that hangs or kills the worker fails
    and a fresh worker carries on with the rest."""
    results: dict[str, dict[str, Any]] = {}
    facts: dict[str, Any] = {}
    pending = list(defs)
    restarts = 0
    scale = opts.timeout_scale
    while pending:
        cfg = {"spec": spec, "peaks": peaks, "checks": [d.id for d in pending],
               "options": {"require_gpu": opts.require_gpu, "in_image": opts.in_image,
                           "timeout_scale": scale}}
        proc = subprocess.Popen(
            [*self_argv(), "--_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=os.name == "posix")
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        tail = _StderrTail(proc.stderr)
        try:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(json.dumps(_sanitize(cfg)).encode())
                proc.stdin.close()
            w = _follow_worker(proc, pending, results, facts, scale)
        finally:
            kill_tree(proc)
        death = _death(proc, tail.text())
        current, problem, limit = w.current, w.problem, w.limit
        if problem is None:
            break
        if current is None and not w.ready:
            what = (f"`import torch` did not finish within {limit:.0f}s" if problem == "timeout"
                    else "the Python process died while importing torch")
            for d in pending:
                results[d.id] = make_check(d.id, d.title, failed(
                    "torch cannot be imported in this interpreter (a crash or hang in a native "
                    "library: mismatched CUDA/cuDNN libraries, an incompatible CPU, or a broken "
                    "install); see evidence.stderr_tail", what, {"error": what, **death}), 0.0)
            break
        restarts += 1
        if current is not None:
            elapsed = time.monotonic() - w.started
            if problem == "timeout":
                outcome = failed(
                    f"the check did not finish within {limit:.0f}s (hung driver or library call, "
                    "or a deadlock) and was killed; on a slow machine rerun with --timeout-scale 3",
                    f"timed out after {limit:.0f}s", {"timeout_s": limit, **death})
            else:
                outcome = failed(
                    "the check killed its Python process (" + (death["signal"] or
                    f"exit {death['returncode']}") + "): usually mismatched native libraries "
                    "(torch vs CUDA/cuDNN/driver) or an illegal instruction; see "
                    "evidence.stderr_tail",
                    f"worker died ({death['signal'] or death['returncode']})",
                    death)
            results[current] = make_check(current, _BY_ID[current].title, outcome, elapsed)
            pending = [d for d in pending if d.id != current]
        if restarts > MAX_WORKER_RESTARTS:
            for d in pending:
                results[d.id] = make_check(d.id, d.title, failed(
                    "not run: the worker process failed repeatedly; see the earlier failures",
                    "not run (worker failed repeatedly)", death), 0.0)
            break
    return [results[d.id] for d in defs if d.id in results], facts


def _run_host_check(defn: CheckDef, spec: dict[str, Any], opts: Options) -> dict[str, Any]:
    host = defn.host
    assert host is not None
    box: dict[str, Outcome] = {}

    def target() -> None:
        try:
            box["outcome"] = host(spec, opts)
        except Exception as e:
            box["outcome"] = failed("the check raised an unexpected error; see evidence",
                                    _err(e), {"error": _err(e)})

    t0 = time.monotonic()
    limit = defn.timeout_s * opts.timeout_scale
    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(limit)
    outcome = box.get("outcome") or failed(
        f"the check did not finish within {limit:.0f}s", "timed out", {"timeout_s": limit})
    return make_check(defn.id, defn.title, outcome, time.monotonic() - t0)


def validate(spec: dict[str, Any], peaks: dict[str, Any] | None, opts: Options,
             defs: Sequence[CheckDef]) -> tuple[dict[str, Any], dict[str, Any]]:
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    by_id: dict[str, dict[str, Any]] = {}
    if opts.emulated:
        by_id.update((d.id, not_run_emulated(d.id, d.title, opts.emulated)) for d in defs
                     if d.id in EMULATION_NOT_RUN)
        defs_run = [d for d in defs if d.id not in by_id]
    else:
        defs_run = list(defs)
    for d in defs_run:
        if d.host is not None:
            by_id[d.id] = _run_host_check(d, spec, opts)
    torch_defs = [d for d in defs_run if d.torch is not None]
    facts: dict[str, Any] = {}
    if torch_defs:
        torch_results, facts = run_torch_checks(torch_defs, spec, peaks, opts)
        by_id.update((c["id"], c) for c in torch_results)
    checks = [by_id[d.id] for d in defs if d.id in by_id]
    gpu_visible = "devices" in facts and _gpu_present(facts)
    without_gpu = gpu_less(checks, spec.get("target"), gpu_visible)
    report = {
        "schema_version": SCHEMA_VERSION,
        "envbuild_validator": VALIDATOR_VERSION,
        "started": started,
        "duration_s": round(time.monotonic() - t0, 3),
        "host": {"hostname": socket.gethostname(), "platform": platform.platform(),
                 "python": platform.python_version(), "machine": platform.machine(),
                 "in_image": opts.in_image},
        "options": {"require_gpu": opts.require_gpu, "in_image": opts.in_image,
                    "timeout_scale": opts.timeout_scale, "peaks": peaks is not None,
                    "emulated": opts.emulated},
        "spec": spec,
        "summary": summarize(checks),
        "checks": checks,
    }
    if without_gpu is not None:
        report["gpu_less"] = without_gpu
    return report, facts


def write_json_atomic(path: str, data: Any) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    text = json.dumps(_sanitize(data), indent=2, allow_nan=False) + "\n"
    write_atomic(path, text, 0o600)  # the mode the report has always had


def format_table(report: dict[str, Any]) -> str:
    s = report["summary"]
    lines = [f"envbuild validator {report['envbuild_validator']}: {s['status'].upper()} "
             f"({s['pass']} pass, {s['warn']} warn, {s['fail']} fail, {s['skip']} skip"
             + (f", {s['not_run']} not run" if s.get("not_run") else "") + ") "
             f"in {report['duration_s']:.1f}s"]
    width = max((len(c["id"]) for c in report["checks"]), default=10)
    for c in report["checks"]:
        msg = c["detail"] or c["reason"]
        if c["status"] in ("warn", "fail"):
            msg = f"{msg} -- fix: {c['remediation']}" if msg else c["remediation"]
        msg = " ".join(msg.split())
        status = c["status"].upper().replace("_", " ")
        lines.append(f"{status:4}  {c['id']:<{width}}  {c['duration_s']:6.2f}s  {msg[:240]}")
    return "\n".join(lines)


DESCRIPTION = "envbuild's validator: does a built environment match its spec, and does it work?"


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # bad arguments are "could not run": exit 3, not 2
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_CANNOT_RUN)


def build_parser() -> argparse.ArgumentParser:
    p = _ArgumentParser(prog="validator", description=DESCRIPTION)
    p.add_argument("--spec", help="the environment spec JSON (without it, expect.* checks skip)")
    p.add_argument("--peaks", help="per-GPU peak table JSON (matrix/peaks.toml converted)")
    p.add_argument("--out", help="write the JSON report here (atomically)")
    p.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    p.add_argument("--require-gpu", action="store_true",
                   help="device checks that would skip for lack of a GPU fail instead")
    p.add_argument("--in-image", action="store_true",
                   help="running inside the built image: also check the image filesystem")
    p.add_argument("--only", action="append", default=[], metavar="ID[,ID]",
                   help="run only these checks (ids or groups such as 'numerics')")
    p.add_argument("--skip", action="append", default=[], metavar="ID[,ID]",
                   help="do not run these checks")
    p.add_argument("--timeout-scale", type=float, default=1.0,
                   help="multiply every check's time limit (slow machines)")
    p.add_argument("--emulated", default="", metavar="HOW",
                   help="this run is emulated (e.g. qemu-aarch64 on x86_64): checks of speed, "
                        "training and compiling are not run; HOW is said in the report")
    p.add_argument("--facts-out", help="also write the raw torch facts (for test fixtures)")
    p.add_argument("--version", action="version", version=VALIDATOR_VERSION)
    return p


def _split(values: Sequence[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def load_spec(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        spec = json.load(fh)
    if not isinstance(spec, dict):
        raise ValueError("the spec must be a JSON object")
    if spec.get("target") not in TARGETS:
        raise ValueError(f"spec target must be one of {', '.join(TARGETS)}, "
                         f"got {spec.get('target')!r}")
    return spec


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["--_worker"]:
        return _worker_main()
    if args_list[:1] == ["--_dist-child"]:
        return dist_child(json.loads(args_list[1]))
    args = build_parser().parse_args(args_list)
    if not args.timeout_scale > 0:
        sys.stderr.write("validator: --timeout-scale must be positive\n")
        return EXIT_CANNOT_RUN
    try:
        spec = load_spec(args.spec) if args.spec else {}
        peaks = None
        if args.peaks:
            with open(args.peaks, encoding="utf-8") as fh:
                raw = json.load(fh)
            peaks = load_peaks(raw) if raw != {} else None  # {}: the matrix has no peaks table
        defs = select_checks(_split(args.only), _split(args.skip))
    except (OSError, ValueError) as e:
        sys.stderr.write(f"validator: cannot run: {_err(e)}\n")
        return EXIT_CANNOT_RUN
    opts = Options(require_gpu=args.require_gpu, in_image=args.in_image,
                   timeout_scale=args.timeout_scale, emulated=" ".join(args.emulated.split())[:200])
    try:
        report, facts = validate(spec, peaks, opts, defs)
    except KeyboardInterrupt:
        sys.stderr.write("validator: interrupted\n")
        return 130
    except Exception:  # a validator bug: say so, exit "could not run", never a bare traceback
        sys.stderr.write("validator: internal error, please report:\n" + traceback.format_exc())
        return EXIT_CANNOT_RUN
    try:
        if args.out:
            write_json_atomic(args.out, report)
        if args.facts_out:
            write_json_atomic(args.facts_out, facts)
    except OSError as e:
        sys.stderr.write(f"validator: cannot write the report: {_err(e)}\n")
        return EXIT_CANNOT_RUN
    if args.json:
        print(json.dumps(_sanitize(report), indent=2, allow_nan=False))
    else:
        print(format_table(report))
    return exit_code_for(report["checks"])


if __name__ == "__main__":
    sys.exit(main())
