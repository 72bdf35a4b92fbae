"""`envbuild fit` through the CLI (docs/guides/fit.md): issue 28's verdicts on sourced GPU memory
sizes (an 8B full fine-tune does not fit one 80 GB GPU and gets a sharding option; its bf16
inference fits a 24 GB GPU, not a 16 GB one), every option it prints re-checked by running it,
generated hostile input of each class as one line and a documented exit code, the measured
method against the formula on the CPU path for each config family, this GPU-less host, a
recorded host and a fleet.

Most runs are in-process (`envbuild.cli.run`, the function the entry point calls: 20 ms a
formula run, so hypothesis can generate hundreds); the done-when verdicts, the GPU-less host and
one measured run go through a real process."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_USAGE
from envbuild.core import gpus as gpu_names
from envbuild.core import memory
from envbuild.matrix import Matrix
from tests.support import FIXTURES, ROOT, run_cli
from tests.support.bounded_input import _bounded_lines

CONFIGS = FIXTURES / "fit" / "configs"
LLAMA3 = CONFIGS / "meta-llama-3-8b.json"
DOCTOR = FIXTURES / "doctor"
FLEET = FIXTURES / "fleet" / "fleet.toml"
FORMULA = ("--method", "formula")
MIB = 1 << 20
KEYS = {"params", "peak_bytes", "components", "method", "gpus"}
GPU_KEYS = {"gpu", "memory_bytes", "fits", "options"}
SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


def fit(*args: str) -> tuple[int, str, str]:
    """`envbuild fit ARGS` in this process: (exit code, stdout, stderr). An exception that is not
    an envbuild error propagates (a traceback fails the test)."""
    from envbuild.cli import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(["fit", *args])
    return rc, out.getvalue(), err.getvalue()


def fit_json(*args: str) -> tuple[int, dict[str, Any]]:
    rc, out, err = fit(*args, "--json")
    assert rc in (0, EXIT_FAILED), (args, rc, err)
    data = json.loads(out)
    assert set(data) >= KEYS and all(set(g) >= GPU_KEYS for g in data["gpus"]), data
    return rc, data


def refused(result: tuple[int, str, str], code: int = EXIT_USAGE, *words: str) -> str:
    """One `error:` line (and a `hint:`), bounded and escaped, nothing on stdout: the error."""
    rc, out, err = result
    assert rc == code, (rc, err)
    assert "Traceback" not in err and out == "", (out[:300], err[:300])
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith("error: "), err
    assert all(x.startswith("hint: ") for x in lines[1:]), err
    _bounded_lines(err, "fit")
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


# -- the done-when verdicts, through the real CLI -------------------------------------------------
def test_an_8b_full_fine_tune_does_not_fit_one_80_gb_gpu_and_gets_a_sharding_option(
        matrix: Matrix) -> None:
    r = run_cli("fit", "--config", str(LLAMA3), "--mixed", "--gpu", "H100", "--gpu", "A100",
                *FORMULA, "--json", timeout=120)
    assert r.returncode == EXIT_FAILED, r.stderr
    data = json.loads(r.stdout)
    assert set(data) >= KEYS and data["method"] == "formula"
    assert data["params"] == 8_030_261_248  # Meta-Llama-3-8B's published count
    assert data["peak_bytes"] == sum(data["components"].values())
    for g in data["gpus"]:
        assert set(g) >= GPU_KEYS
        row = next(x for x in matrix.gpus if x.name == g["gpu"])
        assert row.memory_gb == 80 and row.source  # a sourced 80 GB GPU ...
        assert g["total_bytes"] == row.memory_mib * MIB  # ... judged on its driver's figure
        assert g["memory_bytes"] < g["total_bytes"] and not g["fits"]
        shards = [o for o in g["options"] if "--shards" in o["flags"]]
        assert shards and shards[0]["needed_bytes"] <= g["memory_bytes"], g["options"]
    text = run_cli("fit", "--config", str(LLAMA3), "--mixed", "--gpu", "H100", *FORMULA)
    assert text.returncode == EXIT_FAILED
    assert "to fit: FSDP/ZeRO-3 over" in text.stdout and "--shards" in text.stdout


def test_its_bf16_inference_fits_a_24_gb_gpu_and_not_a_16_gb_one(matrix: Matrix) -> None:
    args = ["fit", "--config", str(LLAMA3), "--infer", "--seq", "4096", *FORMULA]
    r = run_cli(*args, "--gpu", "RTX 4090", "--gpu", "RTX 4080", "--json", timeout=120)
    assert r.returncode == EXIT_FAILED, r.stderr
    data = json.loads(r.stdout)
    assert data["job"]["dtype"] == "bf16" and data["job"]["mode"] == "infer"
    assert [(g["gpu"], g["fits"]) for g in data["gpus"]] == [("RTX 4090", True),
                                                              ("RTX 4080", False)]
    for g, size in zip(data["gpus"], (24, 16), strict=True):
        row = next(x for x in matrix.gpus if x.name == g["gpu"])
        assert row.memory_gb == size and row.source and g["total_bytes"] == row.memory_mib * MIB
    assert data["gpus"][1]["options"]  # a way onto the 16 GB GPU
    assert run_cli(*args, "--gpu", "RTX 4090").returncode == 0


# -- every option printed is a command that fits -------------------------------------------------
TARGETS = st.one_of(
    st.sampled_from(["RTX 4080", "RTX 4090", "A100 40GB", "A100", "H100", "L4", "T4", "V100",
                     "GTX 1080", "RTX 3090"]).map(lambda g: ("--gpu", g)),
    st.sampled_from(["pascal-gtx1080", "wsl2-healthy", "h100-sxm-recorded", "h200-recorded"])
    .map(lambda d: ("--facts", str(DOCTOR / d))))


@st.composite
def jobs(draw: st.DrawFn) -> list[str]:
    words = ["--config", str(draw(st.sampled_from(sorted(CONFIGS.glob("*.json")))))]
    words += ["--batch", str(draw(st.sampled_from([1, 2, 3, 4, 8, 16, 64]))),
              "--seq", str(draw(st.sampled_from([128, 512, 2048, 4096, 8192])))]
    words += ["--dtype", draw(st.sampled_from(["fp32", "bf16", "fp16"]))]
    if draw(st.booleans()):
        words.append("--infer")
    else:
        words += ["--optimizer", draw(st.sampled_from(["adamw", "sgd", "adamw8bit"]))]
        words += draw(st.sampled_from([[], ["--mixed"], ["--checkpointing"], ["--lora", "8"],
                                       ["--accumulate", "2"]]))
    return words


@SETTINGS
@given(job=jobs(), target=TARGETS)
def test_every_option_printed_is_a_command_that_fits(job: list[str], target: tuple[str, str]
                                                      ) -> None:
    rc, data = fit_json(*job, *target, *FORMULA)
    assert rc == (0 if all(g["fits"] for g in data["gpus"]) else EXIT_FAILED)
    text_rc, text, _ = fit(*job, *target, *FORMULA)
    printed = [line.strip() for line in text.splitlines()
               if line.startswith("          envbuild fit ")]
    listed = [o["command"] for g in data["gpus"] for o in g["options"]]
    assert text_rc == rc and printed == listed
    for g in data["gpus"]:
        assert g["fits"] or g["options"] or "no single change" in text
        for option in g["options"]:
            argv = shlex.split(option["command"])
            assert argv[:2] == ["envbuild", "fit"]
            again_rc, again = fit_json(*argv[2:])
            assert again_rc == 0 and again["job"] == option["job"], option
            [same] = [x for x in again["gpus"] if x["gpu"] == g["gpu"]]
            assert same["fits"] and same["needed_bytes"] == option["needed_bytes"], option


def test_a_gpu_the_matrix_does_not_size_as_its_driver_is_named_by_its_recording() -> None:
    """A GTX 1650 the matrix does not know, a GTX 1080 it knows as 8 GB (the driver: 8192 MiB):
    the option's command judges the recorded GPU again, not a matrix row."""
    for host, name in (("wsl2-healthy", "NVIDIA GeForce GTX 1650"),
                       ("pascal-gtx1080", "GTX 1080")):
        facts = str(DOCTOR / host)
        rc, data = fit_json("--config", str(CONFIGS / "qwen2-0.5b.json"), "--infer", "--dtype",
                            "fp32", "--batch", "8", "--seq", "4096", "--facts", facts, *FORMULA)
        [g] = data["gpus"]
        assert (rc, g["gpu"], g["fits"]) == (EXIT_FAILED, name, False)
        assert g["options"] and all(o["command"].endswith(f"--facts {facts}")
                                    for o in g["options"]), g["options"]


# -- hostile input: one line, a documented code ------------------------------------------------
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    held: list[socket.socket] = []
    yield held
    for s in held:
        s.close()


def _config_file(kind: str, tmp: Path, data: Any, held: list[socket.socket]) -> Path:
    path = tmp / f"{kind}.json"
    if kind == "missing":
        return tmp / "no-such-config.json"
    if kind == "directory":
        return tmp
    if kind == "device":
        return Path("/dev/zero")
    if kind == "fifo":
        if not path.exists():
            os.mkfifo(path)
        return path
    if kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        if path.exists():
            path.unlink()
        s.bind(str(path))
        held.append(s)
        return path
    if kind == "huge":
        with path.open("wb") as fh:
            fh.truncate(5 << 20)
        return path
    if kind == "deep":
        path.write_text("[" * 100 + "]" * 100)
        return path
    if kind == "not-utf8":
        path.write_bytes(b'{"model_type": "llama\xff\xfe"}')
        return path
    path.write_text(json.dumps(data))
    return path


LLAMA_DOC = json.loads(LLAMA3.read_text())
NOT_A_POSITIVE_INT = st.one_of(st.booleans(), st.integers(max_value=0),
                               st.integers(min_value=1 << 30), st.floats(allow_nan=False),
                               TEXT, st.lists(st.integers(), max_size=3),
                               st.dictionaries(TEXT, st.integers(), max_size=2))
WRONG = st.one_of(
    st.tuples(st.sampled_from(["hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads", "vocab_size"]), st.none()),  # missing
    st.tuples(st.sampled_from(["hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads", "vocab_size", "num_key_value_heads"]),
              NOT_A_POSITIVE_INT),
    st.tuples(st.just("model_type"),
              st.one_of(st.none(), st.integers(), TEXT.filter(
                  lambda t: t not in ("llama", "mistral", "qwen2")))),
    st.tuples(st.sampled_from(["tie_word_embeddings", "attention_bias"]),
              st.one_of(st.integers(), TEXT, st.lists(st.booleans(), max_size=2))))
MOE = st.sampled_from([{"model_type": "mixtral", "num_local_experts": 8},
                       {"num_local_experts": 8, "num_experts_per_tok": 2},
                       {"model_type": "qwen2_moe", "num_experts": 60},
                       {"n_routed_experts": 64}, {"moe_intermediate_size": 1408}])


@st.composite
def hostile_configs(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["missing", "directory", "device", "fifo", "socket", "huge",
                                 "deep", "not-utf8", "not-object", "wrong", "moe", "empty"]))
    if kind == "not-object":
        return kind, draw(st.one_of(st.lists(st.integers(), max_size=3), st.integers(), TEXT,
                                    st.none()))
    if kind == "wrong":
        key, value = draw(WRONG)
        return kind, {**LLAMA_DOC, key: value}
    if kind == "moe":
        return kind, {**LLAMA_DOC, **draw(MOE)}
    if kind == "empty":
        return kind, {}
    return kind, None


@SETTINGS
@given(config=hostile_configs(), measured=st.booleans())
def test_hostile_config_files_are_one_line_errors(tmp_path: Path, sockets: list[socket.socket],
                                                  config: tuple[str, Any], measured: bool
                                                  ) -> None:
    """A --config that is not a file, too big, too deep, not UTF-8, not an object, of wrong
    types, or a mixture of experts: exit 2 before anything is measured."""
    kind, data = config
    path = _config_file(kind, tmp_path, data, sockets)
    method = ("--method", "measured") if measured else FORMULA
    line = refused(fit("--config", str(path), "--gpu", "H100", *method))
    if kind == "moe":
        assert "not one envbuild can count" in line or "mixture-of-experts" in line, line


ENTRIES = st.one_of(
    TEXT.filter(lambda t: ":" not in t),  # no colon
    st.tuples(TEXT, st.sampled_from(["\x00", "\n", "\r", " ", "-", ".", "1"]), TEXT)
    .map(lambda p: f"train.py:{p[0]}{p[1]}{p[2]}"),  # not an identifier
    st.tuples(TEXT.filter(lambda t: not t.endswith(".py")), st.just(":build"))
    .map("".join),  # not a .py file
    st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8}){0,2}\.py:[a-z_]{1,8}", fullmatch=True)
    .map(lambda t: f"no-such-dir-28/{t}"))  # not there


@SETTINGS
@given(entry=ENTRIES)
def test_hostile_entry_texts_are_one_line_errors(entry: str) -> None:
    refused(fit("--entry", entry, "--gpu", "H100"), EXIT_USAGE, "--entry"
            if ":" not in entry or not entry.rpartition(":")[2].isidentifier() else "")


def _unknown(matrix: Matrix, name: str) -> bool:
    from envbuild.core import gpus

    return not any((g := gpus.lookup(matrix, name, v)) is not None
                   and (g.memory_mib or g.memory_gb) for v in ("nvidia", "amd"))


@SETTINGS
@given(name=st.one_of(TEXT.filter(lambda t: "\x00" not in t),
                      st.from_regex(r"(sm_|gfx)[0-9a]{2,4}", fullmatch=True),
                      st.text("H100\x1b[]\r\n\t\u202e", min_size=1, max_size=30),
                      st.integers(200, 5000).map(lambda n: "H" * n)))
def test_hostile_gpu_names_are_one_line_errors(matrix: Matrix, name: str) -> None:
    assume(_unknown(matrix, name))
    line = refused(fit("--config", str(LLAMA3), "--gpu", name, *FORMULA), EXIT_USAGE, "--gpu")
    assert "\x1b" not in line and len(line) < 400


@SETTINGS
@given(row=st.sampled_from(["H100", "RTX 4090", "T4", "A100", "Jetson Orin Nano", "MI250X"]),
       word=st.sampled_from(["", "Laptop GPU", "Max-Q", "MIG 1g.10gb", "12GB", "40 GB", "999GB"]),
       junk=TEXT.filter(lambda t: "\x00" not in t))
def test_a_known_gpu_with_hostile_words_is_judged_or_refused_in_one_line(
        matrix: Matrix, row: str, word: str, junk: str) -> None:
    """A name the matrix finds, with a size, a laptop or MIG word and anything else around it:
    exit 2 in one line, or a report whose every printed command gives the same --gpu back
    (shell-quoted, escapes not printed raw) and a size no larger than the row's largest."""
    name = f"{junk} {row} {word} {junk}"
    rc, out, err = fit("--config", str(LLAMA3), *FORMULA, "--mixed", "--gpu", name)
    assert "Traceback" not in err and "\x1b" not in out + err
    if rc == EXIT_USAGE:
        assert err.count("\n") == 2, err
        return
    assert rc in (0, 1), err
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--mixed", "--gpu", name)
    (gpu,) = data["gpus"]
    said = shlex.split(gpu["where"])
    assert said[0] == "--gpu" and len(said) == 2
    for o in gpu["options"]:
        assert shlex.split(o["command"])[-2:] == said, (o["command"], said)
    found = next(g for g in matrix.gpus if g.name == gpu["gpu"])
    own = memory.total_bytes(found, memory.coefficients(matrix.extra["memory"]))
    assert gpu["total_bytes"] <= max(own, found.memory_gb * 10**9), (name, gpu)


FLEETS = {
    "not TOML": "[group.a\ngpu = 'H100'\n",
    "no GPU": '[group.a]\ndriver = "580.95.05"\ncount = 1\n',
    "unknown GPU": '[group.a]\ngpu = "Nonexistent 9000"\ndriver = "580.95.05"\ncount = 1\n',
    "wrong types": '[group.a]\ngpu = 3\ndriver = ["580"]\ncount = "four"\n',
    "deep": "a = " + "[" * 100 + "]" * 100 + "\n",
    "not UTF-8": b"[group.a]\ngpu = \"H100\xff\"\n",
}


@SETTINGS
@given(kind=st.sampled_from([*FLEETS, "directory", "fifo", "huge", "missing"]),
       junk=st.binary(max_size=40))
def test_broken_fleet_files_are_one_line_errors(tmp_path: Path, kind: str, junk: bytes) -> None:
    """Exit 2, except a fleet file that is not there: 3, as for `envbuild plan`
    (docs/reference/exit-codes.md)."""
    path = tmp_path / f"{kind.replace(' ', '-')}.toml"  # one name per kind: a FIFO stays one
    body = FLEETS.get(kind)
    if isinstance(body, str):
        path.write_text(body + "# " + junk.hex() + "\n")
    elif isinstance(body, bytes):
        path.write_bytes(body)
    elif kind == "directory":
        path = tmp_path
    elif kind == "fifo":
        if not path.exists():
            os.mkfifo(path)
    elif kind == "huge":
        with path.open("wb") as fh:
            fh.truncate(5 << 20)
    code = EXIT_CANNOT_RUN if kind == "missing" else EXIT_USAGE
    refused(fit("--config", str(LLAMA3), "--fleet", str(path), *FORMULA), code)


CHOICES = {"--dtype": ("fp32", "bf16", "fp16"), "--optimizer": ("adamw", "sgd", "adamw8bit"),
           "--method": ("auto", "measured", "formula")}


@SETTINGS
@given(option=st.sampled_from(sorted(CHOICES)), value=TEXT.filter(lambda t: "\x00" not in t))
def test_bad_choices_are_one_line_errors(option: str, value: str) -> None:
    assume(value not in CHOICES[option])
    rest = () if option == "--method" else FORMULA
    refused(fit("--config", str(LLAMA3), "--gpu", "H100", *rest, option, value))


@SETTINGS
@given(option=st.sampled_from(["--batch", "--seq", "--shards", "--accumulate", "--lora"]),
       value=st.one_of(st.integers(max_value=0), st.integers(min_value=(1 << 24) + 1),
                       st.sampled_from(["", "x", "1.5", "0x10", "1e3"])))
def test_counts_out_of_range_are_one_line_errors(option: str, value: int | str) -> None:
    if option == "--lora" and isinstance(value, int) and value == 0:
        value = -1  # rank 0 is a full fine-tune
    refused(fit("--config", str(LLAMA3), "--gpu", "H100", *FORMULA, option, str(value)))


def test_the_model_is_given_once_and_the_formula_needs_a_config(tmp_path: Path) -> None:
    entry = f"{FIXTURES / 'fit' / 'mlp_entry.py'}:tiny"
    refused(fit("--gpu", "H100"), EXIT_USAGE, "give the model once")
    refused(fit("--config", str(LLAMA3), "--entry", entry, "--gpu", "H100"), EXIT_USAGE)
    refused(fit("--entry", entry, "--gpu", "H100", *FORMULA), EXIT_USAGE, "formula")
    refused(fit("--config", str(LLAMA3), "--image", "x:y", "--gpu", "H100", *FORMULA))
    refused(fit("--entry", "", "--gpu", "H100"), EXIT_USAGE, "is not FILE.py:FUNCTION")
    refused(fit("--config", str(LLAMA3), "--image", "", "--gpu", "H100"), EXIT_USAGE, "--image")


def test_fit_is_in_the_exit_code_reference() -> None:
    text = (ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    rows = {line.split("|")[1].strip(): line for line in text.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    assert "a `fit` step that does not fit a GPU" in rows["1"]
    assert "`fit`" in rows["2"] and "`fit`" in rows["3"]


# -- the measured method against the formula on the CPU path ---------------------------------------
BASE = {"hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
        "num_key_value_heads": 2, "intermediate_size": 1408, "vocab_size": 8192,
        "max_position_embeddings": 4096}
FAMILIES = {
    "llama-gqa": {"model_type": "llama", **BASE},
    "mistral": {"model_type": "mistral", **BASE, "sliding_window": 4096},
    "qwen2-bias-tied": {"model_type": "qwen2", **BASE, "tie_word_embeddings": True},
    # past the sliding window (every step below is longer than 512): transformers passes a mask
    # and repeats K/V, CUDA takes memory-efficient attention; Qwen2 on its layers from
    # max_window_layers only. Mistral's small vocabulary makes the masked call, not the logits,
    # the prefill's peak.
    "mistral-sliding": {"model_type": "mistral", **BASE, "sliding_window": 512,
                        "vocab_size": 1024},
    "qwen2-sliding": {"model_type": "qwen2", **BASE, "use_sliding_window": True,
                      "sliding_window": 512, "max_window_layers": 1},
}
# (mode, batch, seq): big enough that the step's tensors, not the fixed 32-64 MiB of cuBLAS
# workspace, decide the peak; fake tensors make the size free.
STEPS = [("train", 8, 1024), ("infer", 16, 2048)]


@pytest.fixture(scope="module")
def measured_vs_formula() -> list[tuple[str, str, str, int, int, str]]:
    """(family, mode, dtype, measured peak, formula peak, how) of each case: the measured one is
    the probe's answer to the job `envbuild fit` sends, in this process (each a fresh process
    would cost torch's import each time), with the workspace the CLI adds."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from envbuild import matrix
    from envbuild.core import gpus, memory
    from envbuild.core.memshape import parse_config
    from envbuild.features import fit as use
    from envbuild.validator import memprobe

    m = matrix.load()
    full = memory.coefficients(m.extra["memory"])
    t4 = memory.for_gpu(full, gpus.lookup(m, "T4", "nvidia"))  # sm_75: no flash attention
    rows = []
    dtype0, sdpa0 = torch.get_default_dtype(), torch.nn.functional.scaled_dot_product_attention
    try:
        for (family, cfg), (mode, batch, seq), (dtype, gpu, coeffs) in itertools.product(
                FAMILIES.items(), STEPS,
                [("bf16", "", full), ("fp32", "", full), ("fp16", "@T4", t4)]):
            shape = parse_config(json.dumps(cfg), family)
            job = memory.Job(mode=mode, batch=batch, seq=seq, dtype=dtype)
            req = use.FitRequest(job=job, config=Path(f"{family}.json"))
            probe = use.Measured(req, shape, coeffs, memory.sdpa_rule(coeffs), print)
            sent = {**probe.probe_job(job, cfg), "device": "cpu"}
            answer = memprobe.answer([json.dumps(sent)])
            got = use.with_workspace(memory.from_answer(answer, job), job, coeffs)
            want = memory.formula(shape, job, coeffs)
            rows.append((family + gpu, mode, dtype, got.peak_bytes, want.peak_bytes, got.how))
    finally:
        assert torch.get_default_dtype() == dtype0
        assert torch.nn.functional.scaled_dot_product_attention is sdpa0
    return rows


def test_measured_and_formula_agree_within_15_percent_on_the_cpu_path(
        measured_vs_formula: list[tuple[str, str, str, int, int, str]]) -> None:
    """Also on a T4 (no flash attention: bf16 grouped K/V heads take math, in fp32)."""
    assert len(measured_vs_formula) == len(FAMILIES) * len(STEPS) * 3
    for family, mode, dtype, got, want, how in measured_vs_formula:
        print(f"{family:<16} {mode:<5} {dtype}  measured {got / 2**30:6.3f} GiB  formula "
              f"{want / 2**30:6.3f} GiB  formula/measured {want / got:.3f}")
        assert got > 256 * MIB and abs(want / got - 1) < 0.15, (family, mode, dtype, got, want)
        assert how.startswith("fake CPU") and "cuBLAS workspace" in how
        no_flash, family = family.endswith("@T4"), family.removesuffix("@T4")
        assert not no_flash or dtype == "fp16"  # bf16 on a T4: below
        if (dtype == "fp32" or no_flash) and family != "mistral-sliding":
            assert "math" in how, how  # GQA in fp32: CUDA takes math, emulated on the CPU
        if family.endswith("-sliding"):  # a mask: memory-efficient, whatever the dtype
            assert "efficient" in how, how
        else:
            assert "efficient" not in how, how


def test_a_masked_math_call_in_bf16_says_the_formula_counts_it_low() -> None:
    """bf16 on a T4: memory-efficient attention takes no bf16 before sm_80, so a sliding-window
    layer's masked call takes math; the formula counts that call low (0.82 of the measured
    method in training on this CPU, matrix/memory.toml [math_precision]) and its note says so,
    pointing at the measured method."""
    from envbuild import matrix
    from envbuild.core import gpus
    from envbuild.core.memshape import parse_config

    m = matrix.load()
    t4 = memory.for_gpu(memory.coefficients(m.extra["memory"]), gpus.lookup(m, "T4", "nvidia"))
    shape = parse_config(json.dumps(FAMILIES["mistral-sliding"]), "mistral")
    for dtype, low in (("bf16", True), ("fp16", False), ("fp32", False)):
        e = memory.formula(shape, memory.Job(batch=8, seq=1024, dtype=dtype), t4)
        [note] = [n for n in e.notes if n.startswith("attention")]
        assert ("prefer --method measured" in note) == low, (dtype, note)


def test_a_quantized_config_is_noted_and_built_at_the_dtype(tmp_path: Path) -> None:
    """A GPTQ/AWQ/bitsandbytes config.json: the report says the weights are counted at --dtype
    (an upper bound), its quant_method escaped in the text and the JSON; the measured method's
    model is built without the quantization_config (no transformers quantizer to trip)."""
    from envbuild import matrix
    from envbuild.core.memshape import parse_config
    from envbuild.features import fit as use

    cfg = {**FAMILIES["mistral"],
           "quantization_config": {"quant_method": "gptq\x1b[2J", "bits": 4}}
    config = tmp_path / "config.json"
    config.write_text(json.dumps(cfg))
    rc, data = fit_json("--config", str(config), "--gpu", "H100", *FORMULA)
    [note] = [n for n in data["notes"] if "quantized" in n]
    assert note.startswith("the checkpoint is quantized ('gptq\\x1b[2J'): its weights are "
                           "counted at bf16 (--dtype)") and "upper bound" in note
    rc, out, _err = fit("--config", str(config), "--gpu", "H100", *FORMULA)
    assert rc == 0
    assert "\x1b" not in out and "the checkpoint is quantized" in out
    coeffs = memory.coefficients(matrix.load().extra["memory"])
    job = memory.Job()
    req = use.FitRequest(job=job, config=config)
    probe = use.Measured(req, parse_config(json.dumps(cfg), "c"), coeffs,
                         memory.sdpa_rule(coeffs), print)
    sent = probe.probe_job(job, cfg)["model"]["config"]
    assert "quantization_config" not in sent and sent["sliding_window"] == 4096


def test_a_measured_run_through_the_cli(tmp_path: Path) -> None:
    """The whole path once: a fresh probe process with this interpreter, its answer parsed, the
    workspace added, the verdict; against the formula for the same step."""
    pytest.importorskip("transformers")
    config = tmp_path / "config.json"
    config.write_text(json.dumps(FAMILIES["qwen2-bias-tied"]))
    args = ["fit", "--config", str(config), "--batch", "8", "--seq", "1024", "--gpu", "L4",
            "--json"]
    r = run_cli(*args, "--method", "measured", timeout=300)
    assert r.returncode == 0, r.stderr
    measured = json.loads(r.stdout)
    formula = json.loads(run_cli(*args, *FORMULA).stdout)
    assert measured["method"] == "measured" and formula["method"] == "formula"
    assert measured["params"] == formula["params"]  # the exact count, two ways
    assert abs(formula["peak_bytes"] / measured["peak_bytes"] - 1) < 0.15
    assert measured["components"]["other"] >= 64 * MIB  # the two cuBLAS workspaces
    assert [g["fits"] for g in measured["gpus"]] == [True]


# -- this host, a recorded host, a fleet ------------------------------------------------------
def test_no_gpu_here_prints_the_estimate_and_says_so() -> None:
    if Path("/dev/nvidia0").exists():
        pytest.skip("this host has an NVIDIA GPU")  # never in CI: the runners have none
    r = run_cli("fit", "--config", str(LLAMA3), "--infer", *FORMULA, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "peak " in r.stdout and "no NVIDIA GPU found on this host" in r.stdout
    data = json.loads(run_cli("fit", "--config", str(LLAMA3), "--infer", *FORMULA,
                              "--json").stdout)
    assert data["gpus"] == [] and any("no NVIDIA GPU" in n for n in data["notes"])


@pytest.mark.parametrize(("host", "gpu", "mib"), [("h100-sxm-recorded", "H100", 81559),
                                                   ("h200-recorded", "H200", 143771),
                                                   ("pascal-gtx1080", "GTX 1080", 8192)])
def test_a_recorded_host_is_judged_with_its_drivers_memory(host: str, gpu: str, mib: int
                                                           ) -> None:
    rc, data = fit_json("--config", str(LLAMA3), "--infer", "--facts", str(DOCTOR / host),
                        *FORMULA)
    [g] = data["gpus"]  # eight H100s of one kind are one row
    assert (g["gpu"], g["total_bytes"], g["where"]) == (gpu, mib * MIB, "the recorded host, GPU 0")
    assert rc == (0 if g["fits"] else EXIT_FAILED) and g["fits"] == (gpu != "GTX 1080")


def test_a_recorded_host_without_an_nvidia_gpu_is_a_note() -> None:
    rc, data = fit_json("--config", str(LLAMA3), "--facts", str(DOCTOR / "cpu-host-docker"),
                        *FORMULA)
    assert rc == 0 and data["gpus"] == []
    assert any("no NVIDIA GPU found on the recorded host" in n for n in data["notes"])


def test_a_fleet_judges_each_groups_gpu(matrix: Matrix) -> None:
    rc, data = fit_json("--config", str(LLAMA3), "--infer", "--seq", "4096", "--fleet",
                        str(FLEET), *FORMULA)
    got = [(g["gpu"], re.sub(r" \(.*", "", g["where"]), g["fits"]) for g in data["gpus"]]
    assert got == [("P100", "fleet group pascal", False), ("V100 32GB", "fleet group volta", True),
                   ("A100", "fleet group ampere", True), ("H100", "fleet group hopper", True),
                   ("B200", "fleet group blackwell", True)]
    assert rc == EXIT_FAILED  # the Pascal group's Tesla P100-PCIE-16GB: 16 GB, as named
    coeffs = memory.coefficients(matrix.extra["memory"])
    named = {"P100": "Tesla P100-PCIE-16GB", "V100 32GB": "Tesla V100-SXM2-32GB"}
    for g in data["gpus"]:  # the driver's MiB where a source gives it, else memory_gb reduced
        row = next(x for x in matrix.gpus if x.name == g["gpu"])
        row = memory.sized_by_name(row, named.get(row.name, row.name))
        assert g["total_bytes"] == memory.total_bytes(row, coeffs) > 0
    assert data["gpus"][0]["total_bytes"] <= 16 * 10**9  # the P100: no source gives its MiB
    [p100] = [g for g in data["gpus"] if not g["fits"]]
    again = shlex.join(["--gpu", "Tesla P100-PCIE-16GB"])  # the size its name states
    assert p100["options"] and all(o["command"].endswith(again) for o in p100["options"])


def test_each_gpu_says_what_memory_it_was_judged_at() -> None:
    """A module of two devices is judged per device, a name sold with several sizes at the
    smallest, shared memory is said: in --json's per-GPU notes and under the GPU's table row."""
    rc, data = fit_json("--config", str(LLAMA3), "--infer", "--gpu", "MI250X", "--gpu",
                        "Jetson Orin Nano", "--gpu", "RTX 3060", "--gpu", "H100", *FORMULA)
    got = {g["gpu"]: g for g in data["gpus"]}
    assert rc == EXIT_FAILED and got["MI250X"]["total_bytes"] == 64 * 10**9
    assert "one device's" in got["MI250X"]["notes"][0]
    assert got["Jetson Orin Nano"]["total_bytes"] == 4 * 10**9
    assert [("smallest" in n, "shared with the CPU" in n)
            for n in got["Jetson Orin Nano"]["notes"]] == [(True, False), (False, True)]
    assert got["RTX 3060"]["total_bytes"] == 8 * 10**9 and got["H100"]["notes"] == []
    rc2, out, _ = fit("--config", str(LLAMA3), "--infer", "--gpu", "MI250X", *FORMULA)
    assert rc2 == 0
    row = out.index("\nMI250X ")
    assert out[row:].splitlines()[2].startswith("  note: judged at 64.0 GB, one device's")


# -- the guide's runs are what fit prints ------------------------------------------------------
def test_the_guides_formula_runs_are_what_fit_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/guides/fit.md: every shown `$ envbuild fit ... --method formula` block is today's
    output (the measured runs are shown as they were, with their torch). A terminal that is not
    UTF-8 gets `#` bars, as this process's captured stdout does."""
    monkeypatch.chdir(ROOT)
    page = ROOT / "docs" / "guides" / "fit.md"
    runs = 0
    for block in re.findall(r"^```\n(.*?)^```", page.read_text(), re.MULTILINE | re.DOTALL):
        first, *shown = block.splitlines()
        if first.startswith("$ envbuild fit") and "--method formula" in first:
            _, out, err = fit(*shlex.split(first)[3:])
            assert (out + err).splitlines() == [x.replace("\u2588", "#") for x in shown], first
            runs += 1
    assert runs >= 2


def test_the_formula_does_not_import_torch() -> None:
    """Start-up stays light: `fit --method formula` imports neither torch nor transformers."""
    code = ("import sys; from envbuild.cli import run; rc = run(['fit', '--config', "
            f"{str(LLAMA3)!r}, '--infer', '--gpu', 'H100', '--method', 'formula', '--json']); "
            "print('HEAVY', [m for m in ('torch', 'transformers', 'docker') if m in sys.modules], "
            "rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    assert p.stdout.strip().endswith("HEAVY [] 0")


def test_an_entrys_batch_and_sequence_are_its_inputs_never_the_flags() -> None:
    """`fit --entry F:tiny --batch 512 --seq 99` measured the entry's own (64, 256) inputs and
    printed "batch 512 x 99": --batch and --seq are refused with --entry, and the step line
    names the entry's inputs instead of the defaults (1 x 2048) it never ran."""
    entry = f"{FIXTURES / 'fit' / 'mlp_entry.py'}:tiny"
    for flags in (("--batch", "512"), ("--seq", "99")):
        refused(fit("--entry", entry, "--gpu", "H100", *flags), EXIT_USAGE, flags[0])
    from envbuild.features.fit import describe_job

    step = describe_job(memory.Job(), entry=True)
    assert "2048" not in step and "inputs" in step, step


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_mixed_precision_is_described_as_the_bf16_autocast_it_counts(dtype: str) -> None:
    """`--mixed --dtype fp16` printed "mixed fp16" over a method line saying "mixed bf16": the
    formula and the probe count fp32 weights under bf16 autocast whatever --dtype says."""
    rc, out, err = fit("--config", str(LLAMA3), "--gpu", "H100", *FORMULA, "--mixed",
                       "--dtype", dtype)
    step = next(line for line in out.splitlines() if line.startswith("step"))
    assert rc == EXIT_FAILED, err
    assert ", mixed bf16," in step and "fp16" not in step and "fp32," not in step, step


# -- what the review found ---------------------------------------------------------------------
def test_facts_judge_a_recorded_host_and_do_not_go_with_gpu_or_fleet(tmp_path: Path) -> None:
    """--facts with --gpu was silently ignored (an unreadable DIR never checked): refused."""
    host = next(p for p in sorted(DOCTOR.iterdir()) if p.is_dir())
    for extra in (("--gpu", "H100"), ("--fleet", str(FLEET))):
        refused(fit("--config", str(LLAMA3), *FORMULA, "--facts", str(host), *extra),
                EXIT_USAGE, "--facts")


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
def test_mixed_precision_is_one_job_whatever_the_dtype(dtype: str) -> None:
    """--mixed keeps fp32 weights and autocasts to bf16 whatever --dtype says: one job, one
    figure, and its mixed options' commands name no --dtype the job does not use."""
    _, data = fit_json("--config", str(LLAMA3), *FORMULA, "--mixed", "--dtype", dtype,
                       "--gpu", "H100")
    _, plain = fit_json("--config", str(LLAMA3), *FORMULA, "--mixed", "--gpu", "H100")
    assert data["job"] == plain["job"] and data["job"]["dtype"] == "fp32"
    assert data["peak_bytes"] == plain["peak_bytes"]
    assert all("--dtype" not in o["flags"] for g in data["gpus"] for o in g["options"]
               if o["job"]["mixed"])


def test_a_config_with_thousands_of_labels_is_measured(tmp_path: Path) -> None:
    """A classifier's id2label made the probe's one-argument job too long (exit 2 from a config
    the formula answers): keys that do not shape the model are not sent."""
    pytest.importorskip("transformers")
    labels = {str(i): f"label-{i:06d}-" + "x" * 40 for i in range(5000)}
    cfg = {**FAMILIES["llama-gqa"], "num_hidden_layers": 1, "id2label": labels,
           "label2id": {v: int(k) for k, v in labels.items()}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert path.stat().st_size > 400_000
    rc, data = fit_json("--config", str(path), "--batch", "1", "--seq", "64", "--gpu", "H100")
    assert rc == 0 and data["method"] == "measured", data["notes"]


def test_a_recorded_amd_host_names_its_gpus_and_the_command_that_judges_them() -> None:
    """The host side reads no AMD GPU's memory: the note names the MI300X and a --gpu that
    judges it (it said "no NVIDIA GPU found" and nothing more)."""
    rc, data = fit_json("--config", str(LLAMA3), "--facts", str(DOCTOR / "mi300x"), *FORMULA)
    assert rc == 0 and data["gpus"] == []
    [note] = [n for n in data["notes"] if "AMD" in n]
    assert "MI300X" in note and "--gpu MI300X" in note
    rc, judged = fit_json("--config", str(LLAMA3), "--gpu", "MI300X", *FORMULA)
    assert [g["gpu"] for g in judged["gpus"]] == ["MI300X"]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["bf16", "fp16", "fp32", "mixed"]))
def test_gpus_without_native_bf16_are_named_for_a_bf16_step(matrix: Matrix, data: st.DataObject,
                                                           dtype: str) -> None:
    """A bf16 step (bf16 weights, or mixed precision's bf16 autocast) on a GPU older than
    compute capability 8.0 gets a note naming it (same memory, emulated arithmetic); fp16 and
    fp32 steps, and newer GPUs, never."""
    rows = [g for g in matrix.gpus if g.vendor == "nvidia" and g.cc and g.memory_gb]
    chosen = data.draw(st.lists(st.sampled_from(rows), min_size=1, max_size=4,
                                unique_by=lambda g: g.name))
    flags = ["--mixed"] if dtype == "mixed" else ["--dtype", dtype]
    gpus = [w for g in chosen for w in ("--gpu", g.name)]
    rc, data_out = fit_json("--config", str(CONFIGS / "tinyllama-1.1b.json"), *FORMULA, "--infer"
                            if dtype != "mixed" else "--train", *flags, *gpus)
    assert rc in (0, 1), data_out
    said = " ".join(n for n in data_out["notes"] if "no native bf16" in n)
    for g, verdict in zip(chosen, data_out["gpus"], strict=True):
        old = float(g.cc) < 8.0
        bf16 = dtype in ("bf16", "mixed") or any(
            o["job"]["mixed"] or o["job"]["dtype"] == "bf16" for o in verdict["options"])
        assert (f"{g.name} (sm_" in said) == (old and bf16), (g.name, said)
    if "--mixed" in flags and said:
        assert "--dtype fp16 without --mixed" in said


@pytest.mark.parametrize(("name", "gb"), [("Tesla M40 24GB", 24), ("Tesla M40", 12),
                                          ("NVIDIA GeForce GTX 1060 6GB", 6),
                                          ("Tesla P100-PCIE-16GB", 16), ("P100", 12),
                                          ("A100 40 GB", 40), ("A100-40G", 40),
                                          ("NVIDIA A100-SXM4-64GB", 64), ("RTX 3080 12GB", 12),
                                          ("RTX 2060 12GB", 12), ("MI50 32GB", 32),
                                          ("GH200 144G", 144),
                                          ("NVIDIA GeForce RTX 4090 Laptop GPU 16GB", 16),
                                          ("Jetson Xavier 64GB", 64)])
def test_a_name_that_states_its_size_is_judged_at_it(name: str, gb: int) -> None:
    """A row sold in several sizes is judged at its smallest, unless the name typed states one
    (as nvidia-smi's names often do), and any row at a smaller size its name states (a
    reviewer found 'A100 40 GB' judged at 80 and 'RTX 3080 12GB' at 10); the option commands
    name it the same way."""
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--infer", "--gpu", name)
    assert rc in (0, 1), data
    (gpu,) = data["gpus"]
    assert gpu["total_bytes"] == gb * 10**9, gpu
    stated = gb > 12 or "G" in name
    assert any("smallest" in n for n in gpu["notes"]) != stated, gpu["notes"]
    for o in gpu["options"]:
        assert o["command"].endswith(shlex.join(["--gpu", name if stated else gpu["gpu"]]))


@pytest.mark.parametrize("name", ["MI250X 128GB", "NVIDIA GH200 480GB", "H100 96GB"])
def test_a_size_no_device_of_the_row_has_is_not_taken(matrix: Matrix, name: str) -> None:
    """A module's memory (two devices), the Grace memory counted in, or a size over the row's
    largest: judged as the row is, never at more."""
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--infer", "--gpu", name)
    assert rc in (0, 1), data
    (gpu,) = data["gpus"]
    rc, plain = fit_json("--config", str(LLAMA3), *FORMULA, "--infer", "--gpu", gpu["gpu"])
    assert gpu["total_bytes"] == plain["gpus"][0]["total_bytes"], (gpu, plain)


def test_a_laptop_gpu_is_never_judged_at_its_desktop_namesakes_memory(matrix: Matrix) -> None:
    """'RTX 4090 Laptop GPU' found the desktop RTX 4090 (24 GB; the laptop card has 16): for
    every NVIDIA row, a laptop, mobile or Max-Q name without a size is refused with a hint whose
    command judges it at the size it states."""
    rows = [g for g in matrix.gpus if g.vendor == "nvidia" and memory.has_size(g)
            and g.device_memory_basis != "module" and not g.per_system
            and not re.search(r"\d\s?GB?\b", g.name, re.I)]  # 'A100 40GB' states it
    assert len(rows) > 30
    for i, row in enumerate(rows):
        name = f"{row.name} {('Laptop GPU', 'Mobile', 'Max-Q')[i % 3]}"
        if gpu_names.lookup(matrix, name, "nvidia") != row or any(
                re.search("laptop|mobile|max-?q", n, re.I) for n in (row.name, *row.aliases)):
            continue  # the matrix knows this part (a Max-Q card of the same memory)
        rc, _, err = fit("--config", str(LLAMA3), *FORMULA, "--infer", "--gpu", name)
        assert rc == EXIT_USAGE and "laptop GPU" in err, (name, err)
        hint = err.split(" GB: ", 1)[1].split("; or", 1)[0]
        words = shlex.split(hint)
        rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--infer", *words)
        (gpu,) = data["gpus"]
        stated = int(words[1].rsplit(" ", 1)[1].removesuffix("GB"))
        own = memory.total_bytes(row, memory.coefficients(matrix.extra["memory"]))
        want = own if stated == (row.device_memory_gb or row.memory_gb) else stated * 10**9
        assert gpu["total_bytes"] == want, (name, words, gpu)


@pytest.mark.parametrize("config", ["tinyllama-1.1b.json", "llama-2-7b.json",
                                    "mistral-7b-v0.1.json", "qwen2-0.5b.json"])
@pytest.mark.parametrize("step", [["--dtype", "fp16"], ["--dtype", "bf16", "--infer"],
                                  ["--mixed"], ["--dtype", "fp32"]])
def test_each_gpu_is_judged_with_the_attention_kernels_it_runs(
        matrix: Matrix, config: str, step: list[str]) -> None:
    """Flash attention runs on sm_80 to sm_121 (memory.toml [sdpa]): a V100 or T4 takes
    memory-efficient attention, or math where K/V heads are grouped, and is judged at that
    step's peak (a reviewer found a V100 judged at the flash figure: TinyLlama fp16 4 x 2048
    'fits' a 32 GB V100 at 25.7 GB where math needs 50.5). Every NVIDIA GPU of the matrix, at
    once: each one's needed bytes are the formula's with its own kernels."""
    from envbuild.core.memshape import parse_config

    coeffs = memory.coefficients(matrix.extra["memory"])
    shape = parse_config((CONFIGS / config).read_text(), config)
    rows = [g for g in matrix.gpus if g.vendor == "nvidia" and memory.has_size(g)]
    names = [g.name for g in rows]
    rc, data = fit_json("--config", str(CONFIGS / config), *FORMULA, "--batch", "4", *step,
                        *(w for n in names for w in ("--gpu", n)))
    assert rc in (0, 1), data
    job = memory.Job(**data["job"])
    by_name = {g["gpu"]: g for g in data["gpus"]}
    first = memory.needed_bytes(memory.formula(shape, job, memory.for_gpu(coeffs, rows[0])),
                                coeffs)  # the report's figure is the first GPU's
    kinds = set()
    for row in rows:
        here = memory.for_gpu(coeffs, row)
        kinds.add(memory.kernel_names(here))
        want = memory.needed_bytes(memory.formula(shape, job, here), here)
        got = by_name[row.name]
        assert got["needed_bytes"] == want, (row.name, row.cc)
        assert ("flash" in memory.kernel_names(here)) == (8.0 <= float(row.cc) <= 12.1), row
        assert any("not the" in n for n in got["notes"]) == (want != first), got["notes"]
    assert {("flash", "efficient"), ("efficient",)} <= kinds


def test_fleet_groups_of_one_gpu_share_a_row_and_the_most_gpus(tmp_path: Path) -> None:
    """Two groups of H100s (1 x 1 and 16 x 8) are one row; its sharding goes up to 128."""
    fleet = tmp_path / "fleet.toml"
    fleet.write_text('[group.small]\ngpu = "H100"\ncount = 1\ngpus_per_node = 1\n\n'
                     '[group.big]\ngpu = "H100"\ncount = 16\ngpus_per_node = 8\n')
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--mixed", "--fleet", str(fleet))
    assert rc == 1, data
    (gpu,) = data["gpus"]
    assert "small" in gpu["where"] and "big" in gpu["where"]
    assert any(o["job"]["shards"] > 1 for o in gpu["options"]), gpu["options"]


@pytest.mark.parametrize("count", [0, 1, 2, 3])
@pytest.mark.parametrize("per_node", [0, 1, 2, 8])
def test_a_fleet_group_is_sharded_over_no_more_gpus_than_it_has(tmp_path: Path, count: int,
                                                               per_node: int) -> None:
    """count x gpus_per_node (0: unknown, one a node) caps sharding; a group of 0 nodes has no
    GPUs to shard over (a reviewer found it offered FSDP over 32: 0 read as any number)."""
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[group.g]\ngpu = "RTX 4090"\ncount = {count}\n'
                     f'gpus_per_node = {per_node}\n')
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--mixed", "--fleet", str(fleet))
    assert rc == 1, data
    (gpu,) = data["gpus"]
    has = max(1, count * max(per_node, 1))
    assert gpu["options"] and all(o["job"]["shards"] <= has for o in gpu["options"]), \
        (has, gpu["options"])
    if has >= 16:  # enough GPUs that sharding is among the cheapest changes
        assert any(o["job"]["shards"] > 1 for o in gpu["options"]), gpu["options"]


def test_a_recorded_host_is_judged_at_its_own_size_without_a_variants_note() -> None:
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--facts",
                        str(DOCTOR / "gh200-fasrc"))
    assert rc in (0, 1) and data["gpus"], data
    for gpu in data["gpus"]:
        assert not any("smallest" in n for n in gpu["notes"]), gpu["notes"]


@pytest.mark.parametrize("rank", [769, 4096, 1 << 20])
def test_a_lora_rank_above_the_hidden_size_is_refused(rank: int) -> None:
    """--lora 1048576 on a 768-wide model reported 170 billion trainable parameters of 125
    million: one line, exit 2; the hint's rank is taken."""
    config = FIXTURES / "fit" / "llama-125m-gqa.json"
    rc, _, err = fit("--config", str(config), *FORMULA, "--gpu", "H100", "--lora", str(rank))
    assert rc == EXIT_USAGE and "hidden size (768)" in err and err.count("\n") == 2, err
    assert fit("--config", str(config), *FORMULA, "--gpu", "H100", "--lora", "768")[0] == 0
    assert fit("--config", str(config), *FORMULA, "--gpu", "H100", "--lora", "16")[0] == 0


def test_a_mig_slice_is_offered_no_sharding() -> None:
    """NCCL does not run across MIG instances: a slice named with --gpu shards over none."""
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--mixed", "--gpu",
                        "NVIDIA H100 80GB HBM3 MIG 3g.40gb", "--gpu", "H100")
    assert rc == 1, data
    mig, whole = data["gpus"]
    assert mig["total_bytes"] == 40 * 10**9
    assert all(o["job"]["shards"] == 1 for o in mig["options"]), mig["options"]
    assert any(o["job"]["shards"] > 1 for o in whole["options"]), whole["options"]


def test_a_host_gpu_the_matrix_does_not_know_is_judged_with_its_drivers_cc(
        tmp_path: Path) -> None:
    """An sm_75 card the matrix lacks was judged with flash attention (its cc dropped): the
    driver's compute capability picks its kernels."""
    import shutil

    host = tmp_path / "unknown"
    shutil.copytree(DOCTOR / "h100-sxm-recorded", host)
    for name in ("nvidia-smi-q-x.xml", "nvidia-smi-query.csv"):
        path = host / name
        text = path.read_text()
        assert "NVIDIA H100 80GB HBM3" in text
        path.write_text(text.replace("NVIDIA H100 80GB HBM3", "NVIDIA Mystery T9000")
                        .replace("T9000, 9.0,", "T9000, 7.5,"))
    tiny = CONFIGS / "tinyllama-1.1b.json"
    rc, data = fit_json("--config", str(tiny), *FORMULA, "--dtype", "fp16", "--facts", str(host))
    assert rc in (0, 1) and data["gpus"][0]["gpu"] == "NVIDIA Mystery T9000", data
    assert data["attention_kernels"] == ["efficient"], data["attention_kernels"]
    assert any(n.startswith("attention: math") for n in data["notes"]), data["notes"]


def test_a_recorded_host_in_mig_mode_is_noted_with_a_slice_to_judge(tmp_path: Path) -> None:
    """nvidia-smi reports the whole GPU's memory while MIG is on, and torch sees slices: a note,
    whose command judges a slice at its profile's size; the table names the recorded host."""
    import shutil

    host = tmp_path / "mig"
    shutil.copytree(DOCTOR / "h100-sxm-recorded", host)
    xml = host / "nvidia-smi-q-x.xml"
    xml.write_text(xml.read_text().replace("<current_mig>Disabled", "<current_mig>Enabled", 1))
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--infer", "--facts", str(host))
    assert rc in (0, 1), data
    assert data["gpus"][0]["where"].startswith("the recorded host, GPU 0"), data["gpus"]
    [note] = [n for n in data["notes"] if "MIG" in n]
    words = shlex.split(note.split("by its profile: ", 1)[1].removesuffix(" for a 10 GB slice"))
    assert words[-1].endswith("MIG 1g.10gb"), words
    rc, slice_ = fit_json("--config", str(LLAMA3), *FORMULA, "--infer", *words)
    assert slice_["gpus"][0]["total_bytes"] == 10 * 10**9, slice_["gpus"]
    rc, plain = fit_json("--config", str(LLAMA3), *FORMULA, "--infer", "--facts",
                         str(DOCTOR / "h100-sxm-recorded"))
    assert not any("MIG" in n for n in plain["notes"])


@pytest.mark.parametrize("name", ["Jetson Orin Nano", "Jetson AGX Orin", "GB10"])
def test_a_board_whose_memory_is_the_systems_is_offered_no_sharding(matrix: Matrix,
                                                                    name: str) -> None:
    rc, data = fit_json("--config", str(LLAMA3), *FORMULA, "--mixed", "--gpu", name)
    assert rc == 1, data
    (gpu,) = data["gpus"]
    assert all(o["job"]["shards"] == 1 for o in gpu["options"]), gpu["options"]
