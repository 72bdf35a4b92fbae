"""The use cases the CLI calls, called directly: no typer, no process, no Docker (the engine is
replaced by recorders)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from envbuild.cluster import usecase as cluster
from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.core.request import Request
from envbuild.engine import docker
from envbuild.engine import validate as engine_validate
from envbuild.engine.build import BuildResult
from envbuild.engine.validate import Validation
from envbuild.features import bundle as b
from envbuild.features import checkup, make, offline, resolve_render, team_lock
from envbuild.render.pipeline import ContextInputs
from tests.support import ROOT

CPU = Request(target="cpu", torch="2.13.0", python="3.11", os="debian12")
PASSED = {"summary": {"pass": 3, "fail": 0}, "checks": [], "spec": {"target": "cpu"}}
FAILED = {"summary": {"pass": 2, "fail": 1}, "checks": [], "spec": {"target": "cpu"}}


def _built(tag: str = "envbuild/cpu:abc", image_id: str = "sha256:" + "1" * 64) -> BuildResult:
    return BuildResult(tag, image_id, False, 1.0, None, "buildkit")


def _fake_build(monkeypatch: pytest.MonkeyPatch, seen: list[dict[str, Any]],
                result: BuildResult | None = None) -> None:
    from envbuild.engine import build as engine_build

    def build(context: Path, **kw: Any) -> BuildResult:
        seen.append({"context": context, **kw})
        return result or _built(kw.get("tag") or "envbuild/cpu:abc")

    monkeypatch.setattr(engine_build, "build", build)


# -- envbuild build: build -> validate -> gate -> push, the one composition ---------------------

def _checked(report: dict[str, Any]) -> make.Checked:
    code = 1 if report["summary"]["fail"] else 0
    return make.Checked(Validation(report, code, False, ""), False, datetime.now(UTC))


@pytest.mark.parametrize(("push", "unvalidated", "report", "pushed", "skipped", "code"), [
    (None, False, None, None, "", 0),  # no push: no validation
    ("reg:5000", False, PASSED, "reg:5000/envbuild/cpu:abc", "", 0),
    ("reg:5000", False, FAILED, None, "validation failed", 1),
    ("reg:5000", True, None, "reg:5000/envbuild/cpu:abc", "", 0),  # pushed unvalidated
])
def test_build_context_validates_before_a_push_and_holds_a_failure(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, push: str | None, unvalidated: bool,
        report: dict[str, Any] | None, pushed: str | None, skipped: str, code: int) -> None:
    builds: list[dict[str, Any]] = []
    _fake_build(monkeypatch, builds)
    validated: list[str] = []

    def validate(ref: str, image_id: str, **kw: Any) -> make.Checked:
        validated.append(ref)
        assert report is not None
        return _checked(report)

    monkeypatch.setattr(make, "validate", validate)
    monkeypatch.setattr(make, "push", lambda ref, reg: (f"{reg}/{ref}", "sha256:" + "2" * 64))
    out = make.build_context(make.BuildRequest(tmp_path, push=push, push_unvalidated=unvalidated))
    assert builds[0]["context"] == tmp_path and builds[0]["proxies"] is not None
    assert validated == (["envbuild/cpu:abc"] if report is not None else [])
    assert (out.shipped.pushed, out.shipped.push_skipped, out.exit_code) == (pushed, skipped,
                                                                             code)
    data = out.to_json()
    assert data["pushed"] == pushed and data["push_skipped"] == (skipped or None)
    assert (data["validation"] is None) == (report is None)


def test_ship_attaches_the_report_and_times_each_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.engine import registry

    monkeypatch.setattr(make, "validate", lambda *a, **kw: _checked(PASSED))
    monkeypatch.setattr(make, "push", lambda ref, reg: (f"{reg}/{ref}", "sha256:" + "2" * 64))
    monkeypatch.setattr(registry, "attach_report", lambda ref, digest, report: f"{ref}-report")
    statuses: list[str] = []

    def status(text: str) -> Any:
        from contextlib import nullcontext

        statuses.append(text)
        return nullcontext()

    times: dict[str, float] = {}
    s = make.ship(_built(), make.Shipping(push="reg", attach_report=True), status, times)
    assert s.report_ref == "reg/envbuild/cpu:abc-report" and set(times) == {"validate", "push"}
    assert statuses == ["pushing envbuild/cpu:abc to reg"]
    held = make.ship(_built(), make.Shipping(validate=False, push="reg"))
    assert held.push_skipped == "not validated" and held.pushed is None


def test_attached_validation_is_exit_1_when_the_report_failed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.engine import registry
    from envbuild.engine.registry import Attached

    reports = {"r/a:1": FAILED, "r/b:1": PASSED}

    def fetch(ref: str) -> Attached | None:
        if ref not in reports:
            return None
        return Attached(report=reports[ref], artifact="sha256:9", image=ref, via="referrers")

    monkeypatch.setattr(registry, "fetch_report", fetch)
    assert make.attached_validation("r/a:1")[1].exit_code == 1
    assert make.attached_validation("r/b:1")[1].exit_code == 0
    with pytest.raises(EnvbuildError, match="no validation report is attached"):
        make.attached_validation("r/c:1")


def test_validate_one_runs_the_image_or_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, Any]] = []
    monkeypatch.setattr(engine_validate, "validate_image",
                        lambda ref, **kw: ran.append(("image", ref)) or Validation(PASSED, 0,
                                                                                  False, ""))
    monkeypatch.setattr(engine_validate, "validate_host",
                        lambda **kw: ran.append(("host", kw["spec"])) or Validation(PASSED, 0,
                                                                                   False, ""))
    make.validate_one("img:1", spec=None, require_gpu=False, timeout=1)
    make.validate_one(None, spec=Path("spec.json"), require_gpu=False, timeout=1)
    assert ran == [("image", "img:1"), ("host", Path("spec.json"))]
    assert make.gpu_line(PASSED) is None  # a CPU report has no GPU verdict


# -- envbuild bundle / make --from-bundle --------------------------------------------------------

def test_collect_refuses_a_full_out_and_mps_before_any_engine_call(tmp_path: Path) -> None:
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    with pytest.raises(UsageError, match="not an empty directory"):
        offline.collect(full, CPU, ContextInputs())
    with pytest.raises(UsageError, match="--target mps"):
        offline.collect(tmp_path / "new", Request(target="mps", torch="2.13.0"),
                        ContextInputs())
    assert not (tmp_path / "new").exists()


def test_collect_writes_the_bundle_with_a_fake_engine(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    wh.mkdir()
    wheel = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    (wh / wheel).write_bytes(b"w")
    image_id = "sha256:" + "3" * 64
    builds: list[dict[str, Any]] = []
    _fake_build(monkeypatch, builds, _built("envbuild-bundle/system:x", image_id))
    monkeypatch.setattr(docker, "save_image", lambda ref, path: path.write_bytes(b"tar"))
    monkeypatch.setattr(docker, "local_image", lambda ref: None)

    def to_oci(src: Path, dst: Path, ref: str) -> b.OciImage:
        dst.write_bytes(src.read_bytes())
        return b.OciImage("sha256:" + "4" * 64, image_id, (), ref)

    monkeypatch.setattr(b, "to_oci_archive", to_oci)
    out = tmp_path / "bundle"
    got = offline.collect(out, Request(target="cpu", torch="2.13.0", python="3.11",
                                       os="debian12", components=("torch",)),
                          ContextInputs(wheelhouse=wh))
    assert builds[0]["tag"] == got.system_ref and got.system_ref.startswith(
        "envbuild-bundle/system:")
    assert got.torch_wheels == {wheel: b.sha256_file(wh / wheel)} and not got.with_pip
    assert got.torch_source == {"from": "wheelhouse", "wheelhouse": str(wh)}
    assert (out / b.SYSTEM_ARCHIVE).is_file() and (out / "context" / "Dockerfile").is_file()
    assert (out / "context" / "wheelhouse" / wheel).is_file()
    assert "--require-hashes" in (out / "context" / "Dockerfile").read_text()
    meta = b.read_bundle(out).meta
    assert meta["system_id"] == image_id and meta["base"]["kind"] == "unknown"
    assert got.to_json()["wheels"] == [wheel] and got.size > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "wh"]  # no temporary left


def test_make_from_bundle_loads_the_system_image_builds_offline_and_validates(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    meta = {"system_ref": "envbuild-bundle/system:x", "system_id": "sha256:" + "5" * 64}
    monkeypatch.setattr(b, "read_bundle", lambda root: b.Bundle(root, meta))
    images: dict[str, str] = {}
    monkeypatch.setattr(docker, "image_id", lambda ref: images.get(ref, ""))
    monkeypatch.setattr(docker, "load_image",
                        lambda path: images.update({meta["system_ref"]: meta["system_id"]}))
    builds: list[dict[str, Any]] = []
    _fake_build(monkeypatch, builds)
    monkeypatch.setattr(engine_validate, "validate_image",
                        lambda ref, **kw: Validation(FAILED, 1, False, ""))
    lines: list[str] = []
    r = offline.make_from_bundle(tmp_path, tag=None, require_gpu=False, timeout=5,
                                 no_validate=False, on_line=lines.append)
    assert builds[0]["network"] == "none" and builds[0]["context"] == tmp_path / "context"
    assert builds[0]["on_line"] == lines.append
    assert r.exit_code == 1 and r.summary["validation"] == FAILED and r.summary["network"] == "none"
    skipped = offline.make_from_bundle(tmp_path, tag=None, require_gpu=False, timeout=5,
                                       no_validate=True)
    assert skipped.exit_code == 0 and skipped.summary["validation"] is None
    images.clear()
    monkeypatch.setattr(docker, "load_image", lambda path: None)  # loads something else
    with pytest.raises(UsageError, match="does not have its recorded id"):
        offline.make_from_bundle(tmp_path, tag=None, require_gpu=False, timeout=5,
                                 no_validate=True)


# -- envbuild team: the lock policy ---------------------------------------------------------------

TEAM = """
[defaults]
registry = "registry.example.com/ml"
python = "3.11"
torch = "2.13.0"
target = "cpu"
os = "debian12"

[image.a]

[image.b]
pip = ["einops"]
"""


def test_team_plan_reads_the_lock_next_to_the_team_file(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent.sock")  # the plan needs no engine
    f = tmp_path / "envbuild.toml"
    f.write_text(TEAM)
    p = team_lock.plan(f, ["a"])
    assert p.lock == tmp_path / "envbuild.lock"
    assert [i["name"] for i in p.data["images"]] == ["a"]
    assert p.data["lock_changes"] == {"a": ["new image"]}


def test_team_build_writes_the_lock_except_when_locked(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    from envbuild.features import team

    f = tmp_path / "envbuild.toml"
    f.write_text(TEAM)
    calls: list[list[str]] = []
    monkeypatch.setattr(team, "build",
                        lambda planned, m, **kw: calls.append([p.name for p in planned]) or
                        [] if kw["out"] == tmp_path / "envbuild-out" else None)
    done = team_lock.build(f, push=False)
    assert done.lock == tmp_path / "envbuild.lock" and done.lock.is_file()
    assert done.to_json() == {"images": [], "indexes": [],
                              "lock": str(tmp_path / "envbuild.lock"),
                              "out": str(tmp_path / "envbuild-out")}  # the images' SBOMs
    assert calls == [["a", "b"]] and not done.failed
    before = done.lock.read_text()
    with pytest.raises(UsageError, match="has no image"):  # the lock pins none of them yet
        team_lock.build(f, push=False, locked=True)
    assert done.lock.read_text() == before
    (tmp_path / "envbuild.lock").unlink()
    with pytest.raises(UsageError, match="--locked: no lock file"):
        team_lock.build(f, push=False, locked=True)
    assert not (tmp_path / "envbuild.lock").exists()


def test_team_check_needs_a_lock(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no lock file"):
        team_lock.check(tmp_path / "envbuild.toml")


# -- envbuild cluster ------------------------------------------------------------------------------

def test_cluster_render_writes_and_replaces_its_files(tmp_path: Path) -> None:
    kw: dict[str, Any] = {"min_bytes": "1M", "max_bytes": "1G"}
    written = cluster.render("img:1", tmp_path / "s", k8s=False, **kw)
    assert [p.name for p in written] == ["validate.sbatch", "envbuild_cluster_worker.py"]
    assert written[0].read_text().startswith("#!/bin/bash")
    (tmp_path / "s" / "job.log").write_text("a task's log\n")
    again = cluster.render("img:1", tmp_path / "s", k8s=True, nodes=3, **kw)
    assert sorted(p.name for p in again) == ["job.yaml", "jobset.yaml"]
    assert (tmp_path / "s" / "job.log").read_text() == "a task's log\n"
    assert not list((tmp_path / "s").glob(".*.tmp"))
    with pytest.raises(UsageError, match="is not a size"):
        cluster.render("img:1", tmp_path / "x", k8s=True, min_bytes="lots", max_bytes="1G")
    assert cluster.size_bytes("64MiB", "--max-bytes") == 64 << 20


def test_cluster_collect_reads_logs_and_names_the_missing_node(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    with pytest.raises(UsageError, match="no envbuild cluster report lines"):
        cluster.collect([empty])
    with pytest.raises(UsageError, match="cannot read"):
        cluster.collect([tmp_path / "missing.log"])
    line = {"envbuild_cluster": 1, "kind": "node", "node": "n1", "exit_code": 0, "error": None,
            "report": {"checks": [], "summary": {"status": "pass", "pass": 1, "fail": 0}}}
    log = tmp_path / "n1.log"
    log.write_text(json.dumps(line) + "\n")
    report = cluster.collect([log], nodes="n[1-2]")
    statuses = {n["node"]: n["status"] for n in report["nodes"]}
    assert statuses.get("n2") == "missing" and "n1" in statuses


# -- resolve, render, doctor, matrix check --------------------------------------------------------

def test_resolve_gives_the_spec_and_no_size_unless_asked() -> None:
    r = resolve_render.resolve(CPU)
    assert r.spec.target == "cpu" and r.size is None
    assert r.to_json() == r.spec.to_json()
    with pytest.raises(UsageError):
        resolve_render.resolve(CPU, "nowhere")


def test_render_writes_one_context_and_render_all_every_combination(tmp_path: Path) -> None:
    r = resolve_render.render(tmp_path / "one", CPU, ContextInputs())
    assert (tmp_path / "one" / "Dockerfile").is_file() and "Dockerfile" in r.to_json(tmp_path)[
        "files"]
    with pytest.raises(UsageError, match="not empty"):
        resolve_render.render(tmp_path / "one", CPU, ContextInputs())
    resolve_render.render(tmp_path / "one", CPU, ContextInputs(), force=True)
    names = resolve_render.render_all(tmp_path / "all", CPU, ContextInputs())
    assert names and all((tmp_path / "all" / n / "Dockerfile").is_file() for n in names)
    with pytest.raises(UsageError, match="no valid combination"):
        resolve_render.render_all(tmp_path / "none", Request(target="cpu", torch="0.1"),
                                  ContextInputs())


def test_doctor_diagnoses_recorded_facts_and_saves_them(tmp_path: Path) -> None:
    facts = ROOT / "tests" / "fixtures" / "doctor" / "driver-library-mismatch"
    d = checkup.doctor(facts_dir=facts, save=tmp_path / "saved")
    assert d.failed and any(tmp_path.joinpath("saved").iterdir())
    again = checkup.doctor(facts_dir=tmp_path / "saved")
    assert [f.id for f in again.findings] == [f.id for f in d.findings]


def test_check_matrix_counts_problems_and_unverified_rows(tmp_path: Path) -> None:
    c = checkup.check_matrix()
    assert c.problems == [] and c.directory.is_dir()
    assert all(len(row) == 3 for row in c.unverified)
    with pytest.raises(UsageError, match="is not a directory"):
        checkup.check_matrix(tmp_path / "nope")
