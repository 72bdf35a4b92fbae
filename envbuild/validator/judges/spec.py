"""Pure decisions: the spec's promises judged against recorded facts (shape: see collect_facts /
tests' *_facts.json): GPU visibility, versions, flavor, arch lists and coverage, devices."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..rules import (
    arch_covers,
    arch_kind,
    cuda_tag,
    cudnn_version_str,
    gfx_covers,
    major_minor,
    pin_matches,
    public_version,
    version_prefix_matches,
)
from .results import Outcome, failed, passed, skipped, version_verdict, warned

NO_GPU_REASON = "no GPU visible (torch.cuda.is_available() is False)"
NO_MPS_REASON = "no GPU visible (torch.backends.mps.is_available() is False)"
GPU_REMEDIATION = (
    "no GPU is visible to torch: run the container with `--gpus all` (NVIDIA; needs the NVIDIA "
    "Container Toolkit) or `--device /dev/kfd --device /dev/dri` (ROCm), check "
    "CUDA_VISIBLE_DEVICES, and see evidence.init_warnings for the driver's own message"
)

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
    fact, key, name = (("cuda", "torch_cuda", "CUDA") if target == "cuda"
                       else ("hip", "rocm", "HIP"))
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
        build = cuda_tag(str(expected)) if target == "cuda" else f"rocm{expected}"
        return failed(f"install the {build} build of torch; this one is built with {name} "
                      f"{actual}", f"{name} {actual}, spec wants {target.upper()} {expected}",
                      ev)
    return passed(f"{name} {actual}", ev)


def judge_cuda_version(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    return _runtime_version(spec, facts, "cuda")


def _cuda_library(spec: dict[str, Any], t: dict[str, Any], key: str, name: str, actual: Any,
                  ev: dict[str, Any], missing: tuple[str, str], other_copy: str) -> Outcome:
    """A CUDA library torch loads (cuDNN, NCCL) against the spec's pin: `missing` is the
    (remediation, detail) when it does not load, `other_copy` what a wrong version means."""
    other = _other_target(spec, "cuda", ev)
    if other:
        return other
    expected = spec.get(key)
    if not expected:
        return skipped(f"spec does not pin {key}", ev)
    if not t.get("cuda"):
        return failed("torch has no CUDA at all: see expect.flavor", "torch.version.cuda is None",
                      ev)
    if not actual:
        return failed(*missing, ev)
    if not version_prefix_matches(str(expected), str(actual)):
        return failed(f"torch loads {name} {actual} but the spec pins {expected}: {other_copy}",
                      f"{name} {actual}, spec wants {expected}", ev)
    return passed(f"{name} {actual}", ev)


def judge_cudnn(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    t = _torch_facts(facts)
    actual = cudnn_version_str(t.get("cudnn"))
    ev = {"expected": spec.get("cudnn"), "actual": actual, "raw": t.get("cudnn"),
          "error": t.get("cudnn_error")}
    return _cuda_library(
        spec, t, "cudnn", "cuDNN", actual, ev,
        ("cuDNN does not load: install the nvidia-cudnn wheel torch requires (or the cudnn "
         "image flavor) and make sure no other libcudnn shadows it on LD_LIBRARY_PATH",
         "torch.backends.cudnn.version() is None"),
        "another libcudnn on LD_LIBRARY_PATH or a different nvidia-cudnn wheel is being picked up")


def judge_nccl(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    t = _torch_facts(facts)
    actual = t.get("nccl")
    ev = {"expected": spec.get("nccl"), "actual": actual, "error": t.get("nccl_error")}
    return _cuda_library(
        spec, t, "nccl", "NCCL", actual, ev,
        ("NCCL does not load: install the nvidia-nccl wheel torch requires",
         "torch.cuda.nccl.version() unavailable"),
        "a different nvidia-nccl wheel or a system libnccl on LD_LIBRARY_PATH is being picked up")


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


