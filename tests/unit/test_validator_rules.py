"""One set of rules: envbuild.validator.rules is the only home of the version-code, local-tag and
GPU-architecture rules; the core (resolve, explain, doctor) and the validator both use it."""

from __future__ import annotations

import itertools
import re

import pytest

from envbuild.core import compat
from envbuild.features import explain
from envbuild.validator import rules
from tests.support import ROOT

CUBINS = ["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0"]
CCS = ["3.7", "5.0", "5.2", "6.1", "7.0", "7.2", "7.5", "8.0", "8.6", "8.7", "8.9", "9.0",
       "10.0", "10.3", "11.0", "12.0", "12.1"]
WHEELS = [(list(s), list(p)) for n in (1, 3, 6) for s in itertools.combinations(CUBINS, n)
          for p in ([], [s[-1]], ["9.0"])][::7]


@pytest.mark.parametrize(("sass", "ptx"), WHEELS)
def test_resolver_and_validator_agree_on_arch_coverage(sass: list[str], ptx: list[str]) -> None:
    names = rules.arch_names(sass, ptx)
    for cc in CCS:
        via = compat.arch_covers(sass, ptx, cc)
        row = rules.arch_covers(names, cc)
        assert via == row["via"], (sass, ptx, cc)
        assert (via is not None) == row["covered"]


def test_a_suffix_cubins_run_only_on_their_exact_gpu() -> None:
    assert compat.arch_covers(["9.0a"], [], "9.0") == "sm_90a"
    assert compat.arch_covers(["9.0a"], [], "9.1") is None
    assert rules.arch_covers(["sm_100f"], "10.3")["via"] == "sm_100f"


@pytest.mark.parametrize(("code", "text"), [
    (90100, "9.1.0"), (91900, "9.19.0"), (8902, "8.9.2"), (7605, "7.6.5"), (22105, "2.21.5"),
    (2708, "2.7.8"), (21903, "2.19.3"), (100000, "10.0.0"),
])
def test_version_codes_decode_once(code: int, text: str) -> None:
    assert rules.version_code_str(code) == text
    assert explain._tuple_version(str(code)) == text  # explain said 90.1.0 for 90100


@pytest.mark.parametrize("spelling", [
    "sm_86", "compute_86", "SM_86", "86", "8.6", " 8.6 ", "sm_86a", "sm_120", "compute_120",
    "120", "12.0", "sm_90a", "sm_100f", "9.0", "5", "", "gfx942", "abc", "sm_", "08.6",
])
def test_one_cc_parser(spelling: str) -> None:
    parsed = rules.parse_arch(spelling.strip().lower())
    if parsed is not None:
        assert rules.cc_of(spelling) == f"{parsed[1]}.{parsed[2]}"


CORE = [p for p in (ROOT / "envbuild").rglob("*.py") if "validator" not in p.parts]


def test_no_second_arch_parser_or_version_decoder_in_the_core() -> None:
    """The shapes of the duplicated rules issue 8 found: an sm_/compute_ regex and the cuDNN
    code arithmetic. They live in envbuild/validator/rules.py only."""
    arch_re = re.compile(r"""["'][^"'\n]*\(\?:?sm_\|compute_\)|\(sm\|compute\)""")
    code_math = re.compile(r"//\s*1000\b.*%\s*1000\s*\)?\s*//\s*100")
    for path in CORE:
        text = path.read_text()
        assert not arch_re.search(text), f"{path}: an sm_/compute_ parser outside rules"
        assert not code_math.search(text), f"{path}: version-code arithmetic outside rules"
