"""Will it fit, the pure core: config.json -> Shape and exact parameter counts against published
ones, the formula against the H200's torch.cuda.max_memory_allocated(), verdicts on sourced GPU
memory sizes, and the options each re-checked."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import MatrixError, UsageError
from envbuild.core.memory import (
    COMPONENTS,
    OPTIMIZERS,
    Coeffs,
    Estimate,
    Job,
    check_job,
    coefficients,
    formula,
    masked_layers,
    options,
    quantized_note,
    usable_bytes,
    verdict,
)
from envbuild.core.memshape import Shape, param_count, parse_config, shape_of
from envbuild.matrix import Matrix
from envbuild.matrix.crosscheck import cross_check
from envbuild.matrix.model import Gpu

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests/fixtures/fit/configs"
PROBE = ROOT / "tests/fixtures/hosts/h200-driver580-torch2.11-cu130-2026-11-28/memory-probe.jsonl"
GB = 10**9

PUBLISHED = {  # tests/fixtures/fit/configs/README.md says where each count comes from
    "llama-2-7b.json": 6_738_415_616,
    "meta-llama-3-8b.json": 8_030_261_248,
    "mistral-7b-v0.1.json": 7_241_732_096,
    "qwen2-7b.json": 7_615_616_512,
    "qwen2-0.5b.json": 494_032_768,
    "tinyllama-1.1b.json": 1_100_048_384,
    "llama-3.2-1b.json": 1_235_814_400,
}

# memprobe.py's LLAMA_160M and TINYLLAMA_1B (LlamaConfig defaults otherwise), and each llama
# case's job: fp32 weights with autocast is `mixed`.
_LLAMA = {"model_type": "llama", "max_position_embeddings": 4096, "tie_word_embeddings": False}
LLAMA_160M = {**_LLAMA, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
              "num_key_value_heads": 4, "intermediate_size": 2048, "vocab_size": 32000}
TINYLLAMA_1B = {**_LLAMA, "hidden_size": 2048, "num_hidden_layers": 22,
                "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 5632,
                "vocab_size": 32000}
CASES = {
    "llama160m-fp32-b8s1024": (LLAMA_160M, Job(batch=8, seq=1024, dtype="fp32")),
    "llama160m-amp-bf16-b8s1024": (LLAMA_160M, Job(batch=8, seq=1024, dtype="fp32", mixed=True)),
    "llama160m-bf16-b16s2048": (LLAMA_160M, Job(batch=16, seq=2048)),
    "llama160m-bf16-ckpt-b16s2048": (LLAMA_160M, Job(batch=16, seq=2048, checkpointing=True)),
    "llama1b-bf16-b4s2048": (TINYLLAMA_1B, Job(batch=4, seq=2048)),
    "llama1b-bf16-ckpt-b4s2048": (TINYLLAMA_1B, Job(batch=4, seq=2048, checkpointing=True)),
    "llama1b-bf16-infer-b8s2048": (TINYLLAMA_1B, Job(mode="infer", batch=8, seq=2048)),
}


@pytest.fixture(scope="module")
def coeffs(matrix: Matrix) -> Coeffs:
    return coefficients(matrix.extra["memory"])


def _config(name: str) -> Shape:
    return parse_config((CONFIGS / name).read_text(), name)


def _gpu(matrix: Matrix, name: str) -> Gpu:
    gpu = next((g for g in matrix.gpus if g.name == name), None)
    assert gpu is not None, name
    return gpu


def _recorded() -> dict[str, dict[str, Any]]:
    rows = [json.loads(line) for line in PROBE.read_text().splitlines() if line.strip()]
    return {r["case"]: r for r in rows if r["case"].startswith("llama")}


# --- shapes and counts ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_counts_are_the_published_ones(name: str) -> None:
    assert param_count(_config(name)) == PUBLISHED[name]


def test_the_families_read_their_own_keys() -> None:
    qwen = _config("qwen2-0.5b.json")
    assert (qwen.qkv_bias, qwen.o_bias, qwen.tied) == (True, False, True)
    llama = _config("llama-2-7b.json")
    assert (llama.kv_heads, llama.gqa, llama.head_dim) == (32, False, 128)
    assert _config("llama-3.2-1b.json").head_dim == 64
    # a biased Llama counts q, k, v, o and MLP biases; Mistral has no bias key to read
    doc = json.loads((CONFIGS / "tinyllama-1.1b.json").read_text())
    plain = param_count(shape_of(doc, "x"))
    biased = param_count(shape_of({**doc, "attention_bias": True, "mlp_bias": True}, "x"))
    h, kv, i, layers = 2048, 4 * 64, 5632, 22
    assert biased - plain == layers * ((h + 2 * kv + h) + (2 * i + h))
    mistral = json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text())
    assert param_count(shape_of({**mistral, "attention_bias": True}, "x")) == \
        PUBLISHED["mistral-7b-v0.1.json"]


def test_the_measured_models_count_what_torch_counted() -> None:
    recorded = _recorded()
    for case, (config, _job) in CASES.items():
        assert param_count(shape_of(config, case)) == recorded[case]["real_cuda"]["params"]


@pytest.mark.parametrize(("text", "says"), [
    ("", "not valid JSON"),
    ("[1, 2]", "a JSON object, not list"),
    ('{"model_type": "gpt2", "n_embd": 768}', "model_type 'gpt2' is not one"),
    ('{"hidden_size": 8}', "model_type missing"),
    ('{"model_type": "llama", "hidden_size": 8}', "num_attention_heads is missing"),
    ('{"model_type": "mistral", "num_local_experts": 8, "hidden_size": 8}', "mixture-of-experts"),
    ('{"model_type": "llama", "hidden_size": -8, "num_attention_heads": 1}', "out of range"),
    ('{"model_type": "llama", "hidden_size": 1e400, "num_attention_heads": 1}', "not float"),
    ('{"model_type": "llama", "hidden_size": true, "num_attention_heads": 1}', "not bool"),
    ('{"model_type": "llama", "hidden_size": 99999999999999999999999, '
     '"num_attention_heads": 1}', "out of range"),
    ('{"model_type": "llama", "hidden_size": 12, "num_attention_heads": 5}', "not a multiple"),
    ('{"model_type": "llama", "hidden_size": 12, "num_attention_heads": 4, '
     '"num_key_value_heads": 3}', "does not divide"),
    ('{"model_type": "llama", "tie_word_embeddings": "yes", "hidden_size": 8, '
     '"num_attention_heads": 2, "intermediate_size": 8, "num_hidden_layers": 1, '
     '"vocab_size": 8}', "must be true or false"),
    ("[" * 5000 + "]" * 5000, "not valid JSON"),
])
def test_bad_configs_are_one_line_usage_errors(text: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_config(text, "config.json")
    assert says in caught.value.message and "\n" not in caught.value.message
    assert caught.value.hint and caught.value.exit_code == 2


_SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
            | st.floats(allow_nan=True) | st.text(max_size=12))
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12)
_KEYS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
         "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
         "tie_word_embeddings", "attention_bias", "mlp_bias", "max_position_embeddings",
         "torch_dtype", "num_local_experts", "sliding_window", "use_sliding_window",
         "max_window_layers", "layer_types", "quantization_config")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(sorted(PUBLISHED)),
       changes=st.dictionaries(st.sampled_from(_KEYS), _JSON, max_size=4),
       drop=st.sets(st.sampled_from(_KEYS), max_size=3), whole=_JSON)
def test_any_config_is_a_shape_or_a_usage_error(base: str, changes: dict[str, Any],
                                               drop: set[str], whole: Any) -> None:
    doc = json.loads((CONFIGS / base).read_text())
    doc.update(changes)
    for key in drop:
        doc.pop(key, None)
    for text in (json.dumps(doc), json.dumps(whole)):
        try:
            shape = parse_config(text, "config.json")
        except UsageError as exc:
            assert "\n" not in exc.message
            continue
        assert param_count(shape) > 0 and shape.heads % shape.kv_heads == 0


# --- the formula against the H200 ----------------------------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_formula_agrees_with_the_h200(case: str, coeffs: Coeffs) -> None:
    config, job = CASES[case]
    real = _recorded()[case]["real_cuda"]["peak_allocated"]
    est = formula(shape_of(config, case), job, coeffs)
    assert est.method == "formula" and set(est.components) == set(COMPONENTS)
    assert sum(est.components.values()) == est.peak_bytes
    assert 0.9 <= est.peak_bytes / real <= 1.1, (case, est.peak_bytes / real)


def test_fp32_gqa_takes_math_attention(coeffs: Coeffs) -> None:
    config, job = CASES["llama160m-fp32-b8s1024"]
    shape = shape_of(config, "x")
    assert any("attention: math" in n for n in formula(shape, job, coeffs).notes)
    mha = shape_of({**config, "num_key_value_heads": 12}, "x")
    assert any("attention: efficient" in n for n in formula(mha, job, coeffs).notes)
    assert any("attention: flash" in n
               for n in formula(shape, dataclasses.replace(job, dtype="bf16"), coeffs).notes)


# --- sliding-window attention -------------------------------------------------------------------

def test_the_sliding_window_is_read_as_transformers_reads_it() -> None:
    mistral = json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text())
    shape = shape_of(mistral, "x")
    assert (shape.sliding_window, shape.sliding_layers) == (4096, 32)
    assert param_count(shape) == PUBLISHED["mistral-7b-v0.1.json"]  # the count does not move
    off = shape_of({**mistral, "sliding_window": None}, "x")
    assert (off.sliding_window, off.sliding_layers) == (0, 0)
    absent = {k: v for k, v in mistral.items() if k != "sliding_window"}
    assert shape_of(absent, "x").sliding_window == 4096  # MistralConfig's default
    # Qwen2: only with use_sliding_window, on the layers from max_window_layers (28 when absent)
    qwen = json.loads((CONFIGS / "qwen2-7b.json").read_text())  # use_sliding_window false
    assert shape_of(qwen, "x").sliding_window == 0 and qwen["num_hidden_layers"] == 28
    on = {**qwen, "use_sliding_window": True, "sliding_window": 4096}
    assert shape_of(on, "x").sliding_layers == 0  # 28 layers, max_window_layers 28 by default
    some = shape_of({**on, "max_window_layers": 20}, "x")
    assert (some.sliding_window, some.sliding_layers) == (4096, 8)
    assert shape_of({**on, "max_window_layers": 0}, "x").sliding_layers == 28
    kinds = ["sliding_attention", "full_attention"] * 14
    assert shape_of({**on, "layer_types": kinds}, "x").sliding_layers == 14
    assert shape_of({**on, "sliding_window": None, "max_window_layers": 0}, "x").sliding_layers == 0
    # Llama has no sliding window, whatever its config says
    llama = json.loads((CONFIGS / "tinyllama-1.1b.json").read_text())
    assert shape_of({**llama, "sliding_window": 16}, "x").sliding_window == 0


@pytest.mark.parametrize(("base", "changes", "says"), [
    ("mistral-7b-v0.1.json", {"sliding_window": 0}, "sliding_window = 0 is out of range"),
    ("mistral-7b-v0.1.json", {"sliding_window": "4096"}, "sliding_window must be an integer"),
    ("qwen2-0.5b.json", {"use_sliding_window": True, "sliding_window": 2**40}, "out of range"),
    ("qwen2-0.5b.json", {"use_sliding_window": "yes"}, "use_sliding_window must be true or"),
    ("qwen2-0.5b.json", {"use_sliding_window": True, "max_window_layers": -1},
     "max_window_layers must be"),
    ("qwen2-0.5b.json", {"use_sliding_window": True, "max_window_layers": True},
     "max_window_layers must be"),
    ("qwen2-0.5b.json", {"use_sliding_window": True, "layer_types": ["sliding_attention"]},
     "layer_types must be"),
    ("qwen2-0.5b.json", {"use_sliding_window": True, "layer_types": "sliding_attention"},
     "layer_types must be"),
])
def test_bad_sliding_window_keys_are_usage_errors(base: str, changes: dict[str, Any],
                                                  says: str) -> None:
    doc = json.loads((CONFIGS / base).read_text())
    with pytest.raises(UsageError, match=says) as caught:
        shape_of({**doc, **changes}, "config.json")
    assert "\n" not in caught.value.message


def test_a_sliding_window_layer_past_its_window_takes_the_masked_path(coeffs: Coeffs) -> None:
    """From sequence == window on, transformers passes an explicit mask (and repeats grouped K/V):
    CUDA SDPA takes the memory-efficient kernel, which saves the repeated K and V and the
    additive mask (b x s x s in the compute dtype) per layer; checked against the measured
    method on the CPU path in tests/cli/test_fit.py."""
    shape = _config("mistral-7b-v0.1.json")  # window 4096, 32 layers, q 4096, kv 1024
    below, at = Job(batch=2, seq=4095), Job(batch=2, seq=4096)
    assert (masked_layers(shape, below), masked_layers(shape, at)) == (0, 32)
    flash, masked = formula(shape, below, coeffs), formula(shape, at, coeffs)
    assert "attention: flash" in flash.notes[0]
    assert masked.notes[0].startswith("attention: efficient on every layer: sequence 4096 >= "
                                      "sliding window 4096") and "repeats K/V" in masked.notes[0]
    e, t, layers = 2, 2 * 4096, 32
    per_token = 2 * e * (4096 - 1024) + e * 4096  # repeated K and V, the additive mask
    unmasked = dataclasses.replace(shape, sliding_window=0, sliding_layers=0)
    plain = formula(unmasked, at, coeffs)
    assert masked.components["activations"] - plain.components["activations"] == \
        layers * t * per_token
    # the mask's last dimension padded to 8 (the memory-efficient kernel's alignment)
    odd = Job(batch=8, seq=4097)
    assert formula(shape, odd, coeffs).components["activations"] - \
        formula(unmasked, odd, coeffs).components["activations"] == \
        layers * 8 * 4097 * (2 * e * 3072 + e * 4104)
    # fp32 with grouped heads: math below the window, memory-efficient past it (K/V repeated)
    fp32 = dataclasses.replace(at, dtype="fp32")
    assert "attention: math" in formula(unmasked, fp32, coeffs).notes[0]
    assert "attention: efficient on every layer" in formula(shape, fp32, coeffs).notes[0]
    # inference: a prefill past the window holds the additive and boolean masks at the call
    prefill = Job(mode="infer", batch=1, seq=32768)
    assert formula(shape, prefill, coeffs).peak_bytes > \
        formula(unmasked, prefill, coeffs).peak_bytes


def test_qwen2_masks_only_its_sliding_layers(coeffs: Coeffs) -> None:
    qwen = json.loads((CONFIGS / "qwen2-0.5b.json").read_text())  # 24 layers, window 131072
    shape = shape_of({**qwen, "use_sliding_window": True, "sliding_window": 1024,
                      "max_window_layers": 16}, "x")
    assert (shape.sliding_window, shape.sliding_layers) == (1024, 8)
    est = formula(shape, Job(batch=4, seq=2048), coeffs)
    assert est.notes[0].startswith("attention: efficient on 8 of 24 layers (flash on the others)")
    full = formula(dataclasses.replace(shape, sliding_layers=24), Job(batch=4, seq=2048), coeffs)
    none = formula(dataclasses.replace(shape, sliding_layers=0), Job(batch=4, seq=2048), coeffs)
    masked = est.components["activations"] - none.components["activations"]
    assert masked > 0 and full.components["activations"] - none.components["activations"] == \
        3 * masked


def test_a_head_dim_over_256_repeats_kv_and_leaves_math(coeffs: Coeffs) -> None:
    """transformers passes enable_gqa only up to head dim 256; above it K/V are repeated and the
    call has no grouped heads, so CUDA takes memory-efficient, not math."""
    llama = json.loads((CONFIGS / "tinyllama-1.1b.json").read_text())
    wide = shape_of({**llama, "num_attention_heads": 4, "num_key_value_heads": 2,
                     "head_dim": 512}, "x")
    assert "attention: efficient" in formula(wide, Job(seq=1024), coeffs).notes[0]


# --- quantized checkpoints: noted, not modelled ------------------------------------------------

def _nested(depth: int) -> Any:
    value: Any = {"quant_method": "gptq"}
    for _ in range(depth):
        value = {"inner": value}
    return value


@pytest.mark.parametrize(("value", "shown"), [
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, "gptq"),
    ({"quant_method": "awq", "bits": 4, "version": "gemm", "zero_point": True}, "awq"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"},
     "bitsandbytes"),
    ({"bits": 4}, ""),  # no quant_method
    ("gptq", ""), ([{"quant_method": "gptq"}], ""), (4, ""), (True, ""), (1.5, ""),
    ({"quant_method": 4}, ""), ({"quant_method": ""}, ""), ({"quant_method": None}, ""),
    ({"quant_method": {"a": {"b": [1, {"c": "gptq"}]}}}, ""),
    (_nested(60), ""),  # nested close to the parser's 64 levels
    ({f"k{i}": "v" * 100 for i in range(20_000)}, ""),  # 2 MB of keys
    ({"quant_method": "x" * 100_000}, "'" + "x" * 32 + "'..."),
    ({"quant_method": "awq\x1b[2J\nrm -rf /"}, "'awq\\x1b[2J\\nrm -rf /'"),
    ({"quant_method": "gptq\u202e"}, "'gptq\\u202e'"),
])
def test_a_quantized_checkpoint_is_noted_not_modelled(value: Any, shown: str,
                                                      coeffs: Coeffs) -> None:
    """A quantization_config (GPTQ, AWQ, bitsandbytes...) of any shape: the weights are still
    counted at --dtype, and the note says so, naming the quant_method when there is one, cut
    and escaped: one printable line whatever the config holds."""
    mistral = json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text())
    shape = parse_config(json.dumps({**mistral, "quantization_config": value}), "config.json")
    plain = parse_config(json.dumps(mistral), "config.json")
    assert shape.quantized and shape.quant_method == shown
    assert param_count(shape) == PUBLISHED["mistral-7b-v0.1.json"]
    job = Job(mode="infer")
    assert formula(shape, job, coeffs).peak_bytes == formula(plain, job, coeffs).peak_bytes
    note = quantized_note(shape, job)
    assert note is not None and note.isprintable() and len(note) < 300
    assert note.startswith("the checkpoint is quantized (" + (shown or "its quantization_config "
                                                              "names no quant_method") + "): ")
    assert "counted at bf16 (--dtype)" in note and "upper bound for the weights" in note
    assert "counted at fp32" in str(quantized_note(shape, Job(dtype="fp32", mixed=True)))


@pytest.mark.parametrize("value", [None, False, {}])
def test_an_empty_quantization_config_is_no_quantization(value: Any) -> None:
    mistral = json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text())
    shape = shape_of({**mistral, "quantization_config": value}, "x")
    assert not shape.quantized and quantized_note(shape, Job()) is None
    assert quantized_note(_config("mistral-7b-v0.1.json"), Job()) is None


def test_a_quantization_config_nested_past_the_parsers_bound_is_a_usage_error() -> None:
    text = (CONFIGS / "mistral-7b-v0.1.json").read_text().rstrip()[:-1]  # the object left open
    deep = text + ', "quantization_config": ' + '{"a": ' * 5000 + "1" + "}" * 5000 + "}"
    with pytest.raises(UsageError) as caught:
        parse_config(deep, "config.json")
    assert "\n" not in caught.value.message and "not valid JSON" in caught.value.message


_JOBS = st.builds(Job, mode=st.sampled_from(("train", "infer")),
                  batch=st.integers(1, 64), seq=st.integers(1, 8192),
                  dtype=st.sampled_from(("fp32", "bf16", "fp16")), mixed=st.booleans(),
                  optimizer=st.sampled_from(("adamw", "sgd", "adamw8bit")),
                  checkpointing=st.booleans(), lora_rank=st.sampled_from((0, 8, 16)),
                  shards=st.sampled_from((1, 2, 8)), accumulate=st.sampled_from((1, 4))).map(
    lambda j: j if j.mode == "train" else replace(j, optimizer="adamw", checkpointing=False,
                                                  lora_rank=0, accumulate=1))


@given(job=st.builds(Job, mode=st.just("infer"), optimizer=st.sampled_from(OPTIMIZERS),
                     checkpointing=st.booleans(), lora_rank=st.sampled_from((0, 8)),
                     accumulate=st.sampled_from((1, 4))))
def test_an_inference_step_takes_no_training_flag(job: Job, coeffs: Coeffs) -> None:
    """--lora, --checkpointing, --optimizer and --accumulate with --infer are refused, each
    named (they were accepted and copied into every option's command)."""
    given = [f for f, on in (("--lora", job.lora_rank), ("--checkpointing", job.checkpointing),
                             ("--optimizer", job.optimizer != "adamw"),
                             ("--accumulate", job.accumulate != 1)) if on]
    if not given:
        check_job(job, coeffs)
        return
    with pytest.raises(UsageError) as exc:
        check_job(job, coeffs)
    assert all(f in exc.value.message for f in given), exc.value.message


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(sorted(PUBLISHED)), job=_JOBS, more=st.integers(1, 4096))
def test_formula_grows_with_batch_and_sequence(name: str, job: Job, more: int,
                                               coeffs: Coeffs) -> None:
    shape = _config(name)
    est = formula(shape, job, coeffs)
    assert est.peak_bytes > 0 and all(v >= 0 for v in est.components.values())
    for bigger in (dataclasses.replace(job, batch=job.batch + more),
                   dataclasses.replace(job, seq=job.seq + more)):
        if masked_layers(shape, bigger) != masked_layers(shape, job):
            continue  # past a sliding window the attention path changes: fp32 GQA leaves math
        assert formula(shape, bigger, coeffs).peak_bytes >= est.peak_bytes


@pytest.mark.parametrize("job", [Job(mode="eval"), Job(batch=0), Job(seq=-1), Job(dtype="fp8"),
                                 Job(optimizer="adam"), Job(shards=0), Job(lora_rank=-1)])
def test_bad_jobs_are_usage_errors(job: Job, coeffs: Coeffs) -> None:
    with pytest.raises(UsageError):
        formula(_config("tinyllama-1.1b.json"), job, coeffs)


def test_missing_coefficients_are_a_matrix_error(matrix: Matrix) -> None:
    doc = {k: dict(v) for k, v in matrix.extra["memory"].items()}
    del doc["loss"]["logprobs_f32"]
    with pytest.raises(MatrixError, match=r"\[loss\] logprobs_f32"):
        coefficients(doc)


# --- GPUs and verdicts ---------------------------------------------------------------------------

def test_usable_memory_is_the_drivers_total_less_reserve_and_context(matrix: Matrix,
                                                                    coeffs: Coeffs) -> None:
    h200 = _gpu(matrix, "H200")
    assert h200.memory_mib == 143771  # tests/fixtures/hosts/.../nvidia-smi.txt
    usable = usable_bytes(h200, coeffs)
    # torch saw 150,109,880,320 bytes total there (the driver's reserve already off) and the
    # context took 648,871,936 of them
    assert abs(usable - (150_109_880_320 - 648_871_936)) < 2**20
    no_mib = dataclasses.replace(h200, memory_mib=0)
    assert usable_bytes(no_mib, coeffs) < usable  # memory_gb alone is taken on the safe side
    assert usable_bytes(dataclasses.replace(h200, memory_mib=0, memory_gb=0.0), coeffs) == 0


def test_sourced_totals_sit_beside_memory_gb(matrix: Matrix) -> None:
    sized = [g for g in matrix.gpus if g.memory_mib]
    assert {"H100", "H200", "A100", "RTX 4090", "RTX 4080", "T4"} <= {g.name for g in sized}
    bad = dataclasses.replace(matrix, gpus=tuple(
        dataclasses.replace(g, memory_mib=8192) if g.name == "H100" else g for g in matrix.gpus))
    assert any("memory_mib 8192" in p.message for p in cross_check(bad))


def _estimator(shape: Shape, coeffs: Coeffs) -> Any:
    return lambda job: formula(shape, job, coeffs)


def test_an_8b_full_fine_tune_needs_sharding_on_80gb(matrix: Matrix, coeffs: Coeffs) -> None:
    shape = _config("meta-llama-3-8b.json")
    job = Job(batch=1, seq=2048, dtype="fp32", mixed=True)
    est = formula(shape, job, coeffs)
    assert est.components["parameters"] + est.components["gradients"] \
        + est.components["optimizer"] >= 16 * est.params  # ZeRO's 16 bytes per parameter
    for name in ("H100", "A100"):
        gpu = _gpu(matrix, name)
        fit = verdict(gpu, est, coeffs)
        assert not fit.fits and fit.margin_bytes < 0
        offered = options(shape, job, gpu, _estimator(shape, coeffs), coeffs)
        shards = [o for o in offered if o.job.shards > 1]
        assert shards and shards[0].flags[-2] == "--shards"


def test_8b_bf16_inference_fits_24gb_not_16gb(matrix: Matrix, coeffs: Coeffs) -> None:
    shape = _config("meta-llama-3-8b.json")
    est = formula(shape, Job(mode="infer", batch=1, seq=4096), coeffs)
    assert verdict(_gpu(matrix, "RTX 4090"), est, coeffs).fits
    for small in ("RTX 4080", "T4", "V100"):
        assert not verdict(_gpu(matrix, small), est, coeffs).fits


def test_options_keep_the_global_batch_and_say_it(matrix: Matrix, coeffs: Coeffs) -> None:
    shape = _config("tinyllama-1.1b.json")
    job = Job(batch=8, seq=2048)
    gpu = _gpu(matrix, "RTX 4090")
    assert not verdict(gpu, formula(shape, job, coeffs), coeffs).fits
    offered = options(shape, job, gpu, _estimator(shape, coeffs), coeffs, limit=6)
    assert offered[0].change == "activation checkpointing"
    assert offered[0].flags == ("--checkpointing",)
    batch = next(o for o in offered if o.job.batch < 8)
    assert batch.job.batch * batch.job.accumulate == 8
    assert batch.change == f"batch {batch.job.batch} x accumulate {batch.job.accumulate}"
    assert batch.flags == ("--batch", str(batch.job.batch), "--accumulate",
                           str(batch.job.accumulate))
    # the accumulated gradients live through backward: never cheaper than without them
    acc = dataclasses.replace(batch.job, accumulate=1)
    assert formula(shape, batch.job, coeffs).peak_bytes >= formula(shape, acc, coeffs).peak_bytes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(PUBLISHED)), job=_JOBS,
       gpu=st.sampled_from(("T4", "RTX 4090", "A100 40GB", "H100")))
def test_options_that_say_fit_really_fit(name: str, job: Job, gpu: str, matrix: Matrix,
                                         coeffs: Coeffs) -> None:
    shape, row = _config(name), _gpu(matrix, gpu)
    calls: list[Job] = []

    def estimate(changed: Job) -> Estimate:
        calls.append(changed)
        return formula(shape, changed, coeffs)

    offered = options(shape, job, row, estimate, coeffs)
    assert len(offered) <= 3
    for option in offered:
        assert option.job in calls  # checked by the estimator it was given
        fit = verdict(row, formula(shape, option.job, coeffs), coeffs)
        assert fit.fits and fit.needed_bytes == option.needed_bytes
        assert option.flags and all(isinstance(w, str) for w in option.flags)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(PUBLISHED)), job=_JOBS, data=st.data(),
       most=st.sampled_from((0, 1, 2, 4, 8)))
def test_each_option_once_and_no_more_gpus_than_there_are(name: str, job: Job, data: st.DataObject,
                                                          most: int, matrix: Matrix,
                                                          coeffs: Coeffs) -> None:
    """No option is offered twice (two piles of changes once came down to the same job: the
    8B on an RTX 4090 offered 'checkpointing + LoRA' twice), and sharding goes up to the GPUs
    a fleet group or host has."""
    row = data.draw(st.sampled_from([g for g in matrix.gpus
                                     if g.vendor == "nvidia" and (g.memory_mib or g.memory_gb)]))
    shape = _config(name)
    offered = options(shape, job, row, lambda j: formula(shape, j, coeffs), coeffs,
                      max_shards=most)
    jobs = [o.job for o in offered]
    assert len(set(jobs)) == len(jobs), [o.change for o in offered]
    assert all(o.job.shards <= max(most, job.shards) for o in offered if most), offered


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(PUBLISHED)), job=_JOBS, data=st.data())
def test_each_change_of_an_option_is_at_its_mildest(name: str, job: Job, data: st.DataObject,
                                                   matrix: Matrix, coeffs: Coeffs) -> None:
    """Every change an option makes is needed, and at its mildest step that fits beside the
    others: undoing it, or any milder step of its ladder, does not fit (a pile once offered
    batch 1 x accumulate 4 where 2 x 2 fitted)."""
    from envbuild.core import memory

    row = data.draw(st.sampled_from([g for g in matrix.gpus
                                     if g.vendor == "nvidia" and (g.memory_mib or g.memory_gb)]))
    shape = _config(name)

    def fits(j: Job) -> bool:
        return verdict(row, formula(shape, j, coeffs), coeffs).fits

    for option in options(shape, job, row, lambda j: formula(shape, j, coeffs), coeffs):
        for group, kind in memory.GROUPS.items():
            if all(getattr(option.job, f) == getattr(job, f) for f in group):
                continue
            undone = replace(option.job, **{f: getattr(job, f) for f in group})
            ladder = [undone, *memory._ladders(shape, undone, coeffs).get(kind, [])]
            milder = ladder[:ladder.index(option.job)] if option.job in ladder else [undone]
            assert not any(fits(j) for j in milder), (option.change, kind)


def test_no_options_when_it_fits_and_piled_changes_when_no_pair_does(matrix: Matrix,
                                                                     coeffs: Coeffs) -> None:
    shape, gpu = _config("tinyllama-1.1b.json"), _gpu(matrix, "RTX 4090")
    small = Job(batch=1, seq=512, checkpointing=True)
    assert verdict(gpu, formula(shape, small, coeffs), coeffs).fits
    assert options(shape, small, gpu, _estimator(shape, coeffs), coeffs) == ()
    heavy = Job(batch=8, seq=2048, dtype="fp32")  # fp32 GQA: math attention, 159 GB of activations
    offered = options(shape, heavy, gpu, _estimator(shape, coeffs), coeffs)
    assert offered and all(verdict(gpu, formula(shape, o.job, coeffs), coeffs).fits
                           for o in offered)
    # one GPU before several; none needs a change another shows it can do without
    shards = [o.job.shards for o in offered]
    assert shards == sorted(shards) and shards[0] == 1, offered
    changed = [{f for f in ("dtype", "mixed", "checkpointing", "batch", "accumulate", "seq",
                            "optimizer", "lora_rank", "shards")
                if getattr(o.job, f) != getattr(heavy, f)} for o in offered]
    assert any(len(c) >= 3 for c in changed), offered  # piled: no single change or pair fits
    for o in offered:  # each change it makes is needed: undone, it no longer fits
        for group in (("dtype", "mixed"), ("checkpointing",), ("batch", "accumulate"),
                      ("optimizer",), ("lora_rank",), ("shards",)):
            undone = replace(o.job, **{f: getattr(heavy, f) for f in group})
            if undone != o.job:
                assert not verdict(gpu, formula(shape, undone, coeffs), coeffs).fits, (o, group)


# --- the memory one device has -------------------------------------------------------------------

def test_a_module_of_two_devices_is_judged_per_device(matrix: Matrix, coeffs: Coeffs) -> None:
    """An MI250X (or MI250) module's 128 GB are two GCDs of 64 GB, each its own torch device:
    one is judged, as an MI210's 64 GB are, and the note says so."""
    mi210 = _gpu(matrix, "MI210")
    est = formula(_config("meta-llama-3-8b.json"), Job(mode="infer", batch=1, seq=4096), coeffs)
    for name in ("MI250X", "MI250"):
        row = _gpu(matrix, name)
        assert (row.memory_gb, row.device_memory_gb, row.device_memory_basis) == \
            (128.0, 64.0, "module")
        fit = verdict(row, est, coeffs)
        assert fit.total_bytes == 64 * GB and fit.usable_bytes == usable_bytes(mi210, coeffs)
        assert fit.usable_bytes < 64 * GB
        assert any("judged at 64.0 GB, one device's" in n and "128 GB" in n for n in fit.notes)
    # a job that fits the module's 128 GB but not one device's 64 GB does not fit
    big = replace(est, peak_bytes=80 * GB)
    assert not verdict(_gpu(matrix, "MI250X"), big, coeffs).fits


@pytest.mark.parametrize(("typed", "row", "judged_gb"), [
    ("Jetson Orin Nano", "Jetson Orin Nano", 4), ("Jetson Orin NX", "Jetson Orin NX", 8),
    ("Jetson AGX Orin", "Jetson AGX Orin", 32), ("NVIDIA Jetson AGX Orin", "Jetson AGX Orin", 32),
    ("Orin", "Jetson Orin", 4), ("Jetson Orin", "Jetson Orin", 4),
    ("Jetson Xavier NX", "Jetson Xavier NX", 8), ("Xavier", "Jetson Xavier", 8),
    ("Jetson Nano", "Jetson Nano", 2), ("Jetson T4000", "Jetson T4000", 64),
    ("Jetson AGX Thor", "Jetson T5000", 128), ("NVIDIA Thor", "Jetson Thor", 64),
])
def test_each_jetson_module_is_judged_at_its_own_smallest_memory(
        matrix: Matrix, coeffs: Coeffs, typed: str, row: str, judged_gb: int) -> None:
    """Jetson modules that shared a row as aliases (an 8 GB Orin Nano judged as the 64 GB AGX
    Orin) have their own rows; torch's bare family name ('Orin') is judged at the smallest
    module. All share memory with the CPU, and the verdict says so."""
    from envbuild.core import gpus as gpu_names

    gpu = gpu_names.lookup(matrix, typed, "nvidia")
    assert gpu is not None and gpu.name == row
    est = formula(_config("qwen2-0.5b.json"), Job(mode="infer", batch=1, seq=512), coeffs)
    fit = verdict(gpu, est, coeffs)
    assert fit.total_bytes == judged_gb * GB
    assert gpu.unified_memory and any("shared with the CPU" in n for n in fit.notes)
    if gpu.device_memory_basis:
        assert any(f"judged at {judged_gb:.1f} GB, the smallest {row} sold" in n
                   for n in fit.notes)


def test_jetson_rows_keep_what_resolve_and_doctor_read(matrix: Matrix) -> None:
    """The split rows keep the family's arch, JetPack-only wheels and CPU pairing."""
    by_name = {g.name: g for g in matrix.gpus}
    for name in ("Jetson Orin", "Jetson AGX Orin", "Jetson Orin NX", "Jetson Orin Nano"):
        g = by_name[name]
        assert (g.cc, g.wheels, g.cpu_core) == ("8.7", "jetpack", "Cortex-A78AE"), name
    assert (by_name["Jetson Xavier NX"].cc, by_name["Jetson Xavier NX"].wheels) == \
        ("7.2", "jetpack")
    for name in ("Jetson Thor", "Jetson T5000", "Jetson T4000"):
        g = by_name[name]
        assert (g.cc, g.wheels, g.cpu_core) == ("11.0", "", "Neoverse-V3AE"), name


@pytest.mark.parametrize(("name", "smallest", "largest"), [
    ("RTX 3060", 8, 12), ("RTX 3080", 10, 12), ("GTX 1060", 3, 6), ("P100", 12, 16),
    ("M40", 12, 24), ("RX 9060 XT", 8, 16), ("RTX 2060", 6, 12), ("MI50", 16, 32),
])
def test_a_row_of_several_sizes_is_judged_at_its_smallest(
        matrix: Matrix, coeffs: Coeffs, name: str, smallest: int, largest: int) -> None:
    gpu = _gpu(matrix, name)
    assert gpu.device_memory_basis == "variants" and gpu.memory_gb == largest
    fit = verdict(gpu, formula(_config("qwen2-0.5b.json"), Job(mode="infer"), coeffs), coeffs)
    assert fit.total_bytes == smallest * GB
    note = next(n for n in fit.notes if "the smallest" in n)
    assert f"judged at {smallest:.1f} GB, the smallest {name} sold" in note
    assert (f"up to {largest} GB on others" in note) == (largest > smallest)
    assert not gpu.unified_memory and "on its host reads its own size" in note


def test_a_plain_card_has_no_notes_and_a_driver_figure_still_wins(matrix: Matrix,
                                                                   coeffs: Coeffs) -> None:
    est = formula(_config("qwen2-0.5b.json"), Job(mode="infer"), coeffs)
    assert verdict(_gpu(matrix, "RTX 4090"), est, coeffs).notes == ()
    gh200 = _gpu(matrix, "GH200")  # variants (96 or 144 GB), and a driver figure of the 96 GB
    assert verdict(gh200, est, coeffs).total_bytes == gh200.memory_mib * 2**20


def test_the_hosts_own_figure_replaces_the_rows_smallest_variant(matrix: Matrix,
                                                                 coeffs: Coeffs) -> None:
    """On a host, nvidia-smi's total is that device's: a 12 GB RTX 3060 is judged at its 12 GB,
    with no note about the 8 GB one, and named by the host (not --gpu, which would say 8)."""
    from types import SimpleNamespace
    from typing import cast

    from envbuild.doctor.view import Gpu as SmiGpu
    from envbuild.doctor.view import View
    from envbuild.features.fit import view_gpus

    view = cast(View, SimpleNamespace(gpus=[SmiGpu(0, "NVIDIA GeForce RTX 3060", "8.6", 12288),
                                            SmiGpu(1, "NVIDIA GeForce RTX 4090", "8.9", 24564)]))
    (i0, g0, known0), (i1, g1, known1) = view_gpus(view, matrix)
    assert (i0, i1) == (0, 1)
    assert (g0.name, g0.memory_mib, g0.device_memory_gb, known0) == ("RTX 3060", 12288, 0.0,
                                                                      False)
    est = formula(_config("qwen2-0.5b.json"), Job(mode="infer"), coeffs)
    fit = verdict(g0, est, coeffs)
    assert fit.total_bytes == 12288 * 2**20 and fit.notes == ()
    assert (g1.name, known1) == ("RTX 4090", True)  # the matrix sizes it as the driver does


def _matrix_copy(tmp_path: Path, name: str, old: str, new: str) -> Path:
    import shutil

    d = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", d)
    text = (d / "gpus.toml").read_text()
    start = text.index(f'[[gpu]]\nname = "{name}"\n')
    end = text.index("[[gpu]]", start + 1)
    assert old in text[start:end], (name, old)
    (d / "gpus.toml").write_text(text[:start] + text[start:end].replace(old, new, 1)
                                 + text[end:])
    return d


@pytest.mark.parametrize(("name", "old", "new", "says"), [
    ("MI210", "memory_gb = 64.0\n", 'memory_gb = 64.0\ndevice_memory_gb = "32"\n',
     "device_memory_gb: expected a number"),
    ("MI210", "memory_gb = 64.0\n", "memory_gb = 64.0\nunified_memory = 1\n",
     "unified_memory: expected true/false"),
    ("MI210", "memory_gb = 64.0\n", 'memory_gb = 64.0\ndevice_memory_basis = ["module"]\n',
     "device_memory_basis: expected a string"),
    ("MI210", "memory_gb = 64.0\n", "memory_gb = 64.0\ndevice_memory_gb = 32.0\n",
     "go together"),
    ("MI210", "memory_gb = 64.0\n", 'memory_gb = 64.0\ndevice_memory_basis = "module"\n',
     "go together"),
    ("MI210", "memory_gb = 64.0\n",
     'memory_gb = 64.0\ndevice_memory_gb = 32.0\ndevice_memory_basis = "gcd"\n',
     "'gcd' is not one of module, variants"),
    ("MI250X", "device_memory_gb = 64.0\n", "device_memory_gb = 128.0\n",
     "not less than the module's 128 GB"),
    ("RTX 3060", "device_memory_gb = 8.0\n", "device_memory_gb = 16.0\n",
     "more than memory_gb 12: it is the smallest variant"),
    ("RTX 3060", "device_memory_gb = 8.0\n", "device_memory_gb = -8.0\n", "negative"),
    ("Radeon 780M", "memory_gb = 0.0\n",
     'memory_gb = 0.0\ndevice_memory_gb = 8.0\ndevice_memory_basis = "variants"\n',
     "device_memory_gb without memory_gb"),
    ("GH200", "memory_mib = 97871\n", "memory_mib = 147456\n",
     "memory_mib 147456 does not look like the 96 GB of device_memory_gb"),
    ("RTX 3060", "device_memory_gb = 8.0\n", "device_memory_gb = nan\n",
     "device_memory_gb nan is not a memory size"),
    ("MI210", "memory_gb = 64.0\n", "memory_gb = nan\n", "memory_gb nan is not a memory size"),
    ("MI210", "memory_gb = 64.0\n", "memory_gb = inf\n", "memory_gb inf is not a memory size"),
    ("RTX 3060", "device_memory_gb = 8.0\n", "device_memory_gb = 1e-300\n",
     "is not a memory size (finite, 0.5 GB or more)"),
    ("Jetson Orin Nano", 'family = "jetson"\n', "", 'a Jetson row (and only one) has family'),
    ("MI210", "memory_gb = 64.0\n", 'memory_gb = 64.0\nfamily = "jetson"\n',
     'a Jetson row (and only one) has family'),
    ("MI210", "memory_gb = 64.0\n", 'memory_gb = 64.0\nfamily = "tegra"\n',
     "family 'tegra' is not one of jetson"),
    ("Jetson Orin Nano", "per_system = 1\n", "", "a Jetson is one GPU in its system"),
    ("MI210", "memory_gb = 64.0\n", "memory_gb = 64.0\nper_system = -1\n",
     "per_system -1 is not 0 (not said) to 64"),
])
def test_the_device_memory_fields_are_checked(tmp_path: Path, name: str, old: str, new: str,
                                              says: str) -> None:
    from envbuild.matrix import check

    problems = [str(p) for p in check(_matrix_copy(tmp_path, name, old, new))]
    assert any(says in p and "gpus.toml" in p for p in problems), problems


def test_the_device_memory_fields_are_accepted(tmp_path: Path) -> None:
    """A well-formed module row, variants row and unified row check clean and load typed."""
    from envbuild.matrix import check, load

    d = _matrix_copy(tmp_path, "MI210", "memory_gb = 64.0\n",
                     'memory_gb = 64.0\ndevice_memory_gb = 32\ndevice_memory_basis = "module"\n'
                     "unified_memory = false\n")
    assert check(d) == []
    row = next(g for g in load(d).gpus if g.name == "MI210")
    assert (row.device_memory_gb, row.device_memory_basis, row.unified_memory) == \
        (32.0, "module", False)
    assert isinstance(row.device_memory_gb, float)


def test_every_name_the_matrix_knows_is_judged_at_its_rows_size_or_the_size_it_states(
        matrix: Matrix, coeffs: Coeffs) -> None:
    """Every row's name and alias, as `--gpu` takes it: judged at the row's own size, or at a
    size the name itself states (never above the row's largest); a model number glued to a
    letter is no size (a reviewer found 'A10G' judged at 10 GB, not 24)."""
    import re

    from envbuild.core import gpus as gpu_names
    from envbuild.core.memory import has_size, sized_by_name, total_bytes

    checked = 0
    for row in matrix.gpus:
        if not has_size(row):
            continue
        own = total_bytes(row, coeffs)
        for name in (row.name, *row.aliases):
            found = gpu_names.lookup(matrix, name, row.vendor)
            if found is not row:
                continue
            got = total_bytes(sized_by_name(row, name), coeffs)
            stated = [int(n) * 10**9 for n in re.findall(r"(?:^|[\s\-_.])(\d+)\s?GB?\b", name,
                                                          re.I)]
            assert got == own or (got in stated and got <= row.memory_gb * 10**9), \
                (name, got, own, stated)
            checked += 1
    assert checked > 200
    for name in ("A10G", "NVIDIA A10G"):
        row = _gpu(matrix, "A10G")
        assert total_bytes(sized_by_name(row, name), coeffs) == total_bytes(row, coeffs)


@pytest.mark.parametrize(("gpu", "dtype", "gqa", "path"), [
    ("H100", "bf16", True, "flash"), ("A100", "fp16", False, "flash"),
    ("H100", "fp32", False, "efficient"), ("H100", "fp32", True, "math"),
    ("V100", "fp16", False, "efficient"), ("V100", "bf16", False, "math"),
    ("T4", "fp16", True, "math"), ("T4", "fp32", False, "efficient"),
    ("K80", "fp16", False, "math"), ("RTX 5090", "bf16", True, "flash"),
])
def test_each_gpu_takes_the_attention_kernel_pytorch_gives_it(
        matrix: Matrix, coeffs: Coeffs, gpu: str, dtype: str, gqa: bool, path: str) -> None:
    """sdp_utils.cpp: flash on sm_80 to sm_121 (fp16/bf16), memory-efficient from sm_50 and in
    bf16 only from sm_80 (a reviewer found a V100 judged with memory-efficient bf16), else
    math (memory.toml [sdpa])."""
    from envbuild.core.memory import attention_path, for_gpu

    cfg = {**LLAMA_160M, "num_attention_heads": 12, "num_key_value_heads": 4 if gqa else 12}
    shape = parse_config(json.dumps(cfg), "c")
    assert attention_path(shape, dtype, for_gpu(coeffs, _gpu(matrix, gpu))) == path
