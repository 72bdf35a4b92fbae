"""Another platform's images here (issue 22): the wheel tags of the native torch stage, the
two-stage render, what tells an emulated build and check apart, and the CPU stand-in torch needs."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvironmentProblem, UsageError
from envbuild.core import platforms, tags
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.engine import emulation
from envbuild.matrix import Matrix
from envbuild.render.context import RenderOptions, render
from envbuild.validator.judges import (
    EMULATION_NOT_RUN,
    GPU_ONLY_CHECKS,
    gpu_less,
    make_check,
    not_run_emulated,
    passed,
)

ARM = "linux/arm64"


@given(st.integers(17, 60))
def test_wheel_platforms_cover_every_manylinux_tag_up_to_the_glibc(minor: int) -> None:
    tags_ = platforms.wheel_platforms(ARM, f"2.{minor}")
    assert tags_[0] == f"manylinux_2_{minor}_aarch64"
    assert tags_[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert len(tags_) == minor - 17 + 2 and len(set(tags_)) == len(tags_)
    assert all(t.endswith("_aarch64") for t in tags_)


@pytest.mark.parametrize("glibc", ["", "2", "2.36.1", "bogus"])
def test_without_a_known_glibc_only_manylinux2014(glibc: str) -> None:
    assert platforms.wheel_platforms(ARM, glibc) == ["manylinux_2_17_aarch64",
                                                     "manylinux2014_aarch64"]


def _files(m: Matrix, platform: str, **opts: object) -> dict[str, str]:
    spec = resolve(Request(target="cpu", torch="2.13.0", os="debian12", platform=platform), m)
    out = render(spec, RenderOptions(**opts), m)  # type: ignore[arg-type]
    return {k: v.content for k, v in out.items() if isinstance(v.content, str)}


def test_arm64_render_installs_the_torch_stack_on_the_build_machine(matrix: Matrix) -> None:
    df = _files(matrix, ARM, build_base="local/debian:bookworm")["Dockerfile"]
    assert "FROM --platform=$BUILDPLATFORM local/debian:bookworm AS torch-stack" in df
    assert "--target /opt/stack/site --only-binary=:all:" in df
    assert "--platform manylinux_2_36_aarch64" in df  # debian12's glibc
    assert "COPY --from=torch-stack --chown=1000:1000 /opt/stack/site " \
           "/opt/venv/lib/python3.11/site-packages" in df
    # the final stage runs no pip for the torch stack (that would be emulated)
    final = df.split("\nFROM ", 2)[-1]
    assert "-r /opt/envbuild/requirements.txt" not in final


def test_amd64_render_is_one_stage(matrix: Matrix) -> None:
    df = _files(matrix, platforms.AMD64)["Dockerfile"]
    assert "$BUILDPLATFORM" not in df and "torch-stack" not in df
    assert df.count("\nFROM ") == 1


def test_build_base_image_is_refused_for_amd64(matrix: Matrix) -> None:
    from envbuild.render.pipeline import ContextInputs, prepare

    req = Request(target="cpu", torch="2.13.0", os="debian12", platform=platforms.AMD64)
    with pytest.raises(UsageError, match="applies only to an image for another platform"):
        prepare(req, ContextInputs(build_base_image="local/debian:bookworm"), matrix)


def test_default_tag_names_a_foreign_platform(matrix: Matrix) -> None:
    arm = resolve(Request(target="cpu", torch="2.13.0", os="debian12", platform=ARM), matrix)
    amd = resolve(Request(target="cpu", torch="2.13.0", os="debian12",
                          platform=platforms.AMD64), matrix)
    assert "-py3.11-arm64-" in tags.default_tag(arm, "0" * 64)
    assert "arm64" not in tags.default_tag(amd, "0" * 64)


def _binfmt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None) -> None:
    monkeypatch.setattr(emulation, "BINFMT", tmp_path)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    if content is not None:
        (tmp_path / "qemu-aarch64").write_text(content)


def test_emulation_ready_when_qemu_is_enabled(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _binfmt(tmp_path, monkeypatch, "enabled\ninterpreter /usr/libexec/qemu-binfmt/"
            "aarch64-binfmt-P\nflags: PF\n")
    assert emulation.ready(ARM) == "qemu-aarch64 through binfmt_misc"


@pytest.mark.parametrize("content", [None, "disabled\n", "", "\x00" * 10])
def test_no_emulation_is_one_environment_problem_saying_how(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None) -> None:
    _binfmt(tmp_path, monkeypatch, content)
    with pytest.raises(EnvironmentProblem) as exc:
        emulation.ready(ARM)
    assert "qemu-aarch64" in str(exc.value)
    assert "binfmt" in exc.value.hint


def test_a_remote_engine_is_not_checked_here(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.engine import docker

    _binfmt(tmp_path, monkeypatch, None)
    monkeypatch.setenv("DOCKER_HOST", "tcp://builder.example.com:2376")
    assert docker.remote_engine()
    assert emulation.ready(ARM, remote=docker.remote_engine()) == ""


def test_emulated_is_another_platform_than_this_hosts() -> None:
    assert not emulation.emulated(None)
    assert not emulation.emulated(platforms.host())
    other = ARM if platforms.host() == platforms.AMD64 else platforms.AMD64
    assert emulation.emulated(other)


@settings(deadline=None, max_examples=30)  # 64 directories each: over 200 ms on a busy box
@given(st.integers(1, 64))
def test_cpu_standin_has_a_midr_per_cpu_and_the_cpu_lists(cpus: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        emulation.cpu_standin(d, "0x00000000410fd4f0", cpus)
        span = "0" if cpus == 1 else f"0-{cpus - 1}"
        for name in ("online", "possible", "present"):
            assert (d / name).read_text() == span + "\n"
        midrs = sorted(d.glob("cpu*/regs/identification/midr_el1"))
        assert len(midrs) == cpus
        assert {p.read_text() for p in midrs} == {"0x00000000410fd4f0\n"}


def test_the_matrix_midr_is_an_arm_core(matrix: Matrix) -> None:
    midr = int(matrix.meta["torch"]["emulated_arm64_midr"], 16)
    assert midr >> 24 == 0x41 and (midr >> 16) & 0xF == 0xF  # implementer Arm, architecture


def test_emulated_checks_are_not_run_and_counted_apart_from_the_gpu_ones() -> None:
    how = "qemu-aarch64 through binfmt_misc on linux/amd64"
    checks = [make_check("facts.torch", "t", passed("torch 2.13.0"), 1.0)]
    checks += [not_run_emulated(cid, cid, how) for cid in EMULATION_NOT_RUN]
    checks += [make_check(cid, cid, passed("cpu"), 0.1) for cid in GPU_ONLY_CHECKS
               if cid not in EMULATION_NOT_RUN]
    block = gpu_less(checks, "cuda", gpu_visible=False)
    assert block is not None
    assert sorted(block["not_run"]) == sorted(GPU_ONLY_CHECKS)
    assert sorted(block["not_run_emulated"]) == sorted(set(EMULATION_NOT_RUN)
                                                       - set(GPU_ONLY_CHECKS))
    assert block["facts"] == 1
    for c in checks:
        if c["id"] in EMULATION_NOT_RUN and c["id"] not in GPU_ONLY_CHECKS:
            assert c["status"] == "not_run" and how in c["reason"]


@pytest.mark.parametrize("line", [
    "#15 24.91 ERROR: Could not install packages due to an OSError: [Errno 28] No space left on "
    "device", "#9 0.3 write /var/lib/docker/tmp/x: no space left on device"])
def test_a_full_disk_is_named_with_what_frees_it(line: str) -> None:
    """Measured here: the arm64 torch stage (4.4 GB unpacked) filled the disk; the hint says
    where the space goes, not 'fix the input'."""
    from envbuild.engine.build import _hint

    hint = _hint("[torch-stack 4/4] RUN ...", [line])
    assert "disk" in hint and "docker builder prune" in hint
