"""The parsed view of raw HostFacts that every check reads (pure), and the findings collector."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from envbuild.common.echo import escaped
from envbuild.common.record import record
from envbuild.common.versions import minor_of, version_key
from envbuild.core import compat, gpus, wsl
from envbuild.doctor import model, parse
from envbuild.doctor.model import Finding, HostFacts, Severity
from envbuild.matrix import Matrix
from envbuild.validator import rules

OK, INFO, WARN, ERROR = Severity.OK, Severity.INFO, Severity.WARN, Severity.ERROR
WSL_LIB = "/usr/lib/wsl/lib"


@record
class Gpu:
    index: int
    name: str
    cc: str = ""
    memory_mib: int = 0


@record(frozen=False)
class View:
    """What the raw facts say, parsed once (a private working structure)."""

    facts: HostFacts
    wsl: bool = False
    darwin: bool = False
    apple_silicon: bool = False
    kernel_driver: str = ""
    nvml_driver: str = ""
    smi: parse.NvSmi | None = None
    smi_text: str = ""
    mismatch: bool = False
    nvidia: bool = False
    gpus: list[Gpu] = field(default_factory=list)
    amd_gfx: list[str] = field(default_factory=list)
    amd_names: list[str] = field(default_factory=list)
    amd: bool = False
    macos: str = ""
    docker_ok: bool = False
    docker_info: dict[str, Any] = field(default_factory=dict)
    torch_flavor: str = ""  # cpu | cuda | rocm | unknown | "" (not installed)
    torch_cuda: str = ""
    gpu_blocked: bool = False  # WSL 2: NVML says "GPU access blocked by the operating system"
    windows: bool = False  # native Windows (a collect_env report from there; doctor runs on Linux)
    driver_inferred: str = ""  # how a report's driver number was inferred ('' when it was read)

    @property
    def platform(self) -> str:
        """The container platform of a Linux host (linux/arm64), '' for macOS and Windows."""
        from envbuild.core.platforms import ALIASES

        if self.facts.system != "Linux" or not self.facts.machine:
            return ""
        return ALIASES.get(self.facts.machine.lower(), f"linux/{self.facts.machine.lower()}")

    @property
    def windows_driver(self) -> bool:
        """The driver's number is a Windows driver's (WSL 2 or Windows): its own CUDA floors."""
        return self.wsl or self.windows

    @property
    def driver(self) -> str:
        """The driver CUDA wheels meet: on WSL the Windows driver nvidia-smi reports."""
        found = [v for v in (self.kernel_driver, self.nvml_driver) if v]
        return min(found, key=version_key) if found else ""

    @property
    def driver_label(self) -> str:
        """The driver as findings name it: '535.104.05', or '>= 470.42.01 (how it was inferred)'
        when a report gave only the driver's CUDA version."""
        return f">= {self.driver} ({self.driver_inferred})" if self.driver_inferred else self.driver

    def driver_cuda(self, m: Matrix) -> str:
        """Newest CUDA the driver runs natively: from the matrix, else what nvidia-smi reports."""
        native = compat.cuda_for_driver(m, self.driver, self.windows_driver) if self.driver else ""
        return native or (self.smi.cuda if self.smi is not None else "")

    @property
    def ccs(self) -> list[str]:
        return sorted({g.cc for g in self.gpus if g.cc}, key=version_key)


def gfx_name(target_version: int) -> str:
    major, minor = target_version // 10000, (target_version // 100) % 100
    step = target_version % 100
    return f"gfx{major}{minor}{step:x}"


def build_view(f: HostFacts, m: Matrix) -> View:
    v = View(facts=f)
    osrelease = (f.file(model.OSRELEASE) or "").lower()
    # matrix/wsl2.toml [detection]: issue forms show kernels without the -WSL2 suffix, so the
    # distribution's name, /dev/dxg and the Windows driver's library mount count as well
    v.wsl = f.system == "Linux" and ("microsoft" in osrelease or "wsl" in osrelease
                                     or "WSL_DISTRO_NAME" in f.env or "/dev/dxg" in f.devices
                                     or WSL_LIB in f.dirs)
    v.darwin = f.system == "Darwin"
    if v.darwin:
        translated = f.out(model.SYSCTL_TRANSLATED)
        cpu = f.out(model.SYSCTL_CPU)
        v.apple_silicon = (f.machine == "arm64" or (translated is not None and translated.ok
                                                      and translated.stdout.strip() == "1")
                           or (cpu is not None and "apple" in cpu.stdout.lower()))
        sv = f.out(model.SW_VERS)
        v.macos = parse.sw_vers(sv.stdout if sv else "").get("ProductVersion", "")
    v.kernel_driver = parse.proc_driver_version(f.file(model.PROC_NVIDIA))
    xml = f.out(model.NVSMI_XML)
    if xml is not None:
        v.smi_text = xml.text
        v.smi = parse.nvsmi_xml(xml.stdout) if xml.ok else None
    v.mismatch = "driver/library version mismatch" in v.smi_text.lower()
    blocked = str(wsl.table(m, "gpu_access_blocked").get("nvml_error", ""))
    v.gpu_blocked = v.wsl and bool(blocked) and blocked.lower() in v.smi_text.lower()
    lib_versions = [parse.lib_version_from_path(r) for p, r in f.resolved.items()
                    if "libnvidia-ml.so" in p and "/stubs/" not in r]
    if v.smi is not None and v.smi.driver:
        v.nvml_driver = v.smi.driver
    elif v.mismatch:
        v.nvml_driver = next((x for x in lib_versions if x), "") or \
            parse.nvml_library_version(v.smi_text)
    if v.kernel_driver and v.nvml_driver and not v.wsl and not rules.version_prefix_matches(
            v.kernel_driver, v.nvml_driver):
        v.mismatch = True
    csv = f.out(model.NVSMI_CSV)
    rows = {r["index"]: r for r in parse.nvsmi_csv(csv.stdout if csv and csv.ok else "")}
    for g in v.smi.gpus if v.smi else ():
        row = rows.get(str(g.index), {})
        cc = rules.cc_of(row.get("cc", "")) or gpus.gpu_cc(m, g.name)
        v.gpus.append(Gpu(g.index, g.name, cc, g.memory_mib))
    v.nvidia = bool(v.kernel_driver or v.gpus or v.mismatch
                    or any(p[0] == "0x10de" for p in f.pci))
    rocm = f.out(model.ROCMINFO)
    agents = parse.rocminfo_gpus(rocm.stdout if rocm and rocm.ok else "")
    v.amd_gfx = [a.name for a in agents] or [gfx_name(x) for x in f.kfd_gfx]
    v.amd_names = [a.marketing or a.name for a in agents] or list(v.amd_gfx)
    v.amd = bool(v.amd_gfx or "/dev/kfd" in f.devices
                 or any(p[0] == "0x1002" and p[1].startswith("0x12") for p in f.pci))
    info = f.out(model.DOCKER_INFO)
    obj = parse.json_object(info.stdout) if info and info.ran else None
    if obj is not None:
        v.docker_info = obj
        v.docker_ok = bool(obj.get("ServerVersion")) and not obj.get("ServerErrors")
    torch = f.python.get("torch", "")
    if torch:
        local = torch.partition("+")[2]
        probe = torch_probe(f)
        if local.startswith("cu"):
            v.torch_flavor, v.torch_cuda = "cuda", rules.cuda_of_tag(local)
        elif local.startswith("rocm"):
            v.torch_flavor = "rocm"
        elif local == "cpu":
            v.torch_flavor = "cpu"
        elif torch_probe_malformed(f):
            v.torch_flavor = "unknown"  # reported as torch.probe_malformed; no build guessed
        elif probe.get("cuda"):
            v.torch_flavor, v.torch_cuda = "cuda", rules.cuda_of_tag(
                rules.cuda_tag(str(probe["cuda"])))
        elif probe.get("hip"):
            v.torch_flavor = "rocm"
        elif probe and "error" not in probe:
            v.torch_flavor = "cpu"
        else:
            v.torch_flavor = default_flavor(m, torch)
            if v.torch_flavor == "cuda":
                rel = m.torch_release(minor_of(torch))
                v.torch_cuda = rules.cuda_of_tag(rel.default_variant) if rel else ""
    return v


def default_flavor(m: Matrix, torch: str) -> str:
    """A PyPI torch without a local tag on Linux is its release's default variant."""
    rel = m.torch_release(minor_of(torch))
    if rel is None:
        return "unknown"
    return "cuda" if rel.default_variant.startswith("cu") else rel.default_variant


def torch_probe(f: HostFacts) -> dict[str, Any]:
    c = f.out(model.TORCH_PROBE)
    if c is None or not c.ok:
        return {}
    obj = parse.json_object(c.stdout)
    return obj or {}


def torch_probe_malformed(f: HostFacts) -> bool:
    """The probe ran but its output is no JSON object (a damaged or hand-edited recording):
    nothing about this torch's build may be read from it."""
    c = f.out(model.TORCH_PROBE)
    return c is not None and c.ok and parse.json_object(c.stdout) is None


def tail(text: str, n: int = 2) -> tuple[str, ...]:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return tuple(lines[-n:])


class Out:
    """Collects findings in the order the checks run."""

    def __init__(self) -> None:
        self.items: list[Finding] = []

    def add(self, id_: str, sev: Severity, message: str, remediation: str = "",
            evidence: tuple[str, ...] | list[str] = ()) -> None:
        # facts come from the host's (or a recording's) command output: no terminal escapes
        self.items.append(Finding(id_, sev, escaped(message), escaped(remediation),
                                  tuple(escaped(e) for e in evidence)))

    def has(self, id_: str) -> bool:
        return any(x.id == id_ for x in self.items)


def stdout_of(f: HostFacts, name: str) -> str:
    c = f.out(name)
    return c.stdout if c is not None and c.ran else ""


def first_resolved(f: HostFacts, soname: str) -> tuple[str, str] | None:
    """Where the loader finds soname first: LD_LIBRARY_PATH dirs, then the ld.so cache."""
    cands = [f"{d}/{soname}" for d in f.env.get("LD_LIBRARY_PATH", "").split(":")
             if d and soname in f.dirs.get(d, ())]
    cands += parse.ldconfig_paths(stdout_of(f, model.LDCONFIG), soname)
    return (cands[0], f.resolved.get(cands[0], cands[0])) if cands else None
