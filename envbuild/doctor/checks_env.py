"""Checks of the container engines (Docker, Podman, BuildKit) and of the current Python's
torch (pure functions of the View, the Matrix and the HostRules)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from envbuild.common.versions import major_of, minor_of
from envbuild.core import compat
from envbuild.core.compat import HostRules
from envbuild.doctor import model, parse
from envbuild.doctor.model import HostFacts
from envbuild.doctor.view import (
    ERROR,
    INFO,
    OK,
    WARN,
    Out,
    View,
    tail,
    torch_probe,
    torch_probe_malformed,
)
from envbuild.matrix import Matrix, Variant
from envbuild.validator import rules


def check_docker(v: View, m: Matrix, rules: HostRules, o: Out) -> None:
    f = v.facts
    needed = not v.darwin  # on macOS, MPS runs natively; containers get no GPU there
    podman = f.out(model.PODMAN_INFO)
    has_podman = podman is not None and podman.ok
    info = f.out(model.DOCKER_INFO)
    if info is None or info.error.endswith("not found"):
        sev = ERROR if needed and not has_podman else INFO
        o.add("docker.not_found", sev, "the docker CLI is not installed",
              "install Docker Engine (docker.io or docker-ce) for `envbuild make` images"
              if sev is ERROR else "", [info.error] if info is not None and info.error else [])
    elif not v.docker_ok:
        errs = v.docker_info.get("ServerErrors") or []
        text = ("; ".join(str(e) for e in errs) or info.stderr.strip() or info.error
                or info.stdout.strip())
        denied = "permission denied" in text.lower()
        o.add("docker.permission_denied" if denied else "docker.daemon_unreachable",
              ERROR if needed and not has_podman else INFO,
              "this user may not use the Docker engine socket" if denied
              else "the Docker engine is not reachable (daemon down or DOCKER_HOST wrong)",
              "`sudo usermod -aG docker $USER` and log in again (or use rootless Docker)"
              if denied else "start it: `sudo systemctl start docker` (or `dockerd &`)",
              tail(text))
    else:
        d = v.docker_info
        cg = d.get("CgroupDriver", "?")
        o.add("docker.engine", OK, f"Docker engine {d.get('ServerVersion')} is reachable "
              f"({d.get('OperatingSystem', '?')}; cgroup driver {cg}, cgroup v"
              f"{d.get('CgroupVersion', '?')})")
        check_docker_gpu(v, o)
        daemon = parse.json_object(f.file(model.DAEMON_JSON)) or {}
        if "default-shm-size" not in daemon:
            o.add("docker.shm_default", INFO,
                  f"containers get a {rules.docker_default_shm_mb} MB /dev/shm by default: too "
                  "small for DataLoader workers and NCCL",
                  f"run training containers with --shm-size={rules.shm_advice} (or --ipc=host)")
    if info is not None and info.ran:
        check_buildkit(v, rules, o)
    if podman is not None:
        check_podman(v, rules, o)
    if f.container and f.shm_bytes and f.shm_bytes < rules.shm_min_mb << 20:
        o.add("host.shm_small", WARN,
              f"this {f.container} container has a {f.shm_bytes >> 20} MB /dev/shm",
              f"restart it with --shm-size={rules.shm_advice} or --ipc=host")


def cdi_specs(f: HostFacts) -> list[str]:
    return [f"{d}/{n}" for d in ("/etc/cdi", "/var/run/cdi") for n in f.dirs.get(d, ())
            if "nvidia" in n]


def check_docker_gpu(v: View, o: Out) -> None:
    f, d = v.facts, v.docker_info
    if not v.nvidia:
        return
    if str(d.get("DockerRootDir", "")).startswith("/var/snap"):
        o.add("docker.snap", WARN, "Docker is the snap package: the NVIDIA Container Toolkit "
              "does not support it", "remove the snap and install Docker Engine from apt")
    runtimes = d.get("Runtimes") or {}
    cdi = cdi_specs(f)
    desktop = "docker desktop" in str(d.get("OperatingSystem", "")).lower()
    # on WSL2: Docker Desktop (its own VM, GPU through the WSL 2 backend) or Docker Engine
    # inside the distribution (needs the nvidia runtime or CDI, like native Linux)
    engine = (" (Docker Engine inside this WSL2 distribution)" if v.wsl and not desktop
              else " (Docker Desktop, WSL 2 backend)" if v.wsl else "")
    if "nvidia" in runtimes:
        o.add("docker.gpu_runtime", OK, "the nvidia container runtime is registered with Docker"
              + (f" (default: {d.get('DefaultRuntime')})" if d.get("DefaultRuntime") else "")
              + engine)
    elif cdi and d.get("CDISpecDirs"):
        o.add("docker.gpu_runtime", OK, f"Docker can inject GPUs through CDI ({cdi[0]})"
              + engine)
    elif desktop and v.wsl:
        o.add("docker.gpu_runtime", OK, "Docker Desktop passes the GPU to containers on WSL2 "
              "(its WSL 2 backend; no NVIDIA runtime needed in the distribution)")
    else:
        o.add("docker.no_gpu_runtime", ERROR,
              "Docker has no NVIDIA runtime and no CDI spec: `docker run --gpus all` fails with "
              "'could not select device driver \"\" with capabilities: [[gpu]]'",
              "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure "
              "--runtime=docker && sudo systemctl restart docker`"
              + (" (or use Docker Desktop's WSL 2 backend, which passes the GPU itself)"
                 if v.wsl else ""),
              [f"Runtimes: {', '.join(sorted(runtimes)) or 'none'}"])
        return
    if d.get("CgroupDriver") == "systemd" and "/dev/char" in f.dirs and not f.dirs["/dev/char"] \
            and not v.wsl:
        o.add("docker.nvml_after_reload", WARN,
              "systemd cgroup driver without /dev/char/195:* links: containers lose their GPUs "
              "('Failed to initialize NVML: Unknown Error') after `systemctl daemon-reload`",
              "`sudo nvidia-ctk system create-dev-char-symlinks --create-all` (and its udev "
              "rule), or use CDI")


def check_buildkit(v: View, rules: HostRules, o: Out) -> None:
    clients = v.facts.docker_clients
    for c in clients:
        if c.buildx.ok:
            o.add("docker.buildkit", OK, f"BuildKit through the buildx plugin of {c.path} "
                  f"({c.buildx.stdout.strip().splitlines()[0] if c.buildx.stdout.strip() else ''})"
                  .replace(" ()", ""))
            return
    for c in clients:
        ver = parse.docker_cli_version(c.version)
        if ver and compat.at_least(ver, rules.buildkit_classic_min) and not compat.at_least(
                ver, rules.buildx_required_from):
            o.add("docker.buildkit", OK, f"BuildKit through `DOCKER_BUILDKIT=1 {c.path} build` "
                  f"(classic CLI {ver}; no buildx plugin)")
            return
    listed = "; ".join(f"{c.path} {parse.docker_cli_version(c.version) or '?'}" for c in clients)
    o.add("docker.no_buildkit", ERROR,
          f"no docker client here can build with BuildKit ({listed or 'no docker CLI'}): CLIs "
          f">= {rules.buildx_required_from} need the buildx plugin",
          "install the buildx plugin (docker-buildx-plugin from Docker's apt repository, or the "
          "binary into ~/.docker/cli-plugins/docker-buildx)")


def check_podman(v: View, rules: HostRules, o: Out) -> None:
    c = v.facts.out(model.PODMAN_INFO)
    if c is None or not c.ran:
        return
    obj = parse.json_object(c.stdout) if c.ok else None
    if obj is None:
        o.add("podman.failed", WARN, "`podman info` failed", "", tail(c.text))
        return
    ver = str((obj.get("version") or {}).get("Version", ""))
    host = obj.get("host") or {}
    o.add("podman.engine", OK, f"Podman {ver} works (cgroup manager "
          f"{host.get('cgroupManager', '?')}, cgroup {host.get('cgroupVersion', '?')})")
    if not v.nvidia:
        return
    if ver and not compat.at_least(ver, rules.podman_cdi_min):
        o.add("podman.old", WARN, f"Podman {ver} predates CDI device support",
              f"use Podman >= {rules.podman_cdi_min} for `--device nvidia.com/gpu=all`")
    elif not cdi_specs(v.facts):
        o.add("podman.no_cdi", WARN, "no NVIDIA CDI spec: Podman cannot pass the GPUs",
              "`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`")


def check_torch(v: View, m: Matrix, o: Out) -> None:
    f = v.facts
    torch = f.python.get("torch", "")
    exe = f.python.get("executable", "python")
    if not torch:
        o.add("torch.not_installed", INFO, f"torch is not installed in this Python ({exe})",
              "`envbuild make` builds environments with their own torch")
        return
    c = f.out(model.TORCH_PROBE)
    probe = torch_probe(f)
    if c is not None and (not c.ok or "error" in probe):
        detail = probe.get("error") or c.error or (tail(c.text, 1) or ("",))[0]
        o.add("torch.import_failed", ERROR, f"`import torch` fails in {exe}: {detail}",
              "run `envbuild explain` on the full error text", tail(c.text, 3))
        return
    if torch_probe_malformed(f):
        o.add("torch.probe_malformed", WARN,
              f"torch {torch} is installed in {exe}, but the torch probe's output is not a JSON "
              "object: its build (CPU, CUDA, ROCm, MPS) is unknown",
              "run `envbuild doctor` again on the host (or `envbuild doctor --save DIR` to "
              "record it anew)", tail(c.text, 1) if c is not None else ())
        return
    kind = {"cpu": "CPU-only build", "rocm": "ROCm build", "unknown": "unknown build"}.get(
        v.torch_flavor, f"CUDA {v.torch_cuda} build")
    if v.darwin:
        kind = ("macOS build" if "mps_available" not in probe else "macOS build, MPS "
                + ("available" if probe["mps_available"] else "not available"))
    o.add("torch.installed", OK, f"torch {torch} ({kind}) in {exe}")
    if v.torch_flavor == "cpu" and (v.gpus or v.nvidia) and not v.darwin:
        o.add("torch.cpu_wheel", WARN, "this torch is a CPU-only build but the host has an "
              "NVIDIA GPU ('Torch not compiled with CUDA enabled')",
              "use the environment recommended below (or reinstall torch from the matching "
              "cuXXX wheel index)")
    elif v.torch_flavor == "cpu" and v.amd_gfx:
        o.add("torch.cpu_wheel", WARN, "this torch is a CPU-only build but the host has an AMD "
              "GPU", "use the environment recommended below")
    elif v.torch_flavor == "cuda" and not v.nvidia:
        o.add("torch.gpu_build_no_gpu", INFO, f"torch {torch} is a CUDA build; without an NVIDIA "
              "GPU it runs on the CPU", "")
    elif v.torch_flavor == "rocm" and v.nvidia and not v.amd:
        o.add("torch.wrong_vendor", WARN, f"torch {torch} is a ROCm build on an NVIDIA host",
              "use the environment recommended below")
    if v.torch_flavor == "cuda" and v.driver and v.torch_cuda:
        how = compat.how_runs(m, v.driver, v.torch_cuda, v.windows_driver)
        if not how:
            o.add("torch.driver_too_old", ERROR,
                  f"torch {torch} (CUDA {v.torch_cuda}) needs "
                  f"{driver_need(m, v.torch_cuda, v.windows_driver)}; the driver is "
                  f"{v.driver_label}: 'CUDA driver version is insufficient for CUDA runtime "
                  "version'",
                  "upgrade the driver, or use the environment recommended below")
    if v.torch_flavor == "cuda" and v.gpus:
        var = installed_variant(v, m, torch, probe)
        for g in v.gpus:
            if g.cc and var is not None and not compat.covers(var, g.cc):
                o.add("torch.arch_missing", ERROR,
                      f"torch {torch} has no kernels for GPU {g.index} {g.name} (compute "
                      f"capability {g.cc}): 'no kernel image is available for execution on the "
                      f"device'; {wheels_for(m, g.cc)}",
                      "use the environment recommended below", [
                          "sass: " + " ".join(var.sass), "ptx: " + (" ".join(var.ptx) or "-")])
        if probe and probe.get("cuda_available") is False and not o.has("torch.arch_missing") \
                and not o.has("torch.driver_too_old") and not o.has(
                    "nvidia.driver_library_mismatch"):
            o.add("torch.cuda_unavailable", ERROR,
                  "torch.cuda.is_available() is False although GPU, driver and wheel match",
                  "check CUDA_VISIBLE_DEVICES and /dev/nvidia* permissions; after a suspend, "
                  "`sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm`",
                  [f"CUDA_VISIBLE_DEVICES={f.env.get('CUDA_VISIBLE_DEVICES', '(unset)')}"])
    if v.torch_flavor == "rocm" and v.amd_gfx:
        tag = "rocm" + torch.partition("+rocm")[2]
        var = compat.variant(m, minor_of(torch), tag)
        gfx = set(compat.gfx_of_variant(m, var)) if var else set()
        if gfx and not set(v.amd_gfx) <= gfx:
            o.add("torch.gfx_missing", ERROR,
                  f"torch {torch} has no code objects for "
                  + ", ".join(sorted(set(v.amd_gfx) - gfx))
                  + " ('hipErrorNoBinaryForGpu')", "use the environment recommended below")


def wheels_for(m: Matrix, cc: str) -> str:
    """Which torch wheels have kernels for cc, in words: the first release and variant with
    them compiled in (and an older one that runs it only through PTX JIT), and the newest."""
    native = compat.covering(m, cc, native=True)
    jit = compat.covering(m, cc)
    if not jit:
        return f"no torch wheel envbuild knows has kernels for compute capability {cc}"
    if not native:
        return (f"only PTX JIT runs it: from torch {jit[0].release} ({jit[0].tag}); no wheel "
                "envbuild knows has its kernels compiled in")
    first, last = native[0], native[-1]
    said = f"the first torch with kernels for it is {first.release} ({first.tag})"
    if jit[0] is not first and jit[0].release != first.release:
        said += f" (from {jit[0].release} ({jit[0].tag}) only through PTX JIT)"
    return said + (f", the newest {last.release} ({last.tag})" if last.release != first.release
                   else "")


def driver_need(m: Matrix, cuda: str, windows: bool) -> str:
    """What a CUDA minor needs of the driver, natively and through minor-version compatibility,
    in words: 'driver >= 550.54.14 natively, or >= 525.60.13 through minor-version
    compatibility'."""
    ga = compat.ga_driver(m, cuda, windows)
    floor = compat.mvc_floor(m, major_of(cuda), windows)
    native = f"driver >= {ga} natively" if ga else "a driver envbuild has no floor for"
    if floor and floor != ga:
        return f"{native}, or >= {floor} through minor-version compatibility"
    if not floor and ga and m.cuda_history_row(minor_of(cuda)) is not None:
        # an old CUDA: NVIDIA's minor-version compatibility table has no row for its major
        return f"{native} (CUDA {major_of(cuda)}.x has no minor-version compatibility)"
    return native


def installed_variant(v: View, m: Matrix, torch: str,
                       probe: Mapping[str, Any]) -> Variant | None:
    var = compat.variant(m, minor_of(torch), rules.cuda_tag(v.torch_cuda))
    if var is not None:
        return var
    flags = str(probe.get("arch_flags") or "").split()
    sass = tuple(rules.cc_of(x) for x in flags if rules.arch_kind(x) == "sass")
    ptx = tuple(rules.cc_of(x) for x in flags if rules.arch_kind(x) == "ptx")
    if not sass and not ptx:
        return None
    return Variant(release=minor_of(torch), tag=rules.cuda_tag(v.torch_cuda), kind="cuda",
                   sass=sass, ptx=ptx)
