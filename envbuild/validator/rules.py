"""The rules envbuild's core and its validator share, each in one place (stdlib only; runs on
Python 3.9+ inside images): versions and local tags, version codes (cuDNN 90100 -> 9.1.0,
NCCL), and GPU architectures (one sm_/compute_/gfx parser, arch coverage with the 'a'/'f'
suffix rules)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

# ---------------------------------------------------------------------------------------------
# Pure decisions: Linux driver packages (the globs: matrix/wsl2.toml driver_packages)


LINUX_DRIVER_DATA = "linux-driver.json"  # linux_driver_rule's answer, in the zipapp


def linux_driver_rule(wsl2: Any) -> dict[str, list[str]]:
    """From matrix/wsl2.toml (parsed) [do_not_install_linux_driver]: driver_packages (dpkg
    globs of an NVIDIA Linux driver) and forbidden_packages (never to install in WSL 2)."""
    rule = (wsl2 or {}).get("do_not_install_linux_driver") or {}
    return {k: [str(x) for x in rule.get(k) or []] for k in ("driver_packages",
                                                              "forbidden_packages")}


def driver_package(name: str, globs: Sequence[str]) -> bool:
    """Whether a dpkg package name (an ':arch' suffix ignored) is one of the globs."""
    import fnmatch

    base = name.split(":", 1)[0]
    return any(fnmatch.fnmatchcase(base, g) for g in globs)


# ---------------------------------------------------------------------------------------------
# Pure decisions: versions


def public_version(version: str) -> str:
    return version.split("+", 1)[0].strip()


def local_tag(version: str) -> str | None:
    return version.split("+", 1)[1].strip() if "+" in version else None


def version_parts(version: str) -> list[int]:
    parts: list[int] = []
    for piece in re.split(r"[.\-+]", version.strip()):
        m = re.match(r"\d+", piece)
        if not m:
            break
        parts.append(int(m.group()))
    return parts


def major_minor(version: str | None) -> str | None:
    if not version:
        return None
    parts = version_parts(version)
    return f"{parts[0]}.{parts[1]}" if len(parts) >= 2 else None


def version_prefix_matches(expected: str, actual: str) -> bool:
    """'9.1.0.70' vs '9.1.0' compares 9.1.0: as many parts as both have."""
    e, a = version_parts(expected), version_parts(actual)
    n = min(len(e), len(a))
    return n > 0 and e[:n] == a[:n]


def version_code_str(code: int) -> str:
    """The integer version codes cuDNN and NCCL report: major*10000 + minor*100 + patch from
    cuDNN 9 / NCCL 2.9 on (90100 -> '9.1.0', 22105 -> '2.21.5'), major*1000 + minor*100 +
    patch before (8902 -> '8.9.2', 2708 -> '2.7.8')."""
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def cudnn_version_str(code: int | None) -> str | None:
    """torch.backends.cudnn.version(): 8902 -> '8.9.2' (cuDNN 8), 90100 -> '9.1.0' (cuDNN 9+)."""
    return None if code is None else version_code_str(int(code))


def nccl_version_str(version: Any) -> str | None:
    """torch.cuda.nccl.version(): a tuple (2, 21, 5) on current torch, an int (2708) on old."""
    if version is None:
        return None
    if isinstance(version, (tuple, list)):
        return ".".join(str(v) for v in version[:3])
    return version_code_str(int(version))


# A spec made from what a host has installed names only the family ('cuda'): any wheel of that
# family's local tags fits it (torch 2.11.0+cu130 from PyPI has no local tag in its metadata).
_VARIANT_FAMILIES = {"cuda": r"cu\d+", "rocm": r"rocm\d[\w.]*", "cpu": r"cpu(?:\.[\w.]+)?"}


def local_tag_matches_variant(tag: str, variant: str) -> bool:
    if tag == variant or tag.startswith(variant + "."):
        return True
    family = _VARIANT_FAMILIES.get(variant)
    return bool(family and re.fullmatch(family, tag))


_PIN_RE = re.compile(r"^\s*torch\s*(?:\[[^\]]*\])?\s*\(?\s*===?\s*([^\s;,()]+)")


def torch_pin_from_requires(requires: Sequence[str] | None) -> str | None:
    """The exact torch version a companion wheel pins ('torch==2.5.1', 'torch (==2.5.1)')."""
    for req in requires or ():
        if re.search(r";.*\bextra\s*==", req):  # optional-extra requirements are not pins
            continue
        m = _PIN_RE.match(req)
        if m:
            return m.group(1)
    return None


def pin_matches(pin: str, installed: str) -> bool:
    """PEP 440 `==X` without a local label matches any local build of X."""
    if "+" in pin:
        return pin == installed
    return public_version(pin) == public_version(installed)


# ---------------------------------------------------------------------------------------------
# Pure decisions: architecture coverage


def parse_cc(cc: str) -> tuple[int, int]:
    major, _, minor = str(cc).strip().partition(".")
    return int(major), int(minor or 0)


def parse_arch(entry: str) -> tuple[str, int, int, str] | None:
    """'sm_86' -> ('sm', 8, 6, ''); 'compute_120' -> ('compute', 12, 0, ''); 'sm_90a': suffix a."""
    m = re.fullmatch(r"(sm|compute)_(\d+)(\d)([af]?)", entry.strip())
    if not m:
        return None
    return m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)


def arch_kind(entry: str) -> str | None:
    """'sm_90'/'sm_90a' -> 'sass', 'compute_120' -> 'ptx', 'gfx942[:...]' -> 'gfx'."""
    parsed = parse_arch(entry)
    if parsed is not None:
        return "sass" if parsed[0] == "sm" else "ptx"
    return "gfx" if re.fullmatch(r"gfx[0-9a-f]+(?::\S*)?", entry.strip()) else None


def arch_covers(arch_list: Sequence[str], cc: str) -> dict[str, Any]:
    """Whether a torch build with this arch list has kernels for a GPU of compute capability cc.

    A cubin sm_XY runs on the same major X with minor >= Y ('a' variants only on exactly X.Y,
    'f' variants on the same major). PTX compute_XY is JIT-compiled for any cc >= X.Y.
    """
    major, minor = parse_cc(cc)
    sass: list[tuple[int, str]] = []
    ptx: list[tuple[tuple[int, int], str]] = []
    for entry in arch_list:
        parsed = parse_arch(entry)
        if parsed is None:
            continue
        kind, x, y, suffix = parsed
        if kind == "sm":
            if x == major and (minor == y if suffix == "a" else minor >= y):
                sass.append((y, entry))
        elif (major, minor) >= (x, y):
            ptx.append(((x, y), entry))
    if sass:
        return {"covered": True, "via": max(sass)[1], "mode": "sass", "cc": cc}
    if ptx:
        return {"covered": True, "via": max(ptx)[1], "mode": "ptx", "cc": cc}
    return {"covered": False, "via": None, "mode": None, "cc": cc}


def gfx_covers(arch_list: Sequence[str], gfx: str) -> dict[str, Any]:
    """ROCm: kernels exist only for the exact gfx target ('gfx942:sramecc+:xnack-' -> 'gfx942')."""
    base = gfx.split(":", 1)[0].strip()
    names = {a.split(":", 1)[0].strip() for a in arch_list}
    covered = base in names
    return {"covered": covered, "via": base if covered else None,
            "mode": "gfx" if covered else None, "gfx": base}


def cc_of(text: str) -> str:
    """A compute capability from any spelling: 'sm_86' / 'compute_90' / 'sm_90a' / '86' /
    '8.6' / 'sm_120' -> '8.6', '9.0', '9.0', '8.6', '8.6', '12.0' ('' if it is none)."""
    t = text.strip().lower()
    m = re.fullmatch(r"(\d+)\.(\d+)", t)
    if m:
        return f"{int(m.group(1))}.{m.group(2)}"
    parsed = parse_arch(t if t.startswith(("sm_", "compute_")) else "sm_" + t)
    return f"{parsed[1]}.{parsed[2]}" if parsed else ""


def arch_name(cc: str, kind: str = "sm") -> str:
    """'9.0' -> 'sm_90', '12.0' -> 'sm_120', ('12.0', 'compute') -> 'compute_120', '9.0a' ->
    'sm_90a': the names torch.cuda.get_arch_list() prints."""
    return f"{kind}_" + cc.strip().replace(".", "")


def cuda_tag(cuda: str) -> str:
    """A CUDA version's wheel tag, from its first two parts: '13.0' -> 'cu130', '12.6.3' ->
    'cu126', '11.8' -> 'cu118' (the one home of the `cuNNN` spelling)."""
    major, _, rest = cuda.strip().partition(".")
    return f"cu{major}{rest.partition('.')[0]}"


def cuda_of_tag(tag: str) -> str:
    """'cu121' -> '12.1', 'cu118' -> '11.8', 'cu130' -> '13.0' ('' if it is no CUDA tag)."""
    m = re.fullmatch(r"cu(\d+)(\d)", tag)
    return f"{m.group(1)}.{m.group(2)}" if m else ""


def arch_names(sass: Sequence[str], ptx: Sequence[str] = ()) -> list[str]:
    """A wheel's TORCH_CUDA_ARCH_LIST (matrix form: sass 7.5 ..., ptx 12.0) as torch prints it."""
    return [arch_name(c) for c in sass] + [arch_name(c, "compute") for c in ptx]


def split_arch_flags(flags: str | None) -> list[str]:
    return [a for a in re.split(r"[\s;,]+", flags or "") if a]




# ---------------------------------------------------------------------------------------------
# Pure decisions: which CUDA major an installed nvidia-*/cuda-* distribution belongs to

# CUDA 12 wheels are named nvidia-<component>-cu12 and install under nvidia/<component>/lib; the
# CUDA 13 component wheels drop the suffix (nvidia-cublas 13.1.1.3, nvidia-cufft 12.0.0.61: their
# versions are the component's own, not CUDA's) and install under nvidia/cu13/lib, while cuDNN,
# NCCL, cuSPARSELt and NVSHMEM keep a -cu13 suffix. Neither a version's major nor the lack of a
# suffix says the CUDA major: the suffix does, else the install path, else (cuda-toolkit,
# cuda-bindings, cuda-python) the version's major.
_CU_SUFFIX = re.compile(r"-cu(\d+)$")
_CU_PATH = re.compile(r"^nvidia/cu(\d+)/")
_VERSIONED_AS_CUDA = ("cuda-toolkit", "cuda-bindings", "cuda-python", "cuda-runtime")


def canonical_dist(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def is_cuda_dist(name: str) -> bool:
    n = canonical_dist(name)
    return n.startswith("nvidia-") or n in _VERSIONED_AS_CUDA


def cuda_major_of_dist(name: str, version: str, files: Sequence[str]) -> tuple[int | None, str]:
    """(CUDA major, how it was told) of an installed distribution; (None, why) when it has
    none (nvidia-ml-py) or cannot be told."""
    n = canonical_dist(name)
    m = _CU_SUFFIX.search(n)
    if m:
        return int(m.group(1)), f"its name ends in -cu{m.group(1)}"
    majors = {int(p.group(1)) for p in (_CU_PATH.match(f) for f in files) if p}
    if len(majors) == 1:
        major = majors.pop()
        return major, f"it installs under nvidia/cu{major}/"
    if n in _VERSIONED_AS_CUDA:
        parts = version_parts(version)
        if parts:
            return parts[0], f"{n} is versioned as CUDA ({version})"
    return None, "no -cuNN suffix, no nvidia/cuNN/ files"


def parse_require_cuda(value: str | None) -> str | None:
    """NVIDIA_REQUIRE_CUDA's leading `cuda>=X.Y` (the brand clauses that follow are alternatives
    for the cuda-compat package of nvidia/cuda bases)."""
    m = re.match(r"\s*cuda>=([0-9]{1,3}\.[0-9]{1,3})(?![0-9])", value or "")
    return m.group(1) if m else None
