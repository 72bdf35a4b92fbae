"""Checks of the GPU stack: NVIDIA driver and GPUs, a --cuda request, libraries on the loader
path, WSL2, ROCm and macOS (pure functions of the View and the Matrix)."""

from __future__ import annotations

from collections import Counter

from envbuild.common.versions import branch_of, major_of
from envbuild.core import compat, platforms, wsl
from envbuild.core.compat import HostRules
from envbuild.core.gpu_window import window
from envbuild.doctor import model, parse
from envbuild.doctor.model import Request
from envbuild.doctor.view import (
    ERROR,
    INFO,
    OK,
    WARN,
    WSL_LIB,
    Out,
    View,
    first_resolved,
    stdout_of,
    tail,
    torch_probe,
)
from envbuild.matrix import Matrix
from envbuild.validator import rules
from envbuild.validator.rules import arch_name, cuda_tag


def check_wsl(v: View, m: Matrix, o: Out) -> None:
    f = v.facts
    if not v.wsl:
        return
    release = (f.file(model.OSRELEASE) or "").strip()
    if "/dev/dxg" not in f.devices:
        no_gpu_bridge(o, release, wsl1="wsl2" not in release.lower())
    else:
        where = f" inside a {f.container} container" if f.container else ""
        o.add("wsl.detected", INFO, f"WSL2 ({release or 'kernel release not recorded'}) with GPU "
              f"paravirtualization (/dev/dxg){where}")
    rule = rules.linux_driver_rule(m.extra.get("wsl2"))
    blocked = wsl.table(m, "gpu_access_blocked")
    smi = [f"nvidia-smi: {line}" for line in tail(v.smi_text, 1)] if v.gpu_blocked else []
    installed = [p for p in parse.dpkg_installed(stdout_of(f, model.DPKG))
                 if rules.driver_package(p, rule["driver_packages"]) and wsl.apt_name(p)]
    first = first_resolved(f, "libcuda.so.1")
    outside = first and not first[0].startswith("/usr/lib/wsl/")
    if installed or outside:
        # the packages found, else the matrix's globs: the command removes what was reported
        forbidden = rule["forbidden_packages"]
        never = f" (never {', '.join(forbidden)})" if forbidden else ""
        ev = [f"dpkg: {p} installed" for p in installed[:6]]
        if first:
            ev.append(f"libcuda.so.1 -> {first[1]}")
        o.add("wsl.linux_driver_installed", ERROR,
              "a Linux NVIDIA driver is installed inside WSL: it shadows the Windows driver's "
              f"libraries in {WSL_LIB}"
              + (f" (nvidia-smi: '{blocked.get('nvml_error')}')" if v.gpu_blocked else ""),
              f"purge it ({wsl.purge(installed or rule['driver_packages'])}); in WSL install "
              "only the Windows driver, and for a toolkit only cuda-toolkit-X-Y from the "
              "wsl-ubuntu repository" + never + "; then run `envbuild doctor` again: the "
              "Windows driver decides the CUDA version", ev + smi)
    elif v.gpu_blocked and f.container:
        o.add("wsl.gpu_blocked_in_container", ERROR,
              f"inside this {f.container} container on WSL2 NVML fails with "
              f"'{blocked.get('nvml_error')}': the container did not get the Windows driver's "
              "GPU access, or WSL 2 itself is blocked (doctor cannot see outside the container)",
              "run `envbuild doctor` in the WSL distribution itself (outside the container): "
              "if nvidia-smi works there, the container engine's GPU setup is at fault "
              f"(as in {blocked.get('container', 'a container')}): update the NVIDIA Container "
              "Toolkit and restart Docker, or use Docker Desktop's WSL 2 backend (supported by "
              "NVIDIA), and start the container with `--gpus all`; if it fails there too, "
              "follow what doctor says there",
              [*smi, f"container: {f.container}"])
    elif v.gpu_blocked:
        checklist = wsl.blocked_checklist(m, release)
        o.add("wsl.gpu_blocked", ERROR,
              f"NVML fails with '{blocked.get('nvml_error')}' although no Linux NVIDIA driver is "
              "installed here: Windows does not share this GPU with WSL2, for a reason doctor "
              "cannot see from inside WSL",
              "check, in this order: " + (wsl.numbered(checklist) if checklist else
                                          "the GPU's driver model on Windows (WDDM, not TCC), "
                                          "the WSL kernel, `wsl.exe --update`"),
              [*smi, f"/proc/sys/kernel/osrelease: {release or 'not recorded'}"])
    elif first:
        unversioned = first_resolved(f, "libcuda.so")
        if unversioned is None:
            gotcha = wsl.table(m, "libcuda_unversioned")
            o.add("wsl.libcuda_unversioned", WARN,
                  f"libcuda.so.1 comes from the Windows driver ({first[0]}), but the loader "
                  f"cache has no unversioned libcuda.so, though {WSL_LIB} holds it: code that "
                  "loads 'libcuda.so' (cuDNN, Triton, ctypes) fails with "
                  f"'{gotcha.get('error', 'libcuda.so: cannot open shared object file')}'",
                  f"`{gotcha.get('fix', '')}` (in ~/.bashrc, or the environment's activate "
                  "script)", [f"ldconfig -p: libcuda.so.1 => {first[0]}, no libcuda.so"])
        else:
            o.add("wsl.libcuda", OK, f"libcuda.so.1 comes from the Windows driver ({first[0]})")
    if len(v.gpus) > 1:
        o.add("wsl.nccl_multi_gpu", WARN,
              f"{len(v.gpus)} GPUs under WSL2: NCCL cannot read WSL's virtual PCI topology, "
              "so multi-GPU NCCL jobs fail or hang",
              "train on one GPU under WSL, or use native Linux for multi-GPU jobs")
    check_wsl_memory(v, m, o)


def no_gpu_bridge(o: Out, release: str, wsl1: bool) -> None:
    """WSL without the GPU bridge (/dev/dxg), WSL 1 above all: the Windows GPU is not shared."""
    o.add("wsl.no_gpu_bridge", ERROR,
          f"WSL{'1' if wsl1 else '2'} without /dev/dxg: the Windows GPU is not shared with "
          "this distribution",
          "in PowerShell on Windows run `wsl.exe --set-version <distro> 2` (`wsl.exe -l -v` "
          "lists the distribution names) and `wsl.exe --update`, and install "
          "the current Windows NVIDIA driver (nothing NVIDIA inside the distribution)",
          [f"/proc/sys/kernel/osrelease: {release}"])


def check_wsl_memory(v: View, m: Matrix, o: Out) -> None:
    """The VM's RAM (the .wslconfig limit, as /proc/meminfo shows it inside WSL2) against the
    GPUs' memory, and the pinned-memory / NCCL limits of WSL2 (matrix/wsl2.toml)."""
    cfg = wsl.table(m, "wslconfig")
    where = f"`{cfg.get('memory_key', 'memory=')}` in {cfg.get('file', '.wslconfig')}"
    default = f"; WSL's default is {cfg['memory_default']}" if cfg.get("memory_default") else ""
    mem = parse.meminfo_kib(v.facts.file(model.MEMINFO))
    if mem:
        gib = mem / 1024 / 1024
        gpu_gib = sum(g.memory_mib for g in v.gpus) / 1024
        if gpu_gib and gib < gpu_gib:
            o.add("wsl.memory", WARN,
                  f"the WSL2 VM has {gib:.1f} GiB of RAM (its limit, {where}{default}), less "
                  f"than the GPUs' {gpu_gib:.0f} GiB: loading checkpoints and DataLoader "
                  "workers can be OOM-killed",
                  f"raise {where} (and `swap=`), then "
                  f"{cfg.get('apply', '`wsl.exe --shutdown` in PowerShell on Windows')} "
                  "and start the distribution again")
        else:
            o.add("wsl.memory", INFO, f"the WSL2 VM has {gib:.1f} GiB of RAM (its limit, "
                  f"{where}{default})")
    said, advice = wsl.limits(m)
    if v.gpus and said:
        o.add("wsl.limits", INFO, f"WSL2 limits: {said}", advice)


def check_nvidia(v: View, m: Matrix, rules: HostRules, o: Out) -> None:
    f = v.facts
    if not v.nvidia and not (v.wsl and v.smi_text):
        return
    if v.mismatch:
        o.add("nvidia.driver_library_mismatch", ERROR,
              f"the loaded NVIDIA kernel module is {v.kernel_driver or '?'} but the user-space "
              f"driver libraries are {v.nvml_driver or 'another version'}: NVML and CUDA "
              "refuse to start",
              "reboot (or unload and reload the nvidia kernel modules); then stop unattended "
              "upgrades from replacing the driver underneath a running module: "
              "`sudo apt-mark hold` the driver packages",
              [f"/proc/driver/nvidia/version: {v.kernel_driver}", *tail(v.smi_text)])
    if "nouveau" in f.modules and not v.wsl:
        o.add("nvidia.nouveau", ERROR,
              "the nouveau kernel module is loaded: the NVIDIA driver cannot bind the GPU",
              "blacklist nouveau (`blacklist nouveau` + `options nouveau modeset=0` in "
              "/etc/modprobe.d/), rebuild the initramfs and reboot", ["/sys/module/nouveau"])
    if not v.kernel_driver and not v.wsl:
        o.add("nvidia.no_driver", ERROR,
              "an NVIDIA GPU is present but no NVIDIA kernel driver is loaded "
              "(/proc/driver/nvidia/version is missing)",
              "install the NVIDIA driver (a branch that supports the CUDA you want) and reboot")
    xml = f.out(model.NVSMI_XML)
    if xml is None or xml.error.endswith("not found"):
        if v.kernel_driver:
            o.add("nvidia.smi_missing", WARN,
                  "nvidia-smi is not installed: GPU models and compute capabilities are unknown",
                  "install the driver's utilities package (e.g. nvidia-utils-<branch>)")
    elif not xml.ok and not v.mismatch and not v.gpu_blocked:
        o.add("nvidia.smi_failed", ERROR, "nvidia-smi cannot talk to the NVIDIA driver",
              "check `dmesg | grep -i nvrm` for the driver's own error; reinstall the driver "
              "matching the running kernel and reboot", tail(xml.text) or (xml.error,))
    check_driver_and_gpus(v, m, o)
    check_nvidia_gpu_state(v, o)
    check_nvidia_nodes(v, rules, o)


def check_driver_and_gpus(v: View, m: Matrix, o: Out) -> None:
    """The driver against the CUDA releases and the GPUs' driver windows, and the GPUs: what a
    host's probes and a collect_env report both tell."""
    driver = v.driver
    if driver:
        native = compat.cuda_for_driver(m, driver, v.windows_driver)
        reported = f" (nvidia-smi reports CUDA {v.smi.cuda})" if v.smi and v.smi.cuda else ""
        side = "Windows driver" if v.windows_driver else "driver"
        named = v.driver_label
        if native:
            o.add("nvidia.driver", OK,
                  f"NVIDIA {side} {named} runs CUDA <= {native} natively{reported}")
        else:
            oldest = m.cuda[0] if m.cuda else None
            need = (f" (CUDA {oldest.version} needs >= "
                    f"{compat.ga_driver(m, oldest.version, v.windows_driver)})" if oldest
                    else "")
            choice = compat.choose_cuda(m, driver, v.ccs, v.windows_driver)
            how = ("CUDA wheels run on it only through minor-version compatibility"
                   if choice else "no CUDA wheel envbuild knows runs on it")
            o.add("nvidia.driver_old", WARN if choice else ERROR,
                  f"NVIDIA {side} {named}{reported} is older than every CUDA release in the "
                  f"matrix{need}: {how}",
                  "install a current driver branch (see `envbuild matrix show cuda`)")
    for g in v.gpus:
        if not g.cc:
            o.add("nvidia.cc_unknown", WARN,
                  f"GPU {g.index} ({g.name}): compute capability unknown (not in gpus.toml, "
                  "and this nvidia-smi has no compute_cap field)",
                  "the recommendation below does not check arch coverage for it")
    if driver and not v.windows_driver and not v.driver_inferred:  # a lower bound is no driver
        check_driver_window(v, m, driver, o)
    if v.gpus:
        counts = Counter((g.name, g.cc, round(g.memory_mib / 1024)) for g in v.gpus)
        desc = "; ".join(f"{n} x {name} (compute capability {cc or '?'}"
                         + (f", {mem} GiB)" if mem else ")")
                         for (name, cc, mem), n in counts.items())
        o.add("nvidia.gpus", OK, desc)


def check_driver_window(v: View, m: Matrix, driver: str, o: Out) -> None:
    """The resolver's GPU <-> driver window: a driver outside a GPU's window cannot drive it
    (a Pascal GPU on R590, a Blackwell GPU on R560)."""
    seen: set[str] = set()
    for g in v.gpus:
        if not g.cc or g.cc in seen:
            continue
        seen.add(g.cc)
        w = window(m, g.cc, f"{g.name} ({arch_name(g.cc)})")
        if w is None or w.admits(driver):
            continue
        given = f"driver {driver} (R{branch_of(driver)})"
        driven = f"{w.arch_name} GPUs are driven by {w.describe()}"
        if w.too_new(driver):
            o.add("nvidia.driver_too_new_for_gpu", ERROR,
                  f"{given} does not drive {w.label}: {driven}",
                  f"install an R{w.last_branch} driver (the last branch for {w.arch_name})")
        else:
            o.add("nvidia.driver_too_old_for_gpu", ERROR,
                  f"{given} is older than the first branch that knows {w.label}: {driven}",
                  f"install a driver >= {w.first_driver}")


def check_nvidia_gpu_state(v: View, o: Out) -> None:
    for g in v.smi.gpus if v.smi else ():
        label = f"GPU {g.index} ({g.name})"
        if g.mig == "Enabled":
            o.add("nvidia.mig", INFO, f"{label}: MIG is enabled; each MIG slice is a separate, "
                  "smaller CUDA device", "size workloads for the slice; `nvidia-smi -L` lists them")
        if g.persistence == "Disabled" and not v.wsl:
            o.add("nvidia.persistence_off", INFO,
                  f"{label}: persistence mode is off (slower first CUDA call)",
                  "enable nvidia-persistenced (`sudo systemctl enable --now nvidia-persistenced`)")
        if g.pcie_width_max and g.pcie_width and g.pcie_width < g.pcie_width_max:
            o.add("nvidia.pcie_degraded", WARN,
                  f"{label}: PCIe link runs at x{g.pcie_width} of x{g.pcie_width_max}",
                  "reseat the card or riser; check BIOS PCIe settings")
        if g.compute_mode and g.compute_mode not in ("Default", "N/A"):
            o.add("nvidia.compute_mode", WARN,
                  f"{label}: compute mode {g.compute_mode}: only one process may use it",
                  f"`sudo nvidia-smi -i {g.index} -c DEFAULT` unless the exclusivity is wanted"
                  )
        if g.remap_failure or g.remap_pending:
            o.add("nvidia.row_remap", ERROR if g.remap_failure else WARN,
                  f"{label}: memory row remapping {'failed' if g.remap_failure else 'pending'}",
                  "reset the GPU (pending) or drain the node and RMA the GPU (failed)")


def check_nvidia_nodes(v: View, rules: HostRules, o: Out) -> None:
    """Missing nodes, and permission on the nodes a CUDA process opens ([doctor]
    cuda_device_nodes): not /dev/nvidia-caps (MIG capabilities, root-only by design)."""
    f = v.facts
    if v.wsl or not v.kernel_driver:
        return
    missing = [n for n in ("/dev/nvidiactl", *(f"/dev/nvidia{g.index}" for g in v.gpus))
               if n not in f.devices]
    if missing:
        o.add("nvidia.dev_nodes", ERROR, "NVIDIA device nodes are missing: " + ", ".join(missing),
              "run `sudo nvidia-modprobe -c 0` (or restart the driver service)")
    elif "/dev/nvidia-uvm" not in f.devices:
        o.add("nvidia.uvm_missing", WARN,
              "/dev/nvidia-uvm is missing: CUDA inside containers cannot start",
              "`sudo nvidia-modprobe -u -c 0` (or run any CUDA program once on the host)")
    denied = sorted(p for p, d in f.devices.items() if rules.is_cuda_node(p) and not d.rw)
    if denied:
        group = {p: f.group_names.get(f.devices[p].gid, str(f.devices[p].gid)) for p in denied}
        o.add("nvidia.device_permission", ERROR,
              "this user cannot open " + ", ".join(denied) + ", which every CUDA process opens",
              f"the driver's default is mode {rules.nvidia_device_mode} (NVreg_DeviceFileMode); "
              "with a restricted mode "
              f"add the user to the owning group (`sudo usermod -aG "
              f"{','.join(sorted(set(group.values())))} $USER`, then log in again), or fix the "
              "udev rule / modprobe options that set it",
              [f"{p}: mode {f.devices[p].mode & 0o7777:04o}, group {group[p]}" for p in denied])


def check_request(v: View, m: Matrix, req: Request, o: Out) -> None:
    if not req.cuda:
        return
    cuda = req.cuda
    if not v.driver:
        o.add("cuda.request_no_gpu", WARN,
              f"CUDA {cuda} cannot run on this host: no usable NVIDIA driver",
              "images for it can still be built here and run on a GPU host")
        return
    how = compat.how_runs(m, v.driver, cuda, v.windows_driver)
    ga = compat.ga_driver(m, cuda, v.windows_driver)
    floor = compat.mvc_floor(m, major_of(cuda), v.windows_driver)
    native = v.driver_cuda(m)
    if how == "native":
        o.add("cuda.request_ok", OK, f"driver {v.driver} runs CUDA {cuda} natively "
              f"(needs >= {ga})")
    elif how == "mvc":
        o.add("cuda.request_mvc", WARN,
              f"driver {v.driver} runs CUDA {cuda} only through minor-version compatibility "
              f"(>= {floor}); CUDA {cuda} itself shipped with {ga}: PTX built by a newer "
              "toolchain (Triton, torch.compile) cannot be JIT-compiled",
              f"install a driver >= {ga} for full CUDA {cuda} support")
    else:
        supports = f"CUDA <= {native}" if native else "no CUDA release envbuild knows"
        o.add("nvidia.driver_too_old", ERROR,
              f"driver {v.driver} is too old for CUDA {cuda}: it needs >= {ga}, or >= {floor} "
              f"through minor-version compatibility; this driver supports {supports}",
              f"install a driver >= {branch_of(floor) if floor else ga}, or use the CUDA "
              "version recommended below")
    tag = cuda_tag(cuda)
    if not any(v2.tag == tag for v2 in m.variants):
        o.add("cuda.request_no_wheels", INFO, f"no torch release has {tag} wheels",
              "torch wheels exist for CUDA " + ", ".join(compat.wheel_cudas(m)))
    elif v.ccs and compat.newest_release_with(m, tag, v.ccs) is None:
        o.add("cuda.request_arch", ERROR,
              f"no torch {tag} wheel has kernels for compute capability "
              + ", ".join(v.ccs), "use the CUDA version recommended below")


def check_libs(v: View, m: Matrix, o: Out) -> None:
    f = v.facts
    path = [d for d in f.env.get("LD_LIBRARY_PATH", "").split(":") if d]
    stubs = [d for d in path if "stubs" in d and any(n.startswith("libcuda.so")
                                                    for n in f.dirs.get(d, ()))]
    cache = [p for p in parse.ldconfig_paths(stdout_of(f, model.LDCONFIG), "libcuda.so.1")
             if "/stubs/" in p]
    if stubs or cache:
        o.add("libs.stub_libcuda", ERROR,
              "the CUDA stub libcuda (for linking only) is on the runtime library path: CUDA "
              "fails with 'CUDA driver is a stub library' or a misleading 'driver insufficient'",
              "remove the stubs directory from LD_LIBRARY_PATH (and from /etc/ld.so.conf.d, "
              "then `sudo ldconfig`)", [*(f"LD_LIBRARY_PATH: {d}" for d in stubs), *cache])
    if v.torch_flavor != "cuda":
        return
    for lib, id_, what in (("libcudnn", "libs.cudnn_shadow", "cuDNN"),
                           ("libnvJitLink", "libs.nvjitlink_shadow", "nvJitLink")):
        hits = [f"{d}: {', '.join(n for n in f.dirs.get(d, ()) if n.startswith(lib))}"
                for d in path if "site-packages/nvidia" not in d
                and any(n.startswith(lib) for n in f.dirs.get(d, ()))]
        if hits:
            o.add(id_, WARN,
                  f"LD_LIBRARY_PATH puts a system {what} ahead of the one the pip torch wheel "
                  "brings: expect 'cuDNN version incompatibility' / 'undefined symbol "
                  "__nvJitLink...' errors",
                  "drop that directory from LD_LIBRARY_PATH (often added by a shell rc file or "
                  "conda activate script)", hits)


def check_rocm(v: View, m: Matrix, o: Out) -> None:
    f = v.facts
    if not v.amd:
        return
    if "/dev/kfd" not in f.devices:
        o.add("rocm.no_kfd", ERROR, "an AMD GPU is present but /dev/kfd is missing: the amdgpu "
              "kernel driver (with KFD) is not loaded",
              "install the amdgpu-dkms driver from AMD's ROCm repository and reboot")
    else:
        nodes = {p: d for p, d in f.devices.items()
                 if p == "/dev/kfd" or p.startswith("/dev/dri/renderD")}
        denied = sorted(p for p, d in nodes.items() if not d.rw)
        if denied:
            need = sorted({f.group_names.get(nodes[p].gid, str(nodes[p].gid)) for p in denied})
            mine = ", ".join(f.group_names.get(g, str(g)) for g in f.groups) or "none"
            o.add("rocm.device_permission", ERROR,
                  f"this user cannot open {', '.join(denied)} (group {', '.join(need)}; "
                  f"your groups: {mine})",
                  f"`sudo usermod -aG {','.join(need)} $USER` and log in again; in containers "
                  "pass --device=/dev/kfd --device=/dev/dri --group-add video --group-add render")
        else:
            o.add("rocm.devices", OK, f"/dev/kfd and {len(nodes) - 1} render node(s) are usable")
    rocm = f.out(model.ROCMINFO)
    if rocm is not None and rocm.ran and not rocm.ok:
        o.add("rocm.rocminfo_failed", WARN, "rocminfo failed", "", tail(rocm.text))
    if v.amd_gfx:
        counts = Counter(zip(v.amd_names, v.amd_gfx, strict=True))
        o.add("rocm.gpus", OK, "; ".join(f"{n} x {name} ({gfx})"
                                         for (name, gfx), n in counts.items()))
        if compat.choose_rocm(m, set(v.amd_gfx)) is None:
            o.add("rocm.gfx_unsupported", ERROR,
                  "no ROCm torch wheel is built for " + ", ".join(sorted(set(v.amd_gfx))),
                  "HSA_OVERRIDE_GFX_VERSION can force a near target (unsupported, may crash); "
                  "otherwise use --target cpu")


def check_macos(v: View, m: Matrix, o: Out) -> None:
    f = v.facts
    if not v.darwin:
        return
    cpu = stdout_of(f, model.SYSCTL_CPU).strip()
    translated = stdout_of(f, model.SYSCTL_TRANSLATED).strip() == "1"
    if translated:
        seen = (m.extra.get("mps") or {}).get("rosetta", {}).get("seen_macos", "")
        sees = (f" (torch sees macOS as {seen}, so MPS features gated on a newer macOS fail)"
                if seen else "")
        o.add("macos.rosetta", ERROR,
              f"this Python is an x86_64 build running under Rosetta 2 on {cpu or 'Apple silicon'}"
              f"{sees}: pip has only old x86_64 macOS torch wheels for it",
              "install an arm64 (or universal2) Python, e.g. python.org's installer or Homebrew "
              "in /opt/homebrew, and recreate the environment with it",
              [f"sysctl.proc_translated: 1; platform.machine: {f.machine}"])
    elif not v.apple_silicon:
        o.add("macos.intel", WARN, f"Intel Mac ({cpu or f.machine or 'x86_64'}): PyTorch has no "
              "MPS or GPU "
              "support here", "environments here run on the CPU")
    else:
        o.add("macos.apple_silicon", OK, f"{cpu or 'Apple silicon'} (arm64)")
    if not v.apple_silicon:
        return
    newest = compat.newest_torch(m)
    newest_floor = compat.mps_floor(m, newest.version) if newest is not None else ""
    usable = compat.mps_torch(m, v.macos) if v.macos else None
    torch = f.python.get("torch", "")
    probe = torch_probe(f)
    if v.macos and torch and probe.get("mps_built") and probe.get("mps_available") is False \
            and not translated:
        floor = compat.mps_floor(m, torch)
        if floor and not compat.at_least(v.macos, floor):
            instead = (f"use torch {usable.version} (`envbuild make --target mps --torch "
                       f"{usable.version}`)" if usable is not None else "use --target cpu")
            upgrade = (f"upgrade macOS to >= {newest_floor} for torch {newest.version}"
                       if newest is not None and newest_floor else "upgrade macOS")
            # the floor is the matrix's (matrix/mps.toml, torch.toml); torch's own error text
            # may name an older one (pytorch/pytorch#164943: a 2.10 nightly said 13.0+)
            o.add("macos.mps_unavailable", ERROR,
                  f"torch {torch} has MPS built but not available: macOS {v.macos} is older "
                  f"than its MPS floor, macOS {floor} (envbuild's matrix; torch's own error "
                  "message may name an older floor)", f"{upgrade}, or {instead}",
                  ["torch.backends.mps.is_built(): True, is_available(): False"])
        else:
            meets = (f"although macOS {v.macos} meets its MPS floor ({floor})" if floor else
                     f"on macOS {v.macos} (envbuild knows no MPS floor for torch {torch})")
            o.add("macos.mps_unavailable", WARN,
                  f"torch {torch} has MPS built but not available {meets}",
                  "run Python natively on the Mac (not in a VM, container or sandbox) and check "
                  "`torch.backends.mps.is_available()` again",
                  ["torch.backends.mps.is_built(): True, is_available(): False"])
        return
    if not v.macos:
        o.add("macos.version_unknown", WARN, "sw_vers gave no macOS version", "")
    elif translated and usable is not None:
        # torch under Rosetta sees macOS 10.16 (macos.rosetta): the floor is met only natively
        o.add("macos.mps", INFO, f"macOS {v.macos} meets torch {usable.version}'s MPS floor "
              f"(macOS {compat.mps_floor(m, usable.version)}) for an arm64 Python only: this "
              "x86_64 Python under Rosetta gets no MPS (see macos.rosetta)", "")
    elif newest is not None and usable is not None and usable.version == newest.version:
        o.add("macos.mps", OK, f"macOS {v.macos}: MPS works with torch {newest.version} "
              f"(needs macOS >= {newest_floor})")
    elif usable is not None and newest is not None:
        o.add("macos.mps_too_old", WARN,
              f"macOS {v.macos} is older than torch {newest.version}'s MPS floor "
              f"({newest_floor}): the newest torch with MPS here is {usable.version}",
              f"upgrade macOS to >= {newest_floor}, or use torch {usable.version}")
    else:
        o.add("macos.mps_too_old", ERROR,
              f"macOS {v.macos} is older than every torch release's MPS floor",
              "upgrade macOS, or use --target cpu")


def lscpu_cores(text: str) -> list[tuple[str, int]]:
    """(core name, how many) per CPU type of an `lscpu` output (flat or tree layout): 'Model
    name' with the 'Core(s) per socket' x 'Socket(s)' (or 'Core(s) per cluster') after it."""
    out: list[tuple[str, int]] = []
    name, cores, sockets = "", 0, 1
    for line in [*text.splitlines(), "Model name: "]:
        key, _, value = line.strip().partition(":")
        key, value = key.strip().lower(), value.strip()
        if key == "model name":
            if name:
                out.append((name, cores * sockets))
            name, cores, sockets = value, 0, 1
        elif key in ("core(s) per socket", "core(s) per cluster") and value.isdigit():
            cores = int(value)
        elif key in ("socket(s)", "cluster(s)") and value.isdigit():
            sockets = int(value)
    return [(n, c) for n, c in out if n and n != "-"]


def check_platform(v: View, m: Matrix, o: Out, lscpu: str, kernel: str) -> None:
    """An Arm Linux host: its platform, its CPU (named as the module's when its GPU pairs with
    it: Grace beside a GH200), and a Jetson's L4T kernel."""
    if not platforms.foreign(v.platform):
        return
    from envbuild.core import gpus as gpu_rows

    cores = lscpu_cores(lscpu)
    cpu = " + ".join(f"{n} x {name}" if n else name for name, n in cores) or "not reported"
    paired = {}
    for g in v.gpus:
        row = gpu_rows.lookup(m, g.name, "nvidia") if g.name else None
        if row is not None and row.cpu_core:
            paired[row.cpu_core.lower()] = (row.cpu, row.name)
    names = [paired[name.lower()] for name, _ in cores if name.lower() in paired]
    if names:
        cpu += f": {names[0][0]}, the CPU of the {names[0][1]}"
    jetson = "tegra" in kernel.lower()
    detail = f"{v.platform} ({v.facts.machine}); CPU: {cpu}" + (
        f"; kernel {kernel}" if kernel else "") + (
        " (an L4T kernel: a Jetson)" if jetson else "")
    o.add("host.platform", INFO, detail, "", [f"lscpu: {name} x {n}" for name, n in cores][:4])
