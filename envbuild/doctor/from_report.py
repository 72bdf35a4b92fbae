"""Doctor's rules on a collect_env report (pure): the report becomes the facts a doctor run on
that host would have read, as far as the report tells, and doctor's own checks judge them.

What a report does not tell (Docker, /dev nodes, the loader's path order, the kernel module
against the user-space driver, MPS availability) is not judged: `unjudged` says so, instead of a
finding that guesses. Findings only a report shows (two torches, CUDA libraries of two majors, a
system cuDNN beside the wheel's) are checked here, with doctor's severities and the cause codes of
causes.py.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from envbuild.common.record import record
from envbuild.common.versions import major_of, minor_of
from envbuild.core import compat, wsl
from envbuild.core import gpus as gpu_names
from envbuild.doctor import causes, checks_env, checks_host
from envbuild.doctor.collect_env import Report
from envbuild.doctor.model import Cmd, Finding, HostFacts, Recommendation, Request
from envbuild.doctor.recommend import recommend
from envbuild.doctor.view import ERROR, INFO, WARN, Gpu, Out, View, build_view
from envbuild.matrix import Matrix
from envbuild.validator.rules import arch_name

_VERSION = re.compile(r"\d+(?:\.\d+)+")
_MACHINE = re.compile(r"\((x86_64|aarch64|arm64|amd64|ppc64le|s390x|i386)\)\s*$", re.IGNORECASE)
_GFX = re.compile(r"gfx[0-9a-f]{3,4}\b")
_CUDA_SUFFIX = re.compile(r"-cu(\d{2})$")
SOURCE = "collect_env"  # the argv of every output taken from the report


@record
class PastedError:
    """An error message pasted with the report, as `envbuild explain` decoded it."""

    id: str  # the explain signature
    title: str
    cause: str
    fix: str
    line: str  # the pasted line it matched


@record
class ReportDiagnosis:
    findings: list[Finding]
    recommendation: Recommendation
    facts: HostFacts
    view: View
    unjudged: tuple[str, ...]  # what a doctor run on the host checks and the report cannot tell


def _version(text: str) -> str:
    m = _VERSION.search(text)
    return m.group() if m else ""


def system_of(r: Report) -> tuple[str, str]:
    """(system, machine) as platform.system()/machine() would say on the reporting host."""
    os_, plat = r.os.lower(), r.platform.lower()
    if "windows" in os_ or plat.startswith("windows"):
        system = "Windows"
    elif os_.startswith(("mac os", "macos", "mac osx")) or plat.startswith(("macos", "darwin")):
        system = "Darwin"
    else:
        system = "Linux"
    m = _MACHINE.search(r.os)
    machine = m.group(1) if m else next(
        (a for a in ("x86_64", "aarch64", "arm64", "ppc64le") if a in plat), "")
    if system == "Windows" and machine.lower() == "amd64":
        machine = "AMD64"
    return system, machine


def is_wsl(r: Report) -> bool:
    text = f"{r.os} {r.platform}".lower()
    return "microsoft" in text or "wsl2" in text


def is_rocm(r: Report) -> bool:
    return bool(r.rocm_built or r.hip or "+rocm" in r.torch)


def facts_of(r: Report) -> HostFacts:
    """The HostFacts a doctor run would have recorded, as far as the report tells: the torch
    probe's fields, sw_vers and the CPU brand; the rest stays empty (not judged)."""
    system, machine = system_of(r)
    python = {"version": _version(r.python), "executable": "the reporting Python"}
    outputs: dict[str, Cmd] = {}
    if r.torch:
        python["torch"] = r.torch
        probe: dict[str, object] = {}
        built = r.cuda_built.strip()
        if built.lower() in ("none", "could not collect"):
            # collect_env prints torch.version.cuda None as "None" or "Could not collect"
            probe["cuda"] = None
        elif _version(built):
            probe["cuda"] = _version(built)
        if r.rocm_built:
            probe["hip"] = r.rocm_built
        if r.arch_list:  # torch's own warning lists the arch list of the build in use
            probe["arch_flags"] = " ".join(r.arch_list)
        if probe:
            if r.cuda_available is not None:
                probe["cuda_available"] = r.cuda_available
            outputs["torch-probe.json"] = Cmd((SOURCE,), 0, json.dumps(probe))
    if system == "Darwin":
        release = _version(r.os)
        if release:
            outputs["sw_vers.txt"] = Cmd((SOURCE,), 0, f"ProductVersion:\t{release}\n")
        brand = next((c for c in r.cpu if c.lower().startswith("apple")), "")
        if brand:
            outputs["sysctl-cpu_brand.txt"] = Cmd((SOURCE,), 0, brand + "\n")
            # an x86_64 Python on Apple silicon runs under Rosetta 2
            rosetta = "1" if machine == "x86_64" else "0"
            outputs["sysctl-proc_translated.txt"] = Cmd((SOURCE,), 0, rosetta + "\n")
    return HostFacts(system=system, machine=machine, outputs=outputs, python=python)


def view_of(r: Report, m: Matrix) -> View:
    facts = facts_of(r)
    v = build_view(facts, m)
    v.wsl = facts.system == "Linux" and is_wsl(r)
    v.windows = facts.system == "Windows"
    driver = _version(r.driver)
    rocm = is_rocm(r)
    if not driver and r.driver_cuda:
        # torch's "driver on your system is too old (found version 11040)": a driver of CUDA
        # 11.4 is at least 11.4's GA driver; the resolver is asked for no more than that
        driver = compat.ga_driver(m, r.driver_cuda, v.windows_driver)
        if driver:
            v.driver_inferred = (f"its CUDA is {r.driver_cuda}, torch's warning says: 'found "
                                 f"version {_found(r.driver_cuda)}'")
    if not driver and r.cuda_available and v.torch_flavor == "cuda" and v.torch_cuda:
        # CUDA works with this build: the driver runs torch's CUDA, natively or through
        # minor-version compatibility, so it is at least that floor
        floor = compat.mvc_floor(m, major_of(v.torch_cuda), v.windows_driver)
        driver = floor or compat.ga_driver(m, v.torch_cuda, v.windows_driver)
        if driver:
            v.driver_inferred = (f"torch's CUDA {v.torch_cuda} works there, and the report does "
                                 "not give the driver")
    if driver and facts.system != "Darwin":
        v.nvml_driver = driver
        if not v.windows_driver:
            v.kernel_driver = driver
    if not rocm:
        v.gpus = [Gpu(i, name, gpu_names.gpu_cc(m, name)) for i, name in enumerate(r.gpus)]
        if len(r.incompatible_ccs) == 1:  # torch named the compute capability it cannot run
            v.gpus = [g if g.cc else Gpu(g.index, g.name, r.incompatible_ccs[0])
                      for g in v.gpus]
    else:
        v.amd_gfx = sorted({g for name in r.gpus
                            for g in (_GFX.findall(name.lower()) or [gpu_names.gpu_gfx(m, name)])
                            if g})
        v.amd_names = list(r.gpus)
        v.amd = bool(r.gpus)
    v.nvidia = bool(v.gpus or driver) and not rocm and facts.system != "Darwin"
    if v.darwin and facts.machine == "x86_64" and v.apple_silicon:
        v.macos = ""  # a Python under Rosetta sees macOS as 10.16: the real version is unknown
    return v


def _found(cuda: str) -> str:
    """'11.4' -> '11040', as torch prints a driver's CUDA version."""
    major, _, minor = cuda.partition(".")
    return f"{int(major) * 1000 + int(minor or 0) * 10}"


def unjudged(r: Report, v: View) -> tuple[str, ...]:
    """What a doctor run on the host would check that this report cannot tell."""
    out = []
    if "torch" not in r.labels:
        out.append("torch itself (the report starts after its 'PyTorch version' line)")
    if "gpus" not in r.labels and "driver" not in r.labels:
        out.append("the GPUs and the driver (the report is cut before their lines)")
    if v.nvidia and not v.windows_driver:
        out.append("whether the loaded kernel module matches the user-space driver "
                   "(driver/library version mismatch)")
        out.append("the /dev/nvidia* nodes and their permissions")
    if v.nvidia and any(not g.cc for g in v.gpus):
        out.append("the compute capability of " + ", ".join(g.name for g in v.gpus if not g.cc))
    if v.torch_flavor == "cuda" and r.cudnn:
        out.append("which cuDNN the loader picks (LD_LIBRARY_PATH is not in the report)")
    if v.darwin:
        out.append("whether MPS is available (collect_env does not print it)")
    if v.wsl:
        out.append("WSL's /dev/dxg, the libraries in /usr/lib/wsl/lib and the .wslconfig memory "
                   "limit")
    if not v.darwin:
        out.append("the container engine (Docker, BuildKit, "
                   + ("/dev/kfd and /dev/dri)" if v.amd else "the NVIDIA runtime)"))
    if r.uncollected:
        out.append("what collect_env could not collect: " + ", ".join(r.uncollected))
    if r.truncated:
        out.append("the installed packages (the report is cut before them)")
    return tuple(out)


def diagnose_report(r: Report, m: Matrix,
                    errors: tuple[PastedError, ...] = ()) -> ReportDiagnosis:
    """Doctor's findings and recommendation for the host the report comes from; `errors` are
    the error messages pasted with it (explain's matches), a finding each whose cause the
    report's own facts did not already show."""
    v = view_of(r, m)
    o = Out()
    checks_host.check_macos(v, m, o)
    kernel = re.match(r"Linux-(.+?)-(?:aarch64|x86_64|arm64)(?:-|$)", r.platform)
    checks_host.check_platform(v, m, o, "\n".join(r.cpu), kernel.group(1) if kernel else "")
    if v.nvidia:
        checks_host.check_driver_and_gpus(v, m, o)
    check_no_driver(r, v, o)
    check_wsl(r, v, m, o)
    shown = "gpus" in r.labels or "driver" in r.labels or r.cuda_available is not None
    if not (v.nvidia or v.amd or v.apple_silicon) and shown and not o.has("torch.no_driver"):
        o.add("gpu.none", INFO, "no NVIDIA, AMD or Apple GPU in the report: PyTorch there runs on "
              "the CPU", "")
    if "torch" not in r.labels:
        pass  # the report is cut above its torch lines: said under `unjudged`
    elif not r.torch:
        listed = [p for p in r.packages if p.name.lower() in TORCHES]
        o.add("torch.not_imported", ERROR if listed else WARN,
              "collect_env could not import torch ('PyTorch version: N/A')"
              + (f", though {listed[0].name} {listed[0].version} is installed: `import torch` "
                 "fails" if listed else ": it is not installed in that Python, or "
                 "`import torch` fails"),
              "run `python -c 'import torch'` there and give its error to `envbuild explain`",
              [f"[{p.manager}] {p.name}=={p.version}" for p in listed[:3]])
    else:
        checks_env.check_torch(v, m, o)
    check_rocm(r, v, o)
    check_installs(r, v, o)
    check_libraries(r, v, o)
    check_pasted(errors, v, m, o)
    o.items = [_as_report(f, o) for f in o.items if not _superseded(f, o, v)]
    rec = _for_that_host(recommend(v, m, Request()), r, v, m)
    # the leading finding names the cause: findings with a cause code first, in the table's
    # precedence, then the rest by severity (a driver older than envbuild's matrix is no cause
    # of the reporter's failure, a CPU-only torch is)
    findings = sorted(o.items, key=lambda f: (causes.rank(f.id), -f.severity.rank))
    return ReportDiagnosis(findings, rec, v.facts, v, unjudged(r, v))


def _superseded(f: Finding, o: Out, v: View) -> bool:
    """What a report makes moot: a CUDA build's 'runs on the CPU' note once no_driver names the
    cause; the macOS version under Rosetta (the report has only the 10.16 Rosetta shows); a
    driver 'older than the matrix' when only its lower bound is known."""
    return ((f.id == "torch.gpu_build_no_gpu" and o.has("torch.no_driver"))
            or (f.id == "macos.version_unknown" and o.has("macos.rosetta"))
            or (f.id == "nvidia.driver_old" and bool(v.driver_inferred)))


def _as_report(f: Finding, o: Out) -> Finding:
    """A driver older than every CUDA image envbuild knows is an error for doctor (nothing it
    builds runs there) but not a fault of the reporter's setup, which may work: a warning here,
    the recommendation says what runs."""
    from dataclasses import replace

    if f.id == "nvidia.driver_old" and f.severity is ERROR:
        return replace(f, severity=WARN)
    return f


def _for_that_host(rec: Recommendation, r: Report, v: View, m: Matrix) -> Recommendation:
    from dataclasses import replace

    from envbuild.doctor.recommend import checked

    if rec.target == "cpu" and v.driver_inferred and v.nvidia:
        # only a lower bound of the driver is known: the CUDA image for these GPUs, with the
        # driver it needs said, rather than the CPU for a driver that may be newer
        gpus = tuple(arch_name(cc) for cc in v.ccs)
        cuda = checked(Recommendation("cuda", gpus=gpus), m)
        if cuda.target == "cuda":
            return replace(cuda, reason=f"the report does not give the driver ({v.driver_label})"
                           ": check `nvidia-smi` there against what this image needs "
                           "(`envbuild resolve` with these options says)")
    reason = rec.reason.replace("this host", "that host")
    if v.driver_inferred:  # the resolver was asked for the least driver it can be
        reason = reason.replace(f"driver {v.driver} ", f"driver {v.driver_label} ", 1)
    if rec.target == "cpu" and "gpus" not in r.labels and "driver" not in r.labels \
            and r.cuda_available is None:
        reason = ("the report is cut before its GPU and driver lines: the CPU image until they "
                  "are known")
    return replace(rec, reason=reason)


def check_pasted(errors: tuple[PastedError, ...], v: View, m: Matrix, o: Out) -> None:
    """The error messages pasted with the report, in explain's words: a finding each, unless
    a finding of the report's own facts already names that cause. On WSL 2 a libcuda.so that
    cannot be opened is doctor's wsl.libcuda_unversioned (the fix of matrix/wsl2.toml)."""
    seen = {f.cause for f in o.items if f.cause}
    for e in errors:
        if v.wsl and e.id in causes.WSL_LIBCUDA:
            gotcha = str(wsl.table(m, "libcuda_unversioned").get("fix", ""))
            fid = "wsl.libcuda_unversioned"
            fix = e.fix if gotcha in e.fix else f"`{gotcha}`; {e.fix}"
        else:
            fid, fix = f"explain.{e.id}", e.fix
        cause = causes.cause_of(fid)
        if not cause or cause in seen:
            continue
        seen.add(cause)
        o.add(fid, ERROR, f"the paste shows {e.title[:1].lower()}{e.title[1:]}: {e.cause}",
              fix, [e.line[:200]])


def check_no_driver(r: Report, v: View, o: Out) -> None:
    """A CUDA build, and no NVIDIA driver in the report (nvidia-smi found none): an error where
    the report lists GPUs or torch said 'Found no NVIDIA driver', else a warning (a machine
    without a GPU looks the same). On WSL 2 the driver is the Windows one: wsl.no_gpu says so."""
    if v.torch_flavor != "cuda" or v.driver or v.darwin or v.wsl or r.cuda_available:
        return
    if "driver" not in r.labels and not r.no_driver_warning:
        return  # the report is cut before the driver line: not judged
    evidence = (["torch: 'Found no NVIDIA driver on your system'"] if r.no_driver_warning
                else [])
    if "driver" in r.labels:
        evidence.append(f"Nvidia driver version: {r.driver or 'Could not collect'}")
    if r.cuda_available is False:
        evidence.append("Is CUDA available: False")
    sure = bool(r.gpus) or r.no_driver_warning
    o.add("torch.no_driver", ERROR if sure else WARN,
          f"torch {r.torch} is a CUDA {v.torch_cuda} build, and the report shows no NVIDIA "
          "driver" + ("" if r.gpus else " and no GPU") + ": CUDA is unavailable"
          + ("" if sure else " (on a machine without an NVIDIA GPU that is expected: it runs on "
             "the CPU)"),
          "install the NVIDIA driver for the GPU (`nvidia-smi` must work), then check again",
          evidence)


def check_rocm(r: Report, v: View, o: Out) -> None:
    """A ROCm build that finds no GPU, with an AMD GPU listed: what a report cannot see
    (/dev/kfd, the render group, the amdgpu driver) is the likely cause."""
    if v.torch_flavor != "rocm" or r.cuda_available is not False or not r.gpus:
        return
    if o.has("torch.gfx_missing"):
        return
    o.add("torch.cuda_unavailable", ERROR,
          f"torch {r.torch} is a ROCm build and torch.cuda.is_available() is False although the "
          f"report lists {', '.join(r.gpus) or 'an AMD GPU'}",
          "check that this user can open /dev/kfd and /dev/dri/renderD* (`sudo usermod -aG "
          "render,video $USER`, then log in again) and that the amdgpu driver is loaded; run "
          "`envbuild doctor` on that host to see which",
          [f"HIP runtime version: {r.hip or 'Could not collect'}", "Is CUDA available: False"])


def check_wsl(r: Report, v: View, m: Matrix, o: Out) -> None:
    """WSL 2 as a report shows it: the kernel, and the driver nvidia-smi reported."""
    if not v.wsl:
        return
    kernel = next((p for p in (r.platform, r.os) if "microsoft" in p.lower()), r.platform)
    if "wsl2" not in kernel.lower() and "microsoft-standard" not in kernel.lower():
        checks_host.no_gpu_bridge(o, kernel, wsl1=True)  # WSL 1: no GPU at all
        return
    o.add("wsl.detected", INFO, f"WSL2 ({kernel})")
    if v.torch_flavor == "cuda" and not v.driver and not r.cuda_available:
        o.add("wsl.no_gpu", ERROR,
              "WSL2 shows no NVIDIA driver to this distribution: nvidia-smi found none, so CUDA "
              "is unavailable",
              "on Windows, install the current NVIDIA driver (nothing NVIDIA inside the "
              "distribution); in PowerShell `wsl.exe --update`, then `wsl.exe --shutdown`; then "
              "check `nvidia-smi` in WSL")


def _cuda_major_of(p_name: str, version: str) -> int | None:
    m = _CUDA_SUFFIX.search(p_name.lower())
    if m:
        return int(m.group(1))
    if p_name.lower() in ("nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-nvjitlink") \
            and _version(version):
        return major_of(_version(version))
    return None


TORCHES = ("torch", "pytorch", "torch-nightly", "pytorch-nightly")


def _torch_installs(r: Report) -> list[tuple[str, str, str]]:
    """(name, version, where) of every torch the package lines show, one per install: conda
    lists pip's packages too (channel pypi or <pip>), and pip lists conda's pytorch as torch, so
    an entry with the same version as another is the same install seen twice."""
    seen: dict[str, tuple[str, str, str]] = {}
    for p in r.packages:
        if p.name.lower() not in TORCHES:
            continue
        key = f"{p.name.lower().replace('pytorch', 'torch')}=={p.version.partition('+')[0]}"
        via_pip = p.manager != "conda" or p.channel in ("pypi", "<pip>") or p.build in (
            "pypi", "<pip>")
        where = "pip" if via_pip else f"conda ({p.build or p.channel})"
        if key not in seen or (where != "pip" and seen[key][2] == "pip"):
            seen[key] = (p.name, p.version, where)
    return list(seen.values())


def check_installs(r: Report, v: View, o: Out) -> None:
    """Two torches (pip and conda, or torch and a nightly), or a conda CUDA that disagrees with
    the torch in use."""
    installs = _torch_installs(r)
    pip = [p for p in r.packages if p.manager != "conda" and p.name.lower() == "torch"]
    if len(installs) > 1:
        o.add("env.two_torches", ERROR,
              "two torches are installed: " + ", ".join(
                  f"{name} {version} from {where}" for name, version, where in installs)
              + f"; Python imports torch {r.torch or '?'}",
              "keep one: uninstall the others (`pip uninstall` or `conda remove` them, with "
              "their torchvision and torchaudio), then install one torch from one place",
              [f"{name}=={version} ({where})" for name, version, where in installs][:6])
    if v.torch_flavor != "cuda" or not v.torch_cuda:
        return
    for p in r.packages:
        if p.manager != "conda" or p.name.lower() not in ("cudatoolkit", "pytorch-cuda"):
            continue
        toolkit = minor_of(_version(p.version))
        if toolkit and major_of(toolkit) != major_of(v.torch_cuda):
            o.add("env.conda_cuda_mismatch", WARN if pip else ERROR,
                  f"conda's {p.name} {p.version} is CUDA {toolkit}, but torch {r.torch} is built "
                  f"with CUDA {v.torch_cuda}: two CUDA runtimes of different majors in one "
                  "environment",
                  "install torch and its CUDA from one place: the pip wheel brings its own CUDA "
                  f"libraries (remove {p.name}), or conda's pytorch with a matching "
                  f"{p.name}", [f"[conda] {p.name} {p.version} {p.build}".strip()])


def check_libraries(r: Report, v: View, o: Out) -> None:
    """nvidia-* wheels of two CUDA majors, or of another major than torch's; a system cuDNN of
    another major than the wheel's."""
    if v.torch_flavor != "cuda" or not v.torch_cuda:
        return
    majors: Counter[int] = Counter()
    names: dict[int, list[str]] = {}
    for p in r.packages:
        if p.manager == "conda" or not p.name.lower().startswith("nvidia-"):
            continue
        major = _cuda_major_of(p.name, p.version)
        if major is not None:
            majors[major] += 1
            names.setdefault(major, []).append(f"{p.name}=={p.version}")
    torch_major = major_of(v.torch_cuda)
    foreign = sorted(k for k in majors if k != torch_major)
    if foreign:
        o.add("libs.cuda_wheels_mixed", ERROR if len(majors) > 1 else WARN,
              f"pip has CUDA libraries for CUDA {', '.join(map(str, sorted(majors)))} and torch "
              f"{r.torch} is built with CUDA {v.torch_cuda}: a library of another major shadows "
              "the one torch needs ('undefined symbol', 'libcudnn ... not found')",
              f"remove the {', '.join(f'cu{k}' for k in foreign)} packages (`pip uninstall` "
              f"them) or reinstall torch so pip resolves one CUDA major",
              [n for k in foreign for n in names[k][:4]])
    wheel = [p for p in r.packages if p.name.lower().startswith("nvidia-cudnn")]
    system = [c for c in r.cudnn if "site-packages" not in c and "dist-packages" not in c]
    sys_major = {x for c in system if (x := _lib_major(c)) is not None}
    if wheel and sys_major and _version(wheel[0].version):
        wheel_major = major_of(_version(wheel[0].version))
        if any(x != wheel_major for x in sys_major):
            o.add("libs.cudnn_system", WARN,
                  f"a system cuDNN {', '.join(str(x) for x in sorted(sys_major))} is installed "
                  f"beside the wheel's cuDNN {wheel[0].version}: where LD_LIBRARY_PATH puts the "
                  "system one first, torch fails with 'cuDNN version incompatibility'",
                  "keep the system cuDNN's directory off LD_LIBRARY_PATH (often added by a shell "
                  "rc file or conda activate script)", system[:3])


def _lib_major(path: str) -> int | None:
    """libcudnn.so.8.9.2 -> 8; cudnn64_7.dll -> 7; a bare '8.9.2' -> 8."""
    m = re.search(r"libcudnn[a-z_]*\.so\.(\d+)", path) or re.search(r"cudnn64_(\d+)\.dll",
                                                                   path.lower())
    if m:
        return int(m.group(1))
    m = re.fullmatch(r"(\d+)\.\d+(?:\.\d+)*", path.strip())
    return int(m.group(1)) if m else None


