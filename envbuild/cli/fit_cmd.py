"""`envbuild fit`: parsing and printing only (envbuild/features/fit.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say, warn
from envbuild.common.echo import escaped
from envbuild.common.errors import EXIT_FAILED
from envbuild.features.fit import MAX_TIMEOUT

if TYPE_CHECKING:
    from envbuild.features.fit import FitReport

BAR = 32  # characters of the longest bar


@app.command(help="Will a training or inference step fit each GPU? The memory it needs (measured "
                  "under fake tensors, or by formula from a config.json), per GPU, and the "
                  "cheapest changes that make it fit. Exit 0 fits, 1 does not fit a GPU, 2 bad "
                  "input, 3 it could not be measured.")
def fit(
    config: Annotated[Path | None, typer.Option(
        "--config", metavar="CONFIG.json", help="A Hugging Face config.json of a decoder-only "
        "transformer (Llama, Mistral, Qwen2 keys).")] = None,
    entry: Annotated[str | None, typer.Option(
        "--entry", metavar="FILE.py:FN", help="Your own code: FN() returns (model, inputs); the "
        "step is model(*inputs), backward and one optimizer step.")] = None,
    image: Annotated[str | None, typer.Option(
        "--image", metavar="TAG", help="Measure inside this local image (its torch, its "
        "attention kernels; no network; the entry file mounted read-only). Default: this "
        "host's Python.")] = None,
    infer: Annotated[bool, typer.Option(
        "--infer/--train", help="An inference step (a prefill with the KV cache kept) or a "
        "training step (default).")] = False,
    batch: Annotated[int, typer.Option("--batch", min=1, help="Micro-batch size.")] = 1,
    seq: Annotated[int, typer.Option("--seq", min=1, help="Sequence length (tokens).")] = 2048,
    dtype: Annotated[str | None, typer.Option(
        "--dtype", help="Weights' dtype: fp32 | bf16 | fp16 (default: bf16 for --config; fp32, "
        "torch's own, for --entry: the dtype its code builds in unless it names one).")] = None,
    mixed: Annotated[bool, typer.Option(
        "--mixed/--no-mixed", help="Mixed precision: fp32 weights, the step under bf16 "
        "autocast.")] = False,
    optimizer: Annotated[str, typer.Option(
        "--optimizer", help="adamw | sgd | adamw8bit (bitsandbytes).")] = "adamw",
    checkpointing: Annotated[bool, typer.Option(
        "--checkpointing/--no-checkpointing", help="Activation checkpointing (every "
        "layer).")] = False,
    lora: Annotated[int, typer.Option(
        "--lora", metavar="RANK", min=0, help="LoRA adapters of this rank on the attention and "
        "MLP projections, the weights frozen (0: full fine-tune).")] = 0,
    shards: Annotated[int, typer.Option(
        "--shards", min=1, help="FSDP / ZeRO-3 over this many GPUs of one kind.")] = 1,
    accumulate: Annotated[int, typer.Option(
        "--accumulate", min=1, help="Gradient accumulation steps (the global batch is batch x "
        "accumulate).")] = 1,
    gpu: Annotated[list[str] | None, typer.Option(
        "--gpu", metavar="NAME", help="A GPU from the matrix (H100, 'RTX 4090'). Repeatable. "
        "Default: this host's GPUs.")] = None,
    fleet: Annotated[Path | None, typer.Option(
        "--fleet", metavar="FLEET.toml", help="Every GPU kind of a fleet file (envbuild fleet "
        "collect).")] = None,
    facts: Annotated[Path | None, typer.Option(
        "--facts", metavar="DIR", help="The GPUs of a host recorded by `envbuild doctor --save "
        "DIR` instead of this host's.")] = None,
    method: Annotated[str, typer.Option(
        "--method", help="auto (measure where it can, else the formula) | measured | "
        "formula.")] = "auto",
    timeout: Annotated[float, o.seconds(
        "Seconds every measurement together may take (the asked step and the options).",
        high=MAX_TIMEOUT)] = 600,
    json: o.Json = False,
    matrix_dir: Annotated[Path | None, typer.Option("--matrix", hidden=True)] = None,
) -> None:
    """0 every GPU fits (or none was named and this host has none), 1 a GPU does not, 2 bad
    input, 3 it could not be measured (no engine, the probe failed and no formula stands in)."""
    from envbuild.core.memory import Job
    from envbuild.features import fit as use

    if dtype is None:
        dtype = use.default_dtype(entry is not None)
    job = Job(mode="infer" if infer else "train", batch=batch, seq=seq, dtype=dtype, mixed=mixed,
              optimizer=optimizer, checkpointing=checkpointing, lora_rank=lora, shards=shards,
              accumulate=accumulate)
    req = use.FitRequest(job=job, config=config, entry=entry, image=image, method=method,
                         gpus=tuple(gpu or ()), fleet=fleet, facts_dir=facts, timeout=timeout,
                         matrix_dir=matrix_dir)
    report = use.fit(req, progress=None if json else (lambda text: warn(f"fit: {text}")))
    if json:
        emit_json(report.to_json())
    else:
        _print(report)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


def _gb(n: int) -> str:
    return f"{n / 1e9:,.1f} GB"


def _print(r: FitReport) -> None:
    from envbuild.features import fit as use

    e = r.estimate
    trainable = (f" ({e.trainable:,} trainable)"
                 if r.job.mode == "train" and e.trainable != e.params else "")
    say(f"model      {escaped(r.model)}: {e.params:,} parameters{trainable}")
    say(f"step       {use.describe_job(r.job, r.entry is not None)}")
    say(f"method     {e.method}: {escaped(e.how)}")
    say(f"peak       {_gb(e.peak_bytes)} allocated (torch.cuda.max_memory_allocated)")
    block = "\u2588" if (sys.stdout.encoding or "").lower().startswith("utf") else "#"
    biggest = max(e.components.values(), default=0) or 1
    for name, size in e.components.items():
        if size:
            bar = block * max(1, round(BAR * size / biggest))
            say(f"  {name:<12} {_gb(size):>10}  {bar}")
    for note in (*e.notes, *r.notes):
        say(f"note       {escaped(note)}")
    if not r.fits:
        return
    say("")
    say(f"{'GPU':<28} {'usable':>10} {'needed':>10}  {'fits':<4} {'margin':>10}")
    for t, f in zip(r.targets, r.fits, strict=True):
        say(f"{t.gpu.name[:28]:<28} {_gb(f.usable_bytes):>10} {_gb(f.needed_bytes):>10}  "
            f"{'yes' if f.fits else 'no':<4} {_gb(f.margin_bytes):>10}   {escaped(t.where)}")
        for note in f.notes:
            say(f"  note: {escaped(note)}")
        for opt in f.options:
            say(f"  to fit: {opt.change}: needs {_gb(opt.needed_bytes)} "
                f"(margin {_gb(opt.margin_bytes)})")
            say(f"          {escaped(r.option_command(opt.job, t))}")
        if not f.fits and not f.options:
            say("  no single change envbuild knows makes it fit this GPU")
