"""Team files, the lock, shared layers, the lazy CLI and the target registry (no engine)."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.core import sbom, targets
from envbuild.core.request import TARGETS
from envbuild.features import team, teamfile
from envbuild.matrix import Matrix
from tests.support.team import GOOD

F = Path("/team/envbuild.toml")


def test_team_file_merges_lists_and_overrides_scalars() -> None:
    t = teamfile.parse(GOOD, F)
    assert [i.name for i in t.images] == ["a", "b", "c"]
    b = t.image("b")
    assert b.inputs.team_pip == ("numpy>=1.26", "einops")  # the defaults: the shared layer
    assert b.inputs.pip == ("bitsandbytes",)  # its own (einops is already the team's)
    assert b.inputs.apt == ("git",)
    d = teamfile.parse(GOOD + '[image.d]\napt = ["curl"]\n', F).image("d")
    assert d.inputs.apt == ("git", "curl")
    assert t.image("c").request.python == "3.12" and t.image("a").request.python == "3.11"
    assert b.registry == "registry.example.com/ml"
    with pytest.raises(UsageError, match="no image 'zz'"):
        t.image("zz")


def _refused(text: str, *names: str) -> UsageError:
    with pytest.raises(UsageError) as exc:
        teamfile.parse(text, F)
    assert exc.value.exit_code == 2
    for n in (str(F), *names):
        assert n in exc.value.message, (n, exc.value.message)
    return exc.value


def _toml(v: object) -> str:
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, list):
        return "[" + ", ".join(_toml(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"
    return str(v)


HOSTILE_STRINGS = st.one_of(
    st.text(min_size=1, max_size=30).map(lambda s: s + "\n"),  # control characters
    st.sampled_from(["\x00", "a\rb", "x\x1b[31m", "\x7f"]),
    st.just("x" * 600),  # too long
    st.sampled_from(["", "   "]),  # empty
)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(key=st.sampled_from(sorted(teamfile.KEYS)), value=HOSTILE_STRINGS,
       table=st.sampled_from(["defaults", "image.a"]))
def test_hostile_strings_refused_naming_file_table_key(key: str, value: str, table: str) -> None:
    v: object = [value] if key in teamfile.LISTS else value
    _refused(f"[{table}]\n{key} = {_toml(v)}\n" + ("[image.a]\n" if table == "defaults" else ""),
             f"[{table}]", key)


WRONG_TYPES = st.one_of(st.integers(), st.booleans(), st.floats(allow_nan=False,
                        allow_infinity=False), st.just({"x": "y"}), st.just([1, 2]),
                        st.just([["nested"]]))


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(sorted(teamfile.KEYS)), value=WRONG_TYPES)
def test_wrong_types_refused(key: str, value: object) -> None:
    if key in teamfile.FLAGS and isinstance(value, bool):
        return  # a flag's right type (build_extensions = true)
    _refused(f"[image.a]\n{key} = {_toml(value)}\n", "[image.a]", key)


@settings(max_examples=100, deadline=None)
@given(key=st.from_regex(r"[a-z][a-z_]{0,20}", fullmatch=True).filter(
    lambda k: k not in teamfile.KEYS))
def test_unknown_keys_refused(key: str) -> None:
    _refused(f"[image.a]\n{key} = \"x\"\n", "[image.a]", key, "unknown key")


# Values `make` refuses for the same option are refused here, before anything resolves.
BAD_VALUES = [
    ("pip", ["numpy; rm -rf /"]), ("pip", ["--index-url=http://evil"]), ("pip", ["torch==2.0"]),
    ("pip", ["x @ https://evil.example/x.whl"]), ("apt", ["curl; reboot"]),
    ("apt", ["$(id)"]), ("conda", ["numpy`id`"]), ("base_image", "UPPER/Case:tag"),
    ("base_image", "ubuntu:22.04\nRUN id"), ("user", "root; id"), ("user", "-oops"),
    ("pip_index_url", "ftp://x"), ("torch_index_url", "javascript:alert(1)"),
    ("pip_extra_index_url", ["http://a b"]), ("registry", "https://registry.example.com"),
    ("registry", "reg/../../etc"), ("target", "xpu"), ("flavor", "tiny"), ("cuda", "12.x"),
    ("python", "2.7"), ("driver", "abc"), ("torch", "latest!"), ("python_source", "conda"),
    ("without", ["torch"]), ("gpu", ["H100; id"]), ("os", "ubuntu$(id)"), ("rocm", "six"),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES, ids=lambda v: str(v)[:30])
def test_bad_values_refused(key: str, value: object) -> None:
    _refused(f"[defaults]\n{key} = {_toml(value)}\n[image.a]\n", "[defaults]", key)


@pytest.mark.parametrize("name", ["UPPER", "a b", "../x", "a/b", "-a", "a" * 70, "é"])
def test_bad_image_names_refused(name: str) -> None:
    _refused(f"[image.{json.dumps(name)}]\npython = \"3.11\"\n", "not an image name")


@pytest.mark.parametrize("text", ["[image.a\n", "x = 1\n[image.a]\n", "[defaults]\n",
                                  "image = 3\n", "[image.a]\n[image.a]\n"])
def test_malformed_team_files_refused(text: str) -> None:
    _refused(text)


# -- plan: layers, tags, the lock ---------------------------------------------------------------
def test_images_differing_in_packages_share_os_and_torch_layers(matrix: Matrix) -> None:
    planned = team.plan(teamfile.parse(GOOD, F), matrix)
    a, b, c = planned
    assert a.layers["torch"] == b.layers["torch"]  # packages differ: torch layer shared
    assert a.layers["team"] == b.layers["team"] != c.layers["team"]
    assert a.layers["image"] != b.layers["image"]
    assert a.layers["os"] == b.layers["os"]
    assert c.layers["torch"] != a.layers["torch"]  # another Python: another torch stack
    assert len({p.tag for p in planned}) == 3
    assert a.remote is not None and a.remote.startswith("registry.example.com/ml/a:torch2.13.0")
    shared = team.shared_layers(planned)
    assert {"layer": "torch", "key": a.layers["torch"], "images": ["a", "b"]} in shared
    first, rest = team.build_order(planned)
    assert [p.name for p in first] == ["a", "c"] and [p.name for p in rest] == ["b"]


def test_an_image_with_its_own_os_packages_has_its_own_layers(matrix: Matrix) -> None:
    planned = team.plan(teamfile.parse(GOOD + '[image.d]\napt = ["curl"]\n', F), matrix)
    a, d = planned[0], planned[3]
    assert a.layers["os"] != d.layers["os"] and a.layers["torch"] != d.layers["torch"]


def test_dockerfile_puts_torch_then_team_then_image_packages(matrix: Matrix) -> None:
    b = team.plan(teamfile.parse(GOOD, F), matrix)[1]
    df = b.prepared.files["Dockerfile"].content
    torch_run = df.index("-r /opt/envbuild/requirements.txt")
    team_copy = df.index("COPY --chown=1000:1000 team-requirements.txt")
    team_run = df.index("-r /opt/envbuild/team-requirements.txt")
    own_run = df.index("-r /opt/envbuild/user-requirements.txt")
    labels = df.index("LABEL ")
    assert torch_run < team_copy < team_run < own_run < labels
    # the torch RUN installs only the pins: nothing image-specific is in it or before it
    head = df[:torch_run]
    assert "user-requirements" not in head and "team-requirements" not in head
    assert b.prepared.files["team-requirements.txt"].content.splitlines()[1:] == \
        ["numpy>=1.26", "einops"]
    assert "!team-requirements.txt" in b.prepared.files[".dockerignore"].content


def test_lock_is_sorted_stable_toml_and_changes_are_shown(matrix: Matrix) -> None:
    planned = team.plan(teamfile.parse(GOOD, F), matrix)
    lock = {"format": 1, "envbuild": "0.1.0", "image": {
        p.name: {"tag": p.remote, "spec_hash": p.prepared.spec.hash, "base_image": p.base_image,
                 "torch": p.prepared.spec.torch, "python": p.prepared.spec.python,
                 "os": p.prepared.spec.os, "variant": p.prepared.spec.variant,
                 "pip": list(p.prepared.options.team_pip) + list(p.prepared.options.pip),
                 "validation": {"status": "pass", "fail": 0}, "packages": ["a==1", "b==2"]}
        for p in reversed(planned)}}
    text = team.dump_lock(lock)
    assert tomllib.loads(text) == lock  # round trip
    assert team.dump_lock(tomllib.loads(text)) == text  # stable
    assert text.index("[image.a]") < text.index("[image.b]") < text.index("[image.c]")
    assert team.lock_changes(planned, lock) == {"a": [], "b": [], "c": []}
    changed = teamfile.parse(GOOD.replace('pip = ["bitsandbytes", "einops"]',
                                          'pip = ["bitsandbytes", "einops", "rich"]'), F)
    diff = team.lock_changes(team.plan(changed, matrix), lock)
    assert diff["a"] == [] and diff["c"] == []
    assert any(d.startswith("tag:") for d in diff["b"]) and any("rich" in d for d in diff["b"])
    fewer = teamfile.parse(GOOD.replace("[image.c]\npython = \"3.12\"\n", ""), F)
    assert team.lock_changes(team.plan(fewer, matrix), lock)["c"] == [
        "removed from the team file"]


@pytest.mark.parametrize("value", ['"\\u0000"', '"a\\nb"', '"\\"]\\n[image.x]"', '"\\u2028"',
                                   '"quote\\" and \\\\ backslash"'])
def test_lock_escapes_any_string(value: str) -> None:
    s = tomllib.loads(f"v = {value}")["v"]
    lock = {"image": {"a": {"tag": s, "pip": [s]}}}
    assert tomllib.loads(team.dump_lock(lock)) == lock


def test_write_lock_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "envbuild.lock"
    path.write_text("old\n")

    def boom(_a: object, _b: object) -> None:
        raise OSError("disk full")

    from envbuild.validator import files

    monkeypatch.setattr(files.os, "replace", boom)  # team writes through common.files (its helper)
    with pytest.raises(OSError):
        team.write_lock(path, {"image": {}})
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_locked_image_pins_base_digest_and_versions() -> None:
    t = teamfile.parse(GOOD, F)
    digest = "sha256:" + "ab" * 32
    entry = {"base_image": "127.0.0.1:5000/base/debian:bookworm", "base_digest": digest,
             "torch": "2.13.0", "python": "3.11", "os": "debian12",
             "packages": ["NumPy==2.1.0", "einops==0.8.0", "bitsandbytes==0.44.1", "x==1"]}
    b = team.locked_image(t.image("b"), entry, F)
    assert b.inputs.base_image == f"127.0.0.1:5000/base/debian@{digest}"
    assert b.inputs.team_pip == ("numpy==2.1.0", "einops==0.8.0")
    assert b.inputs.pip == ("bitsandbytes==0.44.1",)
    assert b.request.torch == "2.13.0"
    with pytest.raises(UsageError, match="not in the lock"):
        team.locked_image(t.image("b"), {**entry, "packages": []}, F)
    with pytest.raises(UsageError, match="no base image digest"):
        team.locked_image(t.image("b"), {**entry, "base_digest": ""}, F)


def test_a_locked_rebuild_leaves_direct_packages_as_the_team_file_names_them() -> None:
    """A compiled extension's wheel installed by path (the lock's `direct`) has no NAME==VERSION
    in any index: the rebuild installs it from its own file again, so it stays unpinned; junk a
    lock may hold (an old lock's banner lines, a non-list) is ignored, never a crash."""
    t = teamfile.parse(GOOD, F)
    entry = {"base_image": "127.0.0.1:5000/base/debian:bookworm",
             "base_digest": "sha256:" + "ab" * 32, "torch": "2.13.0", "python": "3.11",
             "os": "debian12", "direct": ["BitsAndBytes"],
             "packages": ["== CUDA ==", "==", "numpy==2.1.0", "einops==0.8.0",
                          "bitsandbytes==0.44.1+cu130torch2.13", "x @ file:///opt/x.whl"]}
    b = team.locked_image(t.image("b"), entry, F)
    assert b.inputs.team_pip == ("numpy==2.1.0", "einops==0.8.0")
    assert b.inputs.pip == ("bitsandbytes",)  # as the team file names it
    pinned = team.locked_image(t.image("b"), {**entry, "direct": 7}, F)
    assert pinned.inputs.pip == ("bitsandbytes==0.44.1+cu130torch2.13",)


def _dists(rows: list[tuple[str, str, str]]) -> list[sbom.PyDist]:
    return list(sbom.facts({"dists": [{"name": n, "version": v, "direct": d}
                                      for n, v, d in rows]}).dists)


def test_the_lock_lists_every_distribution_path_installed_ones_too() -> None:
    f = team.frozen(_dists([("torch", "2.13.0+cu130", ""), ("flash_attn", "2.8.3", "archive"),
                            ("mine", "0.1", "vcs"), ("pip", "25.2", "")]))
    assert f.packages == ("flash_attn==2.8.3", "mine==0.1", "pip==25.2", "torch==2.13.0+cu130")
    assert f.direct == ("flash_attn", "mine")
    entry = team.lock_entry(_built(f))
    assert entry["packages"] == list(f.packages) and entry["direct"] == list(f.direct)
    assert "direct" not in team.lock_entry(_built(team.frozen(_dists([("a", "1", "")]))))


def _built(f: team.Frozen) -> team.Built:
    from envbuild.matrix import load

    b = team.Built(team.plan(teamfile.parse(GOOD, F), load())[0])
    b.freeze, b.direct = list(f.packages), list(f.direct)
    return b


# what an image's metadata may hold, and the lines of a console a run may print
_ODD = st.one_of(st.text(max_size=30), st.sampled_from([
    "== CUDA ==", "==", "", " ", "a b", "x @ file:///opt/x.whl", "a;b", "-e", "#", "1.0 ",
    "NVIDIA Driver was not detected", "a==b", "é", "torch", "2.13.0+cpu", "1!2.0.post1.dev3"]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_ODD, _ODD, st.sampled_from(["", "archive", "vcs", "dir", "x"])),
                max_size=8))
def test_every_line_of_the_lock_is_a_pin_whatever_the_image_holds(
        rows: list[tuple[str, str, str]]) -> None:
    from packaging.requirements import Requirement

    dists = _dists(rows)
    f = team.frozen(dists)
    for line in f.packages:
        assert team.PIN.fullmatch(line), line
        name, _, version = line.partition("==")
        assert Requirement(f"{name}==1").name == name and " " not in version
        assert any((d.name, d.version) == (name, version) for d in dists)
    assert set(f.direct) <= {line.partition("==")[0] for line in f.packages}
    assert not [x for x in f.packages if "CUDA" in x or x.startswith("=")]


def test_freeze_runs_the_probe_past_the_image_entrypoint(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia/cuda's ENTRYPOINT prints its banner before the command's output: the run replaces
    it, and what printed before the probe's marker is never read as a package."""
    from envbuild.engine import docker
    from envbuild.engine.sbom_probe import MARKER

    seen: dict[str, object] = {}
    out = ("\n==========\n== CUDA ==\n==========\nCUDA Version 13.0.1\n\n"
           "WARNING: The NVIDIA Driver was not detected.\n"
           f"\n{MARKER}\n" + json.dumps({"format": 1, "dists": [
               {"name": "torch", "version": "2.13.0", "direct": ""},
               {"name": "flash_attn", "version": "2.8.3", "direct": "archive"}]}) + "\n")

    def run(image: str, command: list[str], **kw: object) -> docker.RunResult:
        seen.update(image=image, command=command, **kw)
        return docker.RunResult(0, out, False)

    monkeypatch.setattr(docker, "run_container", run)
    f = team.freeze("img:1")
    assert f == team.Frozen(("flash_attn==2.8.3", "torch==2.13.0"), ("flash_attn",))
    assert seen["entrypoint"] == ["/opt/venv/bin/python"] and seen["network"] is False
    assert seen["command"][-1] == "--dists"  # type: ignore[index]
    monkeypatch.setattr(docker, "run_container",
                        lambda *a, **kw: docker.RunResult(1, "== CUDA ==\n", False))
    assert team.freeze("img:1") == team.Frozen()  # nothing the image can say: nothing pinned


def test_target_registry_is_the_one_list_of_targets() -> None:
    assert TARGETS == targets.NAMES == ("cuda", "rocm", "cpu", "mps")
    for t in targets.REGISTRY.values():
        assert t.wheel_kind in ("cuda", "rocm", "cpu")
        assert t.container == (t.os_candidates != "none")
        if t.gpu_vendor:
            assert targets.for_vendor(t.gpu_vendor) is t
    assert targets.get("rocm").devices == ("/dev/kfd", "/dev/dri")
    assert targets.get("cuda").gpu_request and not targets.get("cpu").gpu_request


def test_make_refuses_push_without_validation() -> None:
    from envbuild.core.request import Request
    from envbuild.features.make import MakeRequest, make
    from envbuild.render.pipeline import ContextInputs

    with pytest.raises(UsageError, match="nobody validated"):
        make(MakeRequest(Request(target="cpu"), ContextInputs(), push="r:5000", validate=False))


def test_a_failed_rebuild_never_replaces_the_locked_entry(matrix: Matrix) -> None:
    from datetime import UTC, datetime

    from envbuild.engine.build import BuildResult
    from envbuild.engine.validate import Validation
    from envbuild.features.make import Checked, MakeResult

    a, b, _ = team.plan(teamfile.parse(GOOD, F), matrix)
    old = {"image": {"a": {"digest": "sha256:old-a"}, "b": {"digest": "sha256:old-b"}}}

    def built(p: team.Planned, fail: int) -> team.Built:
        v = Validation({"summary": {"pass": 3, "fail": fail}, "checks": []}, fail, False, "")
        r = MakeResult(p.prepared.spec, build=BuildResult(p.tag, "sha256:id", False, 1.0, None,
                                                          "x"),
                       checked=Checked(v, False, datetime.now(UTC)), pushed=p.remote,
                       digest="sha256:new")
        return team.Built(p, r)

    new = team.updated_lock(old, [built(a, 0), built(b, 1)])
    assert new["image"]["a"]["digest"] == "sha256:new"
    assert new["image"]["b"] == {"digest": "sha256:old-b"}  # validation failed: kept


def test_build_runs_each_shared_torch_layer_first_then_the_rest_in_parallel(
        matrix: Matrix, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from envbuild.common.errors import EnvbuildError
    from envbuild.features import make as make_mod

    planned = team.plan(teamfile.parse(GOOD + "[image.d]\n[image.e]\n", F), matrix)
    calls: list[str] = []
    finished: list[str] = []
    lock = threading.Lock()
    # the first images of the two torch stacks (a; c: another Python) run at once: each waits
    # for the other to start (a sequential build would break the barrier)
    both_firsts = threading.Barrier(2, timeout=10)

    def fake_make(mr: make_mod.MakeRequest, _m: object, _hooks: object) -> object:
        name = str(mr.tag).split(":")[0]
        with lock:
            calls.append(name)
            if name not in ("a", "c"):  # the rest start once both firsts are done
                assert sorted(finished[:2]) == ["a", "c"], (name, finished)
        assert mr.attach_report is True and mr.recommend is False
        if name in ("a", "c") and jobs_now[0] > 1:
            both_firsts.wait()
        with lock:
            finished.append(name)
        if name == "e":
            raise EnvbuildError("boom", "a test failure")
        return make_mod.MakeResult(planned[0].prepared.spec)

    jobs_now = [1]

    monkeypatch.setattr(make_mod, "make", fake_make)
    monkeypatch.setattr(team, "current_base_digest", lambda _ref: "sha256:x")
    monkeypatch.setattr(team, "freeze", lambda _tag: team.Frozen())
    with pytest.raises(UsageError, match="has no registry"):
        team.build([dataclasses_replace_registry(planned[0])], matrix, push=True)
    done = team.build(planned, matrix, push=True)  # one at a time: the file's order
    assert calls == ["a", "c", "b", "d", "e"]
    calls.clear()
    finished.clear()
    jobs_now[0] = 3
    done = team.build(planned, matrix, push=True, jobs=3)
    assert sorted(calls[:2]) == ["a", "c"]  # one image per torch stack first, both at once
    assert sorted(calls[2:]) == ["b", "d", "e"]
    assert [b.planned.name for b in done] == ["a", "b", "c", "d", "e"]  # file order
    failed = [b for b in done if b.error is not None]
    assert [b.planned.name for b in failed] == ["e"]  # one failure does not stop the others
    assert done[4].to_json()["error"]["message"] == "boom"


def dataclasses_replace_registry(p: team.Planned) -> team.Planned:
    import dataclasses

    return dataclasses.replace(p, image=dataclasses.replace(p.image, registry=None))


def test_team_with_merges_and_each_image_resolves_its_extensions(matrix: Matrix) -> None:
    """with = [...] (issue 23): the defaults' and the image's own merge like other lists; the
    image's plan resolves them (the torch every one has a wheel for) and renders their layer."""
    text = ('[defaults]\ntarget = "cuda"\nplatform = "linux/amd64"\nwith = ["xformers"]\n'
            '[image.a]\ntorch = "2.8"\n[image.b]\nwith = ["bitsandbytes"]\ntorch = "2.8"\n')
    t = teamfile.parse(text, F)
    assert t.image("a").request.extensions == ("xformers",)
    assert t.image("b").request.extensions == ("xformers", "bitsandbytes")
    a, b = team.plan(t, matrix)
    assert [e["name"] for e in a.prepared.spec.extensions] == ["xformers"]
    assert [e["name"] for e in b.prepared.spec.extensions] == ["xformers", "bitsandbytes"]
    assert "extensions-requirements.txt" in b.prepared.files
    with pytest.raises(EnvbuildError, match=r"\[image.b\]: --with xformers is given twice") as e:
        team.plan(teamfile.parse(text.replace('["bitsandbytes"]', '["XFormers"]'), F), matrix)
    assert e.value.exit_code == 2


def test_team_build_extensions_is_a_flag_and_plans_the_source_build(matrix: Matrix) -> None:
    """build_extensions = true (make's --build-extensions): flash-attn has no wheel for torch
    2.13, so the image's plan compiles PyPI's sdist in its builder stage; anything but a TOML
    boolean is refused."""
    text = ('[defaults]\ntarget = "cuda"\nplatform = "linux/amd64"\ngpu = ["H100"]\n'
            '[image.a]\ntorch = "2.13.0"\nwith = ["flash-attn"]\nbuild_extensions = true\n')
    t = teamfile.parse(text, F)
    assert t.image("a").request.build_extensions is True
    (a,) = team.plan(t, matrix)
    assert [e["where"] for e in a.prepared.spec.extensions] == ["sdist"]
    assert "ext-build.json" in a.prepared.files
    _refused(text.replace("= true", '= "yes"'), "build_extensions", "expected true or false")
    # in [defaults], the flag applies to the images that name an extension
    t = teamfile.parse(text.replace("build_extensions = true\n", "") .replace(
        'gpu = ["H100"]\n', 'gpu = ["H100"]\nbuild_extensions = true\n') +
        '[image.plain]\ntorch = "2.13.0"\n', F)
    assert t.image("a").request.build_extensions is True
    assert t.image("plain").request.build_extensions is False
    team.plan(t, matrix)


@pytest.mark.parametrize("to", ["process", "worker thread"])
def test_ctrl_c_during_a_parallel_build_cancels_the_rest(
        matrix: Matrix, monkeypatch: pytest.MonkeyPatch, to: str) -> None:
    """Ctrl-C is handled only by the main thread of `team build --jobs N`: it cancels the work
    of the others (proc.cancel_all: their builds stopped, no later step starts), removes their
    validation containers, starts no image that had not started, and goes on up. The kernel may
    deliver the signal to any thread: delivered to a worker (as once in CI), the main thread,
    blocked waiting for results, used to notice it only when the build ended."""
    import os
    import signal
    import threading

    from envbuild.common import proc
    from envbuild.engine import docker
    from envbuild.features import make as make_mod

    planned = team.plan(teamfile.parse(GOOD + "[image.d]\n[image.e]\n", F), matrix)
    calls: list[str] = []
    removed: list[dict[str, str]] = []
    both = threading.Barrier(2, timeout=10)

    def fake_make(mr: make_mod.MakeRequest, _m: object, _hooks: object) -> object:
        name = str(mr.tag).split(":")[0]
        calls.append(name)
        both.wait()
        if name == "a":  # Ctrl-C (a real SIGINT) while both first images are running
            if to == "process":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                time.sleep(0.5)  # the main thread is waiting for results by then
                signal.pthread_kill(threading.get_ident(), signal.SIGINT)
        deadline = time.monotonic() + 10
        while not proc.cancelled() and time.monotonic() < deadline:  # a build going on
            time.sleep(0.01)
        proc.check_cancelled()
        return make_mod.MakeResult(planned[0].prepared.spec)

    monkeypatch.setattr(make_mod, "make", fake_make)
    monkeypatch.setattr(docker, "remove_containers",
                        lambda labels, settle=0.0: removed.append(dict(labels)) or [])
    old = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            team.build(planned, matrix, push=True, jobs=4)
        assert time.monotonic() - t0 < 5  # the running ones stopped at once, not at their end
        assert sorted(calls) == ["a", "c"]  # b, d, e (reusing a's stack) never started
        assert proc.cancelled()
        assert {r["io.envbuild.image"] for r in removed} == {p.tag for p in planned
                                                             if p.name in ("a", "c")}
    finally:
        signal.signal(signal.SIGINT, old)
        proc.reset_cancel()


def test_a_crashed_worker_stops_a_parallel_build_at_once(matrix: Matrix,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug in one image's worker (not an image's failure, which its entry carries) is raised
    as soon as it happens, whichever image it is, and the other running builds are cancelled
    (waiting in slices once made it wait for the slowest build first)."""
    import threading

    from envbuild.common import proc
    from envbuild.engine import docker
    from envbuild.features import make as make_mod

    planned = team.plan(teamfile.parse(GOOD + "[image.d]\n[image.e]\n", F), matrix)
    both = threading.Barrier(2, timeout=10)

    def fake_make(mr: make_mod.MakeRequest, _m: object, _hooks: object) -> object:
        both.wait()
        if str(mr.tag).split(":")[0] == "c":  # the second image crashes; the first builds on
            raise RuntimeError("a bug")
        deadline = time.monotonic() + 10
        while not proc.cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        proc.check_cancelled()
        return make_mod.MakeResult(planned[0].prepared.spec)

    monkeypatch.setattr(make_mod, "make", fake_make)
    monkeypatch.setattr(docker, "remove_containers", lambda labels, settle=0.0: [])
    try:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match="a bug"):
            team.build(planned, matrix, push=True, jobs=4)
        assert time.monotonic() - t0 < 5  # not after a's 10 s build
        assert proc.cancelled()
    finally:
        proc.reset_cancel()
