"""One job's memory, measured (issue 28, "will it fit"): its training or inference step run under
torch's fake tensors with torch's memory tracker (`MemTracker`), or run for real.

`python -I -c SOURCE JOB_JSON`: on stdout, the MARKER line, then one JSON line (the convention of
envbuild/engine/sbom_probe.py). Whatever the model's code prints goes to stderr while it runs.
The exit status is 0 whenever that line was printed, an error included.

JOB_JSON: {"format": 1, "model": {"entry": "/dir/file.py:FN"} | {"config": {HF config.json}},
"mode": "train"|"infer", "batch", "seq", "accumulate", "dtype": "fp32"|"bf16"|"fp16", "mixed",
"optimizer": "adamw"|"sgd"|"adamw8bit", "checkpointing", "lora_rank", "device": "auto"|"cpu",
"real", "sdpa": RULE|null, "min_torch": "X.Y"|null}.
- entry: FN() -> (model, inputs), built on the device under the fake mode (and `dtype` as the
  default dtype); the step is `model(*inputs)`, reduced to a scalar with `.float().mean()` when it
  is not one (a `.loss` or the first tensor of a tuple or ModelOutput first), `backward()`, the
  optimizer's step, `zero_grad(set_to_none=True)`. Inference: one `model(*inputs)` under no_grad.
- config: `transformers.AutoModelForCausalLM.from_config` (sdpa attention); the step is
  `model(input_ids=ids, labels=ids).loss` on random ids (batch, seq); inference a prefill with
  `use_cache=True` (its cache reported as `kv_cache`).
- Training runs two steps (the second has the optimizer's states); the peak is the run's.
- mixed: fp32 weights, the forward under bf16 autocast. lora_rank r > 0: the weights frozen,
  rank-r adapters on the q/k/v/o/gate/up/down projections (every Linear when none is so named).
- device "auto": the GPU when torch sees one (a fake CUDA step), else the CPU. On the CPU, RULE
  (a matrix fact; the probe holds none) says which attention kernel CUDA would pick for each
  `scaled_dot_product_attention` call: {"backends": [{"name", "dtypes", "max_head_dim", "mask",
  "gqa", "dropout"}, ...]}, the first backend that admits the call's dtype (autocast's when on),
  head dim, mask, grouped heads (fewer key than query heads) and dropout, else "math". Where CUDA
  would take math, the CPU call runs under `sdpa_kernel(SDPBackend.MATH)`, so its memory is
  math's; flash and memory-efficient calls keep the CPU's flash kernel. The optimizer uses its
  foreach implementation then, as on CUDA.
- real: the same step on real tensors; on CUDA `peak_bytes` is `torch.cuda.max_memory_allocated()`
  (`tracker_peak` MemTracker's), on the CPU MemTracker's and `rss_growth` the growth of this
  process's ru_maxrss over its resident size before the model was built.

Output: {"format", "params", "trainable", "peak_bytes", "components" (parameters, gradients,
optimizer, activations, kv_cache, temporaries, buffers, other), "how", "device", "torch",
"seconds", "attention"} or {"format", "error": CODE, "message"}; CODE one of job, no-torch,
no-memtracker, no-transformers, no-bitsandbytes, entry, config, unsupported, untraceable (the
step raised), out-of-memory, failed (anything else).

Standalone: the standard library and torch (transformers and bitsandbytes when they are
there); nothing of envbuild. Bounded: the job, the entry file, every message."""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import stat
import sys
import time
import types
from collections.abc import Callable, Iterator
from typing import Any

FORMAT = 1
MARKER = "::envbuild-memprobe-output-5d0c2b::"  # a line of its own; JSON never holds a newline
MAX_ARG = 128 << 10  # one argv string on Linux (MAX_ARG_STRLEN): this source and the job each
MAX_JOB = MAX_ARG - 1  # characters of JOB_JSON
MAX_SOURCE = 4 << 20  # bytes of the entry file
MAX_MSG = 400
MAX_INPUTS = 64
MAX_BATCH = 1 << 20
MAX_SEQ = 1 << 22
MAX_RANK = 1 << 16
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
OPTIMIZERS = ("adamw", "sgd", "adamw8bit")
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
COMPONENTS = {"Parameter": "parameters", "Gradient": "gradients", "Optstate": "optimizer",
              "Activation": "activations", "Temp": "temporaries", "Buffer": "buffers",
              "Other": "other"}
ORDER = ("parameters", "gradients", "optimizer", "activations", "kv_cache", "temporaries",
         "buffers", "other")


class Refused(Exception):
    """The probe's answer is an error: `code` and a one-line message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = cut(message)


def cut(text: object, limit: int = MAX_MSG) -> str:
    one = " ".join(str(text).split())
    return one if len(one) <= limit else one[: limit - 3] + "..."


def said(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of what it says."""
    lines = str(exc).strip().splitlines()
    return cut(f"{type(exc).__name__}: {lines[0] if lines else ''}")


# --- the job -----------------------------------------------------------------------------------


def _int(job: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = job.get(key, default)
    if type(value) is not int or not low <= value <= high:
        raise Refused("job", f"{key} must be a whole number from {low} to {high}")
    return value


def _bool(job: dict[str, Any], key: str) -> bool:
    value = job.get(key, False)
    if type(value) is not bool:
        raise Refused("job", f"{key} must be true or false")
    return value


def _choice(job: dict[str, Any], key: str, default: str, allowed: tuple[str, ...]) -> str:
    value = job.get(key, default)
    if value not in allowed:
        raise Refused("job", f"{key} must be one of {', '.join(allowed)}")
    return str(value)


def sdpa_rule(value: object) -> list[dict[str, Any]] | None:
    """The CUDA attention rule, checked: its backends in order of preference."""
    if value is None:
        return None
    backends = value.get("backends") if isinstance(value, dict) else None
    if not isinstance(backends, list) or len(backends) > 8:
        raise Refused("job", "sdpa must be {\"backends\": [...]} (at most 8)")
    out = []
    for b in backends:
        ok = (isinstance(b, dict) and isinstance(b.get("name"), str) and b["name"].isidentifier()
              and isinstance(b.get("dtypes"), list) and all(d in DTYPES for d in b["dtypes"])
              and (b.get("max_head_dim") is None or type(b.get("max_head_dim")) is int)
              and all(type(b.get(k, True)) is bool for k in ("mask", "gqa", "dropout")))
        if not ok:
            raise Refused("job", "each sdpa backend needs a name, dtypes (fp32, bf16, fp16), "
                          "max_head_dim (a number or null) and mask/gqa/dropout (true or false)")
        out.append({"name": b["name"][:32], "dtypes": list(b["dtypes"]),
                    "max_head_dim": b.get("max_head_dim"), "mask": b.get("mask", True),
                    "gqa": b.get("gqa", True), "dropout": b.get("dropout", True)})
    return out


def parse_job(text: str) -> dict[str, Any]:
    """JOB_JSON checked and completed with the defaults; Refused("job", ...) when it is not one."""
    if len(text) > MAX_JOB:
        raise Refused("job", f"the job is over {MAX_JOB} characters")
    try:
        job = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise Refused("job", f"the job is not JSON ({said(exc)})") from None
    if not isinstance(job, dict) or job.get("format") != FORMAT:
        raise Refused("job", f"the job must be a JSON object with \"format\": {FORMAT}")
    model = job.get("model")
    if not isinstance(model, dict) or len(model) != 1 or not (
            isinstance(model.get("entry"), str) or isinstance(model.get("config"), dict)):
        raise Refused("job", "model must be {\"entry\": \"FILE.py:FN\"} or {\"config\": {...}}")
    min_torch = job.get("min_torch")
    if min_torch is not None and not (isinstance(min_torch, str) and _version(min_torch)):
        raise Refused("job", "min_torch must be a version such as \"2.5\" or null")
    return {
        "model": model, "min_torch": min_torch,
        "mode": _choice(job, "mode", "train", ("train", "infer")),
        "batch": _int(job, "batch", 1, 1, MAX_BATCH), "seq": _int(job, "seq", 2048, 1, MAX_SEQ),
        "dtype": _choice(job, "dtype", "bf16", tuple(DTYPES)),
        "mixed": _bool(job, "mixed"), "checkpointing": _bool(job, "checkpointing"),
        "optimizer": _choice(job, "optimizer", "adamw", OPTIMIZERS),
        "lora_rank": _int(job, "lora_rank", 0, 0, MAX_RANK),
        "device": _choice(job, "device", "auto", ("auto", "cpu")),
        "real": _bool(job, "real"), "sdpa": sdpa_rule(job.get("sdpa")),
        "accumulate": _int(job, "accumulate", 1, 1, MAX_BATCH),
    }


def _version(text: str) -> tuple[int, ...]:
    """"2.13.0+cpu" -> (2, 13, 0); () when it does not start with numbers."""
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = ""
        for ch in piece:
            if not ch.isdigit():
                break
            digits += ch
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


# --- torch and its tracker ---------------------------------------------------------------------


def load_torch(min_torch: str | None) -> tuple[Any, Any]:
    """torch and its MemTracker class (a private API: refused below `min_torch`, when it does
    not import, or when it lacks what the two-step run calls)."""
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:  # an image without torch, or a broken one
        raise Refused("no-torch", f"torch does not import here: {said(exc)}") from None
    if min_torch and _version(torch.__version__) < _version(min_torch):
        raise Refused("no-memtracker", f"torch {torch.__version__} is older than {min_torch}, "
                      "the first with torch.distributed._tools.mem_tracker")
    try:
        tracker = importlib.import_module("torch.distributed._tools.mem_tracker").MemTracker
        importlib.import_module("torch._subclasses.fake_tensor")
    except Exception as exc:
        raise Refused("no-memtracker", f"torch {torch.__version__} has no MemTracker: "
                      f"{said(exc)}") from None
    missing = [n for n in ("track_external", "reset_mod_stats", "get_tracker_snapshot")
               if not hasattr(tracker, n)]
    if missing:
        raise Refused("no-memtracker", f"torch {torch.__version__}'s MemTracker lacks "
                      f"{', '.join(missing)}")
    return torch, tracker


@contextlib.contextmanager
def default_dtype(torch: Any, dtype: Any) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


class _NoHook:
    def remove(self) -> None:
        pass


@contextlib.contextmanager
def frozen_parameters_tracked(torch: Any) -> Iterator[None]:
    """MemTracker puts a gradient hook on every parameter of a module it enters, which torch
    refuses for a frozen one (LoRA's base weights): a hook that can never fire is skipped."""
    tensor = torch.Tensor
    names = ("register_hook", "register_post_accumulate_grad_hook")
    originals = {n: tensor.__dict__[n] for n in names if n in tensor.__dict__}

    def patched(original: Any) -> Any:
        def register(self: Any, hook: Any) -> Any:
            return original(self, hook) if self.requires_grad else _NoHook()
        return register

    for n, original in originals.items():
        setattr(tensor, n, patched(original))
    try:
        yield
    finally:
        for n, original in originals.items():
            setattr(tensor, n, original)


@contextlib.contextmanager
def one_sequence_a_row(active: bool) -> Iterator[None]:
    """transformers (masking_utils.find_packed_sequence_indices, 4.53 on) looks for several
    sequences packed in one row of the position ids when a step has no cache (training with
    checkpointing turns it off): on real tensors the config step's positions (0 to seq - 1 in
    every row) are one sequence and no mask is made, so SDPA runs causal; a fake tensor's values
    cannot be read, so transformers takes the rows as packed and materialises a mask the real
    step never has (CUDA's memory-efficient kernel and the saved mask instead of flash). While
    `active` (the config's own step, under fake tensors), the answer the real step gets: none."""
    module = sys.modules.get("transformers.masking_utils") if active else None
    original = getattr(module, "find_packed_sequence_indices", None)
    if module is None or original is None:
        yield
        return
    module.find_packed_sequence_indices = lambda *_args, **_kwargs: None  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.find_packed_sequence_indices = original  # type: ignore[attr-defined]


# --- CUDA's attention backend, emulated on the CPU ---------------------------------------------


def cuda_backend(rule: list[dict[str, Any]], dtype: str, head_dim: int, mask: bool, gqa: bool,
                 dropout: bool) -> str:
    """The backend CUDA would pick for one call (the first the rule admits), else "math"."""
    for b in rule:
        if (dtype in b["dtypes"] and (b["max_head_dim"] is None or head_dim <= b["max_head_dim"])
                and (b["mask"] or not mask) and (b["gqa"] or not gqa)
                and (b["dropout"] or not dropout)):
            return str(b["name"])
    return "math"


def _dtype_name(torch: Any, dtype: Any) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "")


@contextlib.contextmanager
def emulated_attention(torch: Any, rule: list[dict[str, Any]] | None,
                       counts: dict[str, int]) -> Iterator[None]:
    """torch.nn.functional.scaled_dot_product_attention replaced while the step runs (and the
    entry file is read: a `from torch.nn.functional import ...` there gets the replacement): each
    call counted by the backend CUDA would take, and run under the math kernel where that is math.
    Without a rule, the calls are only counted (as "native": the device's own choice)."""
    functional = torch.nn.functional
    original = functional.scaled_dot_product_attention
    attention = importlib.import_module("torch.nn.attention")

    def arg(args: tuple[Any, ...], kwargs: dict[str, Any], at: int, name: str,
            default: Any) -> Any:
        return args[at] if len(args) > at else kwargs.get(name, default)

    def replacement(*args: Any, **kwargs: Any) -> Any:
        if rule is None:
            counts["native"] = counts.get("native", 0) + 1
            return original(*args, **kwargs)
        q, k = arg(args, kwargs, 0, "query", None), arg(args, kwargs, 1, "key", None)
        dtype = q.dtype
        if torch.is_autocast_enabled(q.device.type):
            dtype = torch.get_autocast_dtype(q.device.type)
        gqa = q.dim() >= 3 and k.dim() >= 3 and q.shape[-3] != k.shape[-3]
        choice = cuda_backend(rule, _dtype_name(torch, dtype), int(q.shape[-1]),
                              arg(args, kwargs, 3, "attn_mask", None) is not None, gqa,
                              bool(arg(args, kwargs, 4, "dropout_p", 0.0)))
        counts[choice] = counts.get(choice, 0) + 1
        if choice != "math":
            return original(*args, **kwargs)
        with attention.sdpa_kernel(attention.SDPBackend.MATH):
            return original(*args, **kwargs)

    functional.scaled_dot_product_attention = replacement
    try:
        yield
    finally:
        functional.scaled_dot_product_attention = original


# --- the model ---------------------------------------------------------------------------------


def entry_function(spec: str) -> Callable[[], Any]:
    """FN of "FILE.py:FN", the file read bounded and run as a module of its own."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name.isidentifier():
        raise Refused("entry", "the entry must be FILE.py:FUNCTION")
    try:
        st = os.stat(path)
    except (OSError, ValueError) as exc:
        raise Refused("entry", f"cannot read the entry file: {said(exc)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise Refused("entry", "the entry file is not a regular file")
    if st.st_size > MAX_SOURCE:
        raise Refused("entry", f"the entry file is over {MAX_SOURCE >> 20} MiB")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SOURCE + 1)
        if len(data) > MAX_SOURCE:
            raise Refused("entry", f"the entry file is over {MAX_SOURCE >> 20} MiB")
        code = compile(data, path, "exec", dont_inherit=True)
    except Refused:
        raise
    except (OSError, SyntaxError, ValueError) as exc:
        raise Refused("entry", f"cannot load the entry file: {said(exc)}") from None
    module = types.ModuleType("envbuild_fit_entry")
    module.__file__ = path
    sys.modules[module.__name__] = module
    folder = os.path.dirname(os.path.abspath(path))
    if folder not in sys.path:
        sys.path.insert(0, folder)  # its own helper modules beside it
    try:
        exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        raise Refused("entry", f"running the entry file failed: {said(exc)}") from None
    fn = module.__dict__.get(name)
    if not callable(fn):
        raise Refused("entry", f"the entry file defines no function {name}")
    return fn  # type: ignore[no-any-return]


def entry_model(torch: Any, fn: Callable[[], Any]) -> tuple[Any, tuple[Any, ...]]:
    try:
        made = fn()
    except (Exception, SystemExit) as exc:
        raise Refused("entry", f"the entry function failed: {said(exc)}") from None
    if not (isinstance(made, (tuple, list)) and len(made) == 2):
        raise Refused("entry", "the entry function must return (model, inputs), got "
                      f"{cut(type(made).__name__, 60)}")
    model, inputs = made
    if not isinstance(model, torch.nn.Module):
        raise Refused("entry", "the entry function's model is not a torch.nn.Module but a "
                      f"{cut(type(model).__name__, 60)}")
    if not (isinstance(inputs, (tuple, list)) and 0 < len(inputs) <= MAX_INPUTS
            and all(isinstance(t, torch.Tensor) for t in inputs)):
        raise Refused("entry", "the entry function's inputs must be a tuple or list of 1 to "
                      f"{MAX_INPUTS} tensors")
    return model, tuple(inputs)


def config_model(job: dict[str, Any]) -> Any:
    try:
        transformers = importlib.import_module("transformers")
    except Exception as exc:
        raise Refused("no-transformers", f"transformers does not import here: {said(exc)}"
                      ) from None
    cfg = {k: v for k, v in job["model"]["config"].items() if k not in ("auto_map", "dtype",
                                                                         "torch_dtype")}
    model_type = cfg.pop("model_type", None)
    if not isinstance(model_type, str):
        raise Refused("config", "the config has no model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **cfg)
        # the weights' dtype is the default one set around this call (the config's own
        # torch_dtype/dtype is left out): the keyword's name changed across transformers versions
        model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    except Exception as exc:
        raise Refused("config", f"transformers cannot build the model: {said(exc)}") from None
    if job["checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def add_lora(torch: Any, model: Any, rank: int) -> int:
    """Freeze the weights, wrap the target Linear layers with rank-`rank` adapters (A small
    random, B zero, as LoRA starts); the number of layers wrapped. As PEFT does by default
    (autocast_adapter_dtype): the adapters are fp32 whatever the base's dtype, their input is
    cast to fp32 and their sum cast back."""
    nn = torch.nn
    module: Any = nn.Module

    class LoraLinear(module):  # type: ignore[misc]
        def __init__(self, base: Any) -> None:
            super().__init__()
            self.base = base
            w = base.weight
            f32 = torch.float32
            self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, dtype=f32,
                                                   device=w.device).normal_(std=0.02))
            self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, dtype=f32,
                                                   device=w.device))

        def forward(self, x: Any) -> Any:
            y = self.base(x)
            return (y + (x.to(self.lora_a.dtype) @ self.lora_a.t()) @ self.lora_b.t()).to(y.dtype)

    model.requires_grad_(False)
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    chosen = [(n, m) for n, m in linears if n.rsplit(".", 1)[-1] in LORA_TARGETS] or linears
    for name, layer in chosen:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, LoraLinear(layer))
    return len(chosen)


# --- the step ----------------------------------------------------------------------------------


def scalar(torch: Any, out: Any) -> Any:
    """What backward() starts from: `.loss`, the tensor, or the first tensor of a tuple or
    mapping (a ModelOutput), reduced with .float().mean() when it is not a scalar."""
    loss = getattr(out, "loss", None)
    if not isinstance(loss, torch.Tensor):
        loss = out
        if isinstance(out, dict):
            loss = next((v for v in out.values() if isinstance(v, torch.Tensor)), None)
        elif isinstance(out, (tuple, list)):
            loss = next((v for v in out if isinstance(v, torch.Tensor)), None)
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"the model returned no tensor ({type(out).__name__})")
    return loss if loss.dim() == 0 else loss.float().mean()


def optimizer(torch: Any, job: dict[str, Any], params: list[Any], cuda_like: bool) -> Any:
    foreach = True if cuda_like else None  # CUDA's default; the CPU's is the per-tensor loop
    if job["optimizer"] == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=foreach)
    if job["optimizer"] == "adamw8bit":
        try:
            bnb = importlib.import_module("bitsandbytes.optim")
        except Exception as exc:
            raise Refused("no-bitsandbytes", f"bitsandbytes does not import here: {said(exc)}"
                          ) from None
        return bnb.AdamW8bit(params, lr=1e-4)
    return torch.optim.AdamW(params, lr=1e-4, foreach=foreach)


def kv_bytes(torch: Any, out: Any) -> int:
    """The bytes of an output's KV cache (transformers' Cache object or legacy tuples; under
    "cache", or "past_key_values" before transformers 5 renamed it)."""
    cache = None
    if isinstance(out, dict):  # a ModelOutput; its old attribute name warns when read
        cache = out["cache"] if "cache" in out else out.get("past_key_values")
    tensors: list[Any] = []
    for layer in getattr(cache, "layers", None) or []:
        tensors += [getattr(layer, "keys", None), getattr(layer, "values", None)]
    if isinstance(cache, (tuple, list)):
        for layer in cache:
            tensors += list(layer) if isinstance(layer, (tuple, list)) else [layer]
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            st = t.untyped_storage()
            seen[id(st)] = st.nbytes()  # an id is unique while the tensor (kept here) lives
    return sum(seen.values())


def measure(job: dict[str, Any]) -> dict[str, Any]:
    """The job's step under the tracker: the probe's answer (Refused for an error)."""
    start = time.perf_counter()
    torch, tracker_cls = load_torch(job["min_torch"])
    gpu = job["device"] == "auto" and bool(torch.cuda.is_available())
    dev = torch.device("cuda" if gpu else "cpu")
    rule = None if gpu else job["sdpa"]
    fake_mode: Any = (contextlib.nullcontext() if job["real"] else
                      importlib.import_module("torch._subclasses.fake_tensor").FakeTensorMode())
    weights = torch.float32 if job["mixed"] else getattr(torch, DTYPES[job["dtype"]])
    train = job["mode"] == "train"
    counts: dict[str, int] = {}
    rss0 = _rss_now() if job["real"] and not gpu else 0
    with emulated_attention(torch, rule, counts):
        fn = entry_function(job["model"]["entry"]) if "entry" in job["model"] else None
        with fake_mode:
            model, inputs, adapted = build(torch, job, dev, weights, fn)
            params = list(model.parameters())
            trainable = [p for p in params if p.requires_grad]
            if train and not trainable:
                raise Refused("unsupported", "the model has no trainable parameter")
            opt = optimizer(torch, job, trainable, gpu or rule is not None) if train else None
            autocast = (torch.autocast(dev.type, dtype=torch.bfloat16) if job["mixed"]
                        else contextlib.nullcontext())
            tracker = tracker_cls()
            tracker.track_external(model, *([opt] if opt is not None else []), *inputs)
            if job["real"] and gpu:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            kv = 0
            try:
                with frozen_parameters_tracked(torch), \
                        one_sequence_a_row(fn is None and not job["real"]), tracker:
                    for i in range(2 if train else 1):
                        out = one_step(torch, model, inputs, fn is None, train, opt, autocast,
                                       min(job["accumulate"], 2), tracker.reset_mod_stats)
                        if i == 0:
                            tracker.reset_mod_stats()
                    snap = tracker.get_tracker_snapshot("peak")
                if not train and fn is None:
                    kv = kv_bytes(torch, out)
            except MemoryError as exc:
                raise Refused("out-of-memory", f"the step ran out of memory: {said(exc)}"
                              ) from None
            except Exception as exc:
                raise Refused("untraceable", f"the step failed: {said(exc)}") from None
    per: dict[Any, Any] = next((v for k, v in snap.items() if torch.device(k).type == dev.type),
                               {})
    components, peak = components_of(per, kv)
    answer: dict[str, Any] = {
        "format": FORMAT, "params": sum(p.numel() for p in params),
        "trainable": sum(p.numel() for p in trainable) if train else 0, "peak_bytes": peak,
        "components": components, "device": dev.type, "torch": cut(torch.__version__, 64),
        "attention": dict(sorted(counts.items())[:8]),
        "how": how(job, gpu, rule, counts, adapted)}
    if job["real"] and gpu:
        torch.cuda.synchronize()
        answer["tracker_peak"] = peak
        answer["peak_bytes"] = int(torch.cuda.max_memory_allocated())
    elif job["real"]:
        answer["rss_growth"] = max(0, _maxrss() - rss0)
    answer["seconds"] = round(time.perf_counter() - start, 3)
    return answer


def build(torch: Any, job: dict[str, Any], dev: Any, weights: Any,
          fn: Callable[[], Any] | None) -> tuple[Any, tuple[Any, ...], int]:
    """The model and its inputs on `dev` (`weights` the default dtype while they are made),
    checkpointing and LoRA applied, in train or eval mode; and how many layers LoRA adapted."""
    with torch.device(dev), default_dtype(torch, weights):
        if fn is not None:
            model, inputs = entry_model(torch, fn)
        else:
            model = config_model(job)
            inputs = (torch.randint(0, int(model.config.vocab_size),
                                    (job["batch"], job["seq"])),)
    if fn is not None and job["checkpointing"]:
        if not hasattr(model, "gradient_checkpointing_enable"):
            raise Refused("unsupported", "checkpointing needs a model with "
                          "gradient_checkpointing_enable() (transformers'); use "
                          "torch.utils.checkpoint in the model itself instead")
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    adapted = 0
    if job["lora_rank"]:
        with torch.device(dev):
            adapted = add_lora(torch, model, job["lora_rank"])
    model.train(job["mode"] == "train")
    return model, inputs, adapted


def components_of(per: dict[Any, Any], kv: int) -> tuple[dict[str, int], int]:
    """MemTracker's peak snapshot of one device in COMPONENTS' names (the KV cache taken out
    of the activations it is counted in), and the peak."""
    components = {name: 0 for name in ORDER}
    for key, value in per.items():
        name = str(getattr(key, "value", key))  # a _MemRefType (a str enum), or "Total"
        if name != "Total":
            components[COMPONENTS.get(name, "other")] += int(value)
    if kv:
        kv = min(kv, components["activations"])
        components["activations"] -= kv
        components["kv_cache"] = kv
    total = next((int(v) for k, v in per.items() if str(getattr(k, "value", k)) == "Total"),
                 sum(components.values()))
    return components, total


def one_step(torch: Any, model: Any, inputs: tuple[Any, ...], config: bool, train: bool,
             opt: Any, autocast: Any, micro: int = 1,
             between: Callable[[], None] = lambda: None) -> Any:
    """One step; training: `micro` forward/backward passes before the optimizer's step (with
    gradient accumulation the second pass runs with the first's gradients alive, and every later
    one is alike, so two stand for any number; `between` runs between two passes: the tracker
    takes one forward per module between its resets)."""
    if not train:
        with torch.no_grad(), autocast:
            return (model(input_ids=inputs[0], use_cache=True) if config
                    else model(*inputs))
    for i in range(micro):
        if i:
            between()
        with autocast:  # the outputs (the logits) go before backward, as in `model(...).loss`
            loss = scalar(torch, model(input_ids=inputs[0], labels=inputs[0]) if config
                          else model(*inputs))
        loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return None


def how(job: dict[str, Any], gpu: bool, rule: list[dict[str, Any]] | None,
        counts: dict[str, int], adapted: int) -> str:
    steps = "2 training steps" if job["mode"] == "train" else "1 inference step"
    kind = "real" if job["real"] else "fake"
    text = f"{kind} {'CUDA' if gpu else 'CPU'} {steps} under MemTracker"
    if job["real"] and gpu:
        text += "; peak: torch.cuda.max_memory_allocated()"
    elif job["real"]:
        text += "; also ru_maxrss growth"
    calls = ", ".join(f"{n} x{c}" for n, c in sorted(counts.items()))
    if rule is not None:
        text += f"; CUDA attention emulated ({calls or 'no attention call'})"
    elif calls:
        text += f"; attention on this device's own kernels ({calls})"
    if adapted:
        text += f"; LoRA rank {job['lora_rank']} on {adapted} Linear layers"
    return text


def _maxrss() -> int:
    resource = importlib.import_module("resource")
    peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB on Linux


def _rss_now() -> int:
    """This process's resident bytes now (/proc/self/statm), else its ru_maxrss so far."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read(4096).split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return _maxrss()


def answer(argv: list[str]) -> dict[str, Any]:
    try:
        if len(argv) != 1:
            raise Refused("job", "usage: memprobe JOB_JSON")
        return measure(parse_job(argv[0]))
    except Refused as exc:
        return {"format": FORMAT, "error": exc.code, "message": exc.message}
    except Exception as exc:  # building the adapters, the inputs...: still one answer
        return {"format": FORMAT, "error": "failed", "message": said(exc)}


def main(argv: list[str]) -> int:
    """The answer for argv's job, printed after MARKER; what the model prints goes to stderr."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        result = answer(argv)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    sys.stdout.write("\n" + MARKER + "\n" + json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
