"""`envbuild run IMAGE [-- CMD ...]`: the image judged against this host before it starts (a pure
preflight over the image's recorded spec and the doctor's host facts), then started with the
flags the preflight added, its output streamed, its exit code passed through; a failure is
decoded by explain and answered with the nearest variant of the image's spec that runs here.
Nothing here prints: the caller gets events and records."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common import proc
from envbuild.common.echo import escaped, shown
from envbuild.common.errors import EnvbuildError, EnvironmentProblem, UsageError
from envbuild.common.record import record
from envbuild.common.sizes import docker_size, size_bytes
from envbuild.common.versions import branch_of, minor_of
from envbuild.core import compat, memory, platforms, targets
from envbuild.core.memory import Estimate, Job
from envbuild.core.memshape import Shape
from envbuild.core.refs import check_image_ref as check_image_ref  # re-exported for tests
from envbuild.core.spec import Spec, from_json
from envbuild.doctor import checks_env, checks_host, model, parse
from envbuild.doctor.model import Finding, HostFacts, Severity
from envbuild.doctor.view import ERROR, INFO, OK, WARN, Out, View, build_view
from envbuild.engine.docker import CDI_ALL_GPUS, LABEL_ROLE, LABEL_RUN, ContainerPlan
from envbuild.validator import rules

if TYPE_CHECKING:
    from envbuild.core.compat import HostRules
    from envbuild.core.request import Request
    from envbuild.features.fit import FitRequest
    from envbuild.matrix import Gpu, Matrix

SPEC_LABEL = "io.envbuild.spec"
DEFAULT_PLATFORM = "linux/amd64"
CAPTURE_BYTES = 256 << 10  # the tail of a failed command's output that explain reads
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# The doctor's findings a container start depends on (the rest are about builds or this Python)
_ENGINE = ("docker.not_found", "docker.daemon_unreachable", "docker.permission_denied",
           "docker.snap")
_GPU_ENGINE = ("docker.gpu_runtime", "docker.no_gpu_runtime", "docker.nvml_after_reload",
               "podman.no_cdi", "podman.old")


# The refusals whose remediation says "run the nearest variant below": each computes it
NEAREST_FOR = ("torch.driver_too_old", "torch.arch_missing", "torch.gfx_missing")


@record
class ImageFacts:
    """What the image says of itself: its reference, the spec envbuild recorded in its labels,
    and the platform its config names."""

    ref: str
    spec: Spec
    platform: str = DEFAULT_PLATFORM

    @property
    def spec_platform(self) -> str:
        return self.spec.platform or DEFAULT_PLATFORM

    def describe(self) -> str:
        s = self.spec
        return (f"torch {s.torch} ({s.variant}), Python {s.python}, {s.os}, "
                f"{self.platform}")


def image_facts(ref: str, labels: Mapping[str, str], platform: str | None) -> ImageFacts:
    """The image's recorded spec (its io.envbuild.spec label); a UsageError for an image that
    has none or a damaged one."""
    text = labels.get(SPEC_LABEL)
    if not text:
        raise UsageError(f"{shown(ref)} has no {SPEC_LABEL} label: it was not built by envbuild",
                         "build it with `envbuild make`, or start it with `docker run`")
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise TypeError("not an object")
        spec = from_json(data)
        targets.get(spec.target)
    except (TypeError, ValueError, KeyError, EnvbuildError) as exc:
        raise UsageError(f"the {SPEC_LABEL} label of {shown(ref)} is not a spec "
                         f"({escaped(str(exc))[:80]})",
                         "rebuild the image with `envbuild make`") from None
    return ImageFacts(ref, spec, platform or spec.platform or DEFAULT_PLATFORM)


@record
class Mount:
    source: str  # an absolute host path that exists
    target: str  # an absolute container path
    read_only: bool = False


def _plain_path(text: str, what: str, flag: str) -> None:
    if not text or not text.isprintable() or any(c in text for c in ":,\\"):
        raise UsageError(f"{flag} {shown(text)}: the {what} must be a printable path without "
                         "':' ',' or '\\'", f"e.g. {flag} ./data:/data:ro")


def parse_mount(text: str, cwd: Path | None = None) -> Mount:
    """`-v SRC:DST[:ro|rw]`: SRC a host path that exists (relative to cwd), DST absolute."""
    parts = text.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise UsageError(f"-v {shown(text)} is not SRC:DST[:ro|rw]",
                         "e.g. -v ./data:/data:ro (a host path, then an absolute container path)")
    src, dst = parts[0], parts[1]
    _plain_path(src, "host path", "-v")
    _plain_path(dst, "container path", "-v")
    if not dst.startswith("/") or "/../" in f"{dst}/":
        raise UsageError(f"-v {shown(text)}: the container path must be absolute, without '..'",
                         "e.g. -v ./data:/data")
    host = (cwd or Path.cwd()) / Path(src).expanduser()
    if not host.exists():
        raise UsageError(f"-v {shown(text)}: {shown(src)} does not exist on this host",
                         "create it first (Docker would create an empty root-owned directory)")
    return Mount(str(host.resolve()), dst.rstrip("/") or "/", len(parts) == 3 and parts[2] == "ro")


def parse_env(text: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """`-e NAME=VALUE`, or `-e NAME` for this environment's value: (name, value). The value may
    be a secret: no message quotes it."""
    name, eq, value = text.partition("=")
    if not _ENV_NAME.fullmatch(name):
        raise UsageError(f"-e {shown(name)}: not an environment variable name",
                         "names are letters, digits and _ (not starting with a digit): -e NAME or "
                         "-e NAME=VALUE")
    if not eq:
        if name not in environ:
            raise UsageError(f"-e {name}: {name} is not set here",
                             f"set it, or give its value: -e {name}=VALUE")
        value = environ[name]
    if "\0" in value:
        raise UsageError(f"-e {name}: the value holds a NUL character", "give a text value")
    return name, value


@record
class FitClaim:
    """A job's memory as `envbuild fit --json` reported it (REPORT.json, checked): what `run
    --fit` judges this host's GPUs against."""

    report: str  # the file, as messages name it
    job: Job
    estimate: Estimate
    config: str | None = None  # the config.json fit read (the formula's options re-check it)
    entry: str | None = None
    image: str | None = None
    shape: Shape | None = None  # that config, re-read here (a formula report's only)
    kernels: tuple[str, ...] = ()  # the attention kernels its step ran (() : an older report)

    def request(self) -> FitRequest:
        """The `envbuild fit` request that makes the same report (for its commands)."""
        from envbuild.features.fit import FitRequest

        method = "formula" if self.estimate.method == "formula" else "auto"
        return FitRequest(job=self.job, config=Path(self.config) if self.config else None,
                          entry=self.entry, image=self.image, method=method)


FIT_HINT = "save it with `envbuild fit ... --json > REPORT.json` (docs/guides/run.md)"
_JOB_FIELDS: Mapping[str, type] = {
    "mode": str, "batch": int, "seq": int, "dtype": str, "mixed": bool, "optimizer": str,
    "checkpointing": bool, "lora_rank": int, "shards": int, "accumulate": int}


def read_fit(path: Path, matrix_dir: Path | None = None) -> FitClaim:
    """REPORT.json (untrusted: read bounded, every field checked); a one-line UsageError for a
    file that is not `envbuild fit --json`'s report."""
    from envbuild import matrix
    from envbuild.common import boundedio

    name = boundedio.path_text(path)

    def bad(what: str) -> UsageError:
        return UsageError(f"--fit {name}: {what}", FIT_HINT)

    try:
        data = boundedio.load_json(path, "fit report", hint=FIT_HINT)
    except FileNotFoundError:
        raise bad("no such file") from None
    except ValueError as exc:
        raise bad(f"not JSON ({escaped(str(exc))[:80]})") from None
    except UsageError as exc:  # not a regular file, too big, too deep, not UTF-8
        raise bad(exc.message.removeprefix(f"{name}: ")) from None
    if not isinstance(data, dict):
        raise bad("not a JSON object")
    counts = {}
    for key in ("params", "trainable", "peak_bytes"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) \
                or not 0 <= value < memory.MAX_BYTES:
            raise bad(f"{key} is not a byte or parameter count")
        counts[key] = value
    if counts["peak_bytes"] == 0:
        raise bad("peak_bytes is 0")
    method = data.get("method")
    if method not in ("formula", "measured"):
        raise bad("method is not formula or measured")
    comps = data.get("components", {})
    if not isinstance(comps, dict) or not all(
            k in memory.COMPONENTS and isinstance(v, int) and not isinstance(v, bool)
            and 0 <= v < memory.MAX_BYTES for k, v in comps.items()):
        raise bad("components is not an object of byte counts")
    job_doc = data.get("job")
    if not isinstance(job_doc, dict) or set(job_doc) - set(_JOB_FIELDS):
        raise bad("job is not an object of the job's fields")
    for key, kind in _JOB_FIELDS.items():
        value = job_doc.get(key)
        if value is not None and (type(value) is not kind):
            raise bad(f"job.{key} is not {'a ' + kind.__name__ if kind is not int else 'a number'}")
    job = Job(**{k: v for k, v in job_doc.items() if v is not None})
    try:
        memory.check_job(job, memory.coefficients(matrix.load(matrix_dir).extra["memory"]))
    except UsageError as exc:
        raise bad(f"job: {exc.message}") from None
    text = {}
    for key in ("model", "how", "config", "entry", "image"):
        value = data.get(key)
        if value is not None and not (isinstance(value, str) and len(value) <= 4096):
            raise bad(f"{key} is not a text")
        text[key] = value
    kernels = data.get("attention_kernels", [])
    if not isinstance(kernels, list) or len(kernels) > 8 or not all(
            isinstance(k, str) and k.isidentifier() and len(k) <= 32 for k in kernels):
        raise bad("attention_kernels is not a list of kernel names")
    estimate = Estimate(params=counts["params"], trainable=counts["trainable"],
                        peak_bytes=counts["peak_bytes"], components=dict(comps), method=method,
                        how=escaped(text["how"] or "")[:300])
    shape = None
    if method == "formula" and text["config"]:
        from envbuild.features.fit import read_config

        with contextlib.suppress(EnvbuildError, OSError, ValueError):
            shape = read_config(Path(text["config"]))
    return FitClaim(name, job, estimate, text["config"], text["entry"], text["image"], shape,
                    tuple(kernels))


@record
class RunRequest:
    """What the user asked of the container (flags envbuild does not choose)."""

    command: tuple[str, ...] = ()
    mounts: tuple[Mount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    shm_size: str | None = None  # --shm-size: the user's, kept as given
    ipc_host: bool = False  # --ipc host
    no_gpu: bool = False  # --no-gpu: start a GPU image without its GPUs
    fit: FitClaim | None = None  # --fit REPORT.json: the job's memory, as `envbuild fit` said


@record
class Added:
    """A flag the preflight added, and why."""

    flag: str
    why: str

    def to_json(self) -> dict[str, str]:
        return {"flag": self.flag, "why": self.why}


@record
class Preflight:
    image: ImageFacts
    findings: tuple[Finding, ...]
    added: tuple[Added, ...]
    plan: ContainerPlan
    nearest: str = ""  # the make command of the nearest variant that runs here (when refused)

    @property
    def blocked(self) -> bool:
        return any(f.severity is ERROR for f in self.findings)

    def to_json(self) -> dict[str, Any]:
        return {"image": self.image.ref, "spec_hash": self.image.spec.hash,
                "target": self.image.spec.target, "platform": self.image.platform,
                "findings": [f.to_json() for f in self.findings],
                "added": [a.to_json() for a in self.added],
                "docker": shlex.join(self.plan.argv()), "blocked": self.blocked,
                "nearest": self.nearest or None}


# ------------------------------------------------------------------ the pure preflight


def preflight(image: ImageFacts, facts: HostFacts, m: Matrix, host: HostRules,
              req: RunRequest, labels: Mapping[str, str] | None = None) -> Preflight:
    """The image against this host: findings, the flags to add, the container to start."""
    v = build_view(facts, m)
    o = Out()
    spec = image.spec
    entry = targets.get(spec.target)
    gpu_image = entry.gpu_vendor in ("nvidia", "amd") and not req.no_gpu
    _engine(v, m, host, o, gpu_image and entry.gpu_request)
    plan = ContainerPlan(image=image.ref, command=req.command,
                         labels=dict(labels or {LABEL_ROLE: "run"}),
                         shm_size=None if req.shm_size is None else
                         size_bytes(req.shm_size, "--shm-size"), ipc_host=req.ipc_host,
                         mounts=tuple((x.source, x.target, x.read_only) for x in req.mounts),
                         env=dict(req.env))
    if image.platform != (v.platform or DEFAULT_PLATFORM) and v.platform:
        o.add("image.platform", WARN, f"the image is for {image.platform} and this host is "
              f"{v.platform}: it runs only under emulation (qemu), many times slower",
              f"build it for this host: `--platform {v.platform}`")
    if gpu_image and entry.gpu_request:
        plan = _nvidia(image, v, m, host, o, plan)
    elif gpu_image:
        plan = _amd(image, v, o, plan, entry)
    elif entry.gpu_vendor:
        o.add("gpu.none_asked", INFO, f"--no-gpu: the {entry.label} image starts without GPUs")
    plan, added = _limits(v, host, o, plan, req, gpu_image and (v.nvidia or v.amd))
    if not v.docker_ok and podman_version(v.facts):
        _podman_only(v, host, o, plan, gpu_image and entry.gpu_request)
    if v.wsl:
        _doctor(o, lambda scratch: checks_host.check_wsl(v, m, scratch))
    if req.fit is not None:
        _fit(req.fit, v, m, o, gpu_image and bool(entry.gpu_request))
    pre = Preflight(image, tuple(o.items), tuple(added), plan)
    if any(f.id in NEAREST_FOR and f.severity is ERROR for f in pre.findings):
        pre = replace(pre, nearest=nearest_variant(spec, v, m)[0])
    return pre


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB"


def _fit(claim: FitClaim, v: View, m: Matrix, o: Out, gpus_passed: bool) -> None:
    """--fit: the job's memory (fit's report) against each kind of GPU here, by fit's own rule
    (core.memory.verdict: the allocated peak with the allocator's headroom against the driver's
    total less its reserve and the CUDA context). Too big is a warning, never a refusal: the
    job, not the image, is what does not fit."""
    from envbuild.features.fit import command_for, view_gpus

    coeffs = memory.coefficients(m.extra["memory"])
    need = memory.needed_bytes(claim.estimate, coeffs)
    said = f"the job declared with --fit ({claim.report}) needs {_gb(need)} per GPU"
    ran = claim.kernels or memory.kernel_names(coeffs)  # an older report: a flash-capable GPU's
    found = view_gpus(v, m) if gpus_passed else []
    if not found:
        why = ("the container starts without GPUs" if not gpus_passed else
               "this host has no NVIDIA GPU whose memory is known")
        o.add("fit.unjudged", WARN if gpus_passed else INFO, f"{said}; {why}: not judged",
              f"judge it against a GPU by name: `{command_for(claim.request(), claim.job, None)} "
              "--gpu NAME`" if gpus_passed else "")
        return
    smi_names = {g.index: g.name for g in v.gpus}  # as nvidia-smi names them
    kinds: dict[tuple[str, int], tuple[list[int], Gpu, bool]] = {}
    for index, gpu, known in found:
        kinds.setdefault((gpu.name, gpu.memory_mib), ([], gpu, known))[0].append(index)
    for indices, gpu, known in kinds.values():
        where = f"GPU {', '.join(map(str, indices))} {smi_names.get(indices[0], gpu.name)}"
        here, estimate, says = memory.for_gpu(coeffs, gpu), claim.estimate, said
        if memory.kernel_names(here) != ran:  # a V100 or T4 runs no flash attention
            if claim.shape is None:
                o.add("fit.kernels", WARN, f"the job declared with --fit was estimated with "
                      f"{', '.join(ran) or 'no'} attention kernels; {where} runs "
                      f"{', '.join(memory.kernel_names(here)) or 'none of them'}, so its step "
                      "may need more", "measure it here: "
                      f"`{command_for(claim.request(), claim.job, None)}`")
            else:  # a formula report: the same formula with this GPU's kernels
                estimate = memory.formula(claim.shape, claim.job, here)
                says = (f"the job declared with --fit ({claim.report}) needs "
                        f"{_gb(memory.needed_bytes(estimate, here))} per GPU with these GPUs' "
                        f"attention kernels ({', '.join(memory.kernel_names(here)) or 'math'})")
        fit = memory.verdict(gpu, estimate, here)
        if fit.fits:
            o.add("fit.fits", OK, f"{says}; {where} has {_gb(fit.usable_bytes)} usable "
                  f"(margin {_gb(fit.margin_bytes)})")
        else:
            o.add("fit.too_big", WARN, f"{says}; {where} has {_gb(fit.usable_bytes)} usable: "
                  "'CUDA out of memory' is likely",
                  _fit_fix(claim, gpu, known, here, max_shards=len(indices)))
    if claim.job.shards > len(found):
        o.add("fit.shards", WARN, f"the job declared with --fit is sharded over "
              f"{claim.job.shards} GPUs; this host has {len(found)}",
              f"check it over {len(found)}: `"
              + command_for(claim.request(), replace(claim.job, shards=len(found)),
                            found[0][1].name if found[0][2] else None) + "`")


def _fit_fix(claim: FitClaim, gpu: Gpu, known: bool, coeffs: memory.Coeffs,
             max_shards: int) -> str:
    """The cheapest change `envbuild fit` finds for this GPU (a formula report whose config
    still reads; sharded over no more GPUs than this host has), as the fit command that checks
    it; else the fit command for this GPU, which lists them."""
    from envbuild.features.fit import command_for

    req, name = claim.request(), gpu.name if known else None
    if claim.shape is not None:
        shape = claim.shape
        found = memory.options(shape, claim.job, gpu,
                               lambda job: memory.formula(shape, job, coeffs), coeffs, limit=1,
                               max_shards=max_shards)
        if found:
            return (f"{found[0].change} (needs {_gb(found[0].needed_bytes)}): check it with "
                    f"`{command_for(req, found[0].job, name)}`")
    where = "" if known else " on this host"
    return f"`{command_for(req, claim.job, name)}`{where} lists the cheapest changes that fit"


def _doctor(o: Out, check: Callable[[Out], None], least: Severity = INFO) -> None:
    """The doctor's findings of one check, from severity `least` up, that concern a container:
    the user's own permission on /dev/nvidia* does not (the engine opens them)."""
    scratch = Out()
    check(scratch)
    o.items += [f for f in scratch.items if f.severity.rank >= least.rank
                and f.id != "nvidia.device_permission"]


def _engine(v: View, m: Matrix, host: HostRules, o: Out, nvidia: bool) -> None:
    """The doctor's engine findings that a container start depends on."""
    scratch = Out()
    checks_env.check_docker(v, m, host, scratch)
    keep = _ENGINE + (_GPU_ENGINE if nvidia else ())
    o.items += [f for f in scratch.items if f.id in keep]
    if v.docker_ok:
        o.add("docker.engine", OK, f"Docker engine {v.docker_info.get('ServerVersion', '?')}")


def podman_version(facts: HostFacts) -> str:
    """The version `podman info` says ('' without a working Podman)."""
    c = facts.out(model.PODMAN_INFO)
    obj = parse.json_object(c.stdout) if c is not None and c.ok else None
    return str(((obj or {}).get("version") or {}).get("Version", "")) if obj else ""


def _podman_only(v: View, host: HostRules, o: Out, plan: ContainerPlan, nvidia: bool) -> None:
    """A host with Podman and no Docker engine: run starts containers through the Docker engine
    only, so it refuses, and says the `podman run` line that starts the same container (CDI's
    --device nvidia.com/gpu=all for the GPUs, where Podman and a CDI spec allow it)."""
    ver = podman_version(v.facts)
    cdi = nvidia and v.nvidia and bool(checks_env.cdi_specs(v.facts)) and \
        compat.at_least(ver, host.podman_cdi_min)
    line = shlex.join(replace(plan, gpus="cdi" if cdi else "").argv("podman"))
    o.add("engine.podman_only", ERROR, f"this host has Podman {ver} and no Docker engine: "
          "envbuild run starts containers through the Docker engine only",
          f"start it with Podman (the image in Podman's store): {line}")


def _nvidia(image: ImageFacts, v: View, m: Matrix, host: HostRules, o: Out,
            plan: ContainerPlan) -> ContainerPlan:
    """A CUDA image: the driver against its CUDA (native, minor-version compatibility or
    forward compatibility, as the resolver rules), every GPU against its arch list, and how the
    engine passes the GPUs."""
    spec = image.spec
    if not v.nvidia:
        o.add("image.no_gpu", WARN, "a CUDA image on a host without an NVIDIA GPU: torch runs on "
              "the CPU in it", "`envbuild doctor` names the image for this host")
        return plan
    _doctor(o, lambda scratch: checks_host.check_nvidia(v, m, host, scratch), WARN)
    if v.driver and spec.torch_cuda:
        _driver(spec, v, m, o)
    same: dict[tuple[str, str], list[int]] = {}
    for g in v.gpus:
        if g.cc:
            same.setdefault((g.name, g.cc), []).append(g.index)
    for (name, cc), index in same.items():
        gpus = f"GPU {', '.join(map(str, index))} {name}"
        via = rules.arch_covers(tuple(spec.archs), cc)
        if via["covered"]:
            how = "its cubin" if via["mode"] == "sass" else "PTX JIT of"
            o.add("image.arch", OK, f"{gpus} ({rules.arch_name(cc)}) runs {how} {via['via']}")
        else:
            o.add("torch.arch_missing", ERROR,
                  f"torch {spec.torch} in the image has no kernels for {gpus} (compute "
                  f"capability {cc}): 'no kernel image is available for execution on the "
                  "device'", "run the nearest variant below", ["archs: " + " ".join(spec.archs)])
    return _gpu_flags(v, o, plan)


def _driver(spec: Spec, v: View, m: Matrix, o: Out) -> None:
    from envbuild.core.cuda_part import compat_refusal
    from envbuild.core.request import GpuRef

    driver, win = v.driver, v.windows_driver
    need = checks_env.driver_need(m, spec.torch_cuda or "", win)
    if spec.forward_compat:
        pkg = next((c for c in m.compat_packages if c.version == spec.forward_compat), None)
        branch = str(branch_of(driver))
        refused = compat_refusal(m, [GpuRef(g.name, "nvidia", g.cc) for g in v.gpus])
        if compat.how_runs(m, driver, spec.torch_cuda or "", win) == "native":
            o.add("image.driver", OK, f"driver {v.driver_label} runs the image's CUDA "
                  f"{spec.torch_cuda} natively (its forward-compatibility libraries stay unused)")
        elif pkg is not None and branch in pkg.host_branches and refused is None:
            o.add("image.driver", OK, f"driver {v.driver_label} (R{branch}) runs CUDA "
                  f"{spec.torch_cuda} through the image's forward-compatibility libraries "
                  f"{spec.forward_compat}")
        else:
            served = f"R{', R'.join(pkg.host_branches)}" if pkg is not None else "unknown branches"
            o.add("torch.driver_too_old", ERROR,
                  f"the image's forward-compatibility libraries {spec.forward_compat} serve "
                  f"{served}, not driver {v.driver_label}" + (f"; {refused}" if refused else ""),
                  f"upgrade the driver ({need}), or run the nearest variant below")
        return
    how = compat.how_runs(m, driver, spec.torch_cuda or "", win)
    # the NVIDIA container toolkit checks the image's NVIDIA_REQUIRE_CUDA against the driver
    required = spec.require_cuda or (minor_of(spec.cuda_image) if spec.cuda_image else "")
    native_req = not required or compat.how_runs(m, driver, required, win) == "native"
    if how and native_req:
        said = "natively" if how == "native" else "through minor-version compatibility"
        o.add("image.driver", OK, f"driver {v.driver_label} runs the image's CUDA "
              f"{spec.torch_cuda} ({spec.variant}) {said}")
    elif how:
        o.add("torch.driver_too_old", ERROR,
              f"the image requires CUDA {required} natively (NVIDIA_REQUIRE_CUDA=cuda>={required}"
              f"), which driver {v.driver_label} does not run: the NVIDIA container toolkit "
              f"refuses to start it ('unsatisfied condition: cuda>={required}')",
              f"upgrade the driver to >= {compat.ga_driver(m, required, win)}, or run the "
              "nearest variant below")
    else:
        o.add("torch.driver_too_old", ERROR,
              f"torch {spec.torch} (CUDA {spec.torch_cuda}) in the image needs {need}; the "
              f"driver is {v.driver_label}: 'CUDA driver version is insufficient for CUDA "
              "runtime version'", "upgrade the driver, or run the nearest variant below")


def _gpu_flags(v: View, o: Out, plan: ContainerPlan) -> ContainerPlan:
    """--gpus all through the nvidia runtime (Docker Desktop on WSL 2 too), else the CDI
    device; none when the engine has neither (the doctor's docker.no_gpu_runtime said why)."""
    d = v.docker_info
    desktop = "docker desktop" in str(d.get("OperatingSystem", "")).lower()
    if "nvidia" in (d.get("Runtimes") or {}) or (desktop and v.wsl):
        return replace(plan, gpus="all")
    if checks_env.cdi_specs(v.facts) and d.get("CDISpecDirs"):
        return replace(plan, gpus="cdi")
    if v.docker_ok and not o.has("docker.no_gpu_runtime"):
        o.add("docker.no_gpu_runtime", ERROR, "Docker has no NVIDIA runtime and no CDI spec",
              "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure "
              "--runtime=docker && sudo systemctl restart docker`")
    return plan


def _amd(image: ImageFacts, v: View, o: Out, plan: ContainerPlan,
         entry: targets.Target) -> ContainerPlan:
    if not v.amd:
        o.add("image.no_gpu", WARN, "a ROCm image on a host without an AMD GPU: torch runs on "
              "the CPU in it", "`envbuild doctor` names the image for this host")
        return plan
    gfx = {a for a in image.spec.archs if a.startswith("gfx")}
    missing = sorted(set(v.amd_gfx) - gfx) if gfx else []
    if missing:
        o.add("torch.gfx_missing", ERROR, f"torch {image.spec.torch} in the image has no code "
              f"objects for {', '.join(missing)} ('hipErrorNoBinaryForGpu')",
              "run the nearest variant below")
    nodes = tuple(d for d in entry.devices if d in v.facts.devices or any(
        k.startswith(d + "/") for k in v.facts.devices))
    return replace(plan, devices=nodes, group_add=entry.group_add,
                   security_opt=entry.security_opt)


def _daemon(v: View) -> dict[str, Any]:
    return parse.json_object(v.facts.file(model.DAEMON_JSON)) or {}


def _limits(v: View, host: HostRules, o: Out, plan: ContainerPlan, req: RunRequest,
            gpu: bool) -> tuple[ContainerPlan, list[Added]]:
    """/dev/shm for DataLoader workers (every image), and the memlock and stack ulimits NCCL
    over InfiniBand needs (GPU images): each flag added once, with why."""
    added: list[Added] = []
    need = host.shm_min_mb << 20
    if req.ipc_host:
        if v.facts.shm_bytes and v.facts.shm_bytes < need:
            o.add("host.shm_small", WARN, f"--ipc host shares this host's /dev/shm of "
                  f"{v.facts.shm_bytes >> 20} MB, under the {host.shm_min_mb} MB DataLoader "
                  "workers need", f"use --shm-size {host.shm_advice} instead")
    elif req.shm_size is not None:
        if size_bytes(req.shm_size, "--shm-size") < need:
            o.add("shm.small", WARN, f"--shm-size {req.shm_size} is under the "
                  f"{host.shm_min_mb} MB DataLoader workers need (bus errors in workers)",
                  f"--shm-size {host.shm_advice}")
    else:
        default = _daemon(v).get("default-shm-size")
        try:
            have = size_bytes(str(default), "default-shm-size") if default else 0
        except UsageError:
            have = 0
        if have and have >= need:
            o.add("shm.ok", OK, f"/dev/shm: the daemon's default-shm-size {default}")
        else:
            said = (f"the daemon's default-shm-size {default}" if have else
                    f"Docker's default {host.docker_default_shm_mb} MB")
            o.add("shm.small", INFO, f"/dev/shm would be {said}, under the {host.shm_min_mb} MB "
                  "DataLoader workers need: fixed by --shm-size")
            advice = size_bytes(host.shm_advice, "shm_advice")
            plan = replace(plan, shm_size=advice)
            added.append(Added(f"--shm-size={docker_size(advice)}",
                               f"/dev/shm of {said} < {host.shm_min_mb} MB"))
    if gpu:
        plan = _ulimits(v, host, o, plan, added)
    return plan, added


def _ulimits(v: View, host: HostRules, o: Out, plan: ContainerPlan,
             added: list[Added]) -> ContainerPlan:
    defaults = _daemon(v).get("default-ulimits") or {}
    rootless = any("rootless" in str(s) for s in v.docker_info.get("SecurityOptions") or ())
    memlock = int(host.memlock_advice)
    wanted = (("memlock", memlock, "NCCL registers page-locked buffers for InfiniBand/RoCE"),
              ("stack", host.stack_advice, "NVIDIA's containers ask for it"))
    limits = []
    for name, value, why in wanted:
        got = defaults.get(name) if isinstance(defaults, dict) else None
        soft = got.get("Soft") if isinstance(got, dict) else None
        if isinstance(soft, int) and (soft == -1 or (value != -1 and soft >= value)):
            o.add(f"ulimit.{name}", OK, f"{name}: the daemon's default-ulimits give {soft}")
            continue
        if rootless:
            o.add(f"ulimit.{name}", WARN, f"rootless Docker cannot raise the {name} ulimit "
                  f"({why})", "for multi-node NCCL run rootful Docker, or raise the user's "
                  "limit in /etc/security/limits.conf")
            continue
        limits.append((name, value, value))
        added.append(Added(f"--ulimit {name}={value}", why))
    return replace(plan, ulimits=tuple(limits)) if limits else plan


# ------------------------------------------------------------------ the nearest variant


def variant_request(spec: Spec, v: View, m: Matrix) -> Request:
    """The image's spec asked again for this host: the same torch, Python, OS, platform,
    companions and extensions, with this host's driver and GPUs."""
    from envbuild.core.request import Request

    ask = Request(target=spec.target, torch=spec.torch, python=spec.python, os=spec.os,
                  components=spec.components,
                  platform=v.platform if platforms.foreign(v.platform) else
                  spec.platform if spec.platform not in (None, DEFAULT_PLATFORM) else None,
                  extensions=tuple(f"{e['name']}=={e['version']}" for e in spec.extensions))
    if spec.target == "cuda" and v.nvidia:
        ask = replace(ask, gpus=tuple(rules.arch_name(cc) for cc in v.ccs),
                      driver=v.driver if v.driver and not v.windows_driver else None,
                      forward_compat=bool(spec.forward_compat and v.driver
                                          and not v.windows_driver))
        if v.windows_driver and v.driver:  # the doctor's WSL rule: the CUDA this driver runs
            choice = compat.choose_cuda(m, v.driver, v.ccs, True)
            ask = replace(ask, cuda=choice.cuda if choice is not None else None)
    elif spec.target == "rocm" and v.amd_gfx:
        ask = replace(ask, gpus=tuple(sorted(set(v.amd_gfx))))
    return ask


def make_argv(ask: Request) -> list[str]:
    """The `envbuild make` command line of a request (options resolve takes as well)."""
    from envbuild.core.request import make_argv as argv_of

    return argv_of(replace(ask, target=ask.target or "cpu"))


def nearest_variant(spec: Spec, v: View, m: Matrix) -> tuple[str, Spec | None]:
    """(the make command, its spec) of the nearest variant of `spec` that the matrix says runs
    on this host: the spec asked again with this host's driver and GPUs, else the nearest
    alternative the resolver offers that keeps them. ('', None) when none does."""
    from envbuild.common.errors import ConflictError
    from envbuild.core.alternatives import apply_changes
    from envbuild.core.resolve import resolve

    ask = variant_request(spec, v, m)
    tries = [ask]
    try:
        return shlex.join(make_argv(ask)), resolve(ask, m)
    except ConflictError as err:
        fixed = ("driver", "gpus", "target", "platform", "cuda" if ask.cuda else "driver")
        for fix in err.fixes:
            for changes in fix.get("requests") or ():  # type: ignore[attr-defined]
                if not any(k in fixed for k in changes):
                    tries.append(apply_changes(ask, [(k, tuple(x) if isinstance(x, list) else x)
                                                     for k, x in changes.items()]))
    except EnvbuildError:
        return "", None
    for alt in tries[1:]:
        try:
            return shlex.join(make_argv(alt)), resolve(alt, m)
        except EnvbuildError:
            continue
    return "", None


# ------------------------------------------------------------------ the use case


@record
class Outcome:
    """A run that started: the command's exit code, and (when it failed) what explain and the
    matrix say."""

    preflight: Preflight
    exit_code: int
    causes: tuple[dict[str, Any], ...] = ()
    nearest: str = ""
    nearest_note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"preflight": self.preflight.to_json(), "started": True,
                "exit_code": self.exit_code, "causes": list(self.causes),
                "nearest": self.nearest or None, "nearest_note": self.nearest_note or None}


@record
class Context:
    """Where the preflight's inputs come from (tests and --facts replace the host)."""

    facts_dir: Path | None = None
    matrix_dir: Path | None = None
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))


def check(image: str, req: RunRequest, ctx: Context | None = None,
          run_id: str = "") -> tuple[Preflight, Matrix, View]:
    """The preflight of `image` (a local image) on this host, or on recorded facts."""
    from envbuild import matrix
    from envbuild.doctor import probes
    from envbuild.doctor import record as recorded
    from envbuild.engine import docker

    ctx = ctx or Context()
    check_image_ref(image)
    m = matrix.load(ctx.matrix_dir)
    try:
        found = docker.local_image(image)
    except EnvironmentProblem:  # an engine that is not there: exit 3, before probes
        if proc.which("docker") is None and proc.which("podman") is not None:
            raise EnvironmentProblem(
                "no Docker engine here, only Podman: envbuild run starts containers through "
                "the Docker engine only", "start the image with `podman run --rm "
                f"--device {CDI_ALL_GPUS} --shm-size={compat.host_rules().shm_advice} IMAGE` "
                "(docs/guides/run.md, Podman), or install Docker") from None
        raise
    if found is None:
        raise UsageError(f"no image {shown(image)} in the local Docker engine",
                         "`docker images` lists them; build one with `envbuild make` (run "
                         "never builds or pulls)")
    facts = recorded.load(ctx.facts_dir) if ctx.facts_dir is not None else \
        probes.collect(torch=False)
    facts_of = image_facts(image, docker.image_labels(image), docker.image_platform(image))
    labels = {LABEL_ROLE: "run", **({LABEL_RUN: run_id} if run_id else {})}
    pre = preflight(facts_of, facts, m, compat.host_rules(), req, labels)
    return pre, m, build_view(facts, m)


def start(pre: Preflight, m: Matrix, v: View, on_stdout: Callable[[bytes], None],
          on_stderr: Callable[[bytes], None]) -> Outcome:
    """Start the container the preflight planned; its output streamed; on failure the last
    CAPTURE_BYTES decoded by explain, and the nearest variant named."""
    from envbuild.engine import docker
    from envbuild.features.explain import explain

    tail = bytearray()

    def keep(chunk: bytes) -> None:
        tail.extend(chunk)
        if len(tail) > 2 * CAPTURE_BYTES:
            del tail[:-CAPTURE_BYTES]

    def out(chunk: bytes) -> None:
        keep(chunk)
        on_stdout(chunk)

    def err(chunk: bytes) -> None:
        keep(chunk)
        on_stderr(chunk)

    code = docker.run_attached(pre.plan, out, err)
    if code == 0:
        return Outcome(pre, 0)
    text = bytes(tail[-CAPTURE_BYTES:]).decode("utf-8", errors="replace")
    matches = [x for x in explain(text, m) if not x.harmless][:3] if text.strip() else []
    command, spec = nearest_variant(pre.image.spec, v, m)
    note = ""
    if spec is not None and (spec.torch, spec.variant, spec.python) == (
            pre.image.spec.torch, pre.image.spec.variant, pre.image.spec.python):
        note = ("the matrix picks this image's torch, variant and Python for this host: the "
                "failure is the command's, not the image's")
    return Outcome(pre, code, tuple(x.to_json() | {"line": x.line} for x in matches), command,
                   note)

