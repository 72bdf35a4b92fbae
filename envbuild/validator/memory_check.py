"""memory.estimate: `envbuild fit`'s measured figure checked against reality on this GPU.

A reference step (a small decoder written here, bf16 weights, AdamW, about 1.4 GiB at its peak)
runs twice through envbuild/validator/memprobe.py, the code fit's measured method runs: under
fake tensors with MemTracker (fit's figure), then on real tensors, whose peak is
torch.cuda.max_memory_allocated() after reset_peak_memory_stats() (less what was allocated
before the step). The model reaches the probe as fit's `--entry FILE.py:FN` does: a file."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

from . import memprobe
from .context import TorchContext
from .judges import (
    MEMORY_TOLERANCE,
    Outcome,
    _gpu_present,
    judge_memory_estimate,
    memory_probe_refused,
    no_gpu_outcome,
    skipped,
)

# The reference step's size on a GPU: 67 M parameters, 8 x 512 tokens.
REFERENCE = {"vocab": 8192, "width": 1024, "layers": 4, "heads": 16, "batch": 8, "seq": 512}
ENTRY_FN = "reference"
_SOURCE = '''"""envbuild validate's reference step (memory.estimate): a pre-norm decoder,
built where the caller's torch.device and default dtype say."""
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, WIDTH, LAYERS, HEADS, BATCH, SEQ = {vocab}, {width}, {layers}, {heads}, {batch}, {seq}


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.out = nn.Linear(WIDTH, WIDTH, bias=False)
        self.up = nn.Linear(WIDTH, 4 * WIDTH, bias=False)
        self.down = nn.Linear(4 * WIDTH, WIDTH, bias=False)

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(self.norm1(x)).view(b, s, 3, HEADS, WIDTH // HEADS)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, WIDTH))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.norm(x))[:, :-1]
        return F.cross_entropy(logits.reshape(-1, VOCAB).float(), ids[:, 1:].reshape(-1))


def {fn}():
    return Decoder(), (torch.randint(0, VOCAB, (BATCH, SEQ)),)
'''


def reference_source(size: dict[str, int] | None = None) -> str:
    """The entry file's text (REFERENCE's size, or `size`'s)."""
    return _SOURCE.format(fn=ENTRY_FN, **{**REFERENCE, **(size or {})})


@contextlib.contextmanager
def _entry_file(source: str) -> Iterator[str]:
    """The source as a file, "PATH:FN", and the process as it was afterwards (the probe puts
    the file's folder on sys.path and the module in sys.modules)."""
    path = list(sys.path)
    with tempfile.TemporaryDirectory(prefix="envbuild-memory-") as folder:
        file = os.path.join(folder, "reference_step.py")
        with open(file, "w", encoding="utf-8") as f:
            f.write(source)
        try:
            yield f"{file}:{ENTRY_FN}"
        finally:
            sys.path[:] = path
            sys.modules.pop("envbuild_fit_entry", None)


def run_step(entry: str, *, real: bool, device: str = "auto") -> dict[str, Any]:
    """memprobe's answer for the reference step: bf16 weights, AdamW, two training steps
    (memprobe.Refused for an error)."""
    job = {"format": memprobe.FORMAT, "model": {"entry": entry}, "mode": "train",
           "dtype": "bf16", "optimizer": "adamw", "device": device, "real": real}
    return memprobe.measure(memprobe.parse_job(json.dumps(job)))


def _warm(torch: Any, device: str) -> None:
    """cuBLAS's workspaces (the forward's thread and autograd's) allocated before the baseline,
    so the real step's peak holds the step alone, as the fake one does."""
    a = torch.randn(64, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    (a @ a).float().sum().backward()
    del a
    gc.collect()
    torch.cuda.synchronize(device)


def t_memory_estimate(ctx: TorchContext) -> Outcome:
    facts = ctx.device_facts()
    what = ("fit's figure for a reference training step was not compared with "
            "torch.cuda.max_memory_allocated()")
    if not _gpu_present(facts):
        outcome = no_gpu_outcome(facts, ctx.opts.require_gpu, ctx.spec.get("target"))
        if outcome.status == "skip":
            outcome.reason = outcome.detail = f"{outcome.reason}: {what}"
        return outcome
    if facts["devices"].get("backend") == "mps":
        return skipped(f"MPS: {what} (fit answers for CUDA GPUs)")
    device, bad = ctx.compute_device()
    if bad:
        return bad
    torch = ctx.torch
    try:
        memprobe.load_torch(None)
    except memprobe.Refused as exc:
        return memory_probe_refused("fake", exc.code, exc.message)
    with _entry_file(reference_source()) as entry:
        try:
            fake = run_step(entry, real=False)
        except memprobe.Refused as exc:
            return memory_probe_refused("fake", exc.code, exc.message)
        _warm(torch, device)
        baseline = int(torch.cuda.memory_allocated(device))
        try:
            real = run_step(entry, real=True)
        except memprobe.Refused as exc:
            return memory_probe_refused("real", exc.code, exc.message)
        finally:
            gc.collect()
            torch.cuda.empty_cache()
    evidence = {"step": {**REFERENCE, "dtype": "bf16", "optimizer": "adamw", "mode": "train",
                         "params": fake.get("params")},
                "baseline_bytes": baseline, "max_memory_allocated": real.get("peak_bytes"),
                "real_tracker_bytes": real.get("tracker_peak"),
                "components": fake.get("components"), "fake_how": fake.get("how"),
                "real_how": real.get("how"), "torch": fake.get("torch"),
                "seconds": {"fake": fake.get("seconds"), "real": real.get("seconds")}}
    return judge_memory_estimate(int(fake["peak_bytes"]),
                                 int(real["peak_bytes"]) - baseline, MEMORY_TOLERANCE, evidence)
