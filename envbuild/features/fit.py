"""`envbuild fit`: the memory one training or inference step needs, per GPU, and the cheapest
changes that make it fit (docs/guides/fit.md).

Two methods, and the report says which one answered:
- measured: the step run under torch's fake tensors with its memory tracker
  (envbuild/validator/memprobe.py), in the image that would run the job (`--image`) or with this
  host's Python; a config.json is built with transformers' `from_config` where that is installed;
- formula: envbuild/core/memory.py, from a config.json alone.
`auto` measures where it can and falls back to the formula, saying why. Options are re-checked by
the estimator that answered (sharding scales a measured step's states, the one change a single
process cannot run)."""

from __future__ import annotations

import json
import math
import re
import shlex
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common import boundedio
from envbuild.common.echo import escaped, shown
from envbuild.common.errors import (
    EXIT_CANNOT_RUN,
    EnvbuildError,
    EnvironmentProblem,
    UsageError,
)
from envbuild.common.lazyre import lazy
from envbuild.common.record import record
from envbuild.core import gpus as gpu_names
from envbuild.core import memory
from envbuild.core.memory import Coeffs, Estimate, GpuFit, Job
from envbuild.core.memshape import Shape, parse_config
from envbuild.matrix import Gpu, Matrix

if TYPE_CHECKING:
    from envbuild.doctor.view import View

METHODS = ("auto", "measured", "formula")
# config.json keys that do not shape the model (a classifier's labels can be thousands): not sent
# to the probe, whose job is one bounded argument
# config keys the probe's model is built without: labels and names it does not need, and the
# quantization (both methods count the weights at --dtype; a report note says so)
UNUSED_KEYS = frozenset({"id2label", "label2id", "task_specific_params", "_name_or_path",
                         "quantization_config"})
MEASURE_TIMEOUT = 600.0
MAX_TIMEOUT = 86400.0  # --timeout's bound (cli/fit_cmd.py declares it from here)
MAX_ENTRY_BYTES = 4 << 20  # the probe reads the same bound
CONFIG_HINT = "give a Hugging Face config.json (Llama, Mistral or Qwen2): docs/guides/fit.md"
ENTRY_HINT = ("name a Python file and the function in it that returns (model, inputs), "
              "e.g. --entry train.py:build")
@record
class FitRequest:
    job: Job
    config: Path | None = None
    entry: str | None = None  # FILE.py:FN
    image: str | None = None
    method: str = "auto"
    gpus: tuple[str, ...] = ()
    fleet: Path | None = None
    facts_dir: Path | None = None  # host facts recorded by `envbuild doctor --save DIR`
    timeout: float = MEASURE_TIMEOUT
    matrix_dir: Path | None = None


@record
class Target:
    gpu: Gpu  # the matrix row; memory_mib is the driver's figure when it came from a host
    where: str  # "--gpu H100", "fleet group a100 (4 x 8)", "this host, GPU 0"
    # The `envbuild fit` words that judge this GPU again: --gpu NAME for a matrix row, else the
    # host's own source (--facts DIR, or nothing for this host): a GPU the matrix does not know,
    # or knows with another size than its driver reports, is named by where it was found.
    argv: tuple[str, ...] = ()
    max_shards: int = 0  # the GPUs of this kind there are to shard over (0: --gpu, any number)


@record
class FitReport:
    job: Job
    estimate: Estimate
    model: str  # what was estimated: the config's path, or the entry
    targets: tuple[Target, ...]
    fits: tuple[GpuFit, ...]
    notes: tuple[str, ...] = ()
    config: str | None = None  # how the model was given (`envbuild run --fit` re-checks with it)
    entry: str | None = None
    image: str | None = None
    command: tuple[str, ...] = ()  # the `envbuild fit` words naming the model and the method
    kernels: tuple[str, ...] = ()  # the attention kernels the estimate's step ran (memory.toml)

    def option_command(self, job: Job, target: Target) -> str:
        """The `envbuild fit` command that checks `job` on `target` (each option printed)."""
        return shlex.join([*self.command, *job_argv(job, self.entry is not None),
                           *target.argv])

    @property
    def ok(self) -> bool:
        return all(f.fits for f in self.fits)

    def to_json(self) -> dict[str, Any]:
        e = self.estimate
        return {
            "model": self.model, "config": self.config, "entry": self.entry, "image": self.image,
            "method": e.method, "how": e.how, "params": e.params,
            "trainable": e.trainable, "peak_bytes": e.peak_bytes,
            "components": dict(e.components), "job": job_json(self.job),
            "attention_kernels": list(self.kernels),
            "notes": [*e.notes, *self.notes],
            "gpus": [{"gpu": f.gpu, "where": t.where, "memory_bytes": f.usable_bytes,
                      "total_bytes": f.total_bytes, "needed_bytes": f.needed_bytes,
                      "fits": f.fits, "margin_bytes": f.margin_bytes, "notes": list(f.notes),
                      "options": [{"change": o.change, "flags": list(o.flags),
                                   "needed_bytes": o.needed_bytes, "margin_bytes": o.margin_bytes,
                                   "job": job_json(o.job),
                                   "command": self.option_command(o.job, t)}
                                  for o in f.options]}
                     for t, f in zip(self.targets, self.fits, strict=True)],
        }


def job_json(job: Job) -> dict[str, Any]:
    return {"mode": job.mode, "batch": job.batch, "seq": job.seq, "dtype": job.dtype,
            "mixed": job.mixed, "optimizer": job.optimizer, "checkpointing": job.checkpointing,
            "lora_rank": job.lora_rank, "shards": job.shards, "accumulate": job.accumulate}


# -- inputs ------------------------------------------------------------------------------------
def read_config(path: Path) -> Shape:
    try:
        text = boundedio.read_text(path, "config.json", hint=CONFIG_HINT)
    except FileNotFoundError:
        raise UsageError(f"{boundedio.path_text(path)}: no such file", CONFIG_HINT) from None
    return parse_config(text, boundedio.path_text(path))


def entry_file(entry: str) -> Path:
    """FILE.py of FILE.py:FN, checked: a regular .py file of a bounded size, FN a name."""
    path_text, sep, name = entry.rpartition(":")
    if not sep or not path_text or not name.isidentifier() or "\x00" in entry:
        raise UsageError(f"--entry {entry[:80]!r} is not FILE.py:FUNCTION", ENTRY_HINT)
    path = Path(path_text)
    if path.suffix != ".py":
        raise UsageError(f"--entry {entry[:80]!r}: {path.name[:60]!r} is not a .py file",
                         ENTRY_HINT)
    try:
        boundedio.read_bytes(path, "Python file (--entry)", cap=MAX_ENTRY_BYTES, hint=ENTRY_HINT)
    except FileNotFoundError:
        raise UsageError(f"{boundedio.path_text(path)}: no such file", ENTRY_HINT) from None
    return path


def _gpu_row(m: Matrix, name: str, where: str) -> Gpu:
    if name.casefold().startswith(("sm_", "gfx")):
        raise UsageError(f"{where}: {name[:40]!r} is an architecture, not a GPU model",
                         "memory differs by model: name one, e.g. --gpu H100 or --gpu 'RTX 4090' "
                         "(`envbuild matrix show gpus`)")
    row = next((g for vendor in ("nvidia", "amd")
                if (g := gpu_names.lookup(m, name, vendor)) is not None), None)
    if row is None or not memory.has_size(row):
        known = [g.name for g in m.gpus if g.memory_mib][:5]
        raise UsageError(f"{where}: no GPU {name[:60]!r} with a known memory size in the matrix",
                         f"name one as nvidia-smi does, e.g. {', '.join(known)} "
                         "(`envbuild matrix show gpus`)")
    if memory.unsized_mobile(row, name):
        gb = min(8, int(row.device_memory_gb or row.memory_gb))
        sized = f"{name[:60]} {gb}GB"
        raise UsageError(f"{where}: {name[:60]!r} is a laptop GPU, whose memory is not the "
                         f"{row.name}'s ({row.memory_gb:g} GB) and not in the matrix",
                         f"add its memory to the name, as for one with {gb} GB: "
                         f"{shlex.join(['--gpu', sized])}; or run "
                         "`envbuild fit` on that laptop (it reads the driver's figure)")
    return memory.sized_by_name(row, name)


_MIG = lazy(r"(?<![a-z])MIG(?![a-z])", re.I)


def _most_shards(row: Gpu, name: str = "") -> int:
    """The GPUs of this kind a job may shard over when nothing else says (0: any number); a GPU
    that is its whole system (per_system = 1) is one, and so is a MIG slice (NCCL does not
    run across MIG instances)."""
    return 1 if row.per_system == 1 or _MIG.search(name) else 0


def targets(req: FitRequest, m: Matrix) -> tuple[list[Target], list[str]]:
    """The GPUs to judge: --gpu, the fleet's groups, else this host's (or recorded) GPUs."""
    # a board that is the whole system (Jetson, DGX Spark) is offered no sharding; a name that
    # states its size (Tesla M40 24GB) is judged at it, and named so again
    out = [Target(row, shlex.join(["--gpu", said]), ("--gpu", said), _most_shards(row, n))
           for n in req.gpus for row in [_gpu_row(m, n, f"--gpu {n[:40]}")]
           for said in [n if row.device_memory_basis == "stated" else row.name]]
    notes: list[str] = []
    if req.fleet is not None:
        from envbuild.features.fleet import load_fleet

        for g in load_fleet(req.fleet, m).groups:
            per = f" x {g.gpus_per_node}" if g.gpus_per_node else ""
            row = _gpu_row(m, g.gpu, f"{boundedio.path_text(req.fleet)} group {g.name}")
            said = g.gpu if row.device_memory_basis == "stated" else row.name
            out.append(Target(row, f"fleet group {g.name} ({g.count} node(s){per})",
                              ("--gpu", said),
                              min(max(1, g.count * (g.gpus_per_node or 1)),  # 0 nodes: none
                                  _most_shards(row, g.gpu) or 1 << 30)))
    if not req.gpus and req.fleet is None:
        out, notes = _host_targets(m, req.facts_dir)
    return _unique(out), notes


def _unique(found: list[Target]) -> list[Target]:
    """Each GPU kind once (the same row at the same size): where several fleet groups or host
    GPUs share it, the first's name with the others', and the most GPUs any of them has to shard
    over (0, any number, wins)."""
    seen: dict[tuple[str, int, float], Target] = {}
    for t in found:
        key = (t.gpu.name, t.gpu.memory_mib, t.gpu.device_memory_gb)
        first = seen.setdefault(key, t)
        if first is not t:
            most = 0 if 0 in (first.max_shards, t.max_shards) else max(first.max_shards,
                                                                          t.max_shards)
            where = first.where if t.where in first.where.split("; ") else \
                f"{first.where}; {t.where}"
            seen[key] = replace(first, where=where, max_shards=most)
    return list(seen.values())


def view_gpus(v: View, m: Matrix) -> list[tuple[int, Gpu, bool]]:
    """A host's GPUs whose memory is known: (index, the matrix row with the driver's memory
    figure, whether `--gpu ITS_NAME` judges the same GPU: the matrix knows the model and sizes
    it as the driver does)."""
    out: list[tuple[int, Gpu, bool]] = []
    for g in v.gpus:
        row = gpu_names.lookup(m, g.name, "nvidia") or gpu_names.lookup(m, g.name, "amd")
        base = row if row is not None else Gpu(name=g.name, vendor="nvidia", cc=g.cc)
        known = row is not None
        if g.memory_mib:
            # the driver's own figure beats the matrix's: this device's, whatever variant or
            # share of a module the row's device_memory_gb stands for (so no note about them)
            known = known and row is not None and row.memory_mib == g.memory_mib
            base = replace(base, memory_mib=g.memory_mib, device_memory_gb=0.0,
                           device_memory_basis="")
        if base.memory_mib or base.memory_gb:
            out.append((g.index, base, known))
    return out


def same_kind(found: list[tuple[int, Gpu, bool]], gpu: Gpu) -> int:
    """How many of a host's GPUs (view_gpus) are `gpu`'s kind: the most a job shards over."""
    return sum(1 for _, g, _ in found if g == gpu)


def _host_targets(m: Matrix, facts_dir: Path | None) -> tuple[list[Target], list[str]]:
    from envbuild.doctor import probes
    from envbuild.doctor import record as recorded
    from envbuild.doctor.view import build_view

    facts = recorded.load(facts_dir) if facts_dir is not None else probes.collect(torch=False)
    again = ("--facts", str(facts_dir)) if facts_dir is not None else ()
    v = build_view(facts, m)
    found = view_gpus(v, m)
    out = [Target(gpu, f"this host, GPU {index}", ("--gpu", gpu.name) if known else again,
                  max_shards=same_kind(found, gpu))
           for index, gpu, known in found]
    where = "the recorded host" if facts_dir is not None else "this host"
    out = [replace(t, where=t.where.replace("this host", where, 1)) for t in out]
    notes = [_mig_note(g, m) for g in (v.smi.gpus if v.smi else ()) if g.mig == "Enabled"][:1]
    amd = [r.name for n in dict.fromkeys(v.amd_names)
           if (r := gpu_names.lookup(m, n, "amd")) is not None]
    if out:
        return out, notes
    if amd:  # the host side reads no AMD GPU's memory: the matrix's, named by the user
        return out, [f"{where} has AMD GPUs ({', '.join(amd[:4])}), not judged from the host: "
                     f"name them with --gpu (e.g. {shlex.join(['--gpu', amd[0]])}); the figures "
                     "follow CUDA's kernels, not checked on ROCm"]
    return out, [f"no NVIDIA GPU found on {where}: name one with --gpu (e.g. --gpu H100) or "
                 "give a fleet with --fleet"]


def _mig_note(g: Any, m: Matrix) -> str:
    """A GPU in MIG mode: nvidia-smi's total is the whole GPU's; torch sees slices."""
    said = f"GPU {g.index} ({escaped(g.name)[:60]}) has MIG enabled: torch sees its MIG slices, "\
        "each smaller than the whole GPU judged here (`nvidia-smi -L` lists them)"
    if gpu_names.lookup(m, g.name, "nvidia") is None:
        return said
    example = shlex.join(["--gpu", f"{g.name[:60]} MIG 1g.10gb"])
    return f"{said}; judge a slice by its profile: {example} for a 10 GB slice"


def _local_image(ref: str) -> None:
    """--image names an image the local engine has (fit never pulls: the job's image is the one
    that would run it); UsageError otherwise, EnvironmentProblem (exit 3) with no engine."""
    from envbuild.core.refs import check_image_ref
    from envbuild.engine import docker

    check_image_ref(ref)
    if docker.local_image(ref) is None:
        raise UsageError(f"--image {shown(ref)}: no such image in the local Docker engine",
                         "`docker images` lists them; build one with `envbuild make` (fit never "
                         "pulls), or leave --image out to measure with this host's Python")


# -- estimators --------------------------------------------------------------------------------
class Measured:
    """The measured estimator: one probe run per job (cached), in the image or here; sharding
    scales the unsharded step's states (core.memory.sharded)."""

    def __init__(self, req: FitRequest, shape: Shape | None, coeffs: Coeffs, rule: Any,
                 progress: Callable[[str], None], deadline: float | None = None) -> None:
        self.req, self.shape, self.coeffs, self.rule = req, shape, coeffs, rule
        self.progress = progress
        self.cache: dict[Job, Estimate | None] = {}
        self.entry = entry_file(req.entry) if req.entry is not None else None
        # --timeout bounds every run together (shared by the estimators of one fit)
        self.deadline = deadline if deadline is not None else time.monotonic() + req.timeout
        self.out_of_time = False  # an option was left unmeasured for want of time

    def probe_job(self, job: Job, config: Mapping[str, Any] | None) -> dict[str, Any]:
        model: dict[str, Any] = ({"entry": self.req.entry} if self.req.entry is not None
                                 else {"config": {k: v for k, v in (config or {}).items()
                                                  if k not in UNUSED_KEYS}})
        return {"format": 1, "model": model, **job_json(job), "device": "auto", "real": False,
                "sdpa": self.rule, "min_torch": self.coeffs.min_torch}

    def answer(self, job: Job) -> dict[str, Any]:
        from envbuild.engine import fitprobe
        from envbuild.validator import memprobe

        probe = self.probe_job(job, self.config)
        size = len(json.dumps(probe, separators=(",", ":")).encode())
        if size > memprobe.MAX_JOB:
            raise memory.ProbeError("too-big", f"the config is {size >> 10} KiB as the "
                                    f"probe's job; it takes at most {memprobe.MAX_JOB >> 10} KiB")
        left = self.deadline - time.monotonic()
        if left < 1 and not self.asked(job):
            self.out_of_time = True
            raise memory.ProbeError("timeout", "out of time (--timeout) for the options")
        left = max(left, 1.0)
        self.progress(f"measuring {describe_job(job, self.req.entry is not None)}"
                      + (f" in {shown(self.req.image)}" if self.req.image else " here"))
        try:
            if self.req.image:
                return fitprobe.measure_in_image(self.req.image, probe, self.entry, left)
            return fitprobe.measure_here(probe, left)
        except fitprobe.ProbeRunError as exc:  # timed out, died, printed no answer
            if exc.timed_out and not self.asked(job):
                self.out_of_time = True
            raise memory.ProbeError("timeout" if exc.timed_out else "run", exc.message) \
                from None
        except (UsageError, EnvironmentProblem):
            raise  # bad input (an entry it cannot mount), no engine: as they are
        except EnvbuildError as exc:  # the engine refused the run
            raise memory.ProbeError("run", exc.message) from None

    def asked(self, job: Job) -> bool:
        """Whether `job` is the asked step (sharding aside: a sharded step is measured on one
        GPU and scaled), not an option."""
        return replace(job, shards=1) == replace(self.req.job, shards=1)

    config: Mapping[str, Any] | None = None

    def __call__(self, job: Job) -> Estimate | None:
        """The job's estimate; None for a change this estimator cannot make or measure (an
        entry's own inputs fix its batch and sequence; a probe without bitsandbytes cannot run
        8-bit AdamW; a model without checkpointing; no time left): that option is passed over.
        ProbeError for the asked job itself (the caller falls back or fails)."""
        asked = self.req.job
        if job.shards > 1:
            one = self(replace(job, shards=1))
            return None if one is None else memory.sharded(one, job, self.shape, self.coeffs)
        if self.req.entry is not None and (job.batch, job.seq) != (asked.batch, asked.seq):
            return None
        if job not in self.cache:
            try:
                self.cache[job] = with_workspace(memory.from_answer(self.answer(job), job),
                                                 job, self.coeffs)
            except memory.ProbeError:
                if self.asked(job):
                    raise
                self.cache[job] = None
        return self.cache[job]


def with_workspace(fake: Estimate, job: Job, c: Coeffs) -> Estimate:
    """A fake-tensor step's peak plus cuBLAS's workspace, which max_memory_allocated counts and
    no fake tensor holds (memory.toml [cuda]: the H200's real training peaks were 64-74 MiB over
    the fake ones, the prefill 35 MiB), as the formula counts it."""
    handles = c.workspace_handles_train if job.mode == "train" else c.workspace_handles_infer
    extra = int(handles * c.workspace_bytes)
    comps = {**fake.components, "other": fake.components.get("other", 0) + extra}
    return replace(fake, peak_bytes=fake.peak_bytes + extra, components=comps,
                   how=f"{fake.how}; + cuBLAS workspace {extra >> 20} MiB")


@record
class Kind:
    """The estimator of the GPUs that run one set of attention kernels, and its asked step."""

    kernels: tuple[str, ...]  # memory.toml [sdpa] backends these GPUs run ("flash", ...)
    coeffs: Coeffs  # memory.for_gpu's
    fn: Callable[[Job], Estimate | None]
    base: Estimate  # the asked step
    probe: Measured | None = None


class Kernels:
    """One estimator per set of attention kernels the GPUs judged run (a V100 or T4 has no
    flash attention, so its step may save more), made when a GPU first needs it: the formula
    with that rule, or a probe run emulating it, falling back to the formula under auto."""

    def __init__(self, req: FitRequest, shape: Shape | None, config: Mapping[str, Any] | None,
                 progress: Callable[[str], None], notes: list[str]) -> None:
        self.req, self.shape, self.config, self.progress = req, shape, config, progress
        self.notes = notes
        self.deadline = time.monotonic() + req.timeout  # --timeout bounds every run together
        self.found: dict[tuple[Any, ...], Kind] = {}
        self.failed = False  # a probe failed and the formula stood in (so for every kind)

    def estimate(self, c: Coeffs) -> Kind:
        key = memory.rule_key(c)
        if key not in self.found:
            self.found[key] = self._make(memory.kernel_names(c), c)
        return self.found[key]

    def _make(self, key: tuple[str, ...], c: Coeffs) -> Kind:
        req, shape = self.req, self.shape
        first = next(iter(self.found.values())).kernels if self.found else key
        missing = tuple(k for k in first if k not in key)
        more = tuple(k for k in key if k not in first)
        for_whom = (f" for GPUs without {_kernel_words(missing)}" if missing else
                    f" for GPUs with {_kernel_words(more)}" if more else "")
        if req.method == "formula":
            assert shape is not None
            fn = _formula(shape, c)
            return Kind(key, c, fn, _asked(fn, req.job))
        if self.failed and shape is not None:  # the first probe failed: not once per kind
            fn = _formula(shape, c)
            return Kind(key, c, fn, _asked(fn, req.job))
        measured = Measured(req, shape, c, memory.sdpa_rule(c), self.progress,
                            deadline=self.deadline)
        measured.config = self.config
        try:
            return Kind(key, c, measured, _asked(measured, req.job), measured)
        except memory.ProbeError as exc:
            if exc.code == "entry":
                hint = ENTRY_HINT
                if req.image and "ermission denied" in exc.message:
                    hint = ("the image runs as its own user, who cannot read the file: make its "
                            "folder readable to others (chmod o+rx FOLDER, o+r FILE)")
                raise UsageError(f"--entry {str(req.entry)[:80]!r}: {exc.message}",
                                 hint) from None
            if req.method == "measured" or shape is None:  # no formula stands in
                raise EnvbuildError(f"the step could not be measured{for_whom}: {exc.message}",
                                    _hint(exc.code, req, c), exit_code=EXIT_CANNOT_RUN) from None
            self.failed = True
            self.notes.append(f"not measured{for_whom} ({exc.message}): the formula answered")
            fn = _formula(shape, c)
            return Kind(key, c, fn, _asked(fn, req.job))


def _asked(fn: Callable[[Job], Estimate | None], job: Job) -> Estimate:
    base = fn(job)
    if base is None:  # not reached: the asked job is measured, raises, or has a formula
        raise EnvbuildError("the step could not be estimated", "try --method formula",
                            exit_code=EXIT_CANNOT_RUN)
    return base


def _kernel_words(kernels: tuple[str, ...]) -> str:
    words = {"efficient": "memory-efficient"}
    return " or ".join(f"{words.get(k, k)} attention" for k in kernels) or "attention kernels"


def _kernels_note(gpu: Gpu, kind: Kind, shown: Kind) -> str:
    """Why this GPU is judged at another peak than the report's: the attention kernels it runs
    (memory.toml [sdpa] min_cc/max_cc)."""
    missing = [k for k in shown.kernels if k not in kind.kernels]
    more = [k for k in kind.kernels if k not in shown.kernels]
    arch = f"sm_{gpu.cc.replace('.', '')}" if gpu.cc else gpu.name
    path = next((n.removeprefix("attention: ").split("; a prefill", 1)[0] for n in kind.base.notes
                 if n.startswith("attention: ")), "")  # the formula says which kernel
    why = (f"{arch} has no {_kernel_words(tuple(missing))}, so CUDA takes "
           + (path or "another kernel (math where none admits the call, e.g. grouped K/V heads)")
           if missing else f"{arch} runs {_kernel_words(tuple(more))}")
    return (f"judged at this GPU's peak, {kind.base.peak_bytes / 1e9:,.1f} GB allocated, not "
            f"the {shown.base.peak_bytes / 1e9:,.1f} GB above: {why}")


def default_dtype(entry: bool) -> str:
    """`--dtype` when none is given: a config's weights are bf16; an entry's are what its code
    makes, torch's own fp32."""
    return "fp32" if entry else "bf16"


def job_argv(job: Job, entry: bool = False) -> list[str]:
    """The `envbuild fit` words of `job` (what differs from the defaults); `entry`: the job of
    an --entry (its default dtype differs)."""
    default = Job(mode=job.mode, dtype="fp32" if job.mixed else default_dtype(entry))
    return (["--infer"] if job.mode == "infer" else []) + \
        list(memory.job_flags(job, default))


def command_words(req: FitRequest) -> tuple[str, ...]:
    """`envbuild fit` and the words naming the model, the image and the method of `req`."""
    argv = ["envbuild", "fit"]
    if req.config is not None:
        argv += ["--config", str(req.config)]
    if req.entry is not None:
        argv += ["--entry", req.entry]
    if req.image:
        argv += ["--image", req.image]
    if req.method != "auto":
        argv += ["--method", req.method]
    return tuple(argv)


def command_for(req: FitRequest, job: Job, gpu: str | None) -> str:
    """The `envbuild fit` command that checks `job` on `gpu` (None: on the GPUs of the host it
    runs on)."""
    return shlex.join([*command_words(req), *job_argv(job, req.entry is not None),
                       *(["--gpu", gpu] if gpu else [])])


def describe_job(job: Job, entry: bool = False) -> str:
    """The step in words; `entry`: an --entry's, whose inputs fix the batch and sequence."""
    size = "the entry's own inputs" if entry else f"batch {job.batch} x {job.seq}"
    what = (f"{job.mode} step, {size}, "
            f"{'mixed ' if job.mixed else ''}{memory.compute_dtype(job)}")
    if job.mode == "train":
        what += f", {job.optimizer}" + (", checkpointing" if job.checkpointing else "") + \
                (f", LoRA {job.lora_rank}" if job.lora_rank else "")
    return what


def fit(req: FitRequest, progress: Callable[[str], None] | None = None) -> FitReport:
    """The report of one job; UsageError for bad input, EnvbuildError when it cannot be
    measured and no formula stands in."""
    from envbuild import matrix

    say = progress or (lambda _text: None)
    if req.method not in METHODS:
        raise UsageError(f"--method {req.method[:40]!r} is not one of {', '.join(METHODS)}",
                         "auto measures where it can and falls back to the formula")
    if (req.config is None) == (req.entry is None):
        raise UsageError("give the model once: --config config.json or --entry FILE.py:FN",
                         "a Hugging Face config.json, or your own code returning (model, inputs)")
    if req.entry is not None and (req.job.batch, req.job.seq) != (Job().batch, Job().seq):
        flag = "--batch" if req.job.batch != Job().batch else "--seq"
        raise UsageError(f"{flag} does not go with --entry: the inputs your function returns "
                         "are the step's batch and sequence",
                         "leave it out, or make the function build its inputs at that size")
    if req.facts_dir is not None and (req.gpus or req.fleet is not None):
        raise UsageError("--facts judges a recorded host's GPUs: it does not go with --gpu or "
                         "--fleet", "give one of them")
    if req.entry is not None and req.method == "formula":
        raise UsageError("the formula needs a config.json: your own code can only be measured",
                         "leave out --method formula, or give --config")
    if req.image is not None and not req.image.strip():
        raise UsageError("--image '' names no image", "give a local image's TAG, or leave "
                         "--image out to measure with this host's Python")
    if req.image and req.method == "formula":
        raise UsageError("--image measures the step: it does not go with --method formula",
                         "leave out --method formula")
    if isinstance(req.timeout, bool) or not isinstance(req.timeout, (int, float)) \
            or not math.isfinite(req.timeout) or not 0 < req.timeout <= MAX_TIMEOUT:
        raise UsageError(f"--timeout {shown(str(req.timeout))} is not a number of seconds",
                         "give the seconds every measurement together may take, e.g. 600")
    if req.image:
        _local_image(req.image)
    if req.job.mixed and req.job.dtype != "fp32":  # mixed precision keeps fp32 weights, always
        req = replace(req, job=replace(req.job, dtype="fp32"))
    m = matrix.load(req.matrix_dir)
    coeffs = memory.coefficients(m.extra["memory"])
    memory.check_job(req.job, coeffs)
    shape, config_doc = None, None
    if req.config is not None:
        shape = read_config(req.config)
        config_doc = boundedio.parse_json(boundedio.read_text(req.config, "config.json"))
        if req.job.lora_rank > shape.hidden:  # adapters bigger than the layers they adapt
            raise UsageError(f"--lora {req.job.lora_rank} is more than the model's hidden size "
                             f"({shape.hidden})", "LoRA ranks are small: 8 to 64, e.g. --lora 16")
    found, host_notes = targets(req, m)
    notes: list[str] = list(host_notes)
    quantized = memory.quantized_note(shape, req.job) if shape is not None else None
    if quantized:
        notes.append(quantized)
    kinds = Kernels(req, shape, config_doc, say, notes)
    # the report's figure is the first GPU's (its attention kernels), else a flash-capable one's
    base = kinds.estimate(memory.for_gpu(coeffs, found[0].gpu) if found else coeffs).base
    for t in found:  # every kind's asked step before any option spends --timeout
        kinds.estimate(memory.for_gpu(coeffs, t.gpu))
    fits: list[GpuFit] = []
    for t in found:
        kind = kinds.estimate(memory.for_gpu(coeffs, t.gpu))
        verdict = memory.verdict(t.gpu, kind.base, kind.coeffs)
        if kind.base.peak_bytes != base.peak_bytes:
            verdict = replace(verdict, notes=(*verdict.notes, _kernels_note(
                t.gpu, kind, kinds.estimate(memory.for_gpu(coeffs, found[0].gpu)))))
        if not verdict.fits:
            verdict = replace(verdict, options=_options(shape, req.job, t, kind.fn,
                                                        kind.probe, kind.coeffs))
        fits.append(verdict)
    old_gpus = [t.gpu for t, f in zip(found, fits, strict=True)
                if memory.bf16_emulated(t.gpu, req.job, coeffs)
                or any(memory.bf16_emulated(t.gpu, o.job, coeffs) for o in f.options)]
    if old_gpus:
        names = ", ".join(dict.fromkeys(f"{g.name} (sm_{g.cc.replace('.', '')})"
                                        for g in old_gpus))
        fp16 = "--dtype fp16 without --mixed" if req.job.mixed else "--dtype fp16"
        notes.append(f"{names}: no native bf16 (compute capability "
                     f"{coeffs.bf16_native_cc:.1f} and newer): a bf16 step (bf16 weights or "
                     "--mixed, asked or offered) computes emulated, slowly, and its attention "
                     "has no memory-efficient kernel there (math, counted in its figures); fp16 "
                     f"({fp16}) is native there")
    if any(k.probe is not None and k.probe.out_of_time for k in kinds.found.values()):
        notes.append(f"--timeout {req.timeout:g} s ran out before every option was measured: "
                     "some changes that may fit are not shown (give it more time)")
    model = (boundedio.path_text(req.config) if req.config is not None else str(req.entry))
    return FitReport(job=req.job, estimate=base, model=model, targets=tuple(found),
                     fits=tuple(fits), notes=tuple(notes),
                     kernels=next(iter(kinds.found.values())).kernels if kinds.found else (),
                     config=str(req.config) if req.config is not None else None,
                     entry=req.entry, image=req.image, command=command_words(req))


OPTIONS = 3  # changes offered per GPU
MEASURED_CALLS = 16  # probe runs one GPU's options may take (seconds each)


def _options(shape: Shape | None, job: Job, target: Target,
             estimate_fn: Callable[[Job], Estimate | None], measured: Measured | None,
             coeffs: Coeffs) -> tuple[memory.Option, ...]:
    """The cheapest changes that make `job` fit the target's GPU, each re-checked by the
    estimator that answered (sharded over no more GPUs than a fleet or host has). A measured
    step with a config is searched with the formula (instant) and only the changes it finds are
    measured, so a few probe runs answer instead of a hundred; those the measurement does not
    confirm are dropped."""
    gpu, most = target.gpu, target.max_shards
    if measured is None or shape is None:
        return memory.options(shape, job, gpu, estimate_fn, coeffs, limit=OPTIONS,
                              max_calls=MEASURED_CALLS if measured is not None else 128,
                              max_shards=most)
    found = memory.options(shape, job, gpu, _formula(shape, coeffs), coeffs, limit=OPTIONS + 2,
                           max_shards=most)
    out: list[memory.Option] = []
    for option in found:
        estimate = measured(option.job)
        if estimate is None:
            continue
        v = memory.verdict(gpu, estimate, coeffs)
        if v.fits:
            out.append(replace(option, needed_bytes=v.needed_bytes, margin_bytes=v.margin_bytes))
        if len(out) == OPTIONS:
            break
    return tuple(out)


def _hint(code: str, req: FitRequest, c: Coeffs) -> str:
    """What to do when the asked step could not be measured, by the probe's error code."""
    formula = " (or --method formula: it answers from the config alone)" if req.config else ""
    where = "in the image" if req.image else "here"
    return {
        "no-torch": f"install torch {where} (pip install 'envbuild[host]'), or measure in an "
                    "image that has it (--image TAG)",
        "no-memtracker": f"measure with torch >= {c.min_torch} (an image: --image TAG){formula}",
        "no-transformers": f"install transformers {where} to build the model from its "
                           f"config{formula}",
        "no-bitsandbytes": f"install bitsandbytes {where} for --optimizer adamw8bit{formula}",
        "untraceable": ("the step raised under fake tensors: run it once for real to see why"
                        if req.entry else "the model raised under fake tensors" + formula),
        "unsupported": "leave out the option the message names" + formula,
        "too-big": "leave out the config's long lists (labels and the like)" + formula,
        "timeout": "give it more time (--timeout), or a smaller model to try with" + formula,
        "run": "run the step once for real to see why" + formula,
        "out-of-memory": "the host ran out of memory building the fake step: try a smaller "
                         "model first" + formula,
    }.get(code, "see the message; --json shows the probe's answer" + formula)


def _formula(shape: Shape, coeffs: Coeffs) -> Callable[[Job], Estimate | None]:
    return lambda job: memory.formula(shape, job, coeffs)


