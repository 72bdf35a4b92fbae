"""Provenance (envbuild/core/provenance.py), the attestation's composition and files
(envbuild/features/attest.py), the pieces under them (a directory's digest, the matrix's
snapshot hash, the probe's bounded run) and where make() makes it: after validation, before
the push."""

from __future__ import annotations

import json
import os
import shutil
import stat
from contextlib import nullcontext
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.digest import tree_digest
from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.core import provenance, sbom
from envbuild.core.request import Request
from envbuild.engine import docker, image_facts
from envbuild.engine.build import BuildResult
from envbuild.engine.sbom_probe import MARKER
from envbuild.engine.validate import Validation
from envbuild.features import attest, make
from envbuild.render.context import RenderOptions
from envbuild.render.pipeline import ContextInputs
from tests.support import ROOT

RECORDED = ROOT / "tests" / "fixtures" / "sbom" / "probe-debian12-cpu.json"
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
IMAGE_ID = "sha256:" + "1" * 64
BASE = attest.BaseDigest("127.0.0.1:5000/team-test-base/debian:bookworm", "sha256:" + "b" * 64,
                         "registry")
PASSED = {"summary": {"pass": 3, "fail": 0}, "checks": [], "spec": {"target": "cpu"}}


def recorded() -> dict[str, Any]:
    return dict(json.loads(RECORDED.read_text()))


def spec() -> Any:
    from envbuild.core.resolve import resolve
    from envbuild.matrix import load

    return resolve(Request(target="cpu", torch="2.13.0", python="3.11", os="debian12"),
                   load())


# -- provenance --------------------------------------------------------------------------------
def statement(**kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "spec": {"torch": "2.13.0"}, "spec_hash": "abc", "inputs": {"pip": ["six"]},
        "envbuild_version": "0.1.0", "matrix_snapshot": "f" * 64,
        "dependencies": [provenance.Dependency(name="base image", uri="pkg:docker/debian@12",
                                               digest="sha256:" + "b" * 64)],
        "builder": {"engine": "docker 20.10", "buildkit": "", "client": "x"},
        "invocation_id": "id-1", "started": T0, "finished": T0 + timedelta(seconds=90),
        "byproducts": [{"name": "sbom.cdx.json", "digest": {"sha256": "c" * 64}}], **kw}
    return provenance.statement(provenance.Subject("reg/img:tag", IMAGE_ID), **args)


def test_the_statement_is_in_toto_v1_with_a_slsa_v1_predicate() -> None:
    s = statement()
    assert s["_type"] == "https://in-toto.io/Statement/v1"
    assert s["predicateType"] == "https://slsa.dev/provenance/v1"
    assert s["subject"] == [{"name": "reg/img:tag", "digest": {"sha256": "1" * 64}}]
    bd = s["predicate"]["buildDefinition"]
    assert bd["buildType"] == provenance.BUILD_TYPE
    ext = bd["externalParameters"]
    assert ext["spec"] == {"torch": "2.13.0"} and ext["spec_hash"] == "abc"
    assert ext["spec_digest"] == provenance.spec_digest({"torch": "2.13.0"})
    assert ext["pip"] == ["six"]
    assert bd["internalParameters"] == {"envbuild": "0.1.0", "matrix": {"sha256": "f" * 64}}
    assert bd["resolvedDependencies"] == [{"uri": "pkg:docker/debian@12", "name": "base image",
                                           "digest": {"sha256": "b" * 64}}]
    run = s["predicate"]["runDetails"]
    assert run["builder"]["version"] == {"engine": "docker 20.10", "client": "x"}  # '' left out
    assert run["metadata"] == {"invocationId": "id-1", "startedOn": "2026-11-29T12:00:00Z",
                               "finishedOn": "2026-11-29T12:01:30Z"}
    assert run["byproducts"][0]["name"] == "sbom.cdx.json"
    json.dumps(s)  # JSON-ready


def test_the_same_inputs_give_the_same_statement() -> None:
    assert statement() == statement()
    assert provenance.spec_digest({"a": 1, "b": 2}) == provenance.spec_digest({"b": 2, "a": 1})
    assert provenance.spec_digest({"a": 1}) != provenance.spec_digest({"a": 2})


def test_dependencies_name_the_base_context_source_and_every_wheel() -> None:
    f = sbom.facts(recorded())
    s = spec()
    deps = [d.to_json() for d in attest.dependencies(
        BASE, "e" * 64, RenderOptions(pip=("six",)), s, Path("/w/wheelhouse"), f, "linux/amd64")]
    base, context, source, index = deps[:4]
    assert base["uri"] == ("pkg:docker/team-test-base/debian@bookworm?platform=linux/amd64&"
                           "repository_url=127.0.0.1:5000")
    assert base["digest"] == {"sha256": "b" * 64}
    assert context["digest"] == {"sha256": "e" * 64}
    # by its directory's name alone: no path of the machine that built it
    assert (source["name"], source["uri"]) == ("wheelhouse", "wheelhouse:wheelhouse")
    assert (index["name"], index["uri"]) == ("pip index", "https://pypi.org/simple")
    wheels = {d["uri"]: d for d in deps[4:]}
    assert len(wheels) == len(f.dists)  # every distribution installed, hashed or said why not
    torch = wheels["pkg:pypi/torch@2.13.0%2Bcpu"]
    reported = next(w for r in recorded()["pip_reports"] for w in r["install"]
                    if w["name"] == "torch")
    assert torch["digest"] == {"sha256": reported["sha256"]}
    assert torch["name"].startswith("torch-2.13.0+cpu-cp311-cp311")
    assert torch["downloadLocation"].startswith("file:///run/envbuild/wheelhouse/")
    pip = wheels["pkg:pypi/pip@23.0.1"]  # the venv's own pip: no report names it
    assert "digest" not in pip and pip["annotations"]["sha256"].startswith("unknown")
    # no wheelhouse: the torch index instead, its login masked
    opts = RenderOptions(torch_index_url="https://user:secret@mirror.example/whl/cpu")
    deps = [d.to_json() for d in attest.dependencies(BASE, "e" * 64, opts, s, None, f, None)]
    assert deps[2] == {"uri": "https://***@mirror.example/whl/cpu", "name": "torch index"}
    assert "secret" not in json.dumps(deps)


@pytest.mark.parametrize(("ref", "purl"), [
    ("debian:bookworm", "pkg:docker/debian@bookworm"),
    ("nvidia/cuda:12.2.2-base-ubuntu22.04", "pkg:docker/nvidia/cuda@12.2.2-base-ubuntu22.04"),
    ("localhost:5000/a/b@sha256:" + "0" * 64, "pkg:docker/a/b?repository_url=localhost:5000"),
    ("not a ref", "not a ref"),
])
def test_docker_purl(ref: str, purl: str) -> None:
    assert attest.docker_purl(ref, None) == purl


# -- the files ---------------------------------------------------------------------------------
def _attestation() -> attest.Attestation:
    return attest.Attestation('{"bomFormat": "CycloneDX"}\n', statement(),
                              attest.report_text(PASSED), 1)


def test_write_puts_three_files_atomically(tmp_path: Path) -> None:
    a = _attestation()
    paths = a.write(tmp_path / "new" / "dir")
    assert sorted(p.name for p in paths.values()) == sorted(
        [attest.SBOM_FILE, attest.PROVENANCE_FILE, attest.VALIDATION_FILE])
    assert json.loads(paths["provenance"].read_text()) == a.provenance
    assert json.loads(paths["validation"].read_text()) == PASSED
    assert paths["sbom"].read_text() == a.sbom_text
    assert not [p for p in paths["sbom"].parent.iterdir() if p.name not in
                (attest.SBOM_FILE, attest.PROVENANCE_FILE, attest.VALIDATION_FILE)]
    unvalidated = attest.Attestation(a.sbom_text, a.provenance, None)
    assert "validation" not in unvalidated.write(tmp_path / "new" / "dir")
    assert not (tmp_path / "new" / "dir" / attest.VALIDATION_FILE).exists()  # not a stale one


def test_a_file_or_an_unwritable_dir_is_a_usage_error(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    for bad, match in ((f, "is a file"), (f / "sub", "not a directory")):
        with pytest.raises(UsageError, match=match) as exc:
            attest.out_dir(bad, "--sbom")
        assert exc.value.hint and "\n" not in exc.value.message
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
        with pytest.raises(UsageError, match="not writable"):
            attest.out_dir(ro / "out", "--sbom")
    assert attest.out_dir(tmp_path / "a" / "b", "--sbom") == tmp_path / "a" / "b"


def test_check_refuses_a_bad_sbom_dir_before_anything_runs(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    mr = make.MakeRequest(Request(target="cpu"), ContextInputs(), sbom=f)
    with pytest.raises(UsageError, match="--sbom"):
        make.check(mr)


# -- the pieces under it -----------------------------------------------------------------------
def test_tree_digest_is_deterministic_and_sees_names_contents_modes_and_links(
        tmp_path: Path) -> None:
    a = tmp_path / "a"
    (a / "sub").mkdir(parents=True)
    (a / "Dockerfile").write_text("FROM x\n")
    (a / "sub" / "f").write_bytes(b"\x00\xff")
    (a / "wheelhouse").mkdir()
    (a / "wheelhouse" / "big.whl").write_bytes(b"w" * 1000)
    b = tmp_path / "b"
    shutil.copytree(a, b)
    one = tree_digest(a, exclude=("wheelhouse",))
    assert one == tree_digest(b, exclude=("wheelhouse",)) and len(one) == 64
    (b / "wheelhouse" / "big.whl").write_bytes(b"v")  # excluded: no change
    assert tree_digest(b, exclude=("wheelhouse",)) == one
    assert tree_digest(b) != tree_digest(a)
    changes = [lambda: (b / "Dockerfile").write_text("FROM y\n"),
               lambda: (b / "Dockerfile").rename(b / "Dockerfile2"),
               lambda: (b / "Dockerfile").chmod(0o755),
               lambda: (b / "link").symlink_to("Dockerfile"),
               lambda: (b / "sub" / "f").write_bytes(b"\x00\xff\x00")]
    for change in changes:
        shutil.rmtree(b)
        shutil.copytree(a, b)
        change()
        assert tree_digest(b, exclude=("wheelhouse",)) != one


def test_the_matrix_snapshot_is_cached_and_follows_the_values(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    from envbuild.common.resources import matrix_dir
    from envbuild.matrix import loader

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    d = tmp_path / "matrix"
    shutil.copytree(matrix_dir(), d)
    fresh = loader.load(d)
    assert len(fresh.snapshot) == 64
    loader._LOADED.clear()
    cached = loader.load(d)  # from the cache file written above
    assert cached.snapshot == fresh.snapshot
    # a comment does not change it, a value does
    os_toml = d / "os.toml"
    os_toml.write_text(os_toml.read_text() + "\n# a comment\n")
    loader._LOADED.clear()
    assert loader.load(d).snapshot == fresh.snapshot
    os_toml.write_text(os_toml.read_text().replace('uv_version = "0.13.8"',
                                                   'uv_version = "0.13.9"'))
    loader._LOADED.clear()
    assert loader.load(d).snapshot != fresh.snapshot


class _Container:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.closed = False

    def logs(self, **kw: Any) -> Any:
        assert kw["stream"] is True and kw["follow"] is False
        outer = self

        class Stream:
            def __iter__(self) -> Any:
                return iter(outer.chunks)

            def close(self) -> None:
                outer.closed = True
        return Stream()


def test_the_output_of_a_run_is_read_bounded() -> None:
    c = _Container([b"a" * 10, b"b" * 10, b"c" * 10])
    assert docker._bounded_logs(c, False, 100) == (b"a" * 10 + b"b" * 10 + b"c" * 10, False)
    c = _Container([b"a" * 10] * 1000)
    data, cut = docker._bounded_logs(c, False, 25)
    assert data == b"a" * 25 and cut and c.closed


@pytest.mark.parametrize(("run", "match"), [
    (docker.RunResult(0, "", False, True), "more than"),
    (docker.RunResult(0, "", True), "did not finish"),
    (docker.RunResult(1, "/opt/venv/bin/python: not found", False), "exit 1"),
    (docker.RunResult(0, "[" * 100_000, False), "could not list"),
    (docker.RunResult(0, '["a list"]', False), "could not list"),
])
def test_collect_refuses_what_is_not_the_probes_output(monkeypatch: pytest.MonkeyPatch,
                                                       run: docker.RunResult, match: str) -> None:
    monkeypatch.setattr(docker, "run_container", lambda *a, **kw: run)
    with pytest.raises(EnvbuildError, match=match) as exc:
        image_facts.collect("img:1")
    assert exc.value.hint


def test_collect_runs_the_probe_isolated_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def run(image: str, command: list[str], **kw: Any) -> docker.RunResult:
        seen.update(image=image, command=command, **kw)
        return docker.RunResult(0, f"{MARKER}\n{RECORDED.read_text()}", False)

    monkeypatch.setattr(docker, "run_container", run)
    assert image_facts.collect("img:1") == recorded()
    # the image's ENTRYPOINT replaced by the venv's Python (nvidia/cuda's prints a banner)
    assert seen["entrypoint"] == ["/opt/venv/bin/python"]
    assert seen["command"][:2] == ["-I", "-c"]
    assert "def main()" in seen["command"][2] and seen["command"][3] == "/opt/envbuild"
    assert seen["network"] is False and seen["output_limit"] == image_facts.OUTPUT_LIMIT
    assert seen["labels"][docker.LABEL_ROLE] == "sbom"


# what a base image's ENTRYPOINT (or anything else in the run) may print before the probe's
# output: nvidia/cuda's banner, JSON-looking lines, a marker inside a line, a fake marker line
# with junk after it (the probe's own comes last), CRLF line ends
_PREFIX = st.lists(st.one_of(st.text(max_size=40), st.sampled_from([
    "==========", "== CUDA ==", "CUDA Version 13.0.1", "NVIDIA Driver was not detected",
    '{"format": 1}', "[", "{", f"x {MARKER}", f"{MARKER}", f"{MARKER} ", "\r", "\x00",
    "Container image Copyright (c) 2016-2025, NVIDIA CORPORATION"])), max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_PREFIX, st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_collect_reads_only_what_follows_the_last_marker(lines: list[str], end: str,
                                                        pretty: bool) -> None:
    text = json.dumps(recorded(), indent=1 if pretty else None)
    out = "".join(line + end for line in lines) + f"{MARKER}{end}{text}{end}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(docker, "run_container", lambda *a, **kw: docker.RunResult(0, out, False))
        assert image_facts.collect("img:1") == recorded()


@pytest.mark.parametrize("out", [
    "== CUDA ==\n" + json.dumps({"format": 1}),  # no marker: not the probe's output
    f"{MARKER}\n",  # a marker and nothing after it
    f"{MARKER}\n{{}}\nmore\n",  # junk after the JSON
    f"{MARKER}x\n{{}}\n",  # not a line of its own
])
def test_collect_refuses_output_without_the_probes_json_after_its_marker(
        monkeypatch: pytest.MonkeyPatch, out: str) -> None:
    monkeypatch.setattr(docker, "run_container", lambda *a, **kw: docker.RunResult(0, out, False))
    with pytest.raises(EnvbuildError, match="could not list"):
        image_facts.collect("img:1")


# -- make(): attested after validation, before the push -----------------------------------------
def test_make_attests_after_validation_and_before_the_push(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    from envbuild.engine import build as engine_build

    order: list[str] = []
    monkeypatch.setattr(engine_build, "build", lambda ctx, **kw: order.append("build") or
                        BuildResult(kw["tag"], IMAGE_ID, False, 1.0, None, "buildkit"))

    def validate(*a: Any, **kw: Any) -> make.Checked:
        order.append("validate")
        return make.Checked(Validation(PASSED, 0, False, ""), False, T0)

    def collect(ref: str, **kw: Any) -> dict[str, Any]:
        order.append("attest")
        return recorded()

    monkeypatch.setattr(make, "validate", validate)
    monkeypatch.setattr(image_facts, "collect", collect)
    monkeypatch.setattr(make, "push", lambda ref, reg: order.append("push") or
                        (f"{reg}/{ref}", "sha256:" + "2" * 64))
    monkeypatch.setattr(attest, "base_digest", lambda ref: attest.BaseDigest(ref, "", "unknown"))
    monkeypatch.setattr(docker, "builder_versions", lambda reason: {"engine": "docker 1"})
    monkeypatch.setattr(docker, "image_size", lambda ref: 1)
    monkeypatch.setattr(docker, "endpoint", lambda url: nullcontext())
    out = tmp_path / "att"
    r = make.make(make.MakeRequest(
        Request(target="cpu", torch="2.13.0", python="3.11", os="debian12"), ContextInputs(),
        tag="t/cpu:1", push="reg:5000", sbom=out, estimate_size=False, recommend=False))
    assert order == ["build", "validate", "attest", "push"]
    assert r.attestation is not None and r.attestation.sbom and r.attestation.provenance
    assert r.attested == {"sbom": out / attest.SBOM_FILE,
                          "provenance": out / attest.PROVENANCE_FILE,
                          "validation": out / attest.VALIDATION_FILE}
    data = r.to_json()["attestation"]
    assert data["sbom"] == str(out / attest.SBOM_FILE) and data["components"] > 100
    stmt = json.loads((out / attest.PROVENANCE_FILE).read_text())
    assert stmt["subject"][0] == {"name": "t/cpu:1", "digest": {"sha256": "1" * 64}}
    ext = stmt["predicate"]["buildDefinition"]["externalParameters"]
    assert ext["spec_hash"] == r.spec.hash and ext["spec"] == r.spec.to_json()
    from envbuild.common.digest import sha256_hex

    byproducts = {b["name"]: b["digest"]["sha256"]
                  for b in stmt["predicate"]["runDetails"]["byproducts"]}
    assert byproducts == {
        attest.SBOM_FILE: sha256_hex((out / attest.SBOM_FILE).read_bytes()),
        attest.VALIDATION_FILE: sha256_hex((out / attest.VALIDATION_FILE).read_bytes())}
    deps = stmt["predicate"]["buildDefinition"]["resolvedDependencies"]
    assert deps[1]["name"] == "build context" and len(deps[1]["digest"]["sha256"]) == 64
    # without --sbom: nothing of it runs
    order.clear()
    r = make.make(make.MakeRequest(
        Request(target="cpu", torch="2.13.0", python="3.11", os="debian12"), ContextInputs(),
        tag="t/cpu:1", estimate_size=False, recommend=False))
    assert order == ["build", "validate"] and r.attestation is None
    assert "attestation" not in r.to_json()


def test_team_build_attests_each_image_into_its_own_dir_and_keeps_the_documents(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import dataclasses

    from envbuild.features import team, teamfile
    from envbuild.matrix import load
    from tests.support.team import GOOD

    planned = team.plan(teamfile.parse(GOOD, tmp_path / "envbuild.toml"), load())
    arm = dataclasses.replace(planned[0], platform="linux/arm64")
    seen: dict[str, Path | None] = {}
    base_asked: list[str] = []

    def fake_make(mr: make.MakeRequest, _m: object, _hooks: object) -> make.MakeResult:
        seen[str(mr.tag)] = mr.sbom
        r = make.MakeResult(planned[0].prepared.spec,
                            build=BuildResult(str(mr.tag), IMAGE_ID, False, 1.0, None, "x"))
        r.attestation = _attestation()
        r.base = attest.BaseDigest("b:1", "sha256:" + "b" * 64, "registry")
        return r

    monkeypatch.setattr(make, "make", fake_make)
    monkeypatch.setattr(team, "current_base_digest", lambda ref: base_asked.append(ref) or "")
    monkeypatch.setattr(team, "freeze", lambda _tag: team.Frozen())
    done = team.build([planned[0], arm], load(), push=False, out=tmp_path / "out")
    assert seen == {planned[0].tag: tmp_path / "out" / "a",
                    arm.tag: tmp_path / "out" / "a-linux-arm64"}
    a = done[0].result.attestation if done[0].result is not None else None
    assert a is not None and a.sbom == _attestation().sbom and a.provenance == statement()
    assert done[0].base_digest == "sha256:" + "b" * 64 and base_asked == []  # asked once
    assert done[0].to_json()["attestation"]["components"] == 1
