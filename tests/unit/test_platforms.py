"""linux/arm64 wheels in the matrix ([[platform]] rows of torch.toml): the facts read from PyPI's
aarch64 wheels hold as rules over the rows, and a broken row is named by the check."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import ConflictError, UsageError
from envbuild.common.versions import minor_of, version_key
from envbuild.core import platforms
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix, check
from envbuild.validator import rules
from tests.support import ROOT

ARM = "linux/arm64"


def _on_pypi(m: Matrix, release: str) -> list[str]:
    return [w.tag for w in m.platforms if w.release == release and w.platform == ARM
            and w.where in ("pypi", "both")]


def test_pypi_aarch64_is_cpu_through_2_10_and_the_default_cuda_build_after(matrix: Matrix) -> None:
    """PyPI serves one aarch64 torch a CPython: the CPU build up to 2.10 (pytorch/pytorch#160162),
    the release's default CUDA variant from 2.11 (no CPU-only aarch64 wheel on PyPI then)."""
    for rel in matrix.torch:
        tags = _on_pypi(matrix, rel.version)
        if version_key(rel.version) < version_key("2.4"):
            continue  # not collected
        if version_key(rel.version) <= version_key("2.10"):
            assert tags == ["cpu"], rel.version
        else:
            assert tags == [rel.default_variant], rel.version


def test_aarch64_cuda_wheels_have_no_orin_or_gb10_kernels(matrix: Matrix) -> None:
    """No official aarch64 wheel has sm_87 (Jetson Orin: JetPack wheels only) or sm_121 (GB10
    runs sm_120); Jetson Thor's 11.0 only from CUDA 13, and none of x86's 7.5/8.6."""
    rows = [w for w in matrix.platforms if w.platform == ARM and w.sass]
    assert rows
    for w in rows:
        variant = next(v for v in matrix.variants_of(w.release) if v.tag == w.tag)
        assert not {"8.7", "12.1", "7.5", "8.6"} & {*w.sass, *w.ptx}, (w.release, w.tag)
        assert ("11.0" in w.sass) == variant.version.startswith("13."), (w.release, w.tag)


def test_every_platform_is_one_the_meta_lists(matrix: Matrix) -> None:
    platforms = matrix.meta["torch"]["platforms"]
    assert platforms[0] == "linux/amd64"
    assert {w.platform for w in matrix.platforms} <= set(platforms[1:])
    assert matrix.platform_wheel("2.13", "cu130", ARM) is not None
    assert matrix.platform_wheel("2.13", "cu130", "linux/amd64") is None  # that is [[variant]]


def _broken(tmp_path: Path, old: str, new: str) -> list[str]:
    d = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", d)
    text = (d / "torch.toml").read_text()
    start = text.index("\n[[platform]]\n")
    assert old in text[start:], old
    (d / "torch.toml").write_text(text[:start] + text[start:].replace(old, new, 1))
    return [str(p) for p in check(d)]


@pytest.mark.parametrize(("old", "new", "says"), [
    ('platform = "linux/arm64"', 'platform = "linux/riscv64"', "is not one of linux/arm64"),
    ('platform = "linux/arm64"', 'platform = "linux/amd64"', "is not one of linux/arm64"),
    ('where = "pypi"', 'where = "conda"', "where 'conda' is not one of pypi, index, both"),
    ('tag = "cpu"', 'tag = "cu999"', "has no [[variant]] 'cu999'"),
    ('sass = ["8.0", "9.0"', 'sass = ["8.0", "9.9"', "arch '9.9' is not in gpus.toml"),
    ('sass = ["8.0", "9.0", "10.0", "11.0", "12.0"]', "sass = []",
     "a CUDA build needs its sass arch list"),
    ('tag = "cpu"\nplatform = "linux/arm64"\nwhere = "pypi"\n',
     'tag = "cpu"\nplatform = "linux/arm64"\nwhere = "pypi"\nsass = ["8.0"]\n',
     "a cpu build has no CUDA arch list"),
    ('source = ["S-PYPI-TORCH-AARCH64"]', 'source = ["S-NO-SUCH"]', "S-NO-SUCH"),
])
def test_a_broken_platform_row_is_named(tmp_path: Path, old: str, new: str, says: str) -> None:
    problems = _broken(tmp_path, old, new)
    assert any("[[platform]]" in p and says in p for p in problems), problems


def test_a_second_row_for_the_same_platform_wheel_is_named(tmp_path: Path) -> None:
    d = tmp_path / "matrix"
    shutil.copytree(ROOT / "matrix", d)
    text = (d / "torch.toml").read_text()
    start = text.index("\n[[platform]]\n")
    end = text.index("\n[[platform]]\n", start + 1)
    (d / "torch.toml").write_text(text + text[start:end])
    problems = [str(p) for p in check(d)]
    assert any("a second row for this release, tag and platform" in p for p in problems), problems


# -- --platform: parsed, and the resolver on the platform's matrix --------------------------------

@pytest.mark.parametrize(("text", "want"), [
    ("linux/arm64", ARM), ("arm64", ARM), ("aarch64", ARM), ("AARCH64", ARM),
    (" linux/arm64/v8", ARM),
    ("linux/amd64", "linux/amd64"), ("x86_64", "linux/amd64"), ("amd64", "linux/amd64")])
def test_platform_names_as_users_write_them(text: str, want: str, matrix: Matrix) -> None:
    assert platforms.parse(text, matrix) == want


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_any_other_platform_is_one_usage_error(text: str) -> None:
    from envbuild.matrix import load

    m = load()
    if text.strip().lower() in (*platforms.ALIASES, *platforms.known(m)):
        return
    with pytest.raises(UsageError) as e:
        platforms.parse(text, m)
    assert "\n" not in e.value.message and len(e.value.message) < 300


def _resolve(matrix: Matrix, **kw: object) -> Spec:
    return resolve(Request(**kw), matrix)  # type: ignore[arg-type]


@pytest.mark.parametrize(("gpu", "cc", "runs"), [
    ("GH200", "9.0", "sm_90"), ("GB200", "10.0", "sm_100"), ("GB300", "10.3", "sm_100"),
    ("GB10", "12.1", "sm_120"), ("Jetson Thor", "11.0", "sm_110")])
def test_grace_and_spark_gpus_resolve_to_an_arm64_cuda_wheel(gpu: str, cc: str, runs: str,
                                                            matrix: Matrix) -> None:
    s = _resolve(matrix, gpus=(gpu,), platform="linux/arm64")
    assert (s.target, s.platform) == ("cuda", ARM)
    w = matrix.platform_wheel(minor_of(s.torch), s.variant, ARM)
    assert w is not None and s.archs == tuple(rules.arch_names(w.sass, w.ptx))
    assert any(f"runs the wheel's {runs} cubin" in line for line in s.trace), s.trace
    assert any(line.startswith(f"platform {ARM} (--platform)") for line in s.trace)


def test_an_arm64_cuda_request_before_any_arm64_cuda_wheel_is_refused(matrix: Matrix) -> None:
    """torch 2.6 has no linux/arm64 CUDA wheel envbuild knows (only PyPI's CPU build)."""
    with pytest.raises(ConflictError) as e:
        _resolve(matrix, target="cuda", torch="2.6", platform="linux/arm64")
    assert e.value.alternatives, "a refusal names what resolves instead"


def test_an_arm64_cpu_image_takes_pypi_up_to_2_10_and_the_cpu_index_after(matrix: Matrix) -> None:
    old = _resolve(matrix, target="cpu", torch="2.9", platform="linux/arm64")
    assert old.index_url == matrix.meta["torch"]["pypi_index"] and old.variant == "cpu"
    new = _resolve(matrix, target="cpu", torch="2.13", platform="linux/arm64")
    assert new.index_url.endswith("/cpu") and new.variant == "cpu"


def test_rocm_on_arm64_is_refused_with_what_to_use(matrix: Matrix) -> None:
    with pytest.raises(UsageError) as e:
        _resolve(matrix, target="rocm", platform="linux/arm64")
    assert "linux/amd64 only" in e.value.message and "--platform linux/amd64" in e.value.hint


def test_the_platform_is_in_the_json_and_the_hash_but_amd64_hashes_stay(matrix: Matrix) -> None:
    amd = _resolve(matrix, target="cpu", torch="2.13", platform="linux/amd64")
    arm = _resolve(matrix, target="cpu", torch="2.13", platform="linux/arm64")
    assert amd.to_json()["platform"] == "linux/amd64" and arm.to_json()["platform"] == ARM
    assert "platform" not in amd.identity() and arm.identity()["platform"] == ARM
    assert amd.hash != arm.hash
    legacy = dataclasses.replace(amd, platform=None)  # a spec written before --platform
    assert legacy.hash == amd.hash


def test_a_native_mps_environment_takes_no_platform(matrix: Matrix) -> None:
    with pytest.raises(UsageError):
        _resolve(matrix, target="mps", platform="linux/arm64")
    assert _resolve(matrix, target="mps").platform is None


@pytest.mark.parametrize("gpu", ["Jetson Orin", "Orin", "Jetson AGX Orin", "Jetson Xavier",
                                 "Jetson Nano"])
@pytest.mark.parametrize("platform", [ARM, platforms.AMD64])
def test_a_jetson_before_thor_is_refused_naming_jetpack(matrix: Matrix, gpu: str,
                                                         platform: str) -> None:
    with pytest.raises(ConflictError) as exc:
        resolve(Request(gpus=(gpu,), platform=platform), matrix)
    assert "JetPack" in exc.value.message and "JetPack" in exc.value.hint
    assert "--target cpu" in exc.value.hint
    cpu = resolve(Request(target="cpu", platform=platform), matrix)  # what the hint names
    assert cpu.target == "cpu"


def test_jetson_thor_resolves_to_an_aarch64_wheel_with_its_sass(matrix: Matrix) -> None:
    spec = resolve(Request(gpus=("Jetson Thor",), platform=ARM), matrix)
    assert "sm_110" in spec.archs and spec.platform == ARM


def test_the_default_platform_is_one_value_everywhere() -> None:
    """core.spec (lean, for start-up) and core.request keep their own copy of linux/amd64: the
    same as core.platforms.AMD64, the platform a spec without one means."""
    import dataclasses

    from envbuild.core import spec as spec_module
    from envbuild.core.request import Parsed

    parsed = next(f.default for f in dataclasses.fields(Parsed) if f.name == "platform")
    assert spec_module._DEFAULT_PLATFORM == platforms.AMD64 == parsed
    assert not platforms.foreign(None) and not platforms.foreign("") \
        and not platforms.foreign(platforms.AMD64) and platforms.foreign(ARM)
    assert platforms.tag_suffix(ARM) == "-arm64" and platforms.tag_suffix(None) == ""
