"""envbuild/validator/memprobe.py in this process, on this host's CPU torch: a fake step's peak
against the same step on real tensors (MemTracker; the fresh process's RSS is in
tests/cli/test_fit_here.py), CUDA's attention choice emulated, and every kind of broken job or
entry answered as one clean error."""

from __future__ import annotations

import json
import os
import string
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.validator import memprobe
from tests.support import ROOT

torch = pytest.importorskip("torch")

ENTRY = ROOT / "tests" / "fixtures" / "fit" / "mlp_entry.py"
GB = 1 << 30
# CUDA's choice in torch 2.11 (the H200 recording): flash for 16-bit up to head dim 256, grouped
# heads allowed; memory-efficient for any dtype, masks allowed, no grouped heads; else math
RULE = {"backends": [
    {"name": "flash", "dtypes": ["fp16", "bf16"], "max_head_dim": 256, "mask": False,
     "gqa": True},
    {"name": "efficient", "dtypes": ["fp32", "fp16", "bf16"], "max_head_dim": None,
     "mask": True, "gqa": False}]}


def job(**kw: Any) -> dict[str, Any]:
    return {"format": 1, "model": {"entry": f"{ENTRY}:tiny"}, "mode": "train", "dtype": "fp32",
            "optimizer": "adamw", "device": "cpu", **kw}


def ask(**kw: Any) -> dict[str, Any]:
    return memprobe.answer([json.dumps(job(**kw))])


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    """The probe changes process state (the default dtype, SDPA, sys.path, sys.modules): each
    test leaves them as it found them."""
    dtype, sdpa = torch.get_default_dtype(), torch.nn.functional.scaled_dot_product_attention
    hook = torch.Tensor.register_hook
    path = list(sys.path)
    yield
    assert torch.get_default_dtype() == dtype
    assert torch.nn.functional.scaled_dot_product_attention is sdpa
    assert torch.Tensor.register_hook is hook
    sys.path[:] = path
    sys.modules.pop("envbuild_fit_entry", None)


def test_a_small_step_is_measured_with_its_components() -> None:
    r = ask()
    assert "error" not in r, r
    assert (r["params"], r["trainable"], r["device"]) == (198_912, 198_912, "cpu")
    c = r["components"]
    assert list(c) == list(memprobe.ORDER)
    # AdamW: two fp32 states a parameter, and at the peak one parameter's temporaries
    assert c["parameters"] == 198_912 * 4 and 8 * 198_912 <= c["optimizer"] < 12 * 198_912
    assert c["activations"] > 0 and r["peak_bytes"] == sum(c.values())
    assert r["how"].startswith("fake CPU 2 training steps under MemTracker")


def test_the_fake_peak_is_within_10_percent_of_the_real_steps() -> None:
    """The same fp32 AdamW step (about 1.1 GB) on fake and on real tensors."""
    fake = ask(model={"entry": f"{ENTRY}:wide"})
    real = ask(model={"entry": f"{ENTRY}:wide"}, real=True)
    assert "error" not in fake and "error" not in real, (fake, real)
    assert real["peak_bytes"] > GB
    assert abs(fake["peak_bytes"] / real["peak_bytes"] - 1) < 0.10, (fake, real)
    assert real["how"].startswith("real CPU")


def test_inference_is_one_step_without_gradients_or_optimizer() -> None:
    r = ask(mode="infer")
    c = r["components"]
    assert c["optimizer"] == c["gradients"] == 0 and r["how"].startswith("fake CPU 1 inference")


@pytest.mark.parametrize(("dtype", "mixed", "expect"), [
    ("fp32", False, "math"),  # fp32 with grouped heads: neither flash nor memory-efficient
    ("bf16", False, "flash"),
    ("fp32", True, "flash"),  # autocast makes the call bf16
])
def test_cuda_attention_is_emulated(dtype: str, mixed: bool, expect: str) -> None:
    r = ask(model={"entry": f"{ENTRY}:attention"}, dtype=dtype, mixed=mixed, sdpa=RULE)
    assert r["attention"] == {expect: 2}, r  # one call a step, two steps
    assert f"CUDA attention emulated ({expect} x2)" in r["how"]


def test_the_math_path_costs_what_math_costs() -> None:
    """fp32 grouped-head attention: CUDA takes math, whose saved b*h*s*s probabilities the CPU's
    flash kernel never holds."""
    plain = ask(model={"entry": f"{ENTRY}:attention"})
    emulated = ask(model={"entry": f"{ENTRY}:attention"}, sdpa=RULE)
    probabilities = 4 * 8 * 512 * 512 * 4
    assert plain["attention"] == {"native": 2}
    grew = emulated["components"]["activations"] - plain["components"]["activations"]
    assert 0.9 * probabilities <= grew < 2 * probabilities


@pytest.mark.parametrize(("dtype", "head", "mask", "gqa", "dropout", "expect"), [
    ("fp32", 64, False, True, False, "math"),
    ("fp32", 64, False, False, False, "efficient"),
    ("bf16", 64, False, True, False, "flash"),
    ("bf16", 512, False, False, False, "efficient"),
    ("bf16", 512, False, True, False, "math"),
    ("fp16", 64, True, False, False, "efficient"),
    ("", 64, False, False, False, "math"),  # a dtype no backend names (fp64)
])
def test_the_backend_rule(dtype: str, head: int, mask: bool, gqa: bool, dropout: bool,
                          expect: str) -> None:
    rule = memprobe.sdpa_rule(RULE)
    assert rule is not None
    assert memprobe.cuda_backend(rule, dtype, head, mask, gqa, dropout) == expect


def test_lora_trains_only_the_adapters() -> None:
    r = ask(model={"entry": f"{ENTRY}:attention"}, lora_rank=4)
    assert "error" not in r, r
    # q, o: 256->256; k, v: 256->64; each adapter A (4 x in) and B (out x 4)
    assert r["trainable"] == 2 * 4 * (256 + 256) + 2 * 4 * (256 + 64)
    assert 8 * r["trainable"] <= r["components"]["optimizer"] < 12 * r["trainable"]
    assert "LoRA rank 4 on 4 Linear layers" in r["how"]


def test_sgd_keeps_one_state_and_adamw_two() -> None:
    sgd, adamw = ask(optimizer="sgd"), ask(optimizer="adamw")
    assert 4 * 198_912 <= sgd["components"]["optimizer"] < 6 * 198_912
    assert 8 * 198_912 <= adamw["components"]["optimizer"] < 12 * 198_912


def test_checkpointing_an_entry_model_without_the_method_is_refused() -> None:
    r = ask(checkpointing=True)
    assert r["error"] == "unsupported" and "gradient_checkpointing_enable" in r["message"]


def test_a_config_without_transformers_or_model_type() -> None:
    r = ask(model={"config": {"hidden_size": 64}})
    assert r["error"] in ("config", "no-transformers"), r


def test_the_tracker_is_refused_below_the_version_given() -> None:
    r = ask(min_torch="999.0")
    assert r["error"] == "no-memtracker" and "older than 999.0" in r["message"]


# --- broken entries: one clean error each ------------------------------------------------------

BROKEN = {
    "syntax": ("def fn(:\n", "fn", "SyntaxError"),
    "missing": ("def other():\n    pass\n", "fn", "no function fn"),
    "not-callable": ("fn = 3\n", "fn", "no function fn"),
    "raises": ("def fn():\n    raise RuntimeError('no GPU here\\nsecond line')\n", "fn",
               "RuntimeError: no GPU here"),
    "exits": ("import sys\ndef fn():\n    sys.exit(3)\n", "fn", "SystemExit"),
    "exits-on-import": ("import sys\nsys.exit(0)\n", "fn", "SystemExit"),
    "import-fails": ("import no_such_module_envbuild\n", "fn", "ModuleNotFoundError"),
    "junk": ("def fn():\n    return 42\n", "fn", "must return (model, inputs)"),
    "not-a-module": ("def fn():\n    return 1, 2\n", "fn", "not a torch.nn.Module"),
    "no-tensors": ("import torch\ndef fn():\n    return torch.nn.Linear(2, 2), [1]\n", "fn",
                   "tuple or list of 1 to 64 tensors"),
    "no-inputs": ("import torch\ndef fn():\n    return torch.nn.Linear(2, 2), ()\n", "fn",
                  "tuple or list"),
    "binary": ("\x00\xff\xfe", "fn", "cannot load"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_entries_are_one_clean_error(tmp_path: Path, case: str) -> None:
    text, fn, says = BROKEN[case]
    path = tmp_path / "entry.py"
    path.write_bytes(text.encode("latin-1"))
    r = ask(model={"entry": f"{path}:{fn}"})
    assert r.get("error") == "entry", r
    assert says in r["message"] and "\n" not in r["message"]
    assert len(r["message"]) <= memprobe.MAX_MSG


def test_a_step_that_fails_is_untraceable(tmp_path: Path) -> None:
    path = tmp_path / "entry.py"
    path.write_text("import torch\n"
                    "class M(torch.nn.Module):\n"
                    "    def __init__(self):\n"
                    "        super().__init__()\n"
                    "        self.w = torch.nn.Linear(4, 4)\n"
                    "    def forward(self, x):\n"
                    "        raise ValueError('cannot trace this')\n"
                    "def fn():\n    return M(), (torch.randn(2, 4),)\n")
    r = ask(model={"entry": f"{path}:fn"})
    assert r == {"format": 1, "error": "untraceable",
                 "message": "the step failed: ValueError: cannot trace this"}


def test_special_and_missing_entry_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo.py"
    os.mkfifo(fifo)
    big = tmp_path / "big.py"
    with open(big, "wb") as f:
        f.truncate(memprobe.MAX_SOURCE + 1)
    for spec, says in ((f"{fifo}:fn", "not a regular file"), (f"{tmp_path}:fn", "not a regular"),
                       ("/dev/zero:fn", "not a regular file"), (f"{big}:fn", "over 4 MiB"),
                       (f"{tmp_path}/none.py:fn", "cannot read"), ("fn", "FILE.py:FUNCTION"),
                       (f"{ENTRY}:", "FILE.py:FUNCTION"), (f"{ENTRY}:1x", "FILE.py:FUNCTION"),
                       (f"{ENTRY}:a.b", "FILE.py:FUNCTION"), (":fn", "FILE.py:FUNCTION"),
                       ("/a\x00b.py:fn", "cannot read")):
        r = ask(model={"entry": spec})
        assert r.get("error") == "entry" and says in r["message"], (spec, r)


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(["mode", "batch", "seq", "dtype", "mixed", "optimizer",
                            "checkpointing", "lora_rank", "device", "real", "sdpa", "model",
                            "format", "min_torch"]),
       value=st.recursive(st.none() | st.booleans() | st.integers() | st.floats()
                          | st.text(string.printable + "\x00é", max_size=30),
                          lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                          max_leaves=8))
def test_generated_bad_jobs_are_job_errors_before_torch_runs(key: str, value: object) -> None:
    try:
        parsed = memprobe.parse_job(json.dumps(job(**{key: value})))
    except memprobe.Refused as exc:
        assert exc.code == "job" and "\n" not in exc.message
        return
    # what passed is what the probe can use
    assert parsed["mode"] in ("train", "infer") and parsed["dtype"] in memprobe.DTYPES
    assert parsed["optimizer"] in memprobe.OPTIMIZERS and parsed["device"] in ("auto", "cpu")
    for name, high in (("batch", memprobe.MAX_BATCH), ("seq", memprobe.MAX_SEQ),
                       ("lora_rank", memprobe.MAX_RANK)):
        assert type(parsed[name]) is int and 0 <= parsed[name] <= high
    assert all(type(parsed[n]) is bool for n in ("mixed", "checkpointing", "real"))
    assert parsed["sdpa"] is None or isinstance(parsed["sdpa"], list)
    model = parsed["model"]
    assert isinstance(model.get("entry"), str) or isinstance(model.get("config"), dict)


@settings(max_examples=200, deadline=None)
@given(spec=st.text(alphabet=":/.\\\x00\n\r\t é0123456789_-*?~$", max_size=40))
def test_generated_hostile_entry_specs_are_one_line_entry_errors(spec: str) -> None:
    """Only these characters: a generated spec never names a real module file to run."""
    r = ask(model={"entry": spec})
    assert r["error"] == "entry", r
    assert "\n" not in r["message"] and len(r["message"]) <= memprobe.MAX_MSG


@pytest.mark.parametrize("text", ["", "[]", "{", "{\"format\": 2}", "1" * (memprobe.MAX_JOB + 1),
                                  "[" * 100_000, json.dumps(job(batch=0)),
                                  json.dumps(job(batch=True)), json.dumps(job(model={}))])
def test_malformed_jobs(text: str) -> None:
    r = memprobe.answer([text])
    assert r["error"] == "job" and "\n" not in r["message"]


def test_usage() -> None:
    assert memprobe.answer([])["error"] == "job"
    assert memprobe.answer(["{}", "{}"])["error"] == "job"


# --- Hugging Face configs (transformers: the dev extra) ----------------------------------------

TINY_LLAMA = {"model_type": "llama", "hidden_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 256,
              "vocab_size": 1000, "max_position_embeddings": 512, "tie_word_embeddings": False,
              "torch_dtype": "float32", "architectures": ["LlamaForCausalLM"]}
H200 = ROOT / "tests" / "fixtures" / "hosts" / "h200-driver580-torch2.11-cu130-2026-11-28"


def test_a_configs_prefill_reports_its_kv_cache() -> None:
    pytest.importorskip("transformers")  # the dev extra has it; an image may not
    r = ask(model={"config": TINY_LLAMA}, mode="infer", dtype="bf16", batch=2, seq=64)
    assert "error" not in r, r
    head_dim = 128 // 4
    assert r["components"]["kv_cache"] == 2 * 2 * (2 * 2 * 64 * head_dim) * 2  # k,v x layers
    assert r["params"] == 2 * 1000 * 128 + 128 + 2 * (
        128 * 128 * 2 + 2 * 128 * 64 + 3 * 128 * 256 + 2 * 128)  # embed, head, norm, layers
    assert r["components"]["parameters"] == 2 * r["params"]  # bf16, the config's dtype ignored


def test_the_fp32_llama_reproduces_the_h200s_figure() -> None:
    """The recorded H200 case that needs the emulation: HF Llama 125M, fp32, grouped heads,
    8 x 1,024. CUDA takes math there (real 14.77 GiB); the CPU's flash kernel alone says 9.84."""
    pytest.importorskip("transformers")
    case = next(json.loads(line) for line in (H200 / "memory-probe.jsonl").open()
                if json.loads(line)["case"] == "llama160m-fp32-b8s1024")
    cfg = {"model_type": "llama", "hidden_size": 768, "num_hidden_layers": 12,
           "num_attention_heads": 12, "num_key_value_heads": 4, "intermediate_size": 2048,
           "vocab_size": 32000, "max_position_embeddings": 4096, "tie_word_embeddings": False}
    r = ask(model={"config": cfg}, batch=8, seq=1024, sdpa=RULE)
    assert r["params"] == case["real_cuda"]["params"] and r["attention"] == {"math": 24}
    assert abs(r["peak_bytes"] / case["fake_cuda"]["peak"] - 1) < 0.01
    assert abs(r["peak_bytes"] / case["real_cuda"]["peak_allocated"] - 1) < 0.02


def test_a_checkpointed_config_step_runs_causal_as_the_real_one_does() -> None:
    """Checkpointing turns the cache off, and transformers then looks for packed sequences in
    the position ids, which a fake tensor cannot show: without the probe's answer (one sequence
    a row, as the real step's are) it would build a mask the real step never has, and CUDA would
    take memory-efficient attention where the real step takes flash."""
    pytest.importorskip("transformers")
    masking = pytest.importorskip("transformers.masking_utils")
    original = masking.find_packed_sequence_indices
    r = ask(model={"config": TINY_LLAMA}, dtype="bf16", batch=2, seq=64, checkpointing=True,
            sdpa=RULE)
    assert "error" not in r, r
    assert r["attention"] == {"flash": 8}  # 2 layers, forward and recompute, 2 steps
    assert masking.find_packed_sequence_indices is original
    # a sliding window the sequence reaches is a real mask: memory-efficient, as on CUDA
    sliding = {**TINY_LLAMA, "model_type": "mistral", "sliding_window": 32}
    r = ask(model={"config": sliding}, dtype="bf16", batch=2, seq=64, checkpointing=True,
            sdpa=RULE)
    assert r["attention"] == {"efficient": 8}, r


def test_gradient_accumulation_keeps_the_gradients_through_the_next_pass() -> None:
    """With --accumulate the second forward/backward runs while the first's gradients live: at
    the peak the gradients are there with the activations of a pass (a plain step's peak, at
    the optimizer's step of this tiny model, has no activations)."""
    one, two = ask(), ask(accumulate=8)
    assert "error" not in one and "error" not in two, (one, two)
    assert two["components"]["gradients"] == 198_912 * 4
    assert two["peak_bytes"] > one["peak_bytes"]
