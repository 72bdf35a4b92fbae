"""--with NAME[==VER] (issue 23): the resolver picks torch, CUDA variant, Python and platform so
that every requested extension has a prebuilt wheel (matrix/extensions.toml), explains the choice,
refuses what has none with alternatives that resolve, and never lets an extension replace torch.
The facts are the ones read from the wheels and the projects' build records (sources.toml)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from envbuild.common.errors import ConflictError, UsageError
from envbuild.common.versions import minor_of
from envbuild.core import extensions as ext
from envbuild.core.alternatives import apply_changes
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix, check
from envbuild.validator import rules
from tests.support import ROOT


def _resolve(matrix: Matrix, *with_: str, **kw: object) -> Spec:
    return resolve(Request(extensions=with_, platform=str(kw.pop("platform", "linux/amd64")),
                           **kw), matrix)  # type: ignore[arg-type]


def _only(spec: Spec, name: str) -> dict[str, str]:
    (e,) = [e for e in spec.extensions if e["name"] == name]
    return e


# ---- the requests the issue names ---------------------------------------------------------

@pytest.mark.parametrize("gpus", [("H100",), ("A100",), ("H100", "A100")])
def test_flash_attn_on_h100_and_a100_takes_the_newest_torch_with_a_verified_asset(
        matrix: Matrix, gpus: tuple[str, ...]) -> None:
    """flash-attn 2.8.3.post1's tag build has assets for torch 2.4-2.8 (CUDA 12, both ABIs,
    cp39-cp313, x86_64; sm_80 sm_90 sm_100 sm_120): newer torch is skipped, saying why."""
    spec = _resolve(matrix, "flash-attn", gpus=gpus)
    fa = _only(spec, "flash-attn")
    assert (spec.torch, spec.variant, fa["version"]) == ("2.8.0", "cu128", "2.8.3.post1")
    assert fa["install"] == (
        "https://github.com/Dao-AILab/flash-attention/releases/download/v2.8.3.post1/"
        "flash_attn-2.8.3.post1+cu12torch2.8cxx11abiTRUE-cp312-cp312-linux_x86_64.whl")
    assert "verified" not in fa and not spec.warnings
    why = " ".join(spec.trace)
    assert "flash-attn 2.8.3.post1: a prebuilt wheel for torch 2.8.0 cu128" in why
    assert "skipped newer torch" in why and "it needs torch 2.4-2.8" in why


def test_flash_attn_names_the_gpu_its_kernels_leave_out(matrix: Matrix) -> None:
    """Its wheels carry sm_80 and sm_90 (and sm_100, sm_120) cubins, no PTX: a V100 (sm_70)
    has no kernels in any of them; an A10 (sm_86) runs the sm_80 cubin."""
    with pytest.raises(ConflictError) as e:
        _resolve(matrix, "flash-attn", gpus=("V100",))
    assert "no kernels for V100 (sm_70)" in e.value.message
    assert _only(_resolve(matrix, "flash-attn", gpus=("A10",)), "flash-attn")


def test_flash_attn_asset_follows_the_torch_abi(matrix: Matrix) -> None:
    """torch 2.6 cu124 wheels are pre-C++11 ABI (cxx11abiFALSE assets), 2.7+ C++11 ABI."""
    old = _only(_resolve(matrix, "flash-attn", torch="2.6"), "flash-attn")["install"]
    new = _only(_resolve(matrix, "flash-attn", torch="2.7"), "flash-attn")["install"]
    assert "torch2.6cxx11abiFALSE" in old and "torch2.7cxx11abiTRUE" in new
    assert ext.torch_abi(matrix, "2.6.0", "cu126") == "TRUE"  # the exception: 2.6's cu126


@pytest.mark.parametrize(("torch", "xformers"), [
    ("2.5", "0.0.29.post1"), ("2.4.1", "0.0.28.post1"), ("2.6", "0.0.29.post3"),
    ("2.7", "0.0.31.post1"), ("2.8", "0.0.32.post2"), ("2.9", "0.0.33.post2")])
def test_xformers_with_an_older_torch_takes_the_release_that_pins_it(
        matrix: Matrix, torch: str, xformers: str) -> None:
    spec = _resolve(matrix, "xformers", torch=torch)
    x = _only(spec, "xformers")
    assert (x["version"], x["where"], x["install"]) == (xformers, "pypi", f"xformers=={xformers}")
    assert spec.torch.startswith(torch)


def test_xformers_pins_a_patch_and_the_resolver_takes_it(matrix: Matrix) -> None:
    """0.0.33.post1 pins torch==2.9.0 though 2.9.1 is out: the resolver takes 2.9.0."""
    spec = _resolve(matrix, "xformers==0.0.33.post1")
    assert spec.torch == "2.9.0"
    assert "skipped" in " ".join(spec.trace)


def test_xformers_pypi_wheels_every_one(matrix: Matrix) -> None:
    """Each verified PyPI row of xformers, asked for by version, resolves to a torch its pin
    holds, with the CUDA major it was built against (a class over every row, not a sample)."""
    rows = [r for r in matrix.extension_releases if r.extension == "xformers" and r.verified
            and r.where == "pypi" and r.platform == "linux/amd64"]
    known = {p.torch for p in matrix.patches}
    tried = 0
    for r in rows:
        if not any(SpecifierSet(r.torch).contains(t) for t in known):
            continue  # a torch older than the matrix
        spec = _resolve(matrix, f"xformers=={r.version}")
        tried += 1
        assert SpecifierSet(r.torch).contains(spec.torch), r.version
        assert rules.cuda_of_tag(spec.variant).split(".")[0] == \
            rules.cuda_of_tag(r.variant).split(".")[0], r.version
    assert tried >= 15


@pytest.mark.parametrize("gpu", ["B200", "RTX 5090", "H100", "A100"])
def test_bitsandbytes_on_blackwell_and_hopper(matrix: Matrix, gpu: str) -> None:
    """bitsandbytes picks its native library by torch's CUDA; the library's arch list must
    cover the GPU (0.50's CUDA 13 libraries carry sm_100 and sm_120)."""
    spec = _resolve(matrix, "bitsandbytes", gpus=(gpu,))
    b = _only(spec, "bitsandbytes")
    lib = next(x for x in matrix.extension_libraries if (x.extension, x.version, x.platform, x.cuda)
               == ("bitsandbytes", b["version"], "linux/amd64", b["cuda"]))
    g = next(g for g in matrix.gpus if g.name == gpu or gpu in g.aliases)
    assert rules.arch_covers([*lib.archs, *lib.ptx], g.cc)["via"] is not None
    assert b["cuda"] == minor_of(spec.torch_cuda or "") or \
        b["cuda"].split(".")[0] == (spec.torch_cuda or "").split(".")[0]


def test_bitsandbytes_before_0_50_needs_torch_cuda_exactly(matrix: Matrix) -> None:
    """Up to 0.49.2 the library must be torch.version.cuda exactly: 0.49.2 ships 11.8-13.0
    libraries; a cu132 torch has none, so a newer torch is not taken with it."""
    spec = _resolve(matrix, "bitsandbytes==0.49.2")
    b = _only(spec, "bitsandbytes")
    assert b["cuda"] == spec.torch_cuda


def test_vllm_pins_torch_exactly_for_every_release(matrix: Matrix) -> None:
    """Every vLLM release pins torch exactly; the resolver takes that torch, never another."""
    rows = [r for r in matrix.extension_releases if r.extension == "vllm" and r.verified
            and r.platform == "linux/amd64"]
    known = {p.torch for p in matrix.patches}
    tried = 0
    for r in rows:
        pinned = r.torch.removeprefix("==")
        if pinned not in known:
            continue
        spec = _resolve(matrix, f"vllm=={r.version}")
        assert spec.torch == pinned, r.version
        tried += 1
    assert tried >= 20


def test_an_extension_that_pins_another_torch_is_refused_at_resolve_time(matrix: Matrix) -> None:
    with pytest.raises(ConflictError) as e:
        _resolve(matrix, "vllm==0.11.0", torch="2.13")
    assert "vllm==0.11.0" in e.value.message and "torch==2.8.0" in e.value.message
    assert e.value.alternatives


@pytest.mark.parametrize(("with_", "kw", "says"), [
    (("xformers",), {"platform": "linux/arm64"}, "publishes no linux/arm64 wheels"),
    (("flash-attn",), {"torch": "2.13"}, "it needs torch 2.4-2.8"),
    (("transformer-engine",), {}, "compiles at install"),
    (("xformers", "vllm==0.11.0"), {"torch": "2.9"}, "it needs torch==2.8.0"),
    (("flash-attn",), {"target": "cpu"}, "a CUDA extension"),
])
def test_impossible_combinations_are_refused_with_alternatives_that_resolve(
        matrix: Matrix, with_: tuple[str, ...], kw: dict[str, str], says: str) -> None:
    request = Request(extensions=with_, platform=kw.pop("platform", "linux/amd64"),
                      **kw)  # type: ignore[arg-type]
    with pytest.raises(ConflictError) as e:
        resolve(request, matrix)
    assert says in e.value.message
    for fix in e.value.fixes:  # what envbuild suggests resolves, as it says
        for changes in fix["requests"]:  # type: ignore[attr-defined]
            items = [(k, tuple(v) if isinstance(v, list) else v) for k, v in changes.items()]
            spec = resolve(apply_changes(request, items), matrix)
            head = str(fix["text"]).split(":")[1].strip()
            assert head.startswith(f"torch {spec.torch} ({spec.variant})"), fix["text"]


def test_unverified_facts_only_where_no_verified_one_fits(matrix: Matrix) -> None:
    """The PyTorch index rows (not reachable from the collecting machine) and the hand-uploaded
    flash-attn assets are verified = false: taken only when nothing verified fits, with a
    warning that says so."""
    spec = _resolve(matrix, "flash-attn", torch="2.10")
    fa = _only(spec, "flash-attn")
    assert fa["verified"] == "false" and any("flash-attn" in w for w in spec.warnings)
    plain = _resolve(matrix, "xformers")
    assert _only(plain, "xformers")["where"] == "pypi" and not plain.warnings


def test_the_spec_hash_without_with_is_unchanged_and_with_it_differs(matrix: Matrix) -> None:
    plain = resolve(Request(torch="2.8", platform="linux/amd64"), matrix)
    assert "extensions" not in plain.identity() and "extensions" not in plain.to_json()
    withx = _resolve(matrix, "xformers", torch="2.8")
    assert withx.hash != plain.hash
    assert withx.to_json()["extensions"][0]["name"] == "xformers"
    from envbuild.core.spec import from_json
    assert from_json(withx.to_json()).hash == withx.hash


# ---- --with as input ---------------------------------------------------------------------

@pytest.mark.parametrize("value", ["", " ", "x" * 200, "xformers; rm -rf /", "$(id)", "../x",
                                   "xformers==abc", "xformers===", "flash attn", "-xformers",
                                   "xformers\n==1", "\u0445formers"])
def test_malformed_with_values_are_usage_errors(matrix: Matrix, value: str) -> None:
    with pytest.raises(UsageError) as e:
        _resolve(matrix, value)
    assert e.value.exit_code == 2 and e.value.hint and "\n" not in e.value.message


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_any_text_is_a_known_extension_or_a_usage_error(matrix_: Matrix, text: str) -> None:
    try:
        wanted = ext.parse_with([text], matrix_)
    except UsageError as e:
        assert e.exit_code == 2 and "\n" not in e.message
        return
    assert wanted[0].name in {x.name for x in matrix_.extensions}


@pytest.fixture(scope="module")
def matrix_() -> Matrix:
    from envbuild.matrix import load

    return load()


def test_names_normalize_and_typos_get_close_matches(matrix: Matrix) -> None:
    assert ext.parse_with(["Flash_Attn==2.8.3"], matrix)[0] == ext.Wanted("flash-attn",
                                                                         "==2.8.3")
    with pytest.raises(UsageError) as e:
        ext.parse_with(["xformer"], matrix)
    assert "--with xformers" in e.value.alternatives
    with pytest.raises(UsageError, match="given twice"):
        ext.parse_with(["xformers", "XFormers>=0.0.30"], matrix)
    with pytest.raises(UsageError, match="at most"):
        ext.parse_with(["xformers"] * (ext.MAX_WITH + 1), matrix)


# ---- the facts, as rules over the rows ---------------------------------------------------

def test_every_release_row_is_a_real_version_and_its_extension_is_known(matrix: Matrix) -> None:
    names = {e.name for e in matrix.extensions}
    for r in matrix.extension_releases:
        assert r.extension in names
        Version(r.version)  # parses, as pip will
        assert r.where == "pypi" or r.where == "github-release" or r.where.startswith("index:")
        assert not r.where.startswith("index:") or not r.verified  # that index: not reachable


def test_xformers_has_no_aarch64_wheels_and_vllm_has_from_0_10_2(matrix: Matrix) -> None:
    plats = {(r.extension, r.platform) for r in matrix.extension_releases}
    assert ("xformers", "linux/arm64") not in plats
    arm_vllm = sorted(Version(r.version) for r in matrix.extension_releases
                       if r.extension == "vllm" and r.platform == "linux/arm64")
    assert arm_vllm[0] == Version("0.10.2")


def _broken(tmp_path: Path, old: str, new: str) -> list[str]:
    d = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", d)
    text = (d / "extensions.toml").read_text()
    assert old in text, old
    (d / "extensions.toml").write_text(text.replace(old, new, 1))
    return [str(p) for p in check(d)]


@pytest.mark.parametrize(("old", "new", "says"), [
    ('kind = "built"', 'kind = "magic"', "kind 'magic' is not one of"),
    ('extension = "xformers"\nversion = "0.0.25"', 'extension = "xformer"\nversion = "0.0.25"',
     "has no [[extension]] row"),
    ('platform = "linux/amd64"', 'platform = "linux/riscv64"', "is not one of"),
    ('torch = "==2.2.1"', 'torch = "=>2.2"', "is not a version specifier"),
    ('variant = "cu121"', 'variant = ""', "needs variant"),
    ('"sm_80"', '"8.0"', "is not an sm_/compute_ name"),
])
def test_the_check_names_a_broken_extension_row(tmp_path: Path, old: str, new: str,
                                                says: str) -> None:
    problems = _broken(tmp_path, old, new)
    assert any(says in p and "extensions.toml" in p for p in problems), problems


def test_the_shipped_matrix_checks_clean() -> None:
    assert [str(p) for p in check(ROOT / "matrix")] == []


def test_wanted_text_round_trips() -> None:
    w = ext.Wanted("xformers", "==0.0.32.post1")
    assert w.text == "xformers==0.0.32.post1"
    assert dataclasses.replace(w, versions="").text == "xformers"


_V = st.builds(lambda a, b, c: f"{a}.{b}.{c}", st.integers(0, 3), st.integers(0, 12),
               st.integers(0, 3))


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(["==", "!=", ">=", "<=", ">", "<", "~="]), _V, _V,
       st.booleans())
def test_the_validators_clause_reader_agrees_with_packaging(op: str, want: str, have: str,
                                                            wildcard: bool) -> None:
    """The validator (stdlib + torch, whose vendored packaging has Version only) reads
    Requires-Dist clauses itself: it must agree with packaging's SpecifierSet."""
    from envbuild.validator.extensions import _holds

    if wildcard and op in ("==", "!="):
        want = want.rsplit(".", 1)[0] + ".*"
    assert _holds(op, want, Version(have), Version) == \
        SpecifierSet(f"{op}{want}").contains(have), (op, want, have)


# ---- --build-extensions: PyPI's sdist compiled where no prebuilt wheel fits ----------------

def test_build_extensions_compiles_flash_attn_for_a_torch_it_has_no_wheel_for(
        matrix: Matrix) -> None:
    spec = _resolve(matrix, "flash-attn", torch="2.13.0", gpus=("H100", "A100"),
                    build_extensions=True)
    e = _only(spec, "flash-attn")
    assert spec.torch == "2.13.0" and e["where"] == "sdist"
    assert e["install"] == f"flash-attn=={e['version']}" and e["module"] == "flash_attn"
    line = next(t for t in spec.trace if t.startswith(f"flash-attn {e['version']}:"))
    assert "it needs torch 2.4-2.8" in line and "for sm_80 sm_90" in line
    assert "compiled from its PyPI sdist" in line


def test_build_extensions_still_takes_a_prebuilt_wheel_first(matrix: Matrix) -> None:
    """Without a torch pin, an older torch with the asset beats compiling."""
    built = _resolve(matrix, "flash-attn", gpus=("H100",), build_extensions=True)
    plain = _resolve(matrix, "flash-attn", gpus=("H100",))
    assert built.extensions == plain.extensions and built.torch == plain.torch
    assert _only(built, "flash-attn")["where"] == "github-release"


@pytest.mark.parametrize(("with_", "kw", "says"), [
    (("transformer-engine",), {}, "envbuild plans no source build of transformer-engine"),
    (("flash-attn",), {"torch": "2.13.0", "cuda": "12.8"},
     "a source build needs nvcc, which PyPI has for CUDA 13 only"),
])
def test_build_extensions_refuses_what_it_cannot_build(matrix: Matrix, with_: tuple[str, ...],
                                                       kw: dict[str, str], says: str) -> None:
    with pytest.raises(ConflictError) as e:
        _resolve(matrix, *with_, gpus=("H100",), build_extensions=True, **kw)
    assert says in e.value.message


@pytest.mark.parametrize(("kw", "says"), [
    ({"extensions": ()}, "none is named"),
    ({"gpus": ()}, "add --gpu"),
])
def test_build_extensions_needs_a_with_and_the_gpus(matrix: Matrix, kw: dict[str, object],
                                                     says: str) -> None:
    request = dataclasses.replace(Request(target="cuda", torch="2.13.0", extensions=(
        "flash-attn",), gpus=("H100",), build_extensions=True), **kw)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as e:
        resolve(request, matrix)
    assert says in (e.value.message + " " + e.value.hint) and e.value.exit_code == 2


def test_a_refusal_with_gpus_offers_build_extensions_and_it_resolves(matrix: Matrix) -> None:
    request = Request(target="cuda", torch="2.13.0", extensions=("flash-attn",), gpus=("H100",))
    with pytest.raises(ConflictError) as e:
        resolve(request, matrix)
    fix = next(f for f in e.value.fixes if str(f["text"]).startswith("--build-extensions:"))
    for changes in fix["requests"]:  # type: ignore[attr-defined]
        spec = resolve(apply_changes(request, list(changes.items())), matrix)
        assert _only(spec, "flash-attn")["where"] == "sdist"


def test_the_sdist_plan_carries_the_matrix_build_switches(matrix: Matrix) -> None:
    """flash-attn ignores TORCH_CUDA_ARCH_LIST (its own -gencode list): the plan sets its
    FLASH_ATTN_CUDA_ARCHS to the --gpu archs and forces the compile (no asset guess)."""
    from envbuild.render.context import RenderOptions, extension_build

    spec = _resolve(matrix, "flash-attn", torch="2.13.0", gpus=("H100", "A100"),
                    build_extensions=True)
    plan = extension_build(spec, RenderOptions(), matrix)
    assert plan is not None
    (b,) = plan["plan"]["sdists"]
    assert plan["plan"]["arch_list"] == "8.0 9.0" and plan["plan"]["sources"] == []
    assert b["env"] == {"FLASH_ATTENTION_FORCE_BUILD": "TRUE", "FLASH_ATTN_CUDA_ARCHS": "80;90"}
    assert b["no_binary"] == "flash-attn" and "psutil" in b["build_requires"]


@pytest.mark.parametrize(("with_", "gpus", "says"), [
    ("flash-attn==2.7.1", ("H100",), "PyPI has no sdist of flash-attn==2.7.1 to compile"),
    ("flash-attn", ("T4",), "has kernels for sm_80 and newer only, not T4 (sm_75)"),
])
def test_build_extensions_refuses_a_version_without_sdist_and_a_gpu_it_has_no_kernels_for(
        matrix: Matrix, with_: str, gpus: tuple[str, ...], says: str) -> None:
    request = Request(target="cuda", torch="2.13.0", extensions=(with_,), gpus=gpus,
                      build_extensions=True, platform="linux/amd64")
    with pytest.raises(ConflictError) as e:
        resolve(request, matrix)
    assert says in e.value.message
    for fix in e.value.fixes:  # each suggestion resolves as typed (none keeps a lone flag)
        for changes in fix["requests"]:  # type: ignore[attr-defined]
            resolve(apply_changes(request, list(changes.items())), matrix)


def test_flash_attn_builds_for_its_arch_families(matrix: Matrix) -> None:
    """flash-attn's FLASH_ATTN_CUDA_ARCHS knows 80 90 100 110 120: an L40S (sm_89) runs the 80
    code, so the list is the families, not the GPUs' own archs."""
    from envbuild.render.context import RenderOptions, extension_build

    spec = _resolve(matrix, "flash-attn", torch="2.13.0", gpus=("L40S", "H100", "B200"),
                    build_extensions=True)
    plan = extension_build(spec, RenderOptions(), matrix)
    assert plan is not None
    assert plan["plan"]["sdists"][0]["env"]["FLASH_ATTN_CUDA_ARCHS"] == "80;90;100"
