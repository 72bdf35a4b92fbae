"""Pure decisions of the validator: each judge takes recorded facts (plain data) and returns an
Outcome, so every verdict is tested without a GPU (stdlib only)."""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .rules import (
    arch_covers,
    arch_kind,
    cudnn_version_str,
    driver_package,
    gfx_covers,
    local_tag,
    local_tag_matches_variant,
    major_minor,
    parse_require_cuda,
    pin_matches,
    public_version,
    version_parts,
    version_prefix_matches,
)

SCHEMA_VERSION = 1
VALIDATOR_VERSION = "0.1.0"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_CANNOT_RUN = 3
# not_run: a check a GPU target needs a GPU for, on a host without one (never a pass)
STATUSES = ("pass", "warn", "fail", "skip", "not_run")
TARGETS = ("cuda", "rocm", "cpu", "mps")

NO_GPU_REASON = "no GPU visible (torch.cuda.is_available() is False)"
NO_MPS_REASON = "no GPU visible (torch.backends.mps.is_available() is False)"
GPU_REMEDIATION = (
    "no GPU is visible to torch: run the container with `--gpus all` (NVIDIA; needs the NVIDIA "
    "Container Toolkit) or `--device /dev/kfd --device /dev/dri` (ROCm), check "
    "CUDA_VISIBLE_DEVICES, and see evidence.init_warnings for the driver's own message"
)
# Relative Frobenius error allowed against a float64 CPU reference, per compute precision.
TOLERANCES = {"fp64": 1e-12, "fp32": 1e-5, "tf32": 5e-3, "fp16": 5e-3, "bf16": 2e-2}
LOSS_FACTOR = 0.5  # train.smoke: mean of the last 5 losses <= LOSS_FACTOR x mean of the first 5
SHM_WARN_BYTES = 1 << 30



# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class Outcome:
    status: str
    evidence: dict[str, Any] = field(default_factory=dict)
    reason: str = ""
    remediation: str = ""
    detail: str = ""


def passed(detail: str = "", evidence: dict[str, Any] | None = None) -> Outcome:
    return Outcome("pass", evidence or {}, detail=detail)


def warned(remediation: str, detail: str = "", evidence: dict[str, Any] | None = None) -> Outcome:
    return Outcome("warn", evidence or {}, remediation=remediation, detail=detail)


def failed(remediation: str, detail: str = "", evidence: dict[str, Any] | None = None) -> Outcome:
    return Outcome("fail", evidence or {}, remediation=remediation, detail=detail)


def skipped(reason: str, evidence: dict[str, Any] | None = None) -> Outcome:
    return Outcome("skip", evidence or {}, reason=reason, detail=reason)


def worst(statuses: Sequence[str]) -> str:
    for s in ("fail", "warn", "pass"):
        if s in statuses:
            return s
    return "skip"


def _sanitize(obj: Any) -> Any:
    """JSON-safe copy: NaN/inf become strings, tuples lists, unknown objects their repr."""
    if isinstance(obj, dict):
        return {str(k): _sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_sanitize(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if obj is None or isinstance(obj, (str, int, bool)):
        return obj
    return repr(obj)


def make_check(check_id: str, title: str, outcome: Outcome, duration_s: float) -> dict[str, Any]:
    status = outcome.status if outcome.status in STATUSES else "fail"
    remediation = outcome.remediation
    reason = outcome.reason
    if status == "skip" and not reason:
        reason = "skipped"
    if status in ("warn", "fail") and not remediation:
        remediation = "see evidence"
    return {
        "id": check_id,
        "title": title,
        "status": status,
        "reason": reason,
        "duration_s": round(max(duration_s, 0.0), 3),
        "evidence": _sanitize(outcome.evidence),
        "remediation": remediation,
        "detail": outcome.detail or reason or "",
    }


def summarize(checks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    counts = {s: sum(1 for c in checks if c["status"] == s) for s in STATUSES}
    return {**counts, "status": "fail" if counts["fail"] else "pass"}


def exit_code_for(checks: Sequence[dict[str, Any]]) -> int:
    return EXIT_FAILED if any(c["status"] == "fail" for c in checks) else EXIT_OK


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def version_verdict(package: str, expected: str | None, actual: str | None,
                    variant: str | None) -> Outcome:
    ev: dict[str, Any] = {"expected": expected, "actual": actual, "variant": variant}
    if not expected:
        return skipped(f"spec does not pin {package}", ev)
    if actual is None:
        return failed(f"install {package}=={expected} (the spec pins it; it is not installed)",
                      f"{package} is not installed", ev)
    if public_version(actual) != public_version(expected):
        return failed(
            f"install {package}=={public_version(expected)}"
            + (f" from the PyTorch {variant} wheel index" if variant else "")
            + f"; the environment has {actual}",
            f"{package} {actual}, spec wants {expected}", ev)
    tag = local_tag(actual)
    if tag and variant and not local_tag_matches_variant(tag, variant):
        return failed(
            f"{package} {actual} is the {tag} build; install it from the PyTorch {variant} index",
            f"{package} local tag +{tag} does not match variant {variant}", ev)
    return passed(f"{package} {actual}", ev)


# ---------------------------------------------------------------------------------------------
# Pure decisions: judges over recorded facts (shape: see collect_facts / tests' *_facts.json)


def _torch_facts(facts: dict[str, Any]) -> dict[str, Any]:
    t: dict[str, Any] = facts.get("torch") or {}
    return t


def _gpu_present(facts: dict[str, Any]) -> bool:
    dev = facts.get("devices") or {}
    return bool(dev.get("available")) and int(dev.get("count") or 0) > 0


VISIBILITY_VARS = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
                   "ROCR_VISIBLE_DEVICES")
_GPU_UUID = re.compile(r"(?:GPU|MIG)-[0-9a-fA-F-]+(?:/\d+/\d+)?")


def hidden_by_env(env: dict[str, str | None], dev_nodes: Sequence[str]) -> list[str]:
    """Why a *_VISIBLE_DEVICES variable hides the attached GPUs from torch ([] if it does not).

    CUDA and HIP read the list up to the first entry that names no device: an empty value,
    '-1', an index past the attached GPUs or a UUID no GPU has hide everything after it.
    NVIDIA_VISIBLE_DEVICES is read by the container runtime: 'none', 'void' or '' there mean
    no GPU was given to the container."""
    nvidia = sorted(int(n[len("/dev/nvidia"):]) for n in dev_nodes
                    if re.fullmatch(r"/dev/nvidia\d+", n))
    amd = "/dev/kfd" in dev_nodes
    found: list[str] = []
    for var in VISIBILITY_VARS:
        value = env.get(var)
        if value is None:
            continue
        shown = f"{var}={value!r}"
        text = value.strip()
        if var == "NVIDIA_VISIBLE_DEVICES":
            if text.lower() in ("", "none", "void"):
                found.append(f"{shown} gives this container no GPU")
            continue
        if var == "CUDA_VISIBLE_DEVICES" and not nvidia:
            continue
        if var != "CUDA_VISIBLE_DEVICES" and not amd:
            continue
        count = len(nvidia) if var == "CUDA_VISIBLE_DEVICES" else None
        if not text:
            found.append(f"{shown} is set but empty: it hides every GPU")
            continue
        first = text.split(",")[0].strip()
        if re.fullmatch(r"-?\d+", first):
            index = int(first)
            if index < 0:
                found.append(f"{shown} starts with a negative index: it hides every GPU")
            elif count is not None and index >= count:
                found.append(f"{shown} names device {index} but only {count} GPU(s) are "
                             f"attached (indices 0..{count - 1})")
        elif _GPU_UUID.fullmatch(first):
            found.append(f"{shown} names {first}, which no GPU torch can see has (list the "
                         "UUIDs with `nvidia-smi -L`)")
        else:
            found.append(f"{shown} starts with {first!r}, which names no device: it hides "
                         "every GPU")
    return found


def forward_compat_error(text: str) -> str | None:
    """The remedy for CUDA errors 803/804, the two ways NVIDIA's forward-compatibility libraries
    (cuda-compat, /usr/local/cuda/compat) fail; None for any other message."""
    if re.search(r"\b804\b|not supported HW|CompatNotSupportedOnDevice", text):
        return ("error 804: forward-compatibility libraries were loaded on a GPU NVIDIA does not "
                "support them on (only data-center GPUs, select NGC Server Ready RTX SKUs and "
                "Jetson): upgrade the host driver to one that runs this CUDA natively, and use "
                "an image without /usr/local/cuda/compat")
    if re.search(r"\b803\b|unsupported display driver / cuda driver combination|"
                 r"SystemDriverMismatch|SYSTEM_DRIVER_MISMATCH", text):
        return ("error 803: the loaded libcuda does not match the host's kernel module: the "
                "image's forward-compatibility libraries do not serve this driver branch (or "
                "the host driver is already newer, or a libcuda was copied into the image); "
                "rebuild with `envbuild make --forward-compat --driver <this driver> --gpu "
                "<this GPU>`, or upgrade the host driver")
    return None


def no_gpu_outcome(facts: dict[str, Any], require_gpu: bool,
                   target: str | None = None) -> Outcome:
    """No GPU for torch: skip, unless --require-gpu, or a GPU device node is there for a GPU
    target (the container got a GPU that torch cannot use: old driver, CPU wheel, ...). When a
    *_VISIBLE_DEVICES variable hides the GPUs, say that instead of blaming the driver."""
    dev = facts.get("devices") or {}
    reason = NO_MPS_REASON if dev.get("platform") == "Darwin" else NO_GPU_REASON
    keys = ("backend", "init_warnings", "error", "env", "dev_nodes", "driver")
    ev = {k: dev.get(k) for k in keys}
    nodes = [n for n in dev.get("dev_nodes") or []
             if re.fullmatch(r"/dev/nvidia\d+", n) or n == "/dev/kfd"]
    hidden = hidden_by_env(dev.get("env") or {}, dev.get("dev_nodes") or [])
    if hidden:
        ev["hidden_by"] = hidden
        fix = ("unset the variable or name GPUs that exist (indices 0..N-1 or UUIDs from "
               "`nvidia-smi -L` / `rocm-smi --showuniqueid`); "
               + "; ".join(hidden))
        what = f"GPUs hidden: {hidden[0]}"
        if require_gpu or (nodes and target in ("cuda", "rocm")):
            return failed(fix, what, ev) if require_gpu else warned(fix, what, ev)
        return skipped(what, ev)
    if nodes and target in ("cuda", "rocm"):
        said = "; ".join(dev.get("init_warnings") or []) or dev.get("error") or "no message"
        compat = forward_compat_error(said)
        if compat is not None:
            return failed(compat, f"GPU attached but unusable: {said}", ev)
        return failed(
            f"a GPU is attached ({', '.join(nodes)}) but torch cannot use it ({said}): usually "
            "a host driver older than this torch's CUDA/ROCm needs (upgrade the driver or pick "
            "an older variant), or a CPU torch wheel (see expect.flavor)",
            f"GPU attached but unusable: {said}", ev)
    if require_gpu:
        return failed(GPU_REMEDIATION, f"--require-gpu: {reason}", ev)
    return skipped(reason, ev)


def judge_python(spec: dict[str, Any], actual: str) -> Outcome:
    expected = spec.get("python")
    ev = {"expected": expected, "actual": actual}
    if not expected:
        return skipped("spec does not pin python", ev)
    if major_minor(actual) != major_minor(str(expected)):
        return failed(f"use Python {expected} (the spec's); this interpreter is {actual}",
                      f"Python {actual}, spec wants {expected}", ev)
    return passed(f"Python {actual}", ev)


def judge_torch_version(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    return version_verdict("torch", spec.get("torch"), _torch_facts(facts).get("version"),
                           spec.get("variant"))


def _companion_version(spec: dict[str, Any], facts: dict[str, Any], pkg: str) -> Outcome:
    info = facts.get(pkg) or {}
    actual = info.get("version") if info.get("installed") else None
    return version_verdict(pkg, spec.get(pkg), actual, spec.get("variant"))


def judge_torchvision_version(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    return _companion_version(spec, facts, "torchvision")


def judge_torchaudio_version(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    return _companion_version(spec, facts, "torchaudio")


def judge_companion(spec: dict[str, Any], facts: dict[str, Any], pkg: str) -> Outcome:
    info: dict[str, Any] = facts.get(pkg) or {}
    torch_version = _torch_facts(facts).get("version") or ""
    ev = dict(info)
    if not info.get("installed"):
        why = f"{pkg} is not installed"
        if spec.get(pkg):
            why += f" (the spec pins {spec.get(pkg)}: see expect.{pkg}_version)"
        return skipped(why, ev)
    if info.get("import_error"):
        return failed(
            f"`import {pkg}` fails: reinstall the {pkg} wheel built for torch {torch_version} "
            "from the same PyTorch index as torch",
            f"import {pkg} failed", ev)
    pin = info.get("torch_pin")
    if pin and torch_version and not pin_matches(pin, torch_version):
        return failed(
            f"{pkg} {info.get('version')} requires torch=={pin} but torch {torch_version} is "
            f"installed: install the {pkg} release paired with torch "
            f"{public_version(torch_version)}",
            f"{pkg} pins torch=={pin}, torch is {torch_version}", ev)
    if info.get("op_error"):
        return failed(
            f"{pkg}'s compiled operators do not load (e.g. 'operator torchvision::nms does not "
            f"exist'): {pkg} was built for a different torch or CUDA; install the matching pair "
            "from one PyTorch index",
            f"{pkg} ops broken", ev)
    return passed(f"{pkg} {info.get('version')}" + (f" (pins torch=={pin})" if pin else ""), ev)


def judge_torchvision(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    return judge_companion(spec, facts, "torchvision")


def judge_torchaudio(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    return judge_companion(spec, facts, "torchaudio")


def judge_flavor(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    t = _torch_facts(facts)
    target = spec.get("target")
    cuda, hip, mps_built = t.get("cuda"), t.get("hip"), bool(t.get("mps_built"))
    version = t.get("version")
    variant = spec.get("variant") or target
    ev = {"target": target, "variant": spec.get("variant"), "torch": version, "torch_cuda": cuda,
          "torch_hip": hip, "mps_built": mps_built}
    built = "ROCm" if hip else ("CUDA" if cuda else "CPU")
    if target is None:
        return skipped("no spec target given: nothing to compare", ev)
    wanted = spec.get("torch") or public_version(version or "?")
    fix = (f"install the {variant} build of torch {wanted} from the "
           f"PyTorch {variant} wheel index (not the default PyPI wheel)")
    if target == "cuda":
        if not cuda:
            return failed(fix, f"{built} torch in a CUDA image", ev)
        return passed(f"CUDA torch (CUDA {cuda})", ev)
    if target == "rocm":
        if not hip:
            return failed(fix, f"{built} torch in a ROCm image", ev)
        return passed(f"ROCm torch (HIP {hip})", ev)
    if target == "cpu":
        if cuda or hip:
            return failed(fix + "; the GPU build works on CPU but adds gigabytes of GPU libraries",
                          f"{built} torch in a CPU image", ev)
        return passed("CPU torch", ev)
    if target == "mps":
        if not mps_built:
            return failed("install a macOS arm64 torch wheel (built with MPS)",
                          "torch is built without MPS", ev)
        return passed("torch built with MPS", ev)
    return failed(f"unknown spec target {target!r}", "unknown target", ev)


def _other_target(spec: dict[str, Any], want: str, ev: dict[str, Any]) -> Outcome | None:
    target = spec.get("target")
    if target is None:
        return skipped("no spec target given: nothing to compare", ev)
    if target != want:
        return skipped(f"spec target is {target}, not {want}", ev)
    return None


def _runtime_version(spec: dict[str, Any], facts: dict[str, Any], target: str) -> Outcome:
    """torch's CUDA (torch.version.cuda vs spec.torch_cuda) or HIP (torch.version.hip vs
    spec.rocm) major.minor against the spec."""
    fact, key, name, tag = (("cuda", "torch_cuda", "CUDA", "cu") if target == "cuda"
                            else ("hip", "rocm", "HIP", "rocm"))
    actual = _torch_facts(facts).get(fact)
    expected = spec.get(key)
    ev = {"expected": expected, "actual": actual}
    other = _other_target(spec, target, ev)
    if other:
        return other
    if not expected:
        return skipped(f"spec does not pin {key}", ev)
    if not actual:
        return failed(f"torch has no {name} at all: see expect.flavor",
                      f"torch.version.{fact} is None", ev)
    if major_minor(actual) != major_minor(str(expected)):
        build = tag + (str(expected).replace(".", "") if target == "cuda" else str(expected))
        return failed(f"install the {build} build of torch; this one is built with {name} "
                      f"{actual}", f"{name} {actual}, spec wants {target.upper()} {expected}",
                      ev)
    return passed(f"{name} {actual}", ev)


def judge_cuda_version(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    return _runtime_version(spec, facts, "cuda")


def judge_cudnn(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    t = _torch_facts(facts)
    actual = cudnn_version_str(t.get("cudnn"))
    expected = spec.get("cudnn")
    ev = {"expected": expected, "actual": actual, "raw": t.get("cudnn"),
          "error": t.get("cudnn_error")}
    other = _other_target(spec, "cuda", ev)
    if other:
        return other
    if not expected:
        return skipped("spec does not pin cudnn", ev)
    if not t.get("cuda"):
        return failed("torch has no CUDA at all: see expect.flavor", "torch.version.cuda is None",
                      ev)
    if not actual:
        return failed(
            "cuDNN does not load: install the nvidia-cudnn wheel torch requires (or the cudnn "
            "image flavor) and make sure no other libcudnn shadows it on LD_LIBRARY_PATH",
            "torch.backends.cudnn.version() is None", ev)
    if not version_prefix_matches(str(expected), actual):
        return failed(
            f"torch loads cuDNN {actual} but the spec pins {expected}: another libcudnn on "
            "LD_LIBRARY_PATH or a different nvidia-cudnn wheel is being picked up",
            f"cuDNN {actual}, spec wants {expected}", ev)
    return passed(f"cuDNN {actual}", ev)


def judge_nccl(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    t = _torch_facts(facts)
    actual = t.get("nccl")
    expected = spec.get("nccl")
    ev = {"expected": expected, "actual": actual, "error": t.get("nccl_error")}
    other = _other_target(spec, "cuda", ev)
    if other:
        return other
    if not expected:
        return skipped("spec does not pin nccl", ev)
    if not t.get("cuda"):
        return failed("torch has no CUDA at all: see expect.flavor", "torch.version.cuda is None",
                      ev)
    if not actual:
        return failed("NCCL does not load: install the nvidia-nccl wheel torch requires",
                      "torch.cuda.nccl.version() unavailable", ev)
    if not version_prefix_matches(str(expected), str(actual)):
        return failed(
            f"torch loads NCCL {actual} but the spec pins {expected}: a different nvidia-nccl "
            "wheel or a system libnccl on LD_LIBRARY_PATH is being picked up",
            f"NCCL {actual}, spec wants {expected}", ev)
    return passed(f"NCCL {actual}", ev)


def judge_rocm_version(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    return _runtime_version(spec, facts, "rocm")


def matrix_row(spec: dict[str, Any]) -> str:
    """The matrix row a spec's promises come from, named so a wrong fact can be found."""
    return (f"matrix/torch.toml [[variant]] release {major_minor(spec.get('torch')) or '?'} "
            f"tag {spec.get('variant') or '?'}")


def judge_archs(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    """The wheel carries the archs the resolver promised (spec.archs, in get_arch_list form).

    SASS and PTX are judged apart. A cubin (sm_XY, gfxNNN) that a spec GPU runs on and the wheel
    lacks fails: that GPU gets no kernels, or only slow JIT ones. A PTX (compute_XY) the matrix
    promised but the wheel lacks only warns and names the matrix row: the GPUs still run their
    cubins, and one wrong fact must not fail a good image."""
    t = _torch_facts(facts)
    expected = [str(a) for a in spec.get("archs") or []]
    actual = [str(a) for a in t.get("arch_list") or []]
    ev: dict[str, Any] = {"expected": expected, "actual": actual, "matrix_row": matrix_row(spec)}
    if not expected:
        return skipped("spec lists no archs", ev)
    if not (t.get("cuda") or t.get("hip")):
        return skipped("torch is not a CUDA or ROCm build: no arch list (see expect.flavor)", ev)
    if not actual:
        return skipped("torch reports no arch list", ev)
    missing = [a for a in expected if a not in actual]
    missing_ptx = [a for a in missing if arch_kind(a) == "ptx"]
    missing_bin = [a for a in missing if a not in missing_ptx]
    ev.update(missing_cubins=missing_bin, missing_ptx=missing_ptx)
    gpus = spec.get("gpus") or []
    starved: list[str] = []
    for g in gpus:
        if g.get("gfx"):
            want, have = gfx_covers(expected, str(g["gfx"])), gfx_covers(actual, str(g["gfx"]))
        elif g.get("cc"):
            want, have = arch_covers(expected, str(g["cc"])), arch_covers(actual, str(g["cc"]))
        else:
            continue
        if want["mode"] in ("sass", "gfx") and have["mode"] not in ("sass", "gfx"):
            starved.append(f"{g.get('name') or '?'} (needs {want['via']})")
    ev["spec_gpus_losing_cubins"] = starved
    fatal = starved or (missing_bin and not gpus)
    if fatal:
        what = "; ".join(starved) if starved else " ".join(missing_bin)
        return failed(
            f"the installed torch lacks {' '.join(missing_bin)} that the spec's "
            f"{spec.get('variant')} wheel should carry" + (f", so {what} lose their kernels"
                                                            if starved else "")
            + ": a different wheel (another variant or a source build) was installed; "
            "reinstall from the spec's index",
            f"missing cubins: {' '.join(missing_bin)}", ev)
    if missing:
        return warned(
            f"the wheel lacks {' '.join(missing)} that {matrix_row(spec)} promises; the spec's "
            "GPUs still have their cubins (see device.spec_gpus). If the wheel is the one the "
            "spec names, the matrix fact is wrong: correct that row",
            f"missing {'PTX' if not missing_bin else 'archs'} {' '.join(missing)} "
            f"(promised by {matrix_row(spec)})", ev)
    extra = [a for a in actual if a not in expected]
    ev["extra"] = extra
    if extra:
        return warned(
            f"the wheel carries {' '.join(extra)} that {matrix_row(spec)} does not list: if the "
            "wheel is the one the spec names, the matrix row is incomplete: correct it (the "
            "resolver then knows which GPUs this wheel covers)",
            f"arch list {' '.join(actual)} has {' '.join(extra)} beyond {matrix_row(spec)}", ev)
    return passed(" ".join(actual) + " (as the matrix lists)", ev)


def _coverage_outcome(rows: list[dict[str, Any]], arch_list: Sequence[str], version: str,
                      what: str) -> Outcome:
    ev = {"arch_list": list(arch_list), "torch": version, "gpus": rows}
    missing = [r for r in rows if not r["covered"]]
    ptx_only = [r for r in rows if r["covered"] and r["mode"] == "ptx"]
    if missing:
        names = ", ".join(f"{r.get('name') or '?'} ({r.get('cc') or r.get('gfx')})"
                          for r in missing)
        return failed(
            f"torch {version} has kernels for {' '.join(arch_list) or 'no GPU arch'} only; "
            f"{names} need a build that includes them: pick a torch/CUDA (or ROCm) variant whose "
            "arch list covers them (newer GPUs need newer CUDA variants; old GPUs are dropped "
            "by newer torch releases)",
            f"{what} not covered: {names}", ev)
    if ptx_only:
        names = ", ".join(f"{r.get('name') or '?'} via {r['via']}" for r in ptx_only)
        return warned(
            "these GPUs run only through PTX JIT compilation: the first launch of every kernel "
            "is slow and needs a driver new enough for the PTX; prefer a torch variant with a "
            "cubin (sm_XY) for them",
            f"PTX only: {names}", ev)
    return passed(f"{what} covered: " + ", ".join(f"{r.get('name') or '?'} via {r['via']}"
                                                 for r in rows), ev)


def judge_spec_gpus(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    t = _torch_facts(facts)
    gpus = spec.get("gpus") or []
    arch_list = t.get("arch_list") or []
    if not gpus:
        return skipped("spec lists no GPUs")
    if not (t.get("cuda") or t.get("hip")):
        return skipped("torch is not a CUDA or ROCm build: no arch list to check "
                       "(see expect.flavor)")
    if not arch_list:
        return skipped("torch reports no arch list")
    rows: list[dict[str, Any]] = []
    for g in gpus:
        if g.get("gfx"):
            row = gfx_covers(arch_list, str(g["gfx"]))
        elif g.get("cc"):
            row = arch_covers(arch_list, str(g["cc"]))
        else:
            row = {"covered": False, "via": None, "mode": None, "error": "neither cc nor gfx"}
        rows.append({"name": g.get("name"), **row})
    return _coverage_outcome(rows, arch_list, t.get("version") or "?", "spec GPUs")


def judge_device_count(facts: dict[str, Any], require_gpu: bool,
                       target: str | None = None) -> Outcome:
    if not _gpu_present(facts):
        return no_gpu_outcome(facts, require_gpu, target)
    dev = facts["devices"]
    names = [d.get("name") for d in dev.get("devices") or []]
    ev = {k: dev.get(k) for k in ("backend", "count", "env", "driver", "init_warnings")}
    ev["names"] = names
    return passed(f"{dev['count']} {dev.get('backend')} device(s): "
                  + ", ".join(map(str, names)), ev)


def judge_device_properties(facts: dict[str, Any], require_gpu: bool,
                            target: str | None = None) -> Outcome:
    if not _gpu_present(facts):
        return no_gpu_outcome(facts, require_gpu, target)
    rows = facts["devices"].get("devices") or []
    parts = []
    for d in rows:
        mem = d.get("total_memory")
        gib = f"{mem / (1 << 30):.1f} GiB" if isinstance(mem, (int, float)) else "? GiB"
        arch = d.get("gfx") or (f"cc {d.get('cc')}" if d.get("cc") else "")
        parts.append(f"{d.get('name')} ({arch}, {gib})".replace("(, ", "("))
    return passed("; ".join(parts), {"devices": rows})


def device_coverage_rows(facts: dict[str, Any]) -> list[dict[str, Any]]:
    dev = facts.get("devices") or {}
    arch_list = dev.get("arch_list") or _torch_facts(facts).get("arch_list") or []
    rows: list[dict[str, Any]] = []
    for d in dev.get("devices") or []:
        if dev.get("backend") == "mps":
            row: dict[str, Any] = {"covered": True, "via": "mps", "mode": "mps"}
        elif d.get("gfx"):
            row = gfx_covers(arch_list, str(d["gfx"]))
        elif d.get("cc"):
            row = arch_covers(arch_list, str(d["cc"]))
        else:
            row = {"covered": False, "via": None, "mode": None}
        rows.append({"index": d.get("index"), "name": d.get("name"), **row})
    return rows


def judge_arch_coverage(facts: dict[str, Any], require_gpu: bool,
                        target: str | None = None) -> Outcome:
    if not _gpu_present(facts):
        return no_gpu_outcome(facts, require_gpu, target)
    dev = facts["devices"]
    if dev.get("backend") == "mps":
        return skipped("arch coverage does not apply to MPS")
    arch_list = dev.get("arch_list") or _torch_facts(facts).get("arch_list") or []
    return _coverage_outcome(device_coverage_rows(facts), arch_list,
                             _torch_facts(facts).get("version") or "?", "visible GPUs")


# ---------------------------------------------------------------------------------------------
# Pure decisions: numerics, training, shm


def tolerance_verdict(errors: dict[str, float], what: str) -> Outcome:
    """errors: precision -> relative error against the float64 reference."""
    ev: dict[str, Any] = {"rel_errors": errors,
                          "tolerances": {k: TOLERANCES[k] for k in errors if k in TOLERANCES}}
    bad = {k: v for k, v in errors.items()
           if not (isinstance(v, float) and math.isfinite(v)) or v > TOLERANCES.get(k, 0.0)}
    text = ", ".join(f"{k} {v:.2e}" for k, v in errors.items())
    if bad:
        return failed(
            f"{what} differs from the float64 reference beyond tolerance ({text}): a broken "
            "BLAS/cuDNN/MIOpen library, a bad GPU (check ECC/Xid errors), or a miscompiled kernel",
            f"{what} wrong: {text}", ev)
    return passed(f"{what} rel error {text}", ev)


def loss_verdict(losses: Sequence[float], factor: float = LOSS_FACTOR, window: int = 5) -> Outcome:
    ev: dict[str, Any] = {"losses": [round(x, 5) if math.isfinite(x) else str(x) for x in losses],
                          "factor": factor, "window": window, "steps": len(losses)}
    if len(losses) < 2 * window:
        return failed("training ran too few steps to judge", "too few steps", ev)
    if not all(math.isfinite(x) for x in losses):
        return failed("the loss became NaN/inf: numerics are broken on this device (see the "
                      "numerics.* checks)", "non-finite loss", ev)
    first = sum(losses[:window]) / window
    last = sum(losses[-window:]) / window
    ev.update(initial_avg=round(first, 5), final_avg=round(last, 5))
    if last > factor * first:
        return failed(
            f"the loss fell only from {first:.3f} to {last:.3f} (needs <= {factor} x initial): "
            "optimizer or autograd results are wrong on this device",
            f"loss {first:.3f} -> {last:.3f}", ev)
    return passed(f"loss {first:.3f} -> {last:.3f} in {len(losses)} steps", ev)


def shm_verdict(total_bytes: int | None, writable: bool, error: str | None = None) -> Outcome:
    ev = {"total_bytes": total_bytes, "writable": writable, "error": error,
          "warn_below_bytes": SHM_WARN_BYTES}
    fix = ("give the container more shared memory: `docker run --shm-size=8g` (or `--ipc=host`); "
           "DataLoader workers pass batches through /dev/shm")
    if total_bytes is None:
        return skipped("no /dev/shm on this system", ev)
    size = f"{total_bytes / (1 << 30):.2f} GiB"
    if not writable:
        return failed(fix + "; /dev/shm is not writable", f"/dev/shm {size}, not writable", ev)
    if total_bytes < SHM_WARN_BYTES:
        return warned(fix, f"/dev/shm is only {total_bytes >> 20} MiB", ev)
    return passed(f"/dev/shm {size}, writable", ev)


# ---------------------------------------------------------------------------------------------
# Pure decisions: driver userspace in the image


def parse_mountinfo(text: str) -> set[str]:
    """Mount points (field 5) of /proc/self/mountinfo, with its octal escapes decoded."""
    points: set[str] = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5:
            points.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4]))
    return points


DRIVER_LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib/aarch64-linux-gnu", "usr/lib64", "usr/lib",
                   "lib/x86_64-linux-gnu", "lib/aarch64-linux-gnu", "lib64", "usr/local/nvidia/lib",
                   "usr/local/nvidia/lib64")
DRIVER_BIN_DIRS = ("usr/bin", "usr/local/bin", "bin", "usr/local/nvidia/bin")


def _is_driver_file(name: str) -> bool:
    return name.startswith(("libcuda.so", "libnvidia-ml.so")) or name == "nvidia-smi"


def _allowed_driver_path(path: str) -> bool:
    # cuda-compat (forward compatibility) and link-time stubs are meant to be in images.
    return "/stubs/" in path or re.search(r"/cuda[^/]*/compat/", path) is not None


def scan_driver_userspace(root: str, mountpoints: set[str]) -> dict[str, Any]:
    """Find libcuda / libnvidia-ml / nvidia-smi that the image itself ships.

    Files the NVIDIA runtime bind-mounts are mount points; links the runtime's ldconfig made
    point at mount points. Either way they belong to the host driver and are not counted.
    """
    found: dict[str, list[str]] = {"in_image": [], "runtime_mounted": [], "allowed": [],
                                   "dangling": []}
    dirs = [os.path.join(root, d) for d in DRIVER_LIB_DIRS + DRIVER_BIN_DIRS]
    for pattern_dir in ("usr/local",):
        base = os.path.join(root, pattern_dir)
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(base)):
                if name.startswith("cuda"):
                    dirs.append(os.path.join(base, name, "compat"))
                    dirs.append(os.path.join(base, name, "lib64", "stubs"))
    seen_dirs: set[str] = set()
    seen: set[str] = set()
    scanned: list[str] = []
    for d in dirs:
        real_dir = os.path.realpath(d)
        if real_dir in seen_dirs or not os.path.isdir(d):
            continue
        seen_dirs.add(real_dir)
        scanned.append(d)
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for name in names:
            if not _is_driver_file(name):
                continue
            path = os.path.join(real_dir, name)
            if path in seen:
                continue
            seen.add(path)
            if path in mountpoints:
                found["runtime_mounted"].append(path)
            elif os.path.islink(path):
                target = os.path.realpath(path)
                if target in mountpoints:
                    found["runtime_mounted"].append(path)
                elif not os.path.exists(target):
                    found["dangling"].append(path)
                elif _allowed_driver_path(target + "/" if os.path.isdir(target) else target):
                    found["allowed"].append(path)
                else:
                    found["in_image"].append(path)
            elif _allowed_driver_path(path):
                found["allowed"].append(path)
            else:
                found["in_image"].append(path)
    return {**found, "scanned_dirs": scanned}


def driver_userspace_verdict(scan: dict[str, Any], ld_library_path: str) -> Outcome:
    stub_entries = [p for p in ld_library_path.split(os.pathsep) if "stubs" in p]
    ev = {**scan, "ld_library_path_stub_entries": stub_entries}
    if scan["in_image"]:
        return failed(
            "the image ships NVIDIA driver userspace; remove it (do not install nvidia-driver-*, "
            "libnvidia-compute-*, nvidia-utils-* or copy libcuda.so/libnvidia-ml.so/nvidia-smi "
            "into the image): the NVIDIA container runtime injects the versions matching the "
            "host driver, and image copies either shadow them or break the mount ('file exists')",
            "driver files in the image: " + ", ".join(scan["in_image"]), ev)
    if stub_entries:
        return warned(
            "remove the CUDA stubs directory from LD_LIBRARY_PATH: the stub libcuda.so is for "
            "linking only and at run time makes CUDA fail with 'CUDA driver is a stub library'",
            "stubs on LD_LIBRARY_PATH", ev)
    if scan["dangling"]:
        return warned("remove dangling driver symlinks from the image (they are left-overs of a "
                      "driver package and can collide with the runtime's mounts)",
                      "dangling driver symlinks: " + ", ".join(scan["dangling"]), ev)
    return passed(f"no driver userspace in the image ({len(scan['runtime_mounted'])} "
                  "runtime-mounted file(s) ignored)", ev)


# ---------------------------------------------------------------------------------------------
# Pure decisions: WSL2 (facts: matrix/wsl2.toml, S-NV-WSL-GUIDE; NCCL on WSL: NVIDIA/nccl#442)

WSL_LIB = "/usr/lib/wsl/lib"

def is_wsl2(facts: dict[str, Any]) -> list[str]:
    """The signs of WSL2 that are there (heuristics, matrix/wsl2.toml [detection])."""
    signs = []
    if facts.get("dxg"):
        signs.append("/dev/dxg")
    if facts.get("wsl_lib") is not None:
        signs.append(WSL_LIB)
    if any(m.startswith("/usr/lib/wsl") for m in facts.get("mounts") or []):
        signs.append("/usr/lib/wsl mounts")
    if "microsoft" in str(facts.get("kernel") or "").lower():
        signs.append(f"kernel {facts.get('kernel')}")
    return signs


def parse_ldconfig(text: str, lib: str = "libcuda.so") -> list[str]:
    """Paths `ldconfig -p` resolves a library to ('libcuda.so.1 (libc6,x86-64) => /path')."""
    paths = []
    for line in text.splitlines():
        name, _, path = line.strip().partition(" => ")
        if name.split(" ", 1)[0].startswith(lib) and path:
            paths.append(path.strip())
    return paths


def driver_packages(text: str, globs: Sequence[str]) -> list[str]:
    """Installed NVIDIA Linux driver packages (`globs`: matrix/wsl2.toml driver_packages) in
    `dpkg -l` output or /var/lib/dpkg/status."""
    found: list[str] = []
    if "Package:" in text:
        for block in text.split("\n\n"):
            name = re.search(r"^Package:\s*(\S+)", block, re.M)
            status = re.search(r"^Status:.*\binstalled\b", block, re.M)
            if name and status and driver_package(name.group(1), globs):
                found.append(name.group(1))
        return found
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "ii" and driver_package(fields[1], globs):
            found.append(fields[1])
    return found


def wsl2_verdict(facts: dict[str, Any], forbidden: Sequence[str] = ()) -> Outcome:
    """In a WSL2 container (or WSL2 itself): libcuda must come from the Windows driver mounted
    at /usr/lib/wsl/lib; a Linux NVIDIA driver installed in the image breaks it. Pinned memory
    is capped and multi-GPU NCCL is limited there: said as information."""
    signs = is_wsl2(facts)
    ev = {**facts, "signs": signs}
    if not signs:
        return skipped("not WSL2 (no /dev/dxg, no /usr/lib/wsl, kernel not Microsoft's)", ev)
    libcuda = [p for p in facts.get("libcuda") or []]
    foreign = [p for p in libcuda if not p.startswith("/usr/lib/wsl/")
               and "/stubs/" not in p and "/compat/" not in p]
    packages = list(facts.get("driver_packages") or [])
    if packages or foreign:
        what = ", ".join(packages + foreign)
        return failed(
            "a Linux NVIDIA driver is installed: on WSL2 the Windows driver is the only one "
            f"(its libcuda is mounted at {WSL_LIB}); remove it (apt-get purge "
            + (" ".join(packages) or "the package that ships " + " ".join(foreign))
            + ", never install " + (" / ".join(forbidden) or "a Linux driver") + ": use the "
            "cuda-toolkit-1X-Y meta package or the WSL-Ubuntu CUDA repository)",
            f"WSL2 with a Linux NVIDIA driver: {what}", ev)
    names = facts.get("wsl_lib")
    if facts.get("dxg") and not (names and any(n.startswith("libcuda.so") for n in names)):
        return failed(
            f"WSL2 GPU device /dev/dxg is there but {WSL_LIB} has no libcuda: start the "
            "container with the NVIDIA runtime (`docker run --gpus all`, Docker Desktop's WSL2 "
            "backend or the NVIDIA Container Toolkit inside WSL) so it mounts the Windows "
            "driver's libraries", f"no libcuda in {WSL_LIB}", ev)
    notes = [
        "pinned (page-locked) memory is capped on WSL2 (NVIDIA publishes no number): large "
        "pin_memory buffers can fail; use smaller batches or pin_memory=False if they do",
        "multi-GPU NCCL is limited on WSL2 (GPUs cannot be selected by index in containers, "
        "topology detection can fail with 'Could not find real path of /sys/class/pci_bus'): "
        "if NCCL fails or hangs, try NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1, or gloo",
    ]
    ev["notes"] = notes
    ld_path = str(facts.get("ld_library_path") or "")
    registered = any(p.startswith("/usr/lib/wsl/") for p in libcuda)
    if names and not registered and WSL_LIB not in ld_path.split(os.pathsep):
        return warned(
            f"add {WSL_LIB} to LD_LIBRARY_PATH (or to /etc/ld.so.conf.d and run ldconfig): the "
            "loader does not know the WSL driver's libcuda, so dlopen('libcuda.so') can fail",
            f"WSL2: {WSL_LIB} is not on the loader path", ev)
    return passed(f"WSL2 ({', '.join(signs)}): libcuda from {WSL_LIB}; note: {notes[0]}", ev)


# ---------------------------------------------------------------------------------------------
# Pure decisions: performance


PERF_KEYS = {"bf16_tflops": "bf16_dense_tflops", "fp16_tflops": "fp16_dense_tflops",
             "tf32_tflops": "tf32_dense_tflops", "fp32_tflops": "fp32_tflops",
             "mem_bw_gbs": "mem_bw_gbs", "h2d_gbs": "h2d_gbs"}


def load_peaks(data: Any) -> dict[str, Any]:
    """Validate the peaks JSON (matrix/peaks.toml as converted by envbuild): {meta, gpu: [...]}."""
    if not isinstance(data, dict):
        raise ValueError("peaks: top level must be an object")
    meta = data.get("meta")
    gpus = data.get("gpu")
    if not isinstance(meta, dict) or not isinstance(gpus, list):
        raise ValueError("peaks: needs a 'meta' table and a 'gpu' list")
    pass_ratio, warn_ratio = meta.get("pass_ratio"), meta.get("warn_ratio")
    if not (isinstance(pass_ratio, (int, float)) and isinstance(warn_ratio, (int, float))
            and 0 < warn_ratio <= pass_ratio <= 1):
        raise ValueError("peaks: meta needs 0 < warn_ratio <= pass_ratio <= 1")
    for i, g in enumerate(gpus):
        if not isinstance(g, dict) or not isinstance(g.get("name"), str):
            raise ValueError(f"peaks: gpu[{i}] needs a name")
        match = g.get("match")
        if not isinstance(match, list) or not match or not all(isinstance(m, str) for m in match):
            raise ValueError(f"peaks: gpu[{i}] ({g['name']}) needs a non-empty match list")
        for key in PERF_KEYS.values():
            if key in g and not (isinstance(g[key], (int, float)) and g[key] > 0):
                raise ValueError(f"peaks: gpu[{i}] ({g['name']}).{key} must be a positive number")
    return data


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def match_gpu(device_name: str, peaks: dict[str, Any] | None) -> dict[str, Any] | None:
    """The peaks row whose alias appears in the device name as whole words; the longest wins, so
    'NVIDIA L40S' is not an 'L4' and 'H100 PCIe' beats a bare 'H100'."""
    if not peaks:
        return None
    name = _tokens(device_name)
    best: tuple[int, int, dict[str, Any]] | None = None
    for g in peaks.get("gpu") or []:
        for alias in g.get("match") or []:
            want = _tokens(alias)
            n = len(want)
            if n and any(name[i:i + n] == want for i in range(len(name) - n + 1)):
                score = (n, len(alias))
                if best is None or score > best[:2]:
                    best = (score[0], score[1], g)
    return best[2] if best else None


def perf_verdict(measured: float, peak: float, pass_ratio: float, warn_ratio: float) -> str:
    ratio = measured / peak
    if ratio >= pass_ratio:
        return "pass"
    if ratio >= warn_ratio:
        return "warn"
    return "fail"


def judge_perf(metrics: dict[str, float], device_name: str, backend: str,
               peaks: dict[str, Any] | None, what: str) -> Outcome:
    """Compare measured metrics (keys of PERF_KEYS) with the device's row in the peaks table."""
    text = ", ".join(f"{k} {v:.1f}" for k, v in metrics.items())
    ev: dict[str, Any] = {"device": device_name, "backend": backend, "measured": metrics}
    if backend == "cpu":
        ev["note"] = "no verdict on CPU"
        return passed(f"CPU {text} (no verdict on CPU)", ev)
    if backend == "mps":
        ev["note"] = "no peaks for Apple GPUs: no verdict"
        return passed(f"MPS {text} (no verdict on MPS)", ev)
    if peaks is None:
        ev["note"] = "no peaks table given (--peaks): no verdict"
        return passed(f"{text} (no verdict: no --peaks)", ev)
    row = match_gpu(device_name, peaks)
    if row is None:
        ev["note"] = f"{device_name!r} is not in the peaks table: no verdict"
        return passed(f"{text} (no verdict: GPU not in the peaks table)", ev)
    meta = peaks["meta"]
    pass_ratio, warn_ratio = float(meta["pass_ratio"]), float(meta["warn_ratio"])
    verdicts: dict[str, Any] = {}
    for key, value in metrics.items():
        peak = row.get(PERF_KEYS.get(key, ""))
        if not peak:
            verdicts[key] = {"measured": value, "peak": None, "status": "pass",
                             "note": "no peak in the table"}
            continue
        status = perf_verdict(value, float(peak), pass_ratio, warn_ratio)
        verdicts[key] = {"measured": value, "peak": peak, "ratio": round(value / float(peak), 3),
                         "status": status}
    ev.update(gpu=row.get("name"), verified=row.get("verified"), pass_ratio=pass_ratio,
              warn_ratio=warn_ratio, verdicts=verdicts)
    status = worst([v["status"] for v in verdicts.values()])
    summary = ", ".join(
        f"{k} {v['measured']:.1f}" + (f"/{v['peak']} ({v['ratio']:.0%})" if v.get("peak") else "")
        for k, v in verdicts.items())
    if status == "pass":
        return passed(f"{what} on {row['name']}: {summary}", ev)
    low = [k for k, v in verdicts.items() if v["status"] != "pass"]
    fix = (f"{', '.join(low)} below {pass_ratio:.0%} of the {row['name']} peak: check clocks and "
           "throttling (`nvidia-smi -q -d PERFORMANCE`), power limits, other processes on the GPU, "
           "PCIe link width/generation for host transfers, and that the expected GPU model is "
           "the one installed")
    if status == "warn":
        return warned(fix, f"{what} low on {row['name']}: {summary}", ev)
    return failed(fix, f"{what} far below peak on {row['name']}: {summary}", ev)


# ---------------------------------------------------------------------------------------------
# compile.smoke: torch.compile needs a C/C++ toolchain (Inductor's C++ kernels on CPU; Triton
# builds a small C launcher against Python.h at first use on CUDA/ROCm)

COMPILE_TOLERANCE = 1e-4  # fp32 relative error of compiled vs eager (fusion reorders sums)
COMPILER_ERRORS = (
    ("InvalidCxxCompiler", "Inductor found no working C++ compiler"),
    ("Failed to find C compiler", "Triton found no C compiler"),
    ("Python.h: No such file or directory", "Python's C headers are missing"),
    ("No working C++ compiler", "Inductor found no working C++ compiler"),
)


def find_toolchain(env: dict[str, str], which: Callable[[str], str | None],
                   python_include: str | None, exists: Callable[[str], bool]) -> dict[str, Any]:
    """Which compilers torch.compile would use, resolved the way Inductor (CXX, else g++ /
    clang++ on macOS) and Triton (CC, else cc / gcc / clang) look them up, and whether
    Python.h is there."""
    cxx_want = env.get("CXX") or ("clang++" if sys.platform == "darwin" else "g++")
    cc_want = env.get("CC")
    cc = which(cc_want) if cc_want else next(
        (p for p in (which(c) for c in ("cc", "gcc", "clang")) if p), None)
    header = os.path.join(python_include, "Python.h") if python_include else None
    return {"cxx_wanted": cxx_want, "cxx": which(cxx_want), "cc_wanted": cc_want or "cc/gcc/clang",
            "cc": cc, "python_h": header if header and exists(header) else None,
            "python_include": python_include}


def toolchain_remediation(missing: Sequence[str], in_image: bool) -> str:
    fix = ("torch.compile needs " + " and ".join(missing) + ": install them (Debian/Ubuntu: "
           "`apt-get install g++ python3-dev` (for a deadsnakes/uv Python, its -dev package); "
           "RHEL/Rocky: `dnf install gcc-c++ python3-devel`; conda: `conda install gxx_linux-64`), "
           "or point CXX (Inductor) / CC (Triton) at a compiler that exists")
    if in_image:
        fix += "; images built by this envbuild ship one: rebuild the image"
    return fix


def toolchain_missing(tc: dict[str, Any], gpu: bool) -> list[str]:
    missing: list[str] = []
    if not tc.get("cxx"):
        missing.append(f"a C++ compiler (CXX / {tc.get('cxx_wanted')} not found)")
    if gpu and not tc.get("cc"):
        missing.append(f"a C compiler for Triton ({tc.get('cc_wanted')} not found)")
    if not tc.get("python_h"):  # Inductor loads its CPU kernels through Python bindings too
        missing.append(f"Python's C headers (no Python.h in {tc.get('python_include')})")
    return missing


def compiler_error(text: str) -> str | None:
    for needle, what in COMPILER_ERRORS:
        if needle in text:
            return what
    return None


def compile_verdict(toolchain: dict[str, Any], runs: Sequence[dict[str, Any]],
                    in_image: bool = False) -> Outcome:
    """runs: one per device {device, backend, error?, rel_err?, grad_rel_err?, seconds}."""
    ev: dict[str, Any] = {"toolchain": toolchain, "runs": list(runs),
                          "tolerance": COMPILE_TOLERANCE}
    gpu = any(r["device"] != "cpu" for r in runs)
    missing = toolchain_missing(toolchain, gpu)
    for r in runs:
        err = r.get("error")
        if err and compiler_error(err):
            missing = missing or [compiler_error(err) or "a compiler"]
    if missing:
        return failed(toolchain_remediation(missing, in_image),
                      "torch.compile cannot build kernels: " + "; ".join(missing), ev)
    broken = [r for r in runs if r.get("error")]
    if broken:
        r = broken[0]
        if "not supported on Python" in r["error"]:
            return warned("this torch's torch.compile does not support this Python version: use "
                          "a Python the torch release supports for Dynamo, or a newer torch",
                          f"{r['device']}: {r['error'][:200]}", ev)
        return failed("torch.compile failed (see evidence.runs[].error): a broken Inductor/Triton "
                      "install, or a torch/triton version mismatch (pip install the triton "
                      "version torch requires)", f"{r['device']} ({r['backend']}): "
                      f"{r['error'][:200]}", ev)
    errors = [float(r.get(k, 0.0)) for r in runs for k in ("rel_err", "grad_rel_err")]
    bad = [e for e in errors if not (math.isfinite(e) and e <= COMPILE_TOLERANCE)]
    if bad:
        return failed("compiled and eager results differ beyond tolerance: Inductor/Triton "
                      "produced wrong kernels on this device",
                      f"compiled vs eager results differ: rel error {bad[0]:.2e}", ev)
    return passed("compiled forward+backward match eager on " + ", ".join(
        f"{r['device']} ({r['backend']}, {r.get('seconds', 0):.1f}s)" for r in runs), ev)




# ---------------------------------------------------------------------------------------------
# Pure decisions: where the GPU libraries torch loaded come from (issue 14). The wheel brings its
# own: CUDA wheels in site-packages/nvidia/* (nvidia-* packages; older wheels in torch/lib), ROCm
# wheels in torch/lib. A copy from /usr/local/cuda or /opt/rocm (LD_LIBRARY_PATH, ldconfig) is
# another version, the known cause of `undefined symbol: __nvJitLink...` and cuDNN mismatches.

GPU_LIB = re.compile(r"^(lib(?:amdhip64|cudnn[a-z_]*|cublas(?:Lt)?|nvJitLink|cusparse(?:Lt)?|"
                     r"cufft|curand|cusolver|nccl|rccl|rocblas|hipblas(?:lt)?|MIOpen|cudart))"
                     r"\.so(?:\.[0-9.]+)?$")
SYSTEM_GPU_DIRS = ("/usr/local/cuda", "/opt/rocm")


def parse_maps(text: str) -> list[str]:
    """File paths mapped in a /proc/<pid>/maps text, first-seen order, each once."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            path = parts[5].removesuffix(" (deleted)")
            seen.setdefault(path, None)
    return list(seen)


def lib_stem(path: str) -> str | None:
    """'libcublasLt' for .../libcublasLt.so.13.1; None for a file that is no GPU library."""
    m = GPU_LIB.match(os.path.basename(path))
    return m.group(1) if m else None


def wheel_lib_dirs(kind: str, torch_dir: str) -> list[str]:
    torch_dir = torch_dir.rstrip("/")
    site = os.path.dirname(torch_dir)
    if kind == "cuda":
        return [f"{site}/nvidia/", f"{torch_dir}/lib/"]
    return [f"{torch_dir}/lib/"]


def library_origin_verdict(kind: str | None, maps_text: str, torch_dir: str,
                           wheel_copies: dict[str, str], ld_library_path: str) -> Outcome:
    """Every GPU library mapped into the process comes from the torch wheel's own directories.

    wheel_copies: library stem -> the path of the wheel's copy (what should have been loaded).
    """
    if kind not in ("cuda", "rocm"):
        return skipped("a CPU build loads no GPU libraries")
    dirs = wheel_lib_dirs(kind, torch_dir)
    loaded = [p for p in parse_maps(maps_text) if lib_stem(p)]
    ev: dict[str, Any] = {"wheel_dirs": dirs, "loaded": loaded,
                          "ld_library_path": ld_library_path}
    if not loaded:
        return skipped(f"no {kind.upper()} library is mapped in this process", ev)
    foreign = [p for p in loaded if not any(p.startswith(d) for d in dirs)]
    if not foreign:
        return passed(f"{len(loaded)} GPU libraries, all from the wheel ({', '.join(dirs)})", ev)
    pairs: list[tuple[str, str | None]] = [(p, wheel_copies.get(lib_stem(p) or ""))
                                           for p in foreign]
    ev["foreign"] = [{"loaded": p, "wheel": w,
                      "system": any(p.startswith(d) for d in SYSTEM_GPU_DIRS)} for p, w in pairs]
    entries = [e for e in ld_library_path.split(os.pathsep) if e]
    shadowing = [e for e in entries
                 if any(p.startswith(e.rstrip("/") + "/") for p in foreign)]
    ev["shadowing_ld_library_path"] = shadowing
    said = "; ".join(f"{p} instead of " + (w or f"the wheel's copy (none found under {dirs[0]})")
                     for p, w in pairs)
    how = (f"remove {', '.join(shadowing)} from LD_LIBRARY_PATH" if shadowing else
           "remove the system copy from the loader's path (ldconfig, LD_PRELOAD, LD_LIBRARY_PATH)")
    return warned(
        f"torch loaded GPU libraries that are not its wheel's: {how}. A system copy of another "
        "version is the known cause of `undefined symbol: __nvJitLink...` and cuDNN/cuBLAS "
        "version mismatches; the wheel brings the versions torch was built with",
        f"not from the wheel: {said}", ev)


# ---------------------------------------------------------------------------------------------
# A CUDA image checked without a GPU: what the image is, proved from its files


def _cuda_spec(spec: dict[str, Any], what: str) -> Outcome | None:
    if spec.get("target") != "cuda" or not spec.get("torch_cuda"):
        return skipped(f"not a CUDA spec: no {what} to check")
    return None


def judge_cuda_packages(spec: dict[str, Any], dists: Sequence[dict[str, Any]]) -> Outcome:
    """Every nvidia-*/cuda-* distribution belongs to the spec's CUDA major: a cu12 package in a
    cu13 image (or the reverse) is a known cause of `undefined symbol` errors at import.
    dists: {name, version, major (None: cannot be told), how}."""
    not_cuda = _cuda_spec(spec, "CUDA major")
    if not_cuda is not None:
        return not_cuda
    want = version_parts(str(spec["torch_cuda"]))[0]
    rows = [dict(d) for d in dists]
    wrong = [d for d in rows if d.get("major") is not None and d["major"] != want]
    unknown = [d["name"] for d in rows if d.get("major") is None]
    ev = {"cuda_major": want, "distributions": rows, "unknown": unknown}
    if not rows:
        return failed(f"no nvidia-* distribution is installed, yet the spec's "
                      f"{spec.get('variant')} wheel brings its CUDA libraries as nvidia-* "
                      "packages: reinstall torch from the spec's index",
                      "no nvidia-* distributions", ev)
    if wrong:
        names = ", ".join(f"{d['name']} {d['version']} (CUDA {d['major']}: {d['how']})"
                          for d in wrong)
        return failed(
            f"remove {', '.join(d['name'] for d in wrong)}: the image is CUDA {want} "
            f"(torch {spec.get('torch')}+{spec.get('variant')}), and a CUDA {wrong[0]['major']} "
            "library beside it is loaded by whichever comes first (`undefined symbol` errors); "
            f"install the -cu{want} build of what needed it",
            f"not CUDA {want}: {names}", ev)
    detail = f"{len(rows)} nvidia-*/cuda-* distributions, all CUDA {want}"
    if unknown:
        detail += f" ({len(unknown)} carry no CUDA major: {', '.join(unknown)})"
    return passed(detail, ev)


def parse_ldd(text: str) -> list[tuple[str, str | None]]:
    """(library, resolved path or None when 'not found') per line of `ldd` output."""
    out: list[tuple[str, str | None]] = []
    for line in text.splitlines():
        line = line.strip()
        if "=>" not in line:
            continue
        name, _, rest = line.partition("=>")
        rest = rest.strip()
        if rest.startswith("not found"):
            out.append((name.strip(), None))
        else:
            out.append((name.strip(), rest.split(" (", 1)[0].strip() or None))
    return out


# The CUDA libraries of the wheels (cudart, cublas, cufft, nvrtc, nvJitLink, cupti, cufile,
# nvshmem, cudnn, nccl, cusparseLt ...); libcuda.so.1 is the driver's, mounted at run time.
CUDA_NEEDED = re.compile(r"^lib(?:cu(?!da\.so)[A-Za-z_]*|nv[A-Za-z_]+|nccl|cudnn[a-z_]*)\.so")


def judge_cuda_libs(spec: dict[str, Any], rows: Sequence[tuple[str, str | None]], library: str,
                    wheel_dirs: Sequence[str], error: str | None = None) -> Outcome:
    """Every library libtorch_cuda.so needs resolves, and every CUDA one (libcu*, libnv*,
    libcudnn, libnccl) inside the wheel's own directories, not a system copy."""
    not_cuda = _cuda_spec(spec, "libtorch_cuda.so")
    if not_cuda is not None:
        return not_cuda
    ev: dict[str, Any] = {"library": library, "wheel_dirs": list(wheel_dirs),
                          "needed": [{"lib": n, "path": p} for n, p in rows]}
    if error:
        return failed(f"cannot list what {library} links against ({error}): is libc-bin's ldd "
                      "in the image?", error, ev)
    missing = [n for n, p in rows if p is None and n != "libcuda.so.1"]
    if missing:
        return failed(
            f"{library} needs {', '.join(missing)}, which the loader cannot find: a nvidia-* "
            "package is missing or of another CUDA major (see cuda.packages); reinstall torch "
            "from the spec's index", f"not found: {', '.join(missing)}", ev)
    cuda = [(n, p) for n, p in rows if p is not None and CUDA_NEEDED.match(os.path.basename(n))]
    foreign = [(n, p) for n, p in cuda if not any(str(p).startswith(d) for d in wheel_dirs)]
    ev["cuda_libs"] = len(cuda)
    if not cuda:
        return failed(f"{library} resolves no CUDA library: a CPU build?", "no CUDA libraries", ev)
    if foreign:
        return failed(
            "CUDA libraries resolve outside the torch wheel's directories: "
            + "; ".join(f"{n} -> {p}" for n, p in foreign)
            + ". Remove the system copy from the loader's path (LD_LIBRARY_PATH, ldconfig)",
            f"{len(foreign)} CUDA libraries from outside the wheel", ev)
    return passed(f"{len(rows)} libraries resolve, {len(cuda)} CUDA ones inside the wheel's "
                  "directories", ev)


def judge_require_cuda(spec: dict[str, Any], env: dict[str, str | None]) -> Outcome:
    """NVIDIA_REQUIRE_CUDA (what the container runtime checks the host driver against) names
    the CUDA the spec's minimum driver was computed from: the nvidia/cuda image's minor, or on a
    plain base the X.0 envbuild writes."""
    not_cuda = _cuda_spec(spec, "NVIDIA_REQUIRE_CUDA")
    if not_cuda is not None:
        return not_cuda
    value = env.get("NVIDIA_REQUIRE_CUDA")
    want = spec.get("require_cuda") or major_minor(spec.get("cuda_image"))
    got = parse_require_cuda(value)
    ev = {"NVIDIA_REQUIRE_CUDA": value, "expected": want, "min_driver": spec.get("min_driver"),
          "NVIDIA_VISIBLE_DEVICES": env.get("NVIDIA_VISIBLE_DEVICES"),
          "NVIDIA_DRIVER_CAPABILITIES": env.get("NVIDIA_DRIVER_CAPABILITIES")}
    caps = (env.get("NVIDIA_DRIVER_CAPABILITIES") or "").split(",")
    if not env.get("NVIDIA_VISIBLE_DEVICES") or not ({"compute", "all"} & set(caps)):
        return failed("set NVIDIA_VISIBLE_DEVICES=all and NVIDIA_DRIVER_CAPABILITIES="
                      "compute,utility in the image: without them the NVIDIA container "
                      "runtime mounts no CUDA driver library",
                      "the NVIDIA runtime settings are missing", ev)
    if want is None:
        return skipped("the spec names no image CUDA", ev)
    if got is None:
        return failed(f"set NVIDIA_REQUIRE_CUDA=cuda>={want} in the image: without it the "
                      "container runtime starts it on any driver, and an old one fails at the "
                      "first CUDA call instead of at start", "NVIDIA_REQUIRE_CUDA is not set",
                      ev)
    if got != want:
        return failed(f"the image requires CUDA {got} where the spec's minimum driver "
                      f"{spec.get('min_driver')} was computed for CUDA {want}: the image and "
                      "its spec disagree (another base image?); re-render and rebuild",
                      f"NVIDIA_REQUIRE_CUDA cuda>={got}, spec {want}", ev)
    return passed(f"cuda>={got}: drivers >= {spec.get('min_driver')} (spec)", ev)


def judge_triton(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    """torch.compile on NVIDIA GPUs needs Triton and the ptxas it bundles (a C compiler too:
    compile.smoke). facts: {version, dir, ptxas, ptxas_version, error}."""
    not_cuda = _cuda_spec(spec, "Triton")
    if not_cuda is not None:
        return not_cuda
    ev = dict(facts)
    if not facts.get("version"):
        return failed("install triton (the torch wheel pins it on Linux x86_64): torch.compile "
                      "has no GPU backend without it", "triton is not installed", ev)
    if not facts.get("ptxas"):
        return failed(f"triton {facts['version']} has no ptxas under "
                      f"{facts.get('dir')}/backends/nvidia/bin: reinstall triton",
                      "no ptxas", ev)
    if not facts.get("ptxas_version"):
        return failed(f"{facts['ptxas']} does not run ({facts.get('error') or 'no version'})",
                      "ptxas does not run", ev)
    return passed(f"triton {facts['version']}, ptxas {facts['ptxas_version']}", ev)


# Checks whose subject is the GPU itself: on a host without one they are not run, never passed.
GPU_ONLY_CHECKS = ("device.count", "device.properties", "device.arch_coverage", "device.kernel",
                   "perf.matmul", "perf.mem_bw", "perf.h2d")
# Checks that run on the CPU when no GPU is there: their GPU path is not run.
CPU_FALLBACK_CHECKS = ("numerics.matmul", "numerics.conv2d", "numerics.autocast", "train.smoke",
                       "train.dataloader", "train.checkpoint", "compile.smoke", "dist.allreduce")


def gpu_less(checks: list[dict[str, Any]], target: str | None, gpu_visible: bool,
             ) -> dict[str, Any] | None:
    """A GPU target validated on a host without a GPU: each GPU-only check that skipped for that
    becomes not_run; the summary block says how many facts were proved and what was not run
    (None when a GPU was there, or for CPU and MPS targets)."""
    if target not in ("cuda", "rocm") or gpu_visible:
        return None
    for c in checks:  # a GPU-only check cannot pass without a GPU (perf.matmul measures the CPU)
        if c["id"] in GPU_ONLY_CHECKS and c["status"] in ("skip", "pass"):
            c["status"] = "not_run"
            c["reason"] = c["detail"] = "not run: needs a GPU; " + (
                c["reason"] or "none visible, it measured the CPU")
    not_run = [c["id"] for c in checks if c["status"] == "not_run"]
    cpu_only = [c["id"] for c in checks if c["id"] in CPU_FALLBACK_CHECKS
                and c["status"] in ("pass", "warn", "fail")]
    facts = sum(1 for c in checks if c["status"] == "pass")
    return {"checked_without_gpu": True, "facts": facts, "not_run": not_run,
            "cpu_only": cpu_only}
