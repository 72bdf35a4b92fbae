"""Read a pasted `python -m torch.utils.collect_env` report (pure: text in, a Report out).

Every format collect_env has printed since torch 1.0 has the same shape: `Label: value` lines,
a value that may start on the next line (a list of GPUs, "Probably one of the following:" cuDNN
paths, the CPU section), then "Versions of relevant libraries:" and `[pip3] name==version` /
`[conda] name version build channel` lines. What changed over the years is which labels appear
(ROCm, HIP, MIOpen, XNNPACK, XPU, "Python platform" from 1.8 on) and how a boolean or a missing
fact is written ("No"/"False", "Could not collect", "No CUDA", "N/A").

Reports are read as people paste them: inside Markdown fences or a `<details>` block, quoted
with "> ", indented, with Windows line ends, full-width colons, a warning printed before them,
text after them, or cut off. One pass over the lines; no regex that can backtrack on a line.
"""

from __future__ import annotations

import re
from dataclasses import field
from typing import Any

from envbuild.common.errors import UsageError
from envbuild.common.record import record

REPORT_BYTES = 1 << 20  # a real report is 2-30 KB; a MiB is no report
MAX_VALUE = 200  # a field's value longer than this is kept cut: no real version is that long

# Labels, as collect_env prints them (lowercased, colon dropped) -> the Report field.
LABELS: dict[str, str] = {
    "pytorch version": "torch",
    "is debug build": "debug",
    "cuda used to build pytorch": "cuda_built",
    "rocm used to build pytorch": "rocm_built",
    "os": "os",
    "gcc version": "gcc",
    "clang version": "clang",
    "cmake version": "cmake",
    "libc version": "libc",
    "python version": "python",
    "python platform": "platform",
    "is cuda available": "cuda_available",
    "cuda runtime version": "cuda_runtime",
    "cuda_module_loading set to": "module_loading",
    "gpu models and configuration": "gpus",
    "nvidia driver version": "driver",
    "cudnn version": "cudnn",
    "hip runtime version": "hip",
    "miopen runtime version": "miopen",
    "is xnnpack available": "xnnpack",
    "is xpu available": "xpu",
    "caching allocator config": "allocator",
    "xpu used to build pytorch": "xpu_built",
    "cpu": "cpu",
    "versions of relevant libraries": "libraries",
    "version of relevant libraries": "libraries",  # as some pastes have it
}
# Longest first: "cuda runtime version" before "cuda ..." prefixes of other labels.
_BY_LENGTH = sorted(LABELS, key=len, reverse=True)
# Values that say the fact is not known (not that it is absent).
UNKNOWN = ("could not collect", "n/a", "")
_COLON = ":\uff1a"
_LIB = re.compile(r"\[(pip3?|conda)\]\s+(.*)")
_GPU_LINE = re.compile(r"GPU\s*(\d+)\s*[:\uff1a]\s*(.*)")
_QUOTE = re.compile(r"(?:>\s*)+")
_FENCE = re.compile(r"(?:`{3,}|~{3,})")
_TAG = re.compile(r"</?(?:details|summary|pre|code)\b[^>\n]{0,200}>", re.IGNORECASE)  # bounded
_PIP_REQ = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)")
_TORCH_VERSION = re.compile(r"\d+\.\d+[0-9A-Za-z.+_-]*")
# What torch prints while collect_env imports it (pasted with the report):
_FOUND = re.compile(r"driver on your system is too old \(found version (\d{4,6})\)")
_NO_DRIVER = re.compile(r"Found no NVIDIA driver on your system")
_INCOMPATIBLE = re.compile(r"with CUDA capability sm_(\d{2,3}[a-z]?) is not compatible")
_SUPPORTS = re.compile(r"supports CUDA capabilities((?:\s+(?:sm|compute)_\d{2,3}[a-z]?)+)")


@record
class Package:
    manager: str  # pip | pip3 | conda
    name: str
    version: str
    build: str = ""  # conda's build string (py3.7_cuda10.1.243_cudnn7.6.3_0)
    channel: str = ""  # conda's channel (pytorch, conda-forge, pypi, <pip>)


@record
class Report:
    """What a collect_env report says. '' = not in the report or 'Could not collect'."""

    torch: str = ""
    debug: str = ""
    cuda_built: str = ""  # "10.2", "12.1", "None" (a CPU build)
    rocm_built: str = ""
    os: str = ""
    python: str = ""
    platform: str = ""
    libc: str = ""
    cuda_available: bool | None = None
    cuda_runtime: str = ""
    gpus: tuple[str, ...] = ()  # product names, in index order
    driver: str = ""
    cudnn: tuple[str, ...] = ()  # a version, or library paths
    hip: str = ""
    miopen: str = ""
    cpu: tuple[str, ...] = ()
    packages: tuple[Package, ...] = ()
    uncollected: tuple[str, ...] = ()  # labels whose value was "Could not collect"
    labels: tuple[str, ...] = ()  # every label seen, in order
    truncated: bool = False  # the report stops before its library lines
    # torch's warnings pasted with it: the driver's CUDA ("found version 11040" -> "11.4"),
    # "Found no NVIDIA driver", the arch list torch says it supports, GPUs it cannot run on
    driver_cuda: str = ""
    no_driver_warning: bool = False
    arch_list: tuple[str, ...] = ()
    incompatible_ccs: tuple[str, ...] = ()  # "12.0" for "sm_120 is not compatible"
    notes: tuple[str, ...] = field(default=())  # what was odd about the paste
    lines: tuple[tuple[str, str], ...] = ()  # (field, the line as pasted) of every value read

    def packages_of(self, *names: str) -> tuple[Package, ...]:
        want = {n.lower().replace("_", "-") for n in names}
        return tuple(p for p in self.packages if p.name.lower().replace("_", "-") in want)


def _clean(line: str) -> str:
    """One pasted line as collect_env printed it: no quote marks, fences or HTML tags."""
    line = line.replace("\r", "").replace("\t", "    ").replace("\x00", "")
    stripped = line.lstrip()
    q = _QUOTE.match(stripped)
    if q:
        stripped = stripped[q.end():]
    if _FENCE.match(stripped):
        return ""
    if "<" in stripped:
        stripped = _TAG.sub("", stripped)
    return stripped.strip()


def _cut(value: str) -> str:
    return value if len(value) <= MAX_VALUE else value[:MAX_VALUE]


def _label(line: str) -> tuple[str, str] | None:
    """('label', 'value') when the line starts with a collect_env label and a colon (a paste's
    "PyTorch version 1.5.0" without one too); None for any other line."""
    low = line[:48].lower()
    for key in _BY_LENGTH:
        if low.startswith(key):
            rest = line[len(key):].lstrip(" ")
            if rest[:1] and rest[0] in _COLON:
                return key, rest[1:].strip()
            if key == "pytorch version" and rest[:1].isdigit():
                return key, rest.strip()
            return None
    return None


def _bool(value: str) -> bool | None:
    v = value.strip().lower()
    return True if v in ("yes", "true") else False if v in ("no", "false") else None


def _known(value: str) -> str:
    v = value.strip()
    return "" if v.lower() in UNKNOWN or v.lower() == "no cuda" else _cut(v)


def _package(manager: str, rest: str) -> Package | None:
    rest = rest.strip()
    if not rest or rest.lower() in ("could not collect", "no relevant packages"):
        return None
    if manager != "conda":
        m = _PIP_REQ.match(rest)
        return Package(manager, _cut(m.group(1)), _cut(m.group(2))) if m else None
    parts = rest.split()
    if len(parts) < 2:
        return None
    return Package("conda", _cut(parts[0]), _cut(parts[1]),
                   _cut(parts[2]) if len(parts) > 2 else "",
                   _cut(parts[3]) if len(parts) > 3 else "")


def _segments(labelled: list[tuple[int, str]]) -> list[tuple[int, int, int]]:
    """(first line, end line, distinct labels) of each report in the paste: a label seen again
    starts the next one (a report pasted twice, a prose line before the real report)."""
    out: list[tuple[int, int, int]] = []
    seen: set[str] = set()
    start = -1
    for i, key in labelled:
        if key in seen or start < 0:
            if start >= 0:
                out.append((start, i, len(seen)))
            start, seen = i, set()
        seen.add(key)
    if start >= 0:
        out.append((start, -1, len(seen)))
    return out


def parse(text: str) -> Report:
    """The report in `text` (the one with the most collect_env labels, when the paste holds
    more than one); UsageError when there is none."""
    lines = [_clean(ln) for ln in text.split("\n")]
    labelled = [(i, LABELS[lab[0]]) for i, ln in enumerate(lines)
                if (lab := _label(ln)) is not None]
    segments = _segments(labelled)
    best = max(segments, key=lambda seg: seg[2], default=None)
    if best is None or best[2] < 3:
        found = best[2] if best is not None else 0
        raise UsageError("no collect_env report found: a report has 'PyTorch version:', 'OS:', "
                         f"'Is CUDA available:' and more such lines; this text has {found} of "
                         "them together",
                         "paste the whole output of `python -m torch.utils.collect_env`")
    start, end, _ = best
    values: dict[str, list[str]] = {}
    order: list[str] = []
    key = ""
    packages: list[Package] = []
    notes: list[str] = []
    if len(segments) > 1:
        notes.append("the paste holds more than one report (or a report's labels twice); the "
                     "fullest was read")
    kept: list[tuple[str, str]] = []
    for ln in lines[start:end if end >= 0 else len(lines)]:
        lab = _label(ln)
        if lab is not None:
            name, value = lab
            key = LABELS[name]
            order.append(key)
            values[key] = [value] if value else []
            if len(kept) < 512:
                kept.append((key, _cut(ln)))
            continue
        if not ln or not key:
            continue
        if key == "libraries":
            lib = _LIB.match(ln)
            if lib is not None and (p := _package(lib.group(1), lib.group(2))) is not None:
                packages.append(p)
                if len(kept) < 512:
                    kept.append(("libraries", _cut(ln)))
            continue  # anything else after the library lines is the rest of the post
        if _continues(key, ln, values[key]) and len(values[key]) < 256:
            values[key].append(ln)
            if len(kept) < 512:
                kept.append((key, _cut(ln)))
        # any other line (a banner, MIG devices, the post's own words) is not the report's
    one = {k: (v[0] if v else "") for k, v in values.items()}
    uncollected = tuple(k for k, v in values.items()
                        if any(x.strip().lower() == "could not collect" for x in v))
    gpus: list[str] = []
    for g in values.get("gpus", []):
        m = _GPU_LINE.match(g)
        name = m.group(2) if m else g
        name = re.sub(r"\s*\(UUID:[^)]*\)", "", name).strip()
        if _known(name):
            gpus.append(_cut(name))
    cudnn = [c for c in values.get("cudnn", []) if _known(c)
             and c.lower() != "probably one of the following:"]
    warned = _warnings(lines)
    truncated = "libraries" not in values or "torch" not in values
    if "torch" not in values:
        notes.append("the report starts after its 'PyTorch version' line")
    if "libraries" not in values:
        notes.append("the report stops before 'Versions of relevant libraries'")
    return Report(
        torch=_torch_version(one.get("torch", "")),
        debug=_known(one.get("debug", "")),
        cuda_built=_cut(one.get("cuda_built", "").strip()),
        rocm_built=_known(one.get("rocm_built", "")),
        os=_known(one.get("os", "")),
        python=_known(one.get("python", "")),
        platform=_known(one.get("platform", "")),
        libc=_known(one.get("libc", "")),
        cuda_available=_bool(one.get("cuda_available", "")),
        cuda_runtime=_known(one.get("cuda_runtime", "")),
        gpus=tuple(gpus[:64]),
        driver=_known(one.get("driver", "")),
        cudnn=tuple(_cut(c) for c in cudnn[:64]),
        hip=_known(one.get("hip", "")),
        miopen=_known(one.get("miopen", "")),
        cpu=tuple(_cut(c) for c in values.get("cpu", [])[:64]),
        packages=tuple(packages[:512]),
        uncollected=uncollected,
        labels=tuple(order),
        truncated=truncated,
        notes=tuple(notes),
        lines=tuple(kept),
        **warned,
    )


def _continues(key: str, line: str, so_far: list[str]) -> bool:
    """Whether `line` belongs to the multi-line value of `key`: GPU lines, cuDNN paths, the CPU
    section (lscpu's 'Key: value', Windows' 'Key=value', a Mac's one brand line)."""
    if key == "gpus":
        return _GPU_LINE.match(line) is not None
    if key == "cudnn":
        return (line.startswith(("/", "\\")) or line.lower() == "probably one of the following:"
                or re.match(r"[A-Za-z]:\\", line) is not None
                or re.fullmatch(r"\d+(?:\.\d+)*", line) is not None)
    if key == "cpu":
        return ":" in line or "=" in line or not so_far
    return False


def _torch_version(value: str) -> str:
    """'1.9.0 (this problem can be reproduced in 1.8.1 as well)' -> '1.9.0': a paste's edits."""
    m = _TORCH_VERSION.match(value.strip())
    return _cut(m.group()) if m else ""


def _cc(sm: str) -> str:
    digits = sm.rstrip("abcdefghijklmnopqrstuvwxyz")
    return f"{digits[:-1]}.{digits[-1]}"


def _warnings(lines: list[str]) -> dict[str, Any]:
    """torch's CUDA warnings anywhere in the paste (they are printed before the report)."""
    out: dict[str, Any] = {}
    ccs: list[str] = []
    for ln in lines:
        if "driver" in ln and (m := _FOUND.search(ln)):
            n = int(m.group(1))
            out.setdefault("driver_cuda", f"{n // 1000}.{n % 1000 // 10}")
        elif "NVIDIA driver" in ln and _NO_DRIVER.search(ln):
            out["no_driver_warning"] = True
        elif "capabilit" in ln:
            if m := _INCOMPATIBLE.search(ln):
                ccs.append(_cc(m.group(1)))
            if "supports" in ln and (m := _SUPPORTS.search(ln)):
                out.setdefault("arch_list", tuple(m.group(1).split()[:64]))
    if ccs:
        out["incompatible_ccs"] = tuple(dict.fromkeys(ccs))[:16]
    return out
