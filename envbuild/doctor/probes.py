"""Thin, time-limited probes: they only collect raw texts and small facts about this host.

Processes run only through envbuild.common.proc.run (argv, timeout, check=False); files under /proc,
/sys and /dev are read with pathlib. Nothing here needs root and nothing here judges.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import re
import sys
from pathlib import Path

from envbuild.common import proc
from envbuild.common.redact import redact
from envbuild.doctor import model
from envbuild.doctor.model import Cmd, DevNode, DockerClient, HostFacts

TIMEOUT = 10.0
TORCH_TIMEOUT = 60.0
ENV_KEYS = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES",
            "ROCR_VISIBLE_DEVICES", "HSA_OVERRIDE_GFX_VERSION", "WSL_DISTRO_NAME",
            "DOCKER_HOST", "DOCKER_BUILDKIT", "CONDA_PREFIX", "VIRTUAL_ENV")
LIB_RE = re.compile(r"^lib(cuda|cudnn\w*|nvJitLink|nvidia-ml|cusparse|cublas\w*|nccl)\.so")
WATCHED_MODULES = ("nouveau", "nvidia", "nvidia_uvm", "amdgpu")
WATCHED_LIBS = ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1")
# Fixed args only: nothing from the environment ends up on a command line.
TORCH_SNIPPET = """\
import json
out = {}
try:
    import torch
    out["version"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    out["arch_flags"] = flags() if flags else None
    out["cuda_available"] = bool(torch.cuda.is_available())
    out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
    mps = getattr(torch.backends, "mps", None)
    out["mps_built"] = bool(mps is not None and mps.is_built())
    out["mps_available"] = bool(mps is not None and mps.is_available())
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc)
print(json.dumps(out))
"""


def run_cmd(argv: list[str], timeout: float = TIMEOUT) -> Cmd:
    exe = argv[0]
    if not (os.path.isabs(exe) and os.access(exe, os.X_OK)) and proc.which(exe) is None:
        return Cmd(tuple(argv), None, error=f"{exe}: not found")
    try:
        r = proc.run(argv, timeout=timeout, check=False)
    except proc.ProcessError as exc:
        return Cmd(tuple(argv), None, error=exc.message)
    return Cmd(tuple(argv), r.returncode, r.stdout, r.stderr)


def read_text(path: str, limit: int = 1 << 20) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read(limit)
    except OSError:
        return None


def _listdir(path: str, keep: re.Pattern[str] | None = None) -> tuple[str, ...] | None:
    try:
        names = sorted(p.name for p in Path(path).iterdir())
    except OSError:
        return None
    return tuple(n for n in names if keep is None or keep.search(n))[:200]


def _first_on_path(name: str, extra: tuple[str, ...] = ()) -> str | None:
    found = proc.which(name)
    if found:
        return found
    return next((p for p in extra if os.access(p, os.X_OK)), None)


def devices(root: str = "/dev") -> dict[str, DevNode]:
    """The GPU device nodes under root, keyed as /dev/... paths, with whether this user may
    open them read-write (root is a parameter so tests can point it at nodes they made)."""
    names = [p for p in _listdir(root) or () if p.startswith("nvidia") or p in ("dxg", "kfd")]
    names += [f"dri/{p}" for p in _listdir(f"{root}/dri", re.compile(r"^renderD\d+$")) or ()]
    out = {}
    for name in names:
        path = f"{root}/{name}"
        try:
            st = os.stat(path)
        except OSError:
            continue
        out[f"/dev/{name}"] = DevNode(st.st_gid, st.st_mode, os.access(path, os.R_OK | os.W_OK))
    return out


def _group_names(gids: set[int]) -> dict[int, str]:
    try:
        import grp
    except ImportError:  # not a Unix host
        return {}
    out = {}
    for gid in gids:
        with contextlib.suppress(KeyError):
            out[gid] = grp.getgrgid(gid).gr_name
    return out


def _pci() -> tuple[tuple[str, str], ...]:
    out = []
    for dev in _listdir("/sys/bus/pci/devices") or ():
        vendor = (read_text(f"/sys/bus/pci/devices/{dev}/vendor") or "").strip()
        klass = (read_text(f"/sys/bus/pci/devices/{dev}/class") or "").strip()
        if vendor in ("0x10de", "0x1002") and klass[:4] in ("0x03", "0x12"):
            out.append((vendor, klass))
    return tuple(out)


def _docker_clients() -> tuple[DockerClient, ...]:
    seen: set[str] = set()
    out = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        exe = os.path.join(d or ".", "docker")
        if not os.access(exe, os.X_OK) or os.path.isdir(exe):
            continue
        real = os.path.realpath(exe)
        if real in seen:
            continue
        seen.add(real)
        version = run_cmd([exe, "--version"])
        out.append(DockerClient(exe, version.stdout.strip() or version.error,
                                run_cmd([exe, "buildx", "version"])))
    return tuple(out)


def _lib_dirs(env: dict[str, str]) -> dict[str, tuple[str, ...]]:
    dirs: dict[str, tuple[str, ...]] = {}
    for d in env.get("LD_LIBRARY_PATH", "").split(":"):
        if d and d not in dirs:
            listed = _listdir(d, LIB_RE)
            if listed is not None:
                dirs[d] = listed
    for d in ("/etc/cdi", "/var/run/cdi", "/usr/lib/wsl/lib", "/dev/char"):
        listed = _listdir(d, re.compile(r"^195:") if d == "/dev/char" else None)
        if listed is not None:
            dirs[d] = listed
    return dirs


def _resolved(ldconfig: Cmd | None, lib_dirs: dict[str, tuple[str, ...]]) -> dict[str, str]:
    from envbuild.doctor.parse import ldconfig_paths

    paths: list[str] = []
    for lib in WATCHED_LIBS:
        paths += ldconfig_paths(ldconfig.stdout if ldconfig else "", lib)
        paths += [f"{d}/{lib}" for d, names in lib_dirs.items() if lib in names]
    out = {}
    for p in paths:
        with contextlib.suppress(OSError):
            out[p] = str(Path(p).resolve())
    return out


def _python() -> dict[str, str]:
    out = {"executable": sys.executable, "version": platform.python_version()}
    for dist in ("torch", "torchvision", "torchaudio"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[dist] = importlib.metadata.version(dist)
    return out


def _shm_bytes() -> int:
    try:
        st = os.statvfs("/dev/shm")
    except (OSError, AttributeError):
        return 0
    return st.f_frsize * st.f_blocks


def _kfd_gfx() -> tuple[int, ...]:
    out = []
    for node in _listdir("/sys/class/kfd/kfd/topology/nodes") or ():
        text = read_text(f"/sys/class/kfd/kfd/topology/nodes/{node}/properties") or ""
        m = re.search(r"^gfx_target_version\s+(\d+)", text, re.M)
        if m and int(m.group(1)):
            out.append(int(m.group(1)))
    return tuple(out)


def collect(torch: bool = True) -> HostFacts:
    """Probe this host. Every command is time-limited; missing tools are recorded, not errors.
    `torch`: also import this Python's torch (`envbuild run` judges an image, not it)."""
    system, machine = platform.system(), platform.machine()
    # DOCKER_HOST may be tcp://user:password@host: recorded and reported without credentials
    env = {k: redact(os.environ[k]) for k in ENV_KEYS if k in os.environ}
    outputs: dict[str, Cmd] = {}
    files: dict[str, str] = {}
    for name, path in model.FILES.items():
        text = read_text(path)
        if text is not None:
            files[name] = text

    def out(name: str, exe: str | None, timeout: float = TIMEOUT) -> None:
        argv = list(model.OUTPUTS[name])
        if exe is None:
            outputs[name] = Cmd(tuple(argv), None, error=f"{argv[0]}: not found")
            return
        outputs[name] = run_cmd([exe, *argv[1:]], timeout)

    if system == "Linux":
        wsl_smi = "/usr/lib/wsl/lib/nvidia-smi"
        smi = (wsl_smi if os.access(wsl_smi, os.X_OK)  # the real one on WSL, never a Linux one
               else _first_on_path("nvidia-smi"))
        if smi is not None:
            out(model.NVSMI_XML, smi)
            out(model.NVSMI_CSV, smi)
        if proc.which("rocminfo") or os.path.exists("/dev/kfd"):
            out(model.ROCMINFO, _first_on_path("rocminfo", ("/opt/rocm/bin/rocminfo",)))
        out(model.LDCONFIG, _first_on_path("ldconfig", ("/sbin/ldconfig", "/usr/sbin/ldconfig")))
        if machine.lower() not in ("x86_64", "amd64"):  # which Arm cores (Grace, GB10, Jetson)
            out(model.LSCPU, proc.which("lscpu"))
        if "microsoft" in files.get(model.OSRELEASE, "").lower() and proc.which("dpkg"):
            out(model.DPKG, "dpkg")
    if system == "Darwin":
        out(model.SW_VERS, proc.which("sw_vers"))
        out(model.SYSCTL_TRANSLATED, proc.which("sysctl"))
        out(model.SYSCTL_CPU, proc.which("sysctl"))
    out(model.DOCKER_INFO, proc.which("docker"))
    if proc.which("podman"):
        out(model.PODMAN_INFO, "podman")
    python = _python()
    if "torch" in python and torch:
        r = run_cmd([sys.executable, "-c", TORCH_SNIPPET], TORCH_TIMEOUT)
        outputs[model.TORCH_PROBE] = Cmd(model.OUTPUTS[model.TORCH_PROBE], r.returncode,
                                         r.stdout, r.stderr, r.error)
    dirs = _lib_dirs(env)
    nodes = devices()
    groups = tuple(sorted(set(os.getgroups()))) if hasattr(os, "getgroups") else ()
    modules = tuple(m for m in WATCHED_MODULES if os.path.isdir(f"/sys/module/{m}"))
    container = ("docker" if os.path.exists("/.dockerenv")
                 else "podman" if os.path.exists("/run/.containerenv") else "")
    return HostFacts(
        system=system, machine=machine, outputs=outputs, files=files, env=env,
        groups=groups, group_names=_group_names({*groups, *(d.gid for d in nodes.values())}),
        devices=nodes, dirs=dirs, resolved=_resolved(outputs.get(model.LDCONFIG), dirs),
        modules=modules, pci=_pci() if system == "Linux" else (),
        docker_clients=_docker_clients(), python=python, shm_bytes=_shm_bytes(),
        container=container, kfd_gfx=_kfd_gfx() if system == "Linux" else (),
    )
