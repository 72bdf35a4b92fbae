"""Pure parsers for what the host tools print (nvidia-smi, rocminfo, docker, sw_vers, ...)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from envbuild.common.record import record

_DRIVER_RE = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def proc_driver_version(text: str | None) -> str:
    """'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ...' -> '535.104.05'."""
    if not text:
        return ""
    m = _DRIVER_RE.search(text)
    return m.group(1) if m else ""


@record
class NvGpu:
    index: int
    bus_id: str = ""
    name: str = ""
    cc: str = ""
    memory_mib: int = 0
    persistence: str = ""
    mig: str = ""
    pcie_width: int = 0
    pcie_width_max: int = 0
    compute_mode: str = ""
    remap_pending: bool = False
    remap_failure: bool = False


@record
class NvSmi:
    driver: str = ""
    cuda: str = ""
    gpus: tuple[NvGpu, ...] = ()


def _txt(node: ET.Element | None, path: str) -> str:
    if node is None:
        return ""
    found = node.find(path)
    return (found.text or "").strip() if found is not None else ""


def _int(text: str) -> int:
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else 0


def nvsmi_xml(text: str | None) -> NvSmi | None:
    """`nvidia-smi -q -x` -> driver, CUDA and per-GPU facts; None when it is not that XML."""
    if not text or "<nvidia_smi_log" not in text:
        return None
    body = re.sub(r"<!DOCTYPE[^>]*>", "", text)
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    gpus = []
    for i, g in enumerate(root.findall("gpu")):
        gpus.append(NvGpu(
            index=_int(_txt(g, "minor_number")) if _txt(g, "minor_number").isdigit() else i,
            bus_id=g.get("id", ""),
            name=_txt(g, "product_name"),
            memory_mib=_int(_txt(g, "fb_memory_usage/total")),
            persistence=_txt(g, "persistence_mode"),
            mig=_txt(g, "mig_mode/current_mig"),
            pcie_width=_int(_txt(g, "pci/pci_gpu_link_info/link_widths/current_link_width")),
            pcie_width_max=_int(_txt(g, "pci/pci_gpu_link_info/link_widths/max_link_width")),
            compute_mode=_txt(g, "compute_mode"),
            remap_pending=_txt(g, "remapped_rows/remapped_row_pending") == "Yes",
            remap_failure=_txt(g, "remapped_rows/remapped_row_failure") == "Yes",
        ))
    return NvSmi(driver=_txt(root, "driver_version"), cuda=_txt(root, "cuda_version"),
                 gpus=tuple(gpus))


def nvsmi_csv(text: str | None) -> list[dict[str, str]]:
    """`--query-gpu=index,pci.bus_id,name,compute_cap,memory.total --format=csv,noheader`."""
    rows = []
    keys = ("index", "bus_id", "name", "cc", "memory")
    for line in (text or "").splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != len(keys) or not parts[0].isdigit():
            continue
        rows.append(dict(zip(keys, parts, strict=True)))
    return rows


def nvml_library_version(text: str) -> str:
    """'NVML library version: 535.129' (printed by nvidia-smi on a mismatch)."""
    m = re.search(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)", text)
    return m.group(1) if m else ""


def lib_version_from_path(path: str) -> str:
    """'/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.129.03' -> '535.129.03'."""
    m = re.search(r"\.so\.(\d{3}\.\d+(?:\.\d+)?)$", path)
    return m.group(1) if m else ""


def ldconfig_paths(text: str | None, soname: str) -> list[str]:
    """Paths `ldconfig -p` lists for one soname, in the loader's order."""
    out = []
    for line in (text or "").splitlines():
        m = re.match(r"\s*(\S+)\s+\(([^)]*)\)\s+=>\s+(\S+)", line)
        if m and m.group(1) == soname and m.group(2) != "libc6":  # "(libc6)" = 32-bit
            out.append(m.group(3))
    return out


def dpkg_installed(text: str | None) -> list[str]:
    """Package names marked installed ('ii') in `dpkg -l` output."""
    out = []
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] == "ii":
            out.append(parts[1].split(":")[0])
    return out


@record
class RocmAgent:
    name: str  # gfx942
    marketing: str = ""


def rocminfo_gpus(text: str | None) -> list[RocmAgent]:
    """GPU agents of `rocminfo`: each has 'Name: gfxNNN' and 'Device Type: GPU'."""
    agents: list[RocmAgent] = []
    for block in re.split(r"\n\*{3,}\s*\nAgent \d+\s*\n\*{3,}", text or ""):
        if not re.search(r"^\s*Device Type:\s*GPU\s*$", block, re.M):
            continue
        name = re.search(r"^\s{2}Name:\s*(gfx[0-9a-f]+)\s*$", block, re.M)
        if not name:
            continue
        market = re.search(r"^\s*Marketing Name:\s*(.*?)\s*$", block, re.M)
        agents.append(RocmAgent(name.group(1), market.group(1) if market else ""))
    return agents


def sw_vers(text: str | None) -> dict[str, str]:
    out = {}
    for line in (text or "").splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def meminfo_kib(text: str | None, key: str = "MemTotal") -> int:
    m = re.search(rf"^{key}:\s+(\d+)\s*kB", text or "", re.M)
    return int(m.group(1)) if m else 0


def docker_cli_version(text: str) -> str:
    """'Docker version 20.10.24+dfsg1, build 297e128' -> '20.10.24'."""
    m = re.search(r"version\s+v?(\d+\.\d+(?:\.\d+)?)", text, re.I)
    return m.group(1) if m else ""


def json_object(text: str | None) -> dict[str, Any] | None:
    """The first JSON object in text (docker prints errors after it), or None."""
    if not text:
        return None
    start = text.find("{")
    if start < 0:
        return None
    from envbuild.common.boundedio import parse_json_prefix

    try:
        obj, _ = parse_json_prefix(text[start:])
    except ValueError:  # not JSON, or nested too deep (TooDeep)
        return None
    return obj if isinstance(obj, dict) else None
