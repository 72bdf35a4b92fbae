"""Passing validation reports, remembered per image and host, so a warm `make` skips the run.

A report is reused only when everything that could change its verdict is unchanged: the image
(its id), the validator (envbuild's version and the validator's source), the options that change
the checks (--require-gpu) and the host (kernel, NVIDIA driver, GPU names and UUIDs, AMD GPU
targets, the container runtime). A failing report is never stored, so never reused.

The key and the fingerprint are pure functions of their inputs; reading /proc and /sys for the
host's GPUs and the cache files are the only I/O here (the engine's facts come from engine.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envbuild.common.files import write_atomic
from envbuild.common.record import record

FORMAT = 1

NVIDIA_VERSION = Path("/proc/driver/nvidia/version")
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
KFD_NODES = Path("/sys/class/kfd/kfd/topology/nodes")


@record
class Cached:
    report: dict[str, Any]
    note: str
    gpus_passed: bool
    created: datetime  # aware, UTC

    def when(self) -> str:
        """Local time of the run, as the summary prints it."""
        return self.created.astimezone().strftime("%Y-%m-%d %H:%M")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "envbuild" / "validation"


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def gpu_files() -> dict[str, str]:
    """The host files that name the driver and the GPUs (empty on a host without them)."""
    files = {"nvidia/version": _read(NVIDIA_VERSION)}
    for root, name in ((NVIDIA_GPUS, "information"), (KFD_NODES, "properties")):
        try:
            entries = sorted(root.iterdir())
        except OSError:
            continue
        for entry in entries:
            files[f"{root.name}/{entry.name}/{name}"] = _read(entry / name)
    return {k: v for k, v in files.items() if v}


def host_fingerprint(files: Mapping[str, str], kernel: str,
                     runtime: Mapping[str, str]) -> dict[str, str]:
    """What the validation verdict depends on, from the host: pure."""
    out = {"kernel": kernel}
    version = files.get("nvidia/version", "")
    if version:
        out["nvidia_driver"] = version.splitlines()[0].strip()
    gpus = []
    for name, text in sorted(files.items()):
        if name.endswith("/information"):  # /proc/driver/nvidia/gpus/<bus id>/information
            fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
            gpus.append(f"{fields.get('Model', '?').strip()} "
                        f"{fields.get('GPU UUID', '?').strip()} {name.split('/')[1]}")
        elif name.endswith("/properties"):  # KFD topology node: AMD GPU target and unique id
            fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
            gfx = fields.get("gfx_target_version", "0").strip()
            if gfx != "0":
                gpus.append(f"gfx {gfx} {fields.get('unique_id', '?').strip()}")
    if gpus:
        out["gpus"] = "; ".join(gpus)
    for k, v in sorted(runtime.items()):
        out[f"runtime.{k}"] = v
    return out


def validator_version() -> str:
    """envbuild's version and a hash of the validator's source (a module or a package): a new
    validator judges again, even at the same version number."""
    import importlib.util

    from envbuild import __version__

    h = hashlib.sha256()
    spec = importlib.util.find_spec("envbuild.validator")
    if spec is not None and spec.origin:
        origin = Path(spec.origin)
        paths = (sorted(origin.parent.rglob("*.py")) if origin.name == "__init__.py"
                 else [origin])
        for p in paths:
            h.update(p.name.encode() + b"\0")
            h.update(p.read_bytes())
    return f"{__version__}+{h.hexdigest()[:16]}"


def cache_key(image_id: str, validator: str, host: Mapping[str, str],
              options: Mapping[str, str]) -> str:
    blob = json.dumps({"format": FORMAT, "image": image_id, "validator": validator,
                       "host": dict(host), "options": dict(options)}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def passed(report: Mapping[str, Any], exit_code: int) -> bool:
    summary = report.get("summary")
    return (exit_code == 0 and isinstance(summary, dict) and not summary.get("fail")
            and isinstance(report.get("checks"), list))


def load(key: str, directory: Path | None = None) -> Cached | None:
    """The stored passing report for key; None when absent, unreadable or not a pass."""
    path = (directory or cache_dir()) / f"{key}.json"
    from envbuild.common.boundedio import CACHE_BYTES, load_json
    from envbuild.common.errors import UsageError

    try:
        data = load_json(path, "validation cache entry", cap=CACHE_BYTES)
        report = data["report"]
        if data.get("key") != key or not isinstance(report, dict) or not passed(report, 0):
            return None
        created = datetime.fromisoformat(str(data["created"]))
        if created.tzinfo is None:
            return None
        return Cached(report, str(data.get("note", "")), bool(data.get("gpus_passed")), created)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, UsageError):
        return None


def store(key: str, report: Mapping[str, Any], exit_code: int, note: str, gpus_passed: bool,
          parts: Mapping[str, Any], directory: Path | None = None,
          now: datetime | None = None) -> bool:
    """Remember a passing report (a failing one is never stored). Best effort: a cache that
    cannot be written costs a re-run next time, never an error."""
    if not passed(report, exit_code):
        return False
    d = directory or cache_dir()
    created = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    body = json.dumps({"key": key, "created": created, "note": note,
                       "gpus_passed": gpus_passed, "parts": dict(parts),
                       "report": dict(report)}, indent=1)
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(d / f"{key}.json", body, 0o600)
    except OSError:
        return False
    return True
