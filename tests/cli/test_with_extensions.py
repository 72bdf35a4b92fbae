"""--with through the CLI (issue 23): resolve, render and matrix show, with the exit codes and
one-line errors of the conventions (0 resolved, 1 refused with alternatives, 2 bad input)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import run_cli


def test_resolve_with_xformers_json() -> None:
    r = run_cli("resolve", "--with", "xformers", "--torch", "2.8", "--platform", "linux/amd64",
                "--json")
    assert r.returncode == 0, r.stderr
    spec = json.loads(r.stdout)
    (x,) = spec["extensions"]
    assert (x["name"], x["version"], x["install"]) == ("xformers", "0.0.32.post2",
                                                       "xformers==0.0.32.post2")
    assert any(line.startswith("xformers 0.0.32.post2: a prebuilt wheel") for line in
               spec["trace"])


@pytest.mark.parametrize("value", ["nosuch", "xformers==", "x;y", ""])
def test_bad_with_is_one_line_and_exit_2(value: str) -> None:
    r = run_cli("resolve", "--with", value, "--platform", "linux/amd64")
    assert r.returncode == 2, r.stderr
    first, *rest = r.stderr.strip().splitlines()
    assert first.startswith("error: ") and "Traceback" not in r.stderr
    assert any(line.startswith("hint: ") for line in rest)


def test_no_wheel_is_exit_1_with_alternatives_that_resolve() -> None:
    r = run_cli("resolve", "--with", "flash-attn", "--torch", "2.13", "--platform",
                "linux/amd64", "--json")
    assert r.returncode == 1
    err = json.loads(r.stdout)["error"]
    assert "it needs torch 2.4-2.8" in err["message"]
    for fix in err["fixes"]:
        for changes in fix["requests"]:
            argv = ["resolve", "--with", "flash-attn", "--platform", "linux/amd64"]
            if changes.get("torch"):
                argv += ["--torch", changes["torch"]]
            elif "torch" not in changes:
                argv += ["--torch", "2.13"]
            if changes.get("extensions") == []:
                argv.remove("--with")
                argv.remove("flash-attn")
            assert run_cli(*argv).returncode == 0, (fix, argv)


def test_render_installs_extensions_in_a_constrained_layer(tmp_path: Path) -> None:
    out = tmp_path / "ctx"
    r = run_cli("render", "--with", "xformers", "--with", "bitsandbytes", "--torch", "2.8",
                "--platform", "linux/amd64", "--out", str(out))
    assert r.returncode == 0, r.stderr
    reqs = (out / "extensions-requirements.txt").read_text().splitlines()
    assert "xformers==0.0.32.post2" in reqs and any(x.startswith("bitsandbytes==") for x in reqs)
    docker = (out / "Dockerfile").read_text()
    line = next(x for x in docker.splitlines() if "extensions-requirements.txt -c" in x)
    assert line.rstrip().endswith("-c /opt/envbuild/constraints.txt")
    assert docker.index("extensions-requirements.txt") < docker.index("user-requirements.txt")
    assert "torch==2.8.0" in (out / "constraints.txt").read_text()


def test_help_and_matrix_show_name_the_extensions() -> None:
    assert "--with" in run_cli("resolve", "--help").stdout
    r = run_cli("matrix", "show", "extensions", "--json")
    assert r.returncode == 0
    rows = json.loads(r.stdout)
    assert {row["extension"] for row in rows} == {"xformers", "vllm", "bitsandbytes",
                                                  "flash-attn", "transformer-engine"}
    assert any(row["verified"] is False for row in rows)  # kept visible, not hidden


def test_build_extensions_through_the_cli() -> None:
    r = run_cli("resolve", "--with", "flash-attn", "--torch", "2.13.0", "--gpu", "H100",
                "--build-extensions", "--platform", "linux/amd64", "--json")
    assert r.returncode == 0, r.stderr
    (e,) = json.loads(r.stdout)["extensions"]
    assert e["where"] == "sdist" and e["install"].startswith("flash-attn==")
    r = run_cli("resolve", "--with", "flash-attn", "--torch", "2.13.0", "--build-extensions",
                "--platform", "linux/amd64")
    assert r.returncode == 2 and "add --gpu" in r.stderr


@settings(max_examples=25, deadline=None)
@given(value=st.one_of(
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"],
                                   exclude_characters="\x00"), min_size=1,  # argv: no NUL
            max_size=40).filter(lambda v: not v.startswith("-")),
    st.from_regex(r"[a-z0-9.-]{1,20}(:[0-9]{1,5})?", fullmatch=True)))
def test_ext_wheels_refuses_what_is_not_a_registry_in_one_line(value: str) -> None:
    """Before anything resolves or builds: exit 2, one line and a hint, no password echoed."""
    r = run_cli("make", "--target", "cuda", "--ext-wheels", value, "--wheelhouse",
                str(Path(__file__).parent))  # no wheels there: a good registry stops at it
    assert r.returncode == 2, r.stderr
    first, hint = r.stderr.strip().splitlines()
    assert "is not a registry" in first or "--wheelhouse" in first, first
    assert hint.startswith("hint: ") and "Secr3tPw" not in r.stderr


@pytest.mark.parametrize("value", ["user:Secr3tPw@reg.example.com", "reg/UPPER", "a b",
                                   "reg.example.com\n", "x" * 300])
def test_ext_wheels_names_the_bad_registry(value: str) -> None:
    r = run_cli("make", "--target", "cuda", "--ext-wheels", value, "--wheelhouse", ".")
    assert r.returncode == 2 and "is not a registry" in r.stderr, r.stderr
    assert "Secr3tPw" not in r.stderr and len(r.stderr.strip().splitlines()) == 2
