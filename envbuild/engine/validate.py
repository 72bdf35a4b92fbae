"""Run the validator: inside an image (through the engine) or on this host (a subprocess)."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from envbuild.common import proc
from envbuild.common.boundedio import CACHE_BYTES, load_json, parse_json, path_text
from envbuild.common.errors import EXIT_CANNOT_RUN, EnvbuildError, UsageError
from envbuild.common.record import record
from envbuild.core import platforms
from envbuild.engine import docker, emulation
from envbuild.validator import rules

VALIDATE_LABEL = {docker.LABEL_ROLE: "validate"}


@record
class Validation:
    report: dict[str, Any]
    exit_code: int
    gpus_passed: bool
    note: str


def gpu_verdict(report: dict[str, Any]) -> dict[str, Any] | None:
    """Where a GPU image was validated (pure): on a GPU (its names), or without one (how many
    facts were proved, which GPU checks were not run). None for a CPU or MPS report."""
    target = (report.get("spec") or {}).get("target")
    if target not in ("cuda", "rocm"):
        return None
    block = report.get("gpu_less")
    if block:
        return {"on_gpu": False, "gpus": [], "facts": int(block.get("facts", 0)),
                "not_run": list(block.get("not_run", [])),
                "cpu_only": list(block.get("cpu_only", [])),
                "not_run_emulated": list(block.get("not_run_emulated", []))}
    names: list[str] = []
    seen = False
    for c in report.get("checks", []):
        if c.get("id") == "device.properties" and c.get("status") in ("pass", "warn"):
            seen = True
            for d in (c.get("evidence") or {}).get("devices") or []:
                if isinstance(d, dict) and d.get("name"):
                    names.append(str(d["name"]))
    # A GPU counts only where device.properties ran on one (an older validator's report without
    # a gpu_less block, or one that skipped its device checks, is not a GPU validation).
    return {"on_gpu": seen, "gpus": sorted(set(names)), "facts": None, "not_run": [],
            "cpu_only": [], "not_run_emulated": []}


def describe_gpu_verdict(v: dict[str, Any]) -> str:
    if not v["on_gpu"] and v["facts"] is None:
        return "no GPU check ran (the report names no GPU)"
    if not v["on_gpu"]:
        line = (f"checked without GPU: {v['facts']} facts, {len(v['not_run'])} GPU checks not "
                "run")
        if v["cpu_only"]:
            line += f" ({len(v['cpu_only'])} ran on the CPU only)"
        if v.get("not_run_emulated"):
            line += (f"; emulated: {len(v['not_run_emulated'])} checks of speed, training or "
                     "compiling not run")
        return line
    return "validated on GPU " + (", ".join(v["gpus"]) or "(unnamed)")


def _parse_report(output: str) -> dict[str, Any]:
    start = output.find("{")
    if start < 0:
        raise ValueError("no JSON report in the validator output")
    data = parse_json(output[start:])
    if not isinstance(data, dict) or "checks" not in data:
        raise ValueError("the validator output is not a report")
    return data


def validate_image(ref: str, *, require_gpu: bool = False, timeout: float = 600) -> Validation:
    labels = docker.image_labels(ref)
    if docker.LABEL_SPEC_HASH not in labels:
        raise EnvbuildError(f"{ref} was not built by envbuild (no {docker.LABEL_SPEC_HASH} label)",
                            "validate images made by envbuild build / make, or use --host")
    from envbuild.core import targets

    target = labels.get("io.envbuild.target", "cpu")
    entry = targets.REGISTRY.get(target, targets.get("cpu"))
    gpus = entry.gpu_request and docker.gpu_runtime()
    note = ""
    if entry.gpu_request and not gpus:
        note = ("no NVIDIA container runtime on this host: static checks only, device checks "
                "skip" + (" (and fail with --require-gpu)" if require_gpu else ""))
    cmd = ["envbuild-validate", "--json", *entry.validator_flags] + \
        (["--require-gpu"] if require_gpu else [])
    platform = docker.image_platform(ref)
    with tempfile.TemporaryDirectory(prefix="envbuild-cpu-") as tmp:
        run = {"target": target, "gpus": gpus, "timeout": timeout,
               "labels": {**VALIDATE_LABEL, "io.envbuild.image": ref}}
        if emulation.emulated(platform):
            assert platform is not None
            how, mounts = _emulation(platform, Path(tmp))
            cmd += ["--emulated", how]
            run.update(platform=platform, read_only_mounts=mounts)
            note = "; ".join(filter(None, [note, f"emulated: {how}"]))
        result = docker.run_container(ref, cmd, **run)  # type: ignore[arg-type]
    if result.timed_out:
        raise EnvbuildError(f"validation of {ref} did not finish within {timeout:.0f} s",
                            "the container was stopped and removed; retry with --timeout",
                            [], EXIT_CANNOT_RUN)
    try:
        report = _parse_report(result.output)
    except ValueError as exc:
        raise EnvbuildError(f"the validator in {ref} could not run ({exc}; exit "
                            f"{result.exit_code})", "the image may be broken: rebuild it",
                            [result.output.strip()[-400:]], EXIT_CANNOT_RUN) from None
    return Validation(report, result.exit_code, gpus, note)


def _emulation(platform: str, standin: Path) -> tuple[str, dict[str, Path]]:
    """How an image of another platform is checked here, and the mounts that lets torch import
    (see envbuild.engine.emulation)."""
    import os

    from envbuild.matrix import load

    how = emulation.ready(platform, docker.remote_engine())
    mounts: dict[str, Path] = {}
    midr = str(load().meta.get("torch", {}).get("emulated_arm64_midr", ""))
    if platform == "linux/arm64" and midr:
        emulation.cpu_standin(standin, midr, os.cpu_count() or 1)
        mounts[emulation.STANDIN_TARGET] = standin
        how += f", {emulation.STANDIN_TARGET} a stand-in (MIDR_EL1 {midr})"
    return f"{how or 'a remote engine'} on {platforms.host()}", mounts


def host_spec_from(installed: dict[str, str | None], torch_requires: list[str],
                   python: str, system: str, machine: str,
                   mps_floors: dict[str, str] | None = None) -> dict[str, Any]:
    """What a host's Python has, as a spec (pure). Nothing is expected that the host does not
    say: the flavor comes from torch's local tag (+cu130, +rocm6.4, +cpu) or, for a PyPI wheel
    without one, from its nvidia-* requirements; the variant is that local tag, or just the
    family ('cuda') when the metadata has none, which any +cuXXX build satisfies. On an arm64
    Mac the target is mps, and min_macos is the installed torch release's MPS floor (`mps_floors`:
    torch minor -> envbuild.core.compat.mps_floor), as a rendered spec carries it."""
    torch = installed.get("torch")
    local = (rules.local_tag(torch) or "") if torch else ""
    deps = " ".join(torch_requires)
    if local.startswith("cu") or (not local and ("nvidia-" in deps or "cuda-toolkit" in deps)):
        target = "cuda"
    elif local.startswith("rocm"):
        target = "rocm"
    elif system == "Darwin" and machine == "arm64":
        target = "mps"
    else:
        target = "cpu"

    def public(v: str | None) -> str | None:
        return rules.public_version(v) if v else None

    return {"target": target, "torch": public(torch),
            "torchvision": public(installed.get("torchvision")),
            "torchaudio": public(installed.get("torchaudio")),
            "python": python, "variant": local or target, "origin": "host",
            "torch_cuda": None, "rocm": None, "cuda_image": None, "cudnn": None, "nccl": None,
            "archs": [], "gpus": [], "os": system.lower(), "base_image": None,
            "min_driver": None,
            "min_macos": ((mps_floors or {}).get(rules.major_minor(torch) or "") or None
                          if target == "mps" and torch else None)}


def host_spec() -> dict[str, Any]:
    """host_spec_from this interpreter (no torch import: distribution metadata only)."""
    import platform
    from importlib.metadata import PackageNotFoundError, requires, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    have = {name: installed(name) for name in ("torch", "torchvision", "torchaudio")}
    deps = (requires("torch") or []) if have["torch"] else []
    floors: dict[str, str] = {}
    if platform.system() == "Darwin" and have["torch"]:
        from envbuild.core.compat import mps_floor
        from envbuild.matrix import load

        floor = mps_floor(load(), str(have["torch"]))
        if floor:
            floors = {rules.major_minor(str(have["torch"])) or "": floor}
    return host_spec_from(have, list(deps), ".".join(platform.python_version_tuple()[:2]),
                          platform.system(), platform.machine(), floors)


def validate_host(*, spec: Path | None = None, require_gpu: bool = False,
                  timeout: float = 600) -> Validation:
    """Run the validator with this Python (bare metal, WSL2, macOS)."""
    from envbuild.matrix import load
    from envbuild.render.context import peaks_json

    if spec is not None:  # the validator reads it whole: a FIFO, /dev/zero, deep JSON stop here
        try:
            load_json(spec, "spec file")
        except FileNotFoundError:
            raise UsageError(f"--spec {path_text(spec)}: no such file",
                             "give the spec.json of a rendered context") from None
        except ValueError as exc:
            raise UsageError(f"--spec {path_text(spec)}: not JSON ({exc})",
                             "give the spec.json of a rendered context") from None
    with tempfile.TemporaryDirectory(prefix="envbuild-validate-") as tmp:
        peaks = Path(tmp, "peaks.json")
        peaks.write_text(peaks_json(load()))
        out = Path(tmp, "report.json")
        if spec is None:
            spec = Path(tmp, "spec.json")
            spec.write_text(json.dumps(host_spec()))
        argv = [sys.executable, "-m", "envbuild.validator", "--peaks", str(peaks),
                "--out", str(out), "--spec", str(spec)]
        if require_gpu:
            argv.append("--require-gpu")
        r = proc.run(argv, timeout=timeout, check=False)
        if not out.is_file():
            raise EnvbuildError("the validator could not run on this host",
                                "is torch installed here? pip install 'envbuild[host]'",
                                [(r.stderr or r.stdout).strip()[-400:]], EXIT_CANNOT_RUN)
        return Validation(load_json(out, "validator report", cap=CACHE_BYTES), r.returncode,
                          False, "")
