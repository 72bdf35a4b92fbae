"""Will it fit: a training or inference step's peak memory on one GPU, by formula, and the verdict
against a GPU's usable memory, with the cheapest changes that make it fit. Pure: the coefficients
come in as matrix/memory.toml's document (`Matrix.extra["memory"]`), the GPU as its gpus.toml row.

The formula follows the HF Llama decoder as transformers runs it (matrix/memory.toml derives each
term from the tensors autograd saves) and is checked against torch.cuda.max_memory_allocated() on
an H200 (tests/unit/test_memory.py). Its peak is the largest of the moments a step can peak at:
- training, the start of backward: weights, optimizer states, every saved activation and the two
  fp32 vocab-sized gradients of the loss (gradients are None after zero_grad(set_to_none=True),
  unless accumulated);
- training, the end of backward: weights, states, all gradients, one layer's activations and
  their gradients (and the checkpointed layer inputs);
- training, the optimizer step: weights, states, gradients and the step's temporary;
- inference (a prefill with the KV cache): weights, the cache and all positions' logits, or the
  cache and one layer's MLP (and math attention) transients.
cuBLAS's workspace is added to each (max_memory_allocated counts it).
Sliding-window layers (Mistral, Qwen2 with use_sliding_window) whose window the sequence reaches
get an explicit mask from transformers: K/V repeated, CUDA's memory-efficient kernel, the
additive mask saved (memory.toml [masks]).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import field, replace
from typing import Any

from envbuild.common.errors import MatrixError, UsageError
from envbuild.common.lazyre import lazy
from envbuild.common.record import record
from envbuild.core.memshape import (
    Shape,
    layer_params,
    linear_params,
    lora_params,
    param_count,
    root_params,
)
from envbuild.matrix.model import Gpu
from envbuild.validator import memprobe

COMPONENTS = ("parameters", "gradients", "optimizer", "activations", "kv_cache", "temporaries",
              "buffers", "other")
MODES = ("train", "infer")
OPTIMIZERS = ("adamw", "sgd", "adamw8bit")
MIB = 1 << 20
# Input bounds, not facts (a step of more tokens than this is not a question `fit` answers).
MAX_BATCH = 1 << 20
MAX_SEQ = 1 << 24
MAX_SHARDS = 1 << 16


@record
class Job:
    mode: str = "train"  # "train" | "infer"
    batch: int = 1
    seq: int = 2048
    dtype: str = "bf16"  # weights dtype: "fp32" | "bf16" | "fp16"
    mixed: bool = False  # autocast to 16 bits with fp32 weights (mixed precision)
    optimizer: str = "adamw"  # "adamw" | "sgd" | "adamw8bit"
    checkpointing: bool = False  # activation checkpointing (every layer)
    lora_rank: int = 0  # 0: full fine-tune
    shards: int = 1  # FSDP / ZeRO-3 over this many GPUs of one kind
    accumulate: int = 1  # gradient accumulation steps (the gradients live through backward)


@record
class Estimate:
    params: int
    trainable: int
    peak_bytes: int  # comparable with torch.cuda.max_memory_allocated()
    components: Mapping[str, int]  # at the peak, COMPONENTS names
    method: str  # "formula" | "measured"
    how: str  # one line
    notes: tuple[str, ...] = ()


@record
class Option:
    """One change to a job that makes it fit, re-checked by the same estimator."""

    change: str  # "activation checkpointing", "batch 2 x accumulate 4"
    flags: tuple[str, ...]  # the `envbuild fit` argv words that express the changed job
    job: Job
    needed_bytes: int
    margin_bytes: int


@record
class GpuFit:
    gpu: str
    total_bytes: int  # what the driver reports (or one device's GB, conservatively)
    usable_bytes: int  # total less the driver's reserve and the CUDA context
    needed_bytes: int  # the peak with the caching allocator's headroom
    fits: bool
    margin_bytes: int  # usable - needed (negative: short by that much)
    options: tuple[Option, ...] = field(default=())
    notes: tuple[str, ...] = ()  # what the memory figure is (gpu_notes)


# Coefficients: Coeffs field -> (memory.toml table, key).
_COEFFS: Mapping[str, tuple[str, str]] = {
    "adamw_states": ("optimizer", "adamw_states"), "sgd_states": ("optimizer", "sgd_states"),
    "adamw8bit_bytes": ("optimizer", "adamw8bit_bytes"),
    "adamw_step_temp": ("optimizer", "adamw_step_temp"),
    "sgd_step_temp": ("optimizer", "sgd_step_temp"),
    "adamw8bit_step_temp": ("optimizer", "adamw8bit_step_temp"),
    "norm_upcast_f32": ("activations", "norm_upcast_f32"),
    "norm_cast": ("activations", "norm_cast"), "norm_out": ("activations", "norm_out"),
    "attn_norm_readers": ("activations", "attn_norm_readers"),
    "mlp_norm_readers": ("activations", "mlp_norm_readers"),
    "final_norm_readers": ("activations", "final_norm_readers"),
    "flash_h": ("activations", "flash_h"), "flash_kv": ("activations", "flash_kv"),
    "flash_lse_f32": ("activations", "flash_lse_f32"), "math_h": ("activations", "math_h"),
    "math_probs": ("activations", "math_probs"), "mlp_i": ("activations", "mlp_i"),
    "checkpoint_input": ("activations", "checkpoint_input"),
    "logprobs_f32": ("loss", "logprobs_f32"), "labels_bytes": ("loss", "labels_bytes"),
    "backward_grads_f32": ("loss", "backward_grads_f32"),
    "mask_saved": ("masks", "mask_saved"), "mask_align": ("masks", "mask_align"),
    "mask_bool": ("masks", "mask_bool"), "gqa_max_head_dim": ("masks", "gqa_max_head_dim"),
    "math_bytes": ("math_precision", "math_bytes"),
    "kv_cache": ("inference", "kv_cache"), "logits": ("inference", "logits"),
    "final_hidden": ("inference", "final_hidden"),
    "mlp_transient_i": ("inference", "mlp_transient_i"),
    "mlp_transient_r": ("prefill_moments", "mlp_transient_r"),
    "mlp_transient_h": ("prefill_moments", "mlp_transient_h"),
    "attention_r": ("prefill_moments", "attention_r"),
    "attention_h": ("prefill_moments", "attention_h"),
    "attention_q": ("prefill_moments", "attention_q"),
    "math_causal_mask": ("prefill_moments", "math_causal_mask"),
    "math_transient": ("inference", "math_transient"),
    "weight_cast_bytes": ("mixed", "weight_cast_bytes"),
    "lora_default_rank": ("lora", "default_rank"), "lora_adapter_bytes": ("lora", "adapter_bytes"),
    "gathered_layers": ("shards", "gathered_layers"),
    "workspace_bytes": ("cuda", "workspace_bytes"),
    "workspace_handles_train": ("cuda", "workspace_handles_train"),
    "workspace_handles_infer": ("cuda", "workspace_handles_infer"),
    "context_bytes": ("cuda", "context_bytes"),
    "driver_reserved_bytes": ("cuda", "driver_reserved_bytes"),
    "peak_headroom": ("allocator", "peak_headroom"),
    "memory_gb_fraction": ("gpu_total", "memory_gb_fraction"),
    "bf16_native_cc": ("bf16", "native_min_cc"),
}


@record
class Coeffs:
    """matrix/memory.toml, typed (every number the formula uses; see the file for each one's
    derivation and source)."""

    dtype_bytes: Mapping[str, int]
    sdpa_backends: tuple[Mapping[str, Any], ...]  # the probe's rule (memprobe.sdpa_rule)
    min_torch: str  # the first torch whose MemTracker the measured method uses ([probe])
    shard_choices: tuple[int, ...]
    values: Mapping[str, float]
    # the compute capabilities each [sdpa] backend runs on, in sdpa_backends' order:
    # (lowest, highest or 0)
    sdpa_cc: tuple[tuple[float, float], ...] = ()

    def __getattr__(self, name: str) -> float:
        values = self.__dict__.get("values", {})
        if name in values:
            return float(values[name])
        raise AttributeError(name)


def coefficients(doc: Mapping[str, Any]) -> Coeffs:
    """memory.toml's document -> Coeffs; MatrixError naming the first missing or wrong value."""
    def number(table: str, key: str) -> float:
        value = doc.get(table, {}).get(key) if isinstance(doc.get(table), Mapping) else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise MatrixError(f"memory.toml: [{table}] {key} is missing or not a number >= 0")
        return float(value)

    values = {name: number(table, key) for name, (table, key) in _COEFFS.items()}
    sizes = doc.get("dtype_bytes", {})
    dtype_bytes = {k: int(v) for k, v in sizes.items()
                   if isinstance(v, int) and not isinstance(v, bool) and v > 0}
    sdpa, shards = doc.get("sdpa", {}), doc.get("shards", {})
    choices = tuple(int(n) for n in shards.get("choices", ()) if isinstance(n, int) and n > 1)
    if "fp32" not in dtype_bytes or not choices:
        raise MatrixError("memory.toml: [dtype_bytes] fp32 or [shards] choices is missing")
    try:
        rule = memprobe.sdpa_rule({"backends": sdpa.get("backends")
                                   if isinstance(sdpa, Mapping) else None})
    except memprobe.Refused as exc:
        raise MatrixError(f"memory.toml: [sdpa] backends: {exc.message}") from None
    probe = doc.get("probe", {})
    min_torch = probe.get("min_torch") if isinstance(probe, Mapping) else None
    if not isinstance(min_torch, str) or not re.fullmatch(r"\d+\.\d+(\.\d+)?", min_torch):
        raise MatrixError("memory.toml: [probe] min_torch is missing or not a version")
    return Coeffs(dtype_bytes=dtype_bytes, sdpa_backends=tuple(rule or ()), min_torch=min_torch,
                  shard_choices=choices, values=values, sdpa_cc=_sdpa_cc(sdpa))


def _sdpa_cc(sdpa: Any) -> tuple[tuple[float, float], ...]:
    """[sdpa] backends' min_cc/max_cc ("8.0"; max 0: no upper bound); MatrixError if not one."""
    out: list[tuple[float, float]] = []
    for b in sdpa.get("backends", ()) if isinstance(sdpa, Mapping) else ():
        bounds = []
        for key in ("min_cc", "max_cc"):
            value = b.get(key, "0.0") if isinstance(b, Mapping) else "0.0"
            if not isinstance(value, str) or not re.fullmatch(r"\d{1,2}\.\d", value):
                raise MatrixError(f"memory.toml: [sdpa] backends: {key} {value!r} is not a "
                                  "compute capability such as \"8.0\"")
            bounds.append(float(value))
        out.append((bounds[0], bounds[1]))
    return tuple(out)


def for_gpu(c: Coeffs, gpu: Gpu) -> Coeffs:
    """The coefficients for a step on `gpu`: [sdpa] without the kernels its compute capability
    does not run (a V100 or T4 has no flash attention); `c` itself where it runs them all (an
    AMD GPU: the figures follow CUDA's kernels)."""
    try:
        cc = float(gpu.cc) if gpu.vendor == "nvidia" and gpu.cc else 0.0
    except ValueError:
        cc = 0.0
    if not cc:
        return c
    bounds = c.sdpa_cc or tuple((0.0, 0.0) for _ in c.sdpa_backends)
    kept = [(b, cc_range) for b, cc_range in zip(c.sdpa_backends, bounds, strict=True)
            if cc_range[0] <= cc and (not cc_range[1] or cc <= cc_range[1])]
    if len(kept) == len(c.sdpa_backends):
        return c
    return replace(c, sdpa_backends=tuple(b for b, _ in kept),
                   sdpa_cc=tuple(r for _, r in kept))


def kernel_names(c: Coeffs) -> tuple[str, ...]:
    """The attention kernels of `c`'s rule (for_gpu's: the ones a GPU runs), in order, each
    once (a kernel may have a row per range of GPUs: memory-efficient takes bf16 from sm_80)."""
    return tuple(dict.fromkeys(str(b["name"]) for b in c.sdpa_backends))


def rule_key(c: Coeffs) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What tells two attention rules apart (the kernels and the dtypes each takes)."""
    return tuple((str(b["name"]), tuple(b["dtypes"])) for b in c.sdpa_backends)


def check_job(job: Job, c: Coeffs) -> None:
    """UsageError (one line) for a job the formula cannot take."""
    def bad(what: str, hint: str) -> UsageError:
        return UsageError(what, hint)

    if job.mode not in MODES:
        raise bad(f"mode {job.mode!r} is not train or infer", "use --train or --infer")
    if job.dtype not in c.dtype_bytes:
        raise bad(f"dtype {job.dtype!r} is not one of {', '.join(c.dtype_bytes)}",
                  "use --dtype fp32, bf16 or fp16")
    if job.optimizer not in OPTIMIZERS:
        raise bad(f"optimizer {job.optimizer!r} is not one of {', '.join(OPTIMIZERS)}",
                  "use --optimizer adamw, sgd or adamw8bit")
    for name, value, top in (("batch", job.batch, MAX_BATCH), ("seq", job.seq, MAX_SEQ),
                             ("shards", job.shards, MAX_SHARDS),
                             ("accumulate", job.accumulate, MAX_BATCH)):
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= top:
            raise bad(f"{name} = {value!r} is out of range (1 to {top})",
                      f"give --{name} a positive integer")
    if isinstance(job.lora_rank, bool) or not isinstance(job.lora_rank, int) \
            or not 0 <= job.lora_rank <= MAX_BATCH:
        raise bad(f"lora rank {job.lora_rank!r} is out of range", "give --lora a rank such as 16")
    if job.mode == "infer":
        training = [flag for flag, given in (
            ("--lora", bool(job.lora_rank)), ("--checkpointing", job.checkpointing),
            ("--optimizer", job.optimizer != Job().optimizer),
            ("--accumulate", job.accumulate != 1)) if given]
        if training:
            raise bad(f"{', '.join(training)} {'is' if len(training) == 1 else 'are'} for "
                      "training: an inference step has no gradients and no optimizer",
                      "leave it out, or drop --infer")


def compute_dtype(job: Job) -> str:
    """The dtype the matmuls run in: the weights' own, or autocast's bf16 under --mixed."""
    return "bf16" if job.mixed else job.dtype


def masked_layers(shape: Shape, job: Job) -> int:
    """How many layers' attention calls carry an explicit mask: the sliding-window layers once the
    keys reach the window (transformers builds the mask when kv_length >= sliding_window; kv is
    the sequence in training and in a prefill with an empty cache), else none (memory.toml
    [masks])."""
    return shape.sliding_layers if shape.sliding_window and job.seq >= shape.sliding_window else 0


def repeats_kv(shape: Shape, masked: bool, c: Coeffs) -> bool:
    """Whether transformers repeats K/V to every query head before the call (repeat_kv) instead
    of passing enable_gqa: with grouped heads, when the call has a mask or the head dim is over
    what it passes enable_gqa for (memory.toml [masks] gqa_max_head_dim)."""
    return shape.gqa and (masked or shape.head_dim > c.gqa_max_head_dim)


def attention_path(shape: Shape, dtype: str, c: Coeffs, masked: bool = False) -> str:
    """CUDA SDPA's choice for the HF Llama call (memory.toml [sdpa]): flash | efficient | math.
    `masked`: the call carries an explicit mask (a sliding-window layer past its window)."""
    path = memprobe.cuda_backend([dict(b) for b in c.sdpa_backends], dtype, shape.head_dim,
                                 mask=masked, gqa=shape.gqa and not repeats_kv(shape, masked, c),
                                 dropout=False)
    return "flash" if path == "flash" else "math" if path == "math" else "efficient"


def _aligned(n: int, c: Coeffs) -> int:
    """A mask's last dimension as the memory-efficient kernel pads it."""
    align = max(1, int(c.mask_align))
    return -(-n // align) * align


def sdpa_rule(c: Coeffs) -> dict[str, Any]:
    """The rule as the probe takes it in its job (the CUDA choice to emulate on a CPU)."""
    return {"backends": [dict(b) for b in c.sdpa_backends]}


def _norm(readers: float, h: int, e: int, r: int, mixed: bool, c: Coeffs) -> float:
    out = readers * e if mixed else c.norm_out * r
    return (4 * c.norm_upcast_f32 + r * c.norm_cast + out) * h


def _mask_tokens(job: Job, e: int, path: str, c: Coeffs) -> float:
    """Bytes per token of the additive mask one masked call saves (the flash-like kernels keep
    it for backward; the math path adds it to the scores and keeps nothing of it)."""
    return 0.0 if path == "math" else e * c.mask_saved * _aligned(job.seq, c)


def _layer_tokens(shape: Shape, job: Job, e: int, r: int, path: str, c: Coeffs,
                  masked: bool = False) -> float:
    """Saved bytes per token of one decoder layer (`masked`: its attention call has a mask)."""
    h, q, kv, nh = shape.hidden, shape.q_width, shape.kv_width, shape.heads
    if path == "math":  # math computes in fp32 whatever the inputs' dtype ([math_precision])
        attention = max(e, c.math_bytes) * (c.math_h * q + c.math_probs * nh * job.seq)
    else:
        kv_saved = q if repeats_kv(shape, masked, c) else kv  # repeat_kv's copies are saved
        attention = e * (c.flash_h * q + c.flash_kv * kv_saved) + 4 * c.flash_lse_f32 * nh
        if masked:
            attention += _mask_tokens(job, e, path, c)
    return (_norm(c.attn_norm_readers, h, e, r, job.mixed, c) + attention
            + _norm(c.mlp_norm_readers, h, e, r, job.mixed, c) + e * c.mlp_i * shape.intermediate)


def _total(parts: Mapping[str, float]) -> tuple[int, dict[str, int]]:
    comps = {k: round(parts.get(k, 0)) for k in COMPONENTS}
    return sum(comps.values()), comps


def _peak(candidates: list[dict[str, float]]) -> tuple[int, dict[str, int]]:
    return max((_total(p) for p in candidates), key=lambda tc: tc[0])


def _train(shape: Shape, job: Job, c: Coeffs, notes: list[str]) -> tuple[int, int, dict[str, int]]:
    size = c.dtype_bytes
    params = param_count(shape)
    w, e = size["fp32"] if job.mixed else size[job.dtype], size[compute_dtype(job)]
    r, n, t = w, job.shards, job.batch * job.seq
    path = attention_path(shape, compute_dtype(job), c)
    masked = masked_layers(shape, job)
    mask_path = attention_path(shape, compute_dtype(job), c, masked=True)
    adapters = lora_params(shape, job.lora_rank) if job.lora_rank else 0
    trainable = adapters or params
    g = c.lora_adapter_bytes if adapters else w  # bytes per trainable parameter
    weights = (params * w + adapters * c.lora_adapter_bytes) / n
    if n > 1:
        weights += (c.gathered_layers * layer_params(shape) + root_params(shape)) * e
    grads = trainable * g / n
    per_param, step = {"adamw": (c.adamw_states * g, c.adamw_step_temp * g),
                       "sgd": (c.sgd_states * g, c.sgd_step_temp * g),
                       "adamw8bit": (c.adamw8bit_bytes, c.adamw8bit_step_temp * g)}[job.optimizer]
    states, step_temp = trainable * per_param / n, trainable * step / n
    plain = t * _layer_tokens(shape, job, e, r, path, c)
    with_mask = t * _layer_tokens(shape, job, e, r, mask_path, c, masked=True)
    mask = t * _mask_tokens(job, e, mask_path, c) if masked else 0
    # the layer whose activations and gradients the end of backward holds: the larger kind (the
    # mask has no gradient)
    layer, layer_grads = max((plain, plain) if masked < shape.layers else (0, 0),
                             (with_mask, with_mask - mask) if masked else (0, 0))
    final = (_norm(c.final_norm_readers, shape.hidden, e, r, job.mixed, c)
             + 4 * c.logprobs_f32 * shape.vocab + c.labels_bytes)
    inputs = t * shape.layers * c.checkpoint_input * r * shape.hidden if job.checkpointing else 0
    if job.checkpointing and masked:  # the boolean mask is a checkpointed layer's input too
        inputs += job.seq * job.seq * c.mask_bool
    every = (shape.layers - masked) * plain + masked * with_mask
    saved = (inputs if job.checkpointing else every) + t * final
    if job.mixed and n == 1:
        saved += linear_params(shape) * c.weight_cast_bytes
    fixed = {"parameters": weights, "optimizer": states,
             "other": c.workspace_handles_train * c.workspace_bytes}
    start = {**fixed, "activations": saved, "gradients": grads if job.accumulate > 1 else 0,
             "temporaries": t * 4 * c.backward_grads_f32 * shape.vocab}
    end = {**fixed, "gradients": grads, "activations": inputs + layer,
           "temporaries": layer_grads}
    opt = {**fixed, "gradients": grads, "temporaries": step_temp}
    peak, comps = _peak([start, end, opt])
    notes.append(_attention_note(shape, job, path, mask_path, masked))
    if adapters:
        notes.append(f"LoRA rank {job.lora_rank} on every decoder Linear: {adapters:,} trainable "
                     "fp32 parameters; activations counted as for a full fine-tune, without the "
                     "fp32 copies of each adapter's input PEFT keeps (the measured method counts "
                     "them: 23% more on a 125M model at 4 x 1024; unverified on a GPU)")
    if n > 1:
        notes.append(f"FSDP/ZeRO-3 over {n} GPUs: weights, gradients and optimizer states / {n},"
                     " two layers and the root gathered (unverified)")
    return params, trainable, comps | {"_peak": peak}


def _attention_note(shape: Shape, job: Job, path: str, mask_path: str, masked: int) -> str:
    why = (" (CUDA SDPA takes neither flash nor memory-efficient for this dtype"
           + (" with grouped K/V heads" if shape.gqa else " on this GPU")
           + ("; computed in fp32, unverified on a GPU" if compute_dtype(job) != "fp32" else "")
           + ")")
    if not masked:
        return f"attention: {path}" + (why if path == "math" else "")
    where = ("every layer" if masked == shape.layers
             else f"{masked} of {shape.layers} layers ({path} on the others)")
    low = (mask_path == "math" and compute_dtype(job) != "fp32")  # [math_precision]
    return (f"attention: {mask_path} on {where}: sequence {job.seq} >= sliding window "
            f"{shape.sliding_window}, so transformers passes an explicit mask"
            + (" and repeats K/V to every head" if shape.gqa else "")
            + (" (a masked math call in 16 bits is counted low by the formula: prefer "
               "--method measured)" if low else " (unverified on a GPU)"))


def _call_tokens(shape: Shape, job: Job, e: int, w: int, path: str, masked: bool,
                 c: Coeffs) -> float:
    """Bytes per token alive inside one layer's attention call in a prefill (memory.toml
    [inference]): the model's input embeddings and the layer's input, the normed input, q (and
    the output, or math's scaled q), K/V repeated to every head (by transformers, or inside
    math), math's scores and probabilities, the additive mask of a masked call."""
    q, h = shape.q_width, shape.hidden
    copies = shape.gqa and (repeats_kv(shape, masked, c) or path == "math")
    out = ((c.attention_r * w + c.attention_h * e) * h
           + e * (c.attention_q * q + (c.flash_kv * q if copies else 0)))
    if path == "math":
        out += max(e, c.math_bytes) * c.math_transient * shape.heads * job.seq
    if masked:
        out += e * c.mask_saved * _aligned(job.seq, c)
    return out


def _infer(shape: Shape, job: Job, c: Coeffs, notes: list[str]) -> tuple[int, int, dict[str, int]]:
    size = c.dtype_bytes
    params = param_count(shape)
    w, e = size["fp32"] if job.mixed else size[job.dtype], size[compute_dtype(job)]
    n, t = job.shards, job.batch * job.seq
    path = attention_path(shape, compute_dtype(job), c)
    masked = masked_layers(shape, job)
    mask_path = attention_path(shape, compute_dtype(job), c, masked=True)
    fixed = {"parameters": params * w / n, "other": c.workspace_handles_infer * c.workspace_bytes,
             "kv_cache": t * shape.layers * c.kv_cache * w * shape.kv_width / n}
    end = {**fixed, "activations": t * e * (c.logits * shape.vocab
                                            + c.final_hidden * shape.hidden)}
    inside = t * (e * c.mlp_transient_i * shape.intermediate
                  + (c.mlp_transient_r * w + c.mlp_transient_h * e) * shape.hidden)
    if masked:  # the boolean mask lives while the layers run
        inside += job.seq * job.seq * c.mask_bool
    moments = [end, {**fixed, "activations": inside}]
    # inside an attention call: of a layer without a mask, and of one with
    for call_path, has_mask in ((path, False), (mask_path, True)):
        if (masked if has_mask else shape.layers - masked) <= 0:
            continue
        call = t * _call_tokens(shape, job, e, w, call_path, has_mask, c)
        if has_mask:
            call += job.seq * job.seq * c.mask_bool
        elif call_path == "math":  # is_causal: math builds its own s x s mask in the dtype
            call += job.seq * job.seq * e * c.math_causal_mask
        moments.append({**fixed, "activations": call})
    peak, comps = _peak(moments)
    attention = (_attention_note(shape, job, path, mask_path, masked) if masked
                 else f"attention: {path}")
    notes.append(f"{attention}; a prefill of {job.batch} x {job.seq} tokens with the KV cache "
                 "kept, logits for every position")
    if n > 1:
        notes.append(f"layers split over {n} GPUs (as device_map='auto'): weights and KV cache"
                     f" / {n}, the logits on one (unverified)")
    return params, 0, comps | {"_peak": peak}


def quantized_note(shape: Shape, job: Job) -> str | None:
    """The report's note for a quantized checkpoint (a config.json with a quantization_config:
    GPTQ, AWQ, bitsandbytes...), whose weights neither method models; None for any other."""
    if not shape.quantized:
        return None
    method = shape.quant_method or "its quantization_config names no quant_method"
    weights = "fp32 (--mixed)" if job.mixed else f"{job.dtype} (--dtype)"
    return (f"the checkpoint is quantized ({method}): its weights are counted at {weights}, "
            "not in their quantized form, so the figure is an upper bound for the weights")


def formula(shape: Shape, job: Job, coeffs: Coeffs) -> Estimate:
    """The step's peak allocated bytes by formula (see the module docstring)."""
    check_job(job, coeffs)
    notes: list[str] = []
    run = _train if job.mode == "train" else _infer
    params, trainable, comps = run(shape, job, coeffs, notes)
    peak = comps.pop("_peak")
    how = (f"HF {shape.model_type} decoder, {job.mode} {job.batch} x {job.seq}, "
           f"{'mixed ' if job.mixed else ''}{compute_dtype(job)}")
    return Estimate(params=params, trainable=trainable, peak_bytes=peak, components=comps,
                    method="formula", how=how, notes=tuple(notes))


def total_bytes(gpu: Gpu, coeffs: Coeffs) -> int:
    """What the driver reports for one device (gpus.toml memory_mib), else the GB one device has
    (device_memory_gb: one of a module's devices, or a row's smallest variant; else memory_gb),
    taken conservatively."""
    if gpu.memory_mib:
        return gpu.memory_mib * MIB
    gb = gpu.device_memory_gb or gpu.memory_gb
    return int(gb * 10**9 * coeffs.memory_gb_fraction) if has_size(gpu) else 0


def has_size(gpu: Gpu) -> bool:
    """Whether the row says how much memory one device has (a finite, positive figure)."""
    gb = gpu.device_memory_gb or gpu.memory_gb
    return gpu.memory_mib > 0 or (math.isfinite(gb) and gb > 0)


# 24GB, 40 GB, -40G, a MIG profile's 1g.10gb; not the 5 of 1.5GB, nor the 10G of 'A10G' (a model
# number, glued to a letter)
_SIZE_IN_NAME = lazy(r"(?<![a-z\d])(?<!\d\.)(\d{1,3})\s?GB?\b", re.I)


def sized_by_name(gpu: Gpu, name: str) -> Gpu:
    """The row as the name the user typed sizes it: a name that states a size one device of the
    row may have ('Tesla M40 24GB', 'Tesla P100-PCIE-16GB', 'A100 40GB', an 'RTX 4090 Laptop
    16GB') is judged at it (device_memory_basis "stated"); a size above the row's largest, or a
    module's (two devices), is not one device's, and the row is judged as it is."""
    found = _SIZE_IN_NAME.findall(name)  # the last: 'H100 80GB HBM3 MIG 1g.10gb' is a slice
    if not found or gpu.device_memory_basis == "module":
        return gpu
    gb = float(found[-1])
    if gb == (gpu.device_memory_gb or gpu.memory_gb):  # the size the row is judged at already
        return replace(gpu, device_memory_basis="stated") if gpu.device_memory_basis else gpu
    if not 0 < gb <= gpu.memory_gb:
        return gpu
    return replace(gpu, device_memory_gb=gb, device_memory_basis="stated", memory_mib=0)


_MOBILE = lazy(r"(?<![a-z])(laptop|mobile|max-?q)(?![a-z])", re.I)


def unsized_mobile(gpu: Gpu, name: str) -> bool:
    """A laptop part named after a desktop row ('RTX 4090 Laptop GPU' finds the RTX 4090, 24 GB;
    the laptop card has 16) whose name does not state its size: its memory is not the row's."""
    return (_MOBILE.search(name) is not None and _SIZE_IN_NAME.search(name) is None
            and not any(_MOBILE.search(n) for n in (gpu.name, *gpu.aliases)))


def gpu_notes(gpu: Gpu, coeffs: Coeffs) -> tuple[str, ...]:
    """What the figure a GPU is judged at means, where it is not simply one card's memory: one
    device of a module of several, the smallest variant of a name, memory shared with the CPU."""
    total = f"{total_bytes(gpu, coeffs) / 1e9:,.1f} GB"
    notes: list[str] = []
    if gpu.device_memory_basis == "module":
        notes.append(f"judged at {total}, one device's: the {gpu.memory_gb:g} GB of the "
                     f"{gpu.name} are split between devices that torch sees one by one "
                     "(--shards N spreads a job over them)")
    elif gpu.device_memory_basis == "variants":
        more = (f" (up to {gpu.memory_gb:g} GB on others)"
                if gpu.memory_gb > gpu.device_memory_gb else " (others have more)")
        own = "" if gpu.unified_memory else " (`envbuild fit` on its host reads its own size)"
        notes.append(f"judged at {total}, the smallest {gpu.name} sold{more}: one with more "
                     f"memory may fit where this says no{own}")
    if gpu.unified_memory:
        notes.append(f"the {gpu.name}'s memory is the system's, shared with the CPU: the OS, other "
                     f"programs and the job's own host memory come out of the same {total}")
    return tuple(notes)


def usable_bytes(gpu: Gpu, coeffs: Coeffs) -> int:
    """Total less the driver's reserve and the CUDA context (never below 0)."""
    return max(0, total_bytes(gpu, coeffs) - int(coeffs.driver_reserved_bytes)
               - int(coeffs.context_bytes))


def bf16_emulated(gpu: Gpu, job: Job, c: Coeffs) -> bool:
    """Whether `job` computes in bf16 on an NVIDIA GPU without native bf16 (memory.toml
    [bf16]): the same memory, slower arithmetic."""
    if gpu.vendor != "nvidia" or not gpu.cc or compute_dtype(job) != "bf16":
        return False
    try:
        return float(gpu.cc) < c.bf16_native_cc
    except ValueError:
        return False


def needed_bytes(estimate: Estimate, coeffs: Coeffs) -> int:
    """The allocated peak with the caching allocator's headroom (memory.toml [allocator])."""
    return int(estimate.peak_bytes * coeffs.peak_headroom)


def verdict(gpu: Gpu, estimate: Estimate, coeffs: Coeffs,
            options: tuple[Option, ...] = ()) -> GpuFit:
    usable, needed = usable_bytes(gpu, coeffs), needed_bytes(estimate, coeffs)
    return GpuFit(gpu=gpu.name, total_bytes=total_bytes(gpu, coeffs), usable_bytes=usable,
                  needed_bytes=needed, fits=0 < needed <= usable, margin_bytes=usable - needed,
                  options=options, notes=gpu_notes(gpu, coeffs))


# The `envbuild fit` flags that express a Job field (the CLI parses the same words).
def job_flags(job: Job, base: Job) -> tuple[str, ...]:
    """The argv words that turn `base` into `job` (only the fields that differ)."""
    words: list[str] = []
    if job.dtype != base.dtype:
        words += ["--dtype", job.dtype]
    if job.mixed != base.mixed:
        words += ["--mixed"] if job.mixed else ["--no-mixed"]
    if job.checkpointing != base.checkpointing:
        words += ["--checkpointing"] if job.checkpointing else ["--no-checkpointing"]
    if job.batch != base.batch:
        words += ["--batch", str(job.batch)]
    if job.accumulate != base.accumulate:
        words += ["--accumulate", str(job.accumulate)]
    if job.seq != base.seq:
        words += ["--seq", str(job.seq)]
    if job.optimizer != base.optimizer:
        words += ["--optimizer", job.optimizer]
    if job.lora_rank != base.lora_rank:
        words += ["--lora", str(job.lora_rank)]
    if job.shards != base.shards:
        words += ["--shards", str(job.shards)]
    return tuple(words)


def _describe(job: Job, base: Job) -> str:
    parts: list[str] = []
    if job.mixed and not base.mixed:
        parts.append("bf16 mixed precision")
    elif base.mixed and not job.mixed:
        parts.append("bf16 weights (no fp32 copy)")
    elif job.dtype != base.dtype:
        parts.append(f"{job.dtype} weights")
    if job.checkpointing and not base.checkpointing:
        parts.append("activation checkpointing")
    if job.batch != base.batch:
        parts.append(f"batch {job.batch} x accumulate {job.accumulate}" if job.mode == "train"
                     else f"batch {job.batch} ({base.batch // job.batch} runs one after "
                          "another)")
    if job.seq != base.seq:
        parts.append(f"sequence {job.seq}")
    if job.optimizer != base.optimizer:
        parts.append("8-bit AdamW (bitsandbytes)")
    if job.lora_rank != base.lora_rank:
        parts.append(f"LoRA rank {job.lora_rank}")
    if job.shards != base.shards:
        parts.append(f"{'FSDP/ZeRO-3' if job.mode == 'train' else 'layers split'} over "
                     f"{job.shards} GPUs")
    return " + ".join(parts)


def _smaller_batches(job: Job) -> list[Job]:
    """Micro-batches that keep the global batch (training: gradient accumulation) or, for
    inference, smaller batches run one after another; largest first."""
    out, b = [], job.batch
    while b > 1:
        b //= 2
        if job.batch % b == 0:
            out.append(replace(job, batch=b, accumulate=job.accumulate * (job.batch // b))
                       if job.mode == "train" else replace(job, batch=b))
    return out


SHORTER = 4  # a sequence is offered at most 4 times shorter: a context cut further is a new job


def _shorter(job: Job) -> list[Job]:
    out, s = [], job.seq
    while s > max(1, job.seq // SHORTER):
        s //= 2
        out.append(replace(job, seq=s))
    return out


def _ladders(shape: Shape | None, job: Job, coeffs: Coeffs,
             max_shards: int = 0) -> dict[str, list[Job]]:
    """Each kind of change as a ladder of jobs, cheapest kind first (KINDS); on a ladder, the
    mildest first (the first that fits is the one offered). `max_shards`: the GPUs there are
    to shard over (0: any number, GPUs one may buy)."""
    steps: dict[str, list[Job]] = {}
    if job.dtype == "fp32" and not job.mixed:
        steps["dtype"] = ([replace(job, mixed=True)] if job.mode == "train"
                          else [replace(job, dtype="bf16")])
    elif job.mixed:  # bf16 weights without the fp32 copy (how LoRA bases are usually trained)
        steps["dtype"] = [replace(job, mixed=False, dtype="bf16")]
    if job.mode == "train":
        if not job.checkpointing:
            steps["checkpointing"] = [replace(job, checkpointing=True)]
        steps["batch"] = _smaller_batches(job)
        if job.optimizer == "adamw":
            steps["optimizer"] = [replace(job, optimizer="adamw8bit")]
        if shape is not None and not job.lora_rank:
            steps["lora"] = [replace(job, lora_rank=int(coeffs.lora_default_rank))]
    else:
        steps["batch"] = _smaller_batches(job)
        steps["seq"] = _shorter(job)
    steps["shards"] = [replace(job, shards=n) for n in coeffs.shard_choices
                       if n > job.shards and (not max_shards or n <= max_shards)]
    return {k: v for k, v in steps.items() if v}


def options(shape: Shape | None, job: Job, gpu: Gpu,
            estimate_fn: Callable[[Job], Estimate | None],
            coeffs: Coeffs, limit: int = 3, max_calls: int = 128,
            max_shards: int = 0) -> tuple[Option, ...]:
    """When `job` does not fit `gpu`: up to `limit` changes that make it fit, each re-checked with
    estimate_fn (the same estimator), fewest and cheapest changes first: each kind of change alone
    (dtype, checkpointing, micro-batch, 8-bit AdamW, LoRA, shards; inference: dtype, batch,
    sequence, shards), then two kinds together where neither alone fits, then the kinds piled up
    in that order (each at its mildest step that fits, else its strongest). None when it fits.
    At most `max_calls` jobs are estimated (a measured estimator takes seconds a call); a job
    estimate_fn answers None for (a change it cannot make) is passed over. Sharding goes up to
    `max_shards` GPUs (0: no limit)."""
    seen: dict[Job, GpuFit | None] = {}

    def first_fit(ladder: list[Job]) -> Option | None:
        for changed in ladder:
            if changed not in seen and len(seen) >= max_calls:
                return None
            if changed not in seen:
                estimate = estimate_fn(changed)
                seen[changed] = None if estimate is None else verdict(gpu, estimate, coeffs)
            fit = seen[changed]
            if fit is not None and fit.fits:
                return Option(change=_describe(changed, job), flags=job_flags(changed, job),
                              job=changed, needed_bytes=fit.needed_bytes,
                              margin_bytes=fit.margin_bytes)
        return None

    if first_fit([job]) is not None:
        return ()
    ladders = _ladders(shape, job, coeffs, max_shards)
    alone = {kind: first_fit(ladder) for kind, ladder in ladders.items()}
    found = [o for o in alone.values() if o is not None]
    kinds = [k for k, o in alone.items() if o is None]
    search = limit + 3  # more than are shown: dominated ones are dropped below
    piled, pile = job, None
    for kind in kinds if len(found) < search else ():
        ladder = _ladders(shape, piled, coeffs, max_shards).get(kind, [])
        if (pile := first_fit(ladder)) is not None:
            break
        piled = ladder[-1] if ladder else piled
    for i, first in enumerate(kinds):
        for second in kinds[i + 1:]:
            if len(found) >= search:
                break
            for base in ladders[first][:1] + ladders[first][-1:]:  # mildest and strongest
                option = first_fit(_ladders(shape, base, coeffs, max_shards).get(second, []))
                if option is not None and all(o.job != option.job for o in found):
                    found.append(option)
                    break
    if pile is not None and all(o.job != pile.job for o in found):
        found.append(pile)

    def least(option: Option) -> Option:
        """The option with every change it does not need undone (a pile of changes may carry
        one that the others made needless: 8-bit AdamW beside LoRA), and each one it needs at
        its mildest step that fits beside the others (a pile takes each kind's strongest: batch
        1 x accumulate 4 where 2 x 2 fits)."""
        for group, kind in GROUPS.items():
            if all(getattr(option.job, f) == getattr(job, f) for f in group):
                continue
            undone = replace(option.job, **{f: getattr(job, f) for f in group})
            ladder = [undone, *_ladders(shape, undone, coeffs, max_shards).get(kind, [])]
            milder = first_fit(ladder[:ladder.index(option.job)] if option.job in ladder
                               else ladder[:1])
            option = milder if milder is not None else option
        return option

    fewest: dict[Job, Option] = {}  # two piles may come down to the same change: each once
    for option in found:
        option = least(option) if len(_changes(option, job)) > 1 else option
        fewest.setdefault(option.job, option)
    return _chosen(list(fewest.values()), job, limit)


# Job fields that change together: the weights' dtype and mixed precision; a micro-batch and
# its accumulation.
GROUPS = {("dtype", "mixed"): "dtype", ("checkpointing",): "checkpointing",
          ("batch", "accumulate"): "batch", ("seq",): "seq", ("optimizer",): "optimizer",
          ("lora_rank",): "lora", ("shards",): "shards"}  # -> its kind of change (_ladders)


def _changes(option: Option, base: Job) -> frozenset[tuple[str, object]]:
    return frozenset((f, getattr(option.job, f)) for f in Job.__dataclass_fields__
                     if getattr(option.job, f) != getattr(base, f))


def _chosen(found: list[Option], base: Job, limit: int) -> tuple[Option, ...]:
    """The options shown: none that another makes needless (one that needs a subset of its
    changes also fits); on one GPU before several (more GPUs cost more than any change on one),
    then the fewest changes; and the best sharding one among them when there is one (scaling
    out is the answer when nothing on one GPU is wanted)."""
    changes = [_changes(o, base) for o in found]
    kept = [(c, o) for c, o in zip(changes, found, strict=True)
            if not any(other < c for other in changes)]
    kept.sort(key=lambda co: (co[1].job.shards, len(co[0])))
    single = [o for _, o in kept if o.job.shards == 1]
    sharded = [o for _, o in kept if o.job.shards > 1]
    shown = single[:limit - 1] + sharded[:1] if sharded else single[:limit]
    return tuple((shown + [o for _, o in kept if o not in shown])[:limit])


# -- the measured method's answers ---------------------------------------------------------------
MAX_BYTES = 1 << 60  # no step needs an exabyte: a larger figure is a broken answer


class ProbeError(Exception):
    """The probe answered an error (`code`, one line), or something that is not an answer."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_BYTES:
        raise ProbeError("answer", f"the probe's {key!r} is not a count")
    return value


def from_answer(data: object, job: Job) -> Estimate:
    """The probe's answer (untrusted JSON, envbuild/validator/memprobe.py) as an Estimate;
    ProbeError for an error answer or a malformed one."""
    if not isinstance(data, Mapping):
        raise ProbeError("answer", "the probe printed no answer object")
    if "error" in data:
        code, message = data.get("error"), data.get("message")
        raise ProbeError(str(code)[:40] if isinstance(code, str) else "answer",
                         message[:400] if isinstance(message, str) else "no message")
    comps = data.get("components")
    if not isinstance(comps, Mapping):
        raise ProbeError("answer", "the probe's components are not an object")
    components = {name: _count(comps, name) for name in COMPONENTS if name in comps}
    how, torch = data.get("how"), data.get("torch")
    where = f"torch {torch[:64]}" if isinstance(torch, str) else "torch ?"
    return Estimate(params=_count(data, "params"), trainable=_count(data, "trainable"),
                    peak_bytes=_count(data, "peak_bytes"), components=components,
                    method="measured",
                    how=(how[:300] if isinstance(how, str) else "fake-tensor step") + f" ({where})")


def sharded(one: Estimate, job: Job, shape: Shape | None, c: Coeffs) -> Estimate:
    """A measured single-GPU step spread over job.shards GPUs (FSDP / ZeRO-3): weights,
    gradients and optimizer states divided, the layers in use gathered (the formula's rule); the
    activations stay per GPU. The one change a single fake-tensor process cannot run."""
    n = job.shards
    comps = dict(one.components)
    saved = 0
    for name in ("parameters", "gradients", "optimizer"):
        part = comps.get(name, 0)
        saved += part - part // n
        comps[name] = part // n
    notes = [f"FSDP/ZeRO-3 over {n} GPUs: the measured weights, gradients and optimizer states "
             f"/ {n} (unverified)"]
    gathered = 0
    if shape is not None:
        gathered = int((c.gathered_layers * layer_params(shape) + root_params(shape))
                       * c.dtype_bytes[compute_dtype(job)])
        comps["parameters"] = comps.get("parameters", 0) + gathered
        notes.append("two layers and the root gathered, as the formula counts them")
    else:
        notes.append("the layers FSDP gathers are not counted: envbuild does not know your "
                     "model's layers")
    return replace(one, peak_bytes=max(0, one.peak_bytes - saved + gathered), components=comps,
                   how=one.how, notes=(*one.notes, *notes))
