"""Pure decisions: performance against the GPU's published peaks."""

from __future__ import annotations

import re
from typing import Any

from .results import Outcome, failed, passed, warned, worst

PERF_KEYS = {"bf16_tflops": "bf16_dense_tflops", "fp16_tflops": "fp16_dense_tflops",
             "tf32_tflops": "tf32_dense_tflops", "fp32_tflops": "fp32_tflops",
             "mem_bw_gbs": "mem_bw_gbs", "h2d_gbs": "h2d_gbs"}


def load_peaks(data: Any) -> dict[str, Any]:
    """Validate the peaks JSON (matrix/peaks.toml as converted by envbuild): {meta, gpu: [...]}."""
    if not isinstance(data, dict):
        raise ValueError("peaks: top level must be an object")
    meta = data.get("meta")
    gpus = data.get("gpu")
    if not isinstance(meta, dict) or not isinstance(gpus, list):
        raise ValueError("peaks: needs a 'meta' table and a 'gpu' list")
    pass_ratio, warn_ratio = meta.get("pass_ratio"), meta.get("warn_ratio")
    if not (isinstance(pass_ratio, (int, float)) and isinstance(warn_ratio, (int, float))
            and 0 < warn_ratio <= pass_ratio <= 1):
        raise ValueError("peaks: meta needs 0 < warn_ratio <= pass_ratio <= 1")
    for i, g in enumerate(gpus):
        if not isinstance(g, dict) or not isinstance(g.get("name"), str):
            raise ValueError(f"peaks: gpu[{i}] needs a name")
        match = g.get("match")
        if not isinstance(match, list) or not match or not all(isinstance(m, str) for m in match):
            raise ValueError(f"peaks: gpu[{i}] ({g['name']}) needs a non-empty match list")
        for key in PERF_KEYS.values():
            if key in g and not (isinstance(g[key], (int, float)) and g[key] > 0):
                raise ValueError(f"peaks: gpu[{i}] ({g['name']}).{key} must be a positive number")
    return data


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def match_gpu(device_name: str, peaks: dict[str, Any] | None) -> dict[str, Any] | None:
    """The peaks row whose alias appears in the device name as whole words; the longest wins, so
    'NVIDIA L40S' is not an 'L4' and 'H100 PCIe' beats a bare 'H100'."""
    if not peaks:
        return None
    name = _tokens(device_name)
    best: tuple[int, int, dict[str, Any]] | None = None
    for g in peaks.get("gpu") or []:
        for alias in g.get("match") or []:
            want = _tokens(alias)
            n = len(want)
            if n and any(name[i:i + n] == want for i in range(len(name) - n + 1)):
                score = (n, len(alias))
                if best is None or score > best[:2]:
                    best = (score[0], score[1], g)
    return best[2] if best else None


def perf_verdict(measured: float, peak: float, pass_ratio: float, warn_ratio: float) -> str:
    ratio = measured / peak
    if ratio >= pass_ratio:
        return "pass"
    if ratio >= warn_ratio:
        return "warn"
    return "fail"


def judge_perf(metrics: dict[str, float], device_name: str, backend: str,
               peaks: dict[str, Any] | None, what: str) -> Outcome:
    """Compare measured metrics (keys of PERF_KEYS) with the device's row in the peaks table."""
    text = ", ".join(f"{k} {v:.1f}" for k, v in metrics.items())
    ev: dict[str, Any] = {"device": device_name, "backend": backend, "measured": metrics}
    if backend == "cpu":
        ev["note"] = "no verdict on CPU"
        return passed(f"CPU {text} (no verdict on CPU)", ev)
    if backend == "mps":
        ev["note"] = "no peaks for Apple GPUs: no verdict"
        return passed(f"MPS {text} (no verdict on MPS)", ev)
    if peaks is None:
        ev["note"] = "no peaks table given (--peaks): no verdict"
        return passed(f"{text} (no verdict: no --peaks)", ev)
    row = match_gpu(device_name, peaks)
    if row is None:
        ev["note"] = f"{device_name!r} is not in the peaks table: no verdict"
        return passed(f"{text} (no verdict: GPU not in the peaks table)", ev)
    meta = peaks["meta"]
    pass_ratio, warn_ratio = float(meta["pass_ratio"]), float(meta["warn_ratio"])
    verdicts: dict[str, Any] = {}
    for key, value in metrics.items():
        peak = row.get(PERF_KEYS.get(key, ""))
        if not peak:
            verdicts[key] = {"measured": value, "peak": None, "status": "pass",
                             "note": "no peak in the table"}
            continue
        status = perf_verdict(value, float(peak), pass_ratio, warn_ratio)
        verdicts[key] = {"measured": value, "peak": peak, "ratio": round(value / float(peak), 3),
                         "status": status}
    ev.update(gpu=row.get("name"), verified=row.get("verified"), pass_ratio=pass_ratio,
              warn_ratio=warn_ratio, verdicts=verdicts)
    status = worst([v["status"] for v in verdicts.values()])
    summary = ", ".join(
        f"{k} {v['measured']:.1f}" + (f"/{v['peak']} ({v['ratio']:.0%})" if v.get("peak") else "")
        for k, v in verdicts.items())
    if status == "pass":
        return passed(f"{what} on {row['name']}: {summary}", ev)
    low = [k for k, v in verdicts.items() if v["status"] != "pass"]
    fix = (f"{', '.join(low)} below {pass_ratio:.0%} of the {row['name']} peak: check clocks and "
           "throttling (`nvidia-smi -q -d PERFORMANCE`), power limits, other processes on the GPU, "
           "PCIe link width/generation for host transfers, and that the expected GPU model is "
           "the one installed")
    if status == "warn":
        return warned(fix, f"{what} low on {row['name']}: {summary}", ev)
    return failed(fix, f"{what} far below peak on {row['name']}: {summary}", ev)


