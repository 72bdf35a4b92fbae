"""--build-extension (issue 23): the source tree read into the build context (bounded, regular
files only, no link followed) and the builder stage's preconditions, each a one-line usage
error with a hint."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix
from envbuild.render import pipeline
from envbuild.render.context import RenderOptions, extension_build

TINY = Path(__file__).resolve().parents[1] / "fixtures" / "extensions" / "envbuild-tiny-cuda"


def test_the_tiny_extension_reads_whole_and_in_order() -> None:
    name, files = pipeline.read_source_tree(TINY)
    assert name == "envbuild-tiny-cuda"
    assert [rel for rel, _ in files] == ["setup.py", "csrc/add_one.cu", "csrc/bind.cpp"]


def _tree(tmp_path: Path) -> Path:
    d = tmp_path / "ext"
    (d / "src").mkdir(parents=True)
    (d / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (d / "src" / "k.cu").write_text("// k\n")
    return d


def test_links_fifos_and_build_outputs_stay_out(tmp_path: Path) -> None:
    d = _tree(tmp_path)
    (tmp_path / "secret").write_text("token")
    os.symlink(tmp_path / "secret", d / "link-to-secret")
    os.mkfifo(d / "fifo")
    for skipped in (".git", "build", "__pycache__", "x.egg-info"):
        (d / skipped).mkdir()
        (d / skipped / "f").write_text("x")
    _, files = pipeline.read_source_tree(d)
    assert sorted(rel for rel, _ in files) == ["setup.py", "src/k.cu"]


@pytest.mark.parametrize("how", ["missing", "a file", "a link", "no setup", "bad name",
                                 "too many files", "too big"])
def test_bad_source_trees_are_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           how: str) -> None:
    d = _tree(tmp_path)
    path = d
    if how == "missing":
        path = tmp_path / "nope"
    elif how == "a file":
        path = d / "setup.py"
    elif how == "a link":
        path = tmp_path / "link"
        os.symlink(d, path)
    elif how == "no setup":
        (d / "setup.py").unlink()
    elif how == "bad name":
        path = tmp_path / "bad name;x"
        d.rename(path)
    elif how == "too many files":
        monkeypatch.setattr(pipeline, "SOURCE_FILES", 1)
    else:
        monkeypatch.setattr(pipeline, "SOURCE_BYTES", 10)
    with pytest.raises(UsageError) as e:
        pipeline.read_source_tree(path)
    assert e.value.exit_code == 2 and e.value.hint and "\n" not in e.value.message


@pytest.mark.parametrize(("request_", "says"), [
    (Request(target="cpu", torch="2.13"), "needs a CUDA torch"),
    (Request(torch="2.8", gpus=("A100",)), "carry no nvcc"),
    (Request(torch="2.13", target="cuda"), "name the GPUs"),
    (Request(torch="2.13", gpus=("GH200",), platform="linux/arm64"), "would run emulated"),
])
def test_the_builder_stage_needs_cuda_13_gpus_and_this_platform(
        matrix: Matrix, request_: Request, says: str) -> None:
    import dataclasses

    if request_.platform is None:
        request_ = dataclasses.replace(request_, platform="linux/amd64")
    spec = resolve(request_, matrix)
    opts = RenderOptions(extension_sources=(pipeline.read_source_tree(TINY),))
    with pytest.raises(UsageError, match=says):
        extension_build(spec, opts, matrix)


def test_the_arch_list_is_exactly_the_gpus(matrix: Matrix) -> None:
    spec = resolve(Request(torch="2.13", gpus=("H100", "A100", "H200"), platform="linux/amd64"),
                   matrix)
    plan = extension_build(spec, RenderOptions(extension_sources=(
        pipeline.read_source_tree(TINY),)), matrix)
    assert plan is not None
    assert (plan["names"], plan["arch_list"]) == (["envbuild-tiny-cuda"], "8.0 9.0")
    assert plan["plan"] == {"arch_list": "8.0 9.0", "sources": ["envbuild-tiny-cuda"],
                            "sdists": [], "key": plan["key"]}


def _prepare(wheelhouse: Path, matrix: Matrix) -> pipeline.Prepared:
    req = Request(target="cuda", torch="2.13.0", gpus=("A100",), platform="linux/amd64")
    return pipeline.prepare(req, pipeline.ContextInputs(wheelhouse=wheelhouse,
                                                        extension_sources=(TINY,)), matrix)


def test_a_wheelhouse_holding_the_key_renders_no_builder_stage(tmp_path: Path,
                                                              matrix: Matrix) -> None:
    """The compiled wheels of a key wait in the wheelhouse's ext-KEY: the next render installs
    them from there (no nvcc, no compile, no sources in the context); another key (another GPU,
    another source byte) compiles again."""
    from envbuild.features.make import compiled_plan

    (tmp_path / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"x")
    first = _prepare(tmp_path, matrix)
    plan = compiled_plan(first)
    assert plan is not None and plan["prebuilt"] is False
    assert "FROM env AS ext-builder" in str(first.files["Dockerfile"].content)
    kept = tmp_path / f"ext-{plan['key']}"
    kept.mkdir()
    (kept / "envbuild_tiny_cuda-0.1.0-cp311-cp311-linux_x86_64.whl").write_bytes(b"w")
    again = _prepare(tmp_path, matrix)
    dockerfile = str(again.files["Dockerfile"].content)
    assert compiled_plan(again) == {**plan, "prebuilt": True}
    assert "ext-builder" not in dockerfile and "build-extensions.py" not in again.files
    assert not any(f.startswith("ext-src/") for f in again.files)
    assert f"/run/envbuild/wheelhouse/ext-{plan['key']}/*.whl" in dockerfile
    # the context links the key's directory beside the wheelhouse's own wheels
    from envbuild.render.context import write_tree

    ctx = write_tree(again.files, tmp_path / "ctx",
                     links=pipeline.wheelhouse_links(tmp_path, again.files))
    assert (ctx / "wheelhouse" / f"ext-{plan['key']}" /
            "envbuild_tiny_cuda-0.1.0-cp311-cp311-linux_x86_64.whl").read_bytes() == b"w"
    assert (ctx / "wheelhouse" / "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl").is_file()
    other = pipeline.prepare(Request(target="cuda", torch="2.13.0", gpus=("H100",),
                                     platform="linux/amd64"),
                             pipeline.ContextInputs(wheelhouse=tmp_path,
                                                    extension_sources=(TINY,)), matrix)
    assert compiled_plan(other)["prebuilt"] is False  # type: ignore[index]


@pytest.mark.parametrize("name", ["ext-", "ext-XYZ", "ext-0123456789abcdef0", "ext-../x",
                                  "ext-0123456789ABCDEF"])
def test_only_key_directories_with_a_wheel_count(tmp_path: Path, name: str) -> None:
    d = tmp_path / name.replace("/", "_")
    d.mkdir()
    (d / "a-1-py3-none-any.whl").write_bytes(b"w")
    empty = tmp_path / "ext-0123456789abcdef"
    empty.mkdir()
    link = tmp_path / "ext-fedcba9876543210"
    link.symlink_to(d)
    assert pipeline.compiled_keys(tmp_path) == frozenset()
    (empty / "a-1-py3-none-any.whl").write_bytes(b"w")
    assert pipeline.compiled_keys(tmp_path) == {"0123456789abcdef"}


def test_a_stage_exported_as_files_has_no_load_output() -> None:
    """buildx's --load is a second output beside --output type=local: refused by older buildx,
    an untagged image left by newer ones."""
    from envbuild.engine import docker

    bx = docker.Builder("/usr/bin/docker", True, "27.0", "buildx")
    argv = docker.build_argv(bx, Path("/ctx"), None, {}, {}, "plain", target="ext-wheels",
                             output="type=local,dest=/tmp/x")
    assert "--load" not in argv and "--iidfile" not in argv
    assert argv[-5:] == ["--target", "ext-wheels", "--output", "type=local,dest=/tmp/x", "/ctx"]
    assert "--load" in docker.build_argv(bx, Path("/ctx"), Path("/iid"), {}, {}, "plain")


@pytest.mark.parametrize("name", ["ext\n", "bad name", "-x"])
def test_a_source_directory_needs_a_plain_name(tmp_path: Path, name: str) -> None:
    d = tmp_path / name
    d.mkdir()
    (d / "setup.py").write_text("")
    with pytest.raises(UsageError, match="plain name"):
        pipeline.read_source_tree(d)


def test_a_source_file_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "ext"
    d.mkdir()
    (d / "setup.py").write_text("")
    (d / os.fsdecode(b"k\xff.cu")).write_text("")
    with pytest.raises(UsageError, match="not printable UTF-8"):
        pipeline.read_source_tree(d)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(alphabet=st.characters(codec="utf-8", exclude_characters="/\x00",
                                           exclude_categories=["Cs"]), min_size=1, max_size=40))
def test_any_directory_name_counts_only_as_a_key(tmp_path_factory: pytest.TempPathFactory,
                                                 name: str) -> None:
    """Whatever a wheelhouse holds, only ext-<16 hex> directories with a wheel are keys."""
    import re

    base = tmp_path_factory.mktemp("wh")
    try:
        d = base / f"ext-{name}"
        d.mkdir()
    except OSError:  # a name the file system refuses (too long, "..")
        return
    (d / "a-1-py3-none-any.whl").write_bytes(b"w")
    want = {name} if re.fullmatch(r"[0-9a-f]{16}", name) else set()
    assert pipeline.compiled_keys(base) == want
