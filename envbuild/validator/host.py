"""The host checks: stdlib only, run in the supervisor (Python, /dev/shm, driver userspace in
the image, CUDA packages and libraries, NVIDIA_REQUIRE_CUDA, Triton, WSL2, macOS)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from .context import Options
from .judges import (
    WSL_LIB,
    Outcome,
    _err,
    driver_packages,
    driver_userspace_verdict,
    is_wsl2,
    judge_cuda_libs,
    judge_cuda_packages,
    judge_macos_native,
    judge_macos_version,
    judge_python,
    judge_require_cuda,
    judge_triton,
    parse_ldconfig,
    parse_ldd,
    parse_mountinfo,
    passed,
    scan_driver_userspace,
    shm_verdict,
    skipped,
    wsl2_verdict,
)
from .probes import macos_facts
from .rules import (
    LINUX_DRIVER_DATA,
    cuda_major_of_dist,
    is_cuda_dist,
    linux_driver_rule,
)


def h_facts_python(spec: dict[str, Any], opts: Options) -> Outcome:
    ev = {"version": platform.python_version(), "implementation": platform.python_implementation(),
          "executable": sys.executable, "prefix": sys.prefix}
    return passed(f"{platform.python_implementation()} {platform.python_version()} "
                  f"({sys.executable})", ev)


def h_expect_python(spec: dict[str, Any], opts: Options) -> Outcome:
    return judge_python(spec, platform.python_version())


def h_shm_size(spec: dict[str, Any], opts: Options) -> Outcome:
    path = "/dev/shm"
    if not os.path.isdir(path):
        return shm_verdict(None, False)
    st = os.statvfs(path)
    total = st.f_frsize * st.f_blocks
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix="envbuild-") as fh:
            block = os.urandom(1 << 20)
            fh.write(block)
            fh.flush()
            fh.seek(0)
            ok = fh.read() == block
        return shm_verdict(total, ok, None if ok else "read back different bytes")
    except OSError as e:
        return shm_verdict(total, False, _err(e))


def h_image_driver(spec: dict[str, Any], opts: Options) -> Outcome:
    if not opts.in_image:
        return skipped("not running as the image's validator (pass --in-image inside the image)")
    mountinfo = ""
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as fh:
        mountinfo = fh.read()
    scan = scan_driver_userspace("/", parse_mountinfo(mountinfo))
    return driver_userspace_verdict(scan, os.environ.get("LD_LIBRARY_PATH", ""))


_NO_DRIVER_RULE: dict[str, list[str]] = {"driver_packages": [], "forbidden_packages": []}


def driver_rule_near(validator_dir: Path) -> dict[str, list[str]]:
    """matrix/wsl2.toml's lists, read from the matrix envbuild ships beside this package: inside
    an installed wheel (envbuild/_data/matrix) or a checkout (matrix/ at the top), the same rule
    as envbuild.common.resources. Never raises: without a readable matrix (or a TOML reader,
    before Python 3.11) the lists are empty."""
    try:
        import tomllib
    except ImportError:
        return _NO_DRIVER_RULE
    package = validator_dir.parent
    for matrix in (package / "_data" / "matrix", package.parent / "matrix"):
        try:
            with open(matrix / "wsl2.toml", "rb") as fh:
                return linux_driver_rule(tomllib.load(fh))
        except (OSError, ValueError):
            continue
    return _NO_DRIVER_RULE


@functools.lru_cache(maxsize=1)
def shipped_linux_driver_rule() -> dict[str, list[str]]:
    """matrix/wsl2.toml's driver_packages and forbidden_packages: the zipapp carries them (its
    LINUX_DRIVER_DATA, written by envbuild when it renders the image); run from envbuild's own
    package (`validate --host`), they are read from the matrix it ships."""
    import pkgutil

    try:
        data = pkgutil.get_data(__package__ or "envbuild.validator", LINUX_DRIVER_DATA)
        if data is not None:
            return dict(json.loads(data))
    except (OSError, ValueError):
        pass
    return driver_rule_near(Path(__file__).resolve().parent)


def wsl2_facts(run_ldconfig: bool = True) -> dict[str, Any]:
    wsl_lib = None
    with contextlib.suppress(OSError):
        wsl_lib = sorted(os.listdir(WSL_LIB))
    kernel = ""
    with contextlib.suppress(OSError), open("/proc/version") as fh:
        kernel = fh.read().strip()[:300]
    mountinfo = ""
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as fh:
        mountinfo = fh.read()
    facts: dict[str, Any] = {
        "dxg": os.path.exists("/dev/dxg"), "wsl_lib": wsl_lib, "kernel": kernel,
        "mounts": sorted(m for m in parse_mountinfo(mountinfo) if m.startswith("/usr/lib/wsl")),
        "ld_library_path": os.environ.get("LD_LIBRARY_PATH", ""), "libcuda": [],
        "driver_packages": []}
    if not is_wsl2(facts):
        return facts
    if run_ldconfig:
        for exe in ("/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"):
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                out = subprocess.run([exe, "-p"], capture_output=True, text=True, timeout=10,
                                     check=False).stdout
                facts["libcuda"] = parse_ldconfig(out)
                break
    with contextlib.suppress(OSError), open("/var/lib/dpkg/status", encoding="utf-8",
                                            errors="replace") as fh:
        facts["driver_packages"] = driver_packages(fh.read(),
                                                   shipped_linux_driver_rule()["driver_packages"])
    return facts


def _package_dir(name: str) -> str | None:
    """The directory of an importable top-level package, without importing it."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if found is None or not found.submodule_search_locations:
        return None
    return os.path.realpath(next(iter(found.submodule_search_locations)))


def cuda_dists() -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    for dist in importlib.metadata.distributions():
        try:
            name = str(dist.metadata["Name"] or "")
        except KeyError:
            continue
        if not is_cuda_dist(name):
            continue
        files = [str(f) for f in (dist.files or []) if str(f).startswith("nvidia/")]
        major, how = cuda_major_of_dist(name, dist.version, files)
        rows.setdefault(name.lower(), {"name": name, "version": dist.version, "major": major,
                                       "how": how})
    return sorted(rows.values(), key=lambda r: str(r["name"]))


def h_cuda_packages(spec: dict[str, Any], opts: Options) -> Outcome:
    return judge_cuda_packages(spec, cuda_dists())


def h_cuda_libs(spec: dict[str, Any], opts: Options) -> Outcome:
    torch_dir = _package_dir("torch")
    if torch_dir is None:
        return judge_cuda_libs(spec, [], "torch", [], "torch is not installed")
    lib = os.path.join(torch_dir, "lib", "libtorch_cuda.so")
    if not os.path.exists(lib):
        return judge_cuda_libs(spec, [], lib, [], "no libtorch_cuda.so: not a CUDA build of torch")
    site = os.path.dirname(torch_dir)
    dirs = [os.path.join(site, "nvidia") + "/", os.path.join(torch_dir, "lib") + "/"]
    try:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=20,
                             check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return judge_cuda_libs(spec, [], lib, dirs, _err(e))
    rows = [(n, os.path.realpath(p) if p else None) for n, p in parse_ldd(out.stdout)]
    return judge_cuda_libs(spec, rows, lib, dirs, None if rows else (out.stderr.strip()[:300]
                                                                    or "ldd printed nothing"))


def h_cuda_require(spec: dict[str, Any], opts: Options) -> Outcome:
    keys = ("NVIDIA_REQUIRE_CUDA", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES")
    return judge_require_cuda(spec, {k: os.environ.get(k) for k in keys})


def triton_facts() -> dict[str, Any]:
    f: dict[str, Any] = {"version": None, "dir": _package_dir("triton"), "ptxas": None,
                         "ptxas_version": None, "error": None}
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        f["version"] = importlib.metadata.version("triton")
    if f["dir"] is None:
        f["version"] = None
        return f
    ptxas = os.path.join(f["dir"], "backends", "nvidia", "bin", "ptxas")
    if os.access(ptxas, os.X_OK):
        f["ptxas"] = ptxas
        try:
            out = subprocess.run([ptxas, "--version"], capture_output=True, text=True,
                                 timeout=20, check=False)
            last = [ln for ln in out.stdout.splitlines() if ln.strip()]
            f["ptxas_version"] = last[-1].strip() if out.returncode == 0 and last else None
            if out.returncode != 0:
                f["error"] = (out.stderr.strip() or f"exit {out.returncode}")[:300]
        except (OSError, subprocess.SubprocessError) as e:
            f["error"] = _err(e)
    return f


def h_triton(spec: dict[str, Any], opts: Options) -> Outcome:
    return judge_triton(spec, triton_facts())


def h_wsl2(spec: dict[str, Any], opts: Options) -> Outcome:
    facts = wsl2_facts()
    if not is_wsl2(facts):
        return wsl2_verdict(facts)
    return wsl2_verdict(facts, shipped_linux_driver_rule()["forbidden_packages"])


def h_macos_native(spec: dict[str, Any], opts: Options) -> Outcome:
    return judge_macos_native(spec, macos_facts())


def h_macos_version(spec: dict[str, Any], opts: Options) -> Outcome:
    return judge_macos_version(spec, macos_facts())
