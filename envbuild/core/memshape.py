"""A decoder-only transformer's shape from a Hugging Face `config.json`, and its exact parameter
count. Pure: the caller reads the file (bounded); this module parses the text and checks it.

Llama, Mistral and Qwen2 (the `LlamaForCausalLM` family as transformers builds it): token
embeddings, per layer q/k/v/o projections (GQA: k and v have num_key_value_heads heads), a SwiGLU
MLP (gate, up, down) and two RMSNorm weights, a final RMSNorm and an lm_head unless it is tied to
the embeddings. Biases where the family has them: Llama's `attention_bias` (q, k, v, o) and
`mlp_bias`, Qwen2's q/k/v always. Mixture-of-experts configs are refused.

Sliding-window attention, as transformers 5.24 reads it (models/mistral/configuration_mistral.py,
models/qwen2/configuration_qwen2.py): Mistral's `sliding_window` (4096 when the key is absent, none
when null) on every layer; Qwen2's only with `use_sliding_window` true, on the layers its
`layer_types` names "sliding_attention", else on layers max_window_layers (28 when absent) and up.
It does not change the parameters, only the attention call (core/memory.py).

A `quantization_config` (GPTQ, AWQ, bitsandbytes...) is noted, not modelled: the weights are
counted at the step's dtype (Shape.quantized, Shape.quant_method).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from envbuild.common.boundedio import CONFIG_BYTES, parse_json
from envbuild.common.errors import UsageError
from envbuild.common.record import record

# model_type -> (q/k/v always biased, reads attention_bias, reads mlp_bias)
FAMILIES: Mapping[str, tuple[bool, bool, bool]] = {
    "llama": (False, True, True),
    "mistral": (False, False, False),
    "qwen2": (True, False, False),
}
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
            "num_experts_per_tok")
# Input bounds, not facts: far beyond any published model, small enough that every product the
# formula makes stays a reasonable Python int.
_LIMITS = {"hidden_size": 1 << 20, "intermediate_size": 1 << 22, "num_hidden_layers": 1 << 14,
           "num_attention_heads": 1 << 14, "num_key_value_heads": 1 << 14, "head_dim": 1 << 14,
           "vocab_size": 1 << 24, "max_position_embeddings": 1 << 30,
           "sliding_window": 1 << 30, "max_window_layers": 1 << 14}
# transformers' defaults when a config leaves the key out (MistralConfig.sliding_window,
# Qwen2Config.sliding_window and max_window_layers, transformers 5.24)
MISTRAL_WINDOW = 4096
QWEN2_WINDOW = 4096
QWEN2_MAX_WINDOW_LAYERS = 28
QUANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")  # a quant_method shown as it is
NEEDED = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "vocab_size")
HINT = ("give a Hugging Face config.json of a Llama, Mistral or Qwen2 model: "
        + ", ".join(NEEDED) + " as positive integers (num_key_value_heads, head_dim optional)")


@record
class Shape:
    """What the memory formula reads of a model (names as transformers' configs spell them)."""

    model_type: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    max_positions: int = 0  # 0: not given
    torch_dtype: str = ""  # as the config names it ("bfloat16"), "" = not given
    sliding_window: int = 0  # tokens a sliding-window layer attends to; 0: none
    sliding_layers: int = 0  # how many layers use it
    quantized: bool = False  # the config carries a quantization_config (not modelled)
    quant_method: str = ""  # its quant_method, escaped and cut; "" when it names none

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def gqa(self) -> bool:
        return self.kv_heads < self.heads


def _bad(where: str, what: str) -> UsageError:
    return UsageError(f"{where}: {what}", HINT)


def _int(doc: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = doc.get(key)
    if value is None:
        if default is None:
            raise _bad(where, f"{key} is missing")
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(where, f"{key} must be an integer, not {type(value).__name__}")
    if not 0 < value <= _LIMITS[key]:
        digits = str(value)  # a JSON number may have thousands of digits: the line stays short
        size = len(digits.lstrip("-"))
        shown = digits if len(digits) <= 24 else f"{digits[:12]}... ({size} digits)"
        raise _bad(where, f"{key} = {shown} is out of range (1 to {_LIMITS[key]})")
    return value


def _bool(doc: Mapping[str, Any], key: str, where: str) -> bool:
    value = doc.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(where, f"{key} must be true or false, not {type(value).__name__}")
    return value


def _dtype(doc: Mapping[str, Any]) -> str:
    value = doc.get("torch_dtype", doc.get("dtype"))
    return value[:32] if isinstance(value, str) and value.isidentifier() else ""


def _sliding(doc: Mapping[str, Any], model_type: str, layers: int, where: str) -> tuple[int, int]:
    """(window, layers that use it) as transformers builds the model; (0, 0) for none."""
    if model_type == "mistral":
        if "sliding_window" not in doc:
            return MISTRAL_WINDOW, layers
        window = _int(doc, "sliding_window", where, 0)
        return (window, layers) if window else (0, 0)
    if model_type != "qwen2" or not _bool(doc, "use_sliding_window", where):
        return 0, 0
    window = (_int(doc, "sliding_window", where, 0) if "sliding_window" in doc
              else QWEN2_WINDOW)
    if not window:
        return 0, 0
    kinds = doc.get("layer_types")
    if kinds is not None:
        if not (isinstance(kinds, list) and len(kinds) == layers
                and all(isinstance(k, str) for k in kinds)):
            raise _bad(where, f"layer_types must be a list of num_hidden_layers = {layers} "
                              "strings")
        return window, sum(k == "sliding_attention" for k in kinds)
    first = doc.get("max_window_layers", QWEN2_MAX_WINDOW_LAYERS)
    if isinstance(first, bool) or not isinstance(first, int) \
            or not 0 <= first <= _LIMITS["max_window_layers"]:
        raise _bad(where, f"max_window_layers must be an integer from 0 to "
                          f"{_LIMITS['max_window_layers']}")
    sliding = max(0, layers - first)
    return (window, sliding) if sliding else (0, 0)


def _quant_name(method: object) -> str:
    """A quant_method as a report shows it: a plain name as it is; any other text cut to 32
    characters and escaped (ascii(): no control character or terminal escape gets through);
    "" for no text."""
    if not isinstance(method, str) or not method:
        return ""
    if QUANT_NAME.fullmatch(method):
        return method
    return ascii(method[:32]) + ("..." if len(method) > 32 else "")


def _quantized(doc: Mapping[str, Any]) -> tuple[bool, str]:
    """(whether the config says the checkpoint is quantized, its quant_method as shown). Any
    value but null, false or {} counts (a list, a string, a number: the note errs on telling)."""
    value = doc.get("quantization_config")
    if value is None or value is False or value == {}:
        return False, ""
    return True, _quant_name(value.get("quant_method") if isinstance(value, dict) else None)


def shape_of(doc: Mapping[str, Any], where: str) -> Shape:
    """A parsed config.json (a mapping) -> Shape; UsageError for anything else."""
    model_type = doc.get("model_type")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        shown = repr(model_type)[:40] if model_type is not None else "missing"
        raise UsageError(f"{where}: model_type {shown} is not one envbuild can count",
                         "fit --config knows " + ", ".join(FAMILIES)
                         + " (decoder-only); for another model use fit --entry FILE.py:FN")
    moe = [k for k in MOE_KEYS if doc.get(k) not in (None, 0, 1, False)]
    if moe:
        raise UsageError(f"{where}: a mixture-of-experts config ({moe[0]}): not supported yet",
                         "fit --config counts dense decoders; for an MoE model use fit --entry")
    hidden = _int(doc, "hidden_size", where)
    heads = _int(doc, "num_attention_heads", where)
    kv_heads = _int(doc, "num_key_value_heads", where, heads)
    if kv_heads > heads or heads % kv_heads:
        raise _bad(where, f"num_key_value_heads = {kv_heads} does not divide "
                          f"num_attention_heads = {heads}")
    if doc.get("head_dim") is None and hidden % heads:
        raise _bad(where, f"hidden_size = {hidden} is not a multiple of num_attention_heads = "
                          f"{heads} (give head_dim)")
    head_dim = _int(doc, "head_dim", where, hidden // heads)
    always_qkv, reads_attention_bias, reads_mlp_bias = FAMILIES[model_type]
    attention_bias = _bool(doc, "attention_bias", where) if reads_attention_bias else False
    layers = _int(doc, "num_hidden_layers", where)
    window, sliding = _sliding(doc, model_type, layers, where)
    quantized, quant_method = _quantized(doc)
    return Shape(model_type=model_type, hidden=hidden,
                 intermediate=_int(doc, "intermediate_size", where),
                 layers=layers, heads=heads, kv_heads=kv_heads,
                 head_dim=head_dim, vocab=_int(doc, "vocab_size", where),
                 tied=_bool(doc, "tie_word_embeddings", where),
                 qkv_bias=always_qkv or attention_bias, o_bias=attention_bias,
                 mlp_bias=_bool(doc, "mlp_bias", where) if reads_mlp_bias else False,
                 max_positions=_int(doc, "max_position_embeddings", where, 0),
                 torch_dtype=_dtype(doc), sliding_window=window, sliding_layers=sliding,
                 quantized=quantized, quant_method=quant_method)


def parse_config(text: str, where: str) -> Shape:
    """A config.json's text -> Shape. Bounded (size, nesting); UsageError, one line, for text that
    is not JSON, not an object, or not a dense Llama/Mistral/Qwen2 config."""
    if len(text) > CONFIG_BYTES:
        raise _bad(where, f"{len(text)} characters: a config.json is read up to {CONFIG_BYTES}")
    try:
        doc = parse_json(text)
    except (ValueError, RecursionError) as exc:  # TooDeep and JSONDecodeError are ValueErrors
        raise _bad(where, f"not valid JSON ({str(exc).splitlines()[0][:120]})") from None
    if not isinstance(doc, dict):
        raise _bad(where, f"a config.json is a JSON object, not {type(doc).__name__}")
    return shape_of(doc, where)


def layer_params(shape: Shape) -> int:
    """One decoder layer's parameters: attention, MLP, its two RMSNorm weights."""
    h, q, kv, i = shape.hidden, shape.q_width, shape.kv_width, shape.intermediate
    attention = h * q + 2 * h * kv + q * h
    if shape.qkv_bias:
        attention += q + 2 * kv
    if shape.o_bias:
        attention += h
    mlp = 3 * h * i + ((2 * i + h) if shape.mlp_bias else 0)
    return attention + mlp + 2 * h


def linear_params(shape: Shape) -> int:
    """The parameters that go through a matmul (every Linear's weight and bias, lm_head's, tied or
    not): what autocast casts to 16 bits."""
    return shape.layers * (layer_params(shape) - 2 * shape.hidden) + shape.vocab * shape.hidden


def root_params(shape: Shape) -> int:
    """Outside the layers: embeddings, final norm, lm_head unless tied."""
    return shape.vocab * shape.hidden * (1 if shape.tied else 2) + shape.hidden


def param_count(shape: Shape) -> int:
    """Exact: what `sum(p.numel() for p in model.parameters())` gives (tied weights once)."""
    return shape.layers * layer_params(shape) + root_params(shape)


def lora_params(shape: Shape, rank: int) -> int:
    """LoRA adapters on every Linear of the decoder layers: r x (in + out) each."""
    h, q, kv, i = shape.hidden, shape.q_width, shape.kv_width, shape.intermediate
    per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
    return shape.layers * rank * per_layer
