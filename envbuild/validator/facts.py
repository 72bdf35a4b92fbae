"""The torch checks judged straight from probed facts: facts.*, expect.*, device.* and
libs.origin."""

from __future__ import annotations

import contextlib
import importlib
import os
from collections.abc import Callable
from typing import Any

from .context import (
    TorchContext,
    synchronize,
)
from .judges import (
    Outcome,
    _err,
    _gpu_present,
    device_coverage_rows,
    failed,
    lib_stem,
    library_origin_verdict,
    no_gpu_outcome,
    passed,
    skipped,
)
from .rules import cudnn_version_str


def t_facts_torch(ctx: TorchContext) -> Outcome:
    f = ctx.all_facts("torch")["torch"]
    dnn = (f"MIOpen {f['cudnn']}" if f["hip"]
           else f"cuDNN {cudnn_version_str(f['cudnn']) or 'none'}")
    detail = (f"torch {f['version']} (CUDA {f['cuda'] or 'none'}, HIP {f['hip'] or 'none'}, "
              f"{dnn}, NCCL {f['nccl'] or 'none'})")
    return passed(detail, f)


def spec_judge(judge: Callable[[dict[str, Any], dict[str, Any]], Outcome],
                *keys: str) -> Callable[[TorchContext], Outcome]:
    def run(ctx: TorchContext) -> Outcome:
        return judge(ctx.spec, ctx.all_facts(*keys))
    return run


def device_judge(judge: Callable[[dict[str, Any], bool, str | None], Outcome],
                  ) -> Callable[[TorchContext], Outcome]:
    def run(ctx: TorchContext) -> Outcome:
        return judge(ctx.device_facts(), ctx.opts.require_gpu, ctx.spec.get("target"))
    return run


def t_device_kernel(ctx: TorchContext) -> Outcome:
    torch = ctx.torch
    facts = ctx.device_facts()
    if not _gpu_present(facts):
        return no_gpu_outcome(facts, ctx.opts.require_gpu, ctx.spec.get("target"))
    rows = device_coverage_rows(facts)
    results: list[dict[str, Any]] = []
    for row in rows:
        name = "mps" if facts["devices"]["backend"] == "mps" else f"cuda:{row['index']}"
        res: dict[str, Any] = {"device": name, "name": row["name"]}
        if not row["covered"]:
            res["error"] = "no kernels for this GPU in this torch build (see device.arch_coverage)"
        else:
            try:
                x = torch.arange(4096, dtype=torch.float32, device=name)
                y = (x + 1.0) * 2.0
                synchronize(torch, name)
                if not torch.equal(y.cpu(), (torch.arange(4096, dtype=torch.float32) + 1.0) * 2.0):
                    res["error"] = "wrong result from an elementwise kernel"
            except Exception as e:
                res["error"] = _err(e)
        results.append(res)
    vision = ctx.all_facts("torchvision")["torchvision"]
    if vision.get("installed") and not vision.get("import_error") and rows and rows[0]["covered"]:
        dev0 = results[0]["device"]
        try:
            tv = importlib.import_module("torchvision")
            boxes = torch.tensor([[0.0, 0.0, 10.0, 10.0], [1.0, 1.0, 11.0, 11.0]], device=dev0)
            keep = tv.ops.nms(boxes, torch.tensor([0.9, 0.8], device=dev0), 0.5).tolist()
            results.append({"device": dev0, "op": "torchvision.ops.nms",
                            **({} if keep == [0] else {"error": f"nms returned {keep}"})})
        except Exception as e:
            results.append({"device": dev0, "op": "torchvision.ops.nms", "error": _err(e)})
    ev = {"results": results}
    bad = [r for r in results if "error" in r]
    if bad:
        first = bad[0]
        return failed(
            "a kernel failed on the GPU: 'no kernel image is available' means the torch build "
            "lacks this GPU's arch; 'CUDA driver version is insufficient' means the host driver "
            "is older than the image's CUDA; a torchvision op failing on the GPU means torchvision "
            "was built for another CUDA/torch",
            f"{first['device']}: {first['error']}", ev)
    return passed(f"kernels ran on {len(rows)} device(s)", ev)


def t_libs_origin(ctx: TorchContext) -> Outcome:
    """Which GPU libraries torch mapped (after the GPU checks loaded them), and from where."""
    facts = ctx.all_facts("torch")["torch"]
    kind = ctx.spec.get("target") or ("rocm" if facts.get("hip") else
                                      "cuda" if facts.get("cuda") else "cpu")
    if ctx.torch is not None and kind in ("cuda", "rocm"):
        with contextlib.suppress(Exception):  # loads libcudnn when it is lazy
            ctx.torch.backends.cudnn.version()
    torch_dir = os.path.realpath(os.path.dirname(getattr(ctx.torch, "__file__", "") or "."))
    copies: dict[str, str] = {}
    site = os.path.dirname(torch_dir)
    for top in (os.path.join(site, "nvidia"), os.path.join(torch_dir, "lib")):
        for root, _, names in os.walk(top):
            for name in names:
                stem = lib_stem(name)
                if stem:
                    copies.setdefault(stem, os.path.join(root, name))
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as fh:
            maps = fh.read()
    except OSError as e:
        return skipped(f"cannot read /proc/self/maps: {_err(e)}")
    return library_origin_verdict(kind, maps, torch_dir, copies,
                                  os.environ.get("LD_LIBRARY_PATH", ""))
