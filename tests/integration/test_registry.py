"""The registry client against a real registry (Debian's docker-registry, no engine needed) and
the bearer-token flow against a small local token-auth server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from envbuild.common.errors import EnvbuildError
from envbuild.engine import registry
from tests.support import run_cli
from tests.support.junit import assert_matches_team, cases
from tests.support.junit import read as read_junit
from tests.support.registry import (
    PASSWORD,
    WRONG,
    _store,
    free_port,
    push_tiny_image,
    serve,
    start_login_registry,
    start_registry,
)


@pytest.fixture(scope="module")
def reg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(start_registry(tmp_path_factory.mktemp("registry")))


REPORT = {"schema": 1, "checks": [{"id": "facts.torch", "status": "pass", "title": "torch"}],
          "summary": {"pass": 1, "fail": 0, "warn": 0, "skip": 0}}


def test_attach_and_read_back_a_report(reg: str) -> None:
    digest = push_tiny_image(reg, "team/tiny", "v1")
    assert registry.resolve_digest(f"{reg}/team/tiny:v1") == digest
    assert registry.fetch_report(f"{reg}/team/tiny:v1") is None  # nothing attached yet
    ref = registry.attach_report(f"{reg}/team/tiny:v1", digest, REPORT)
    assert ref == f"{reg}/team/tiny:sha256-{digest[7:]}.envbuild"
    # the artifact: one layer of the report's media type, subject = the image
    raw = registry.client(reg).get_manifest(registry.parse_ref(ref), (registry.OCI_MANIFEST,))
    assert raw is not None
    m = json.loads(raw[0])
    assert m["artifactType"] == registry.REPORT_TYPE
    assert [x["mediaType"] for x in m["layers"]] == [registry.REPORT_TYPE]
    assert m["subject"]["digest"] == digest
    assert m["subject"]["mediaType"] == registry.DOCKER_MANIFEST
    for image in (f"{reg}/team/tiny:v1", f"{reg}/team/tiny@{digest}"):
        att = registry.fetch_report(image)
        assert att is not None and att.report == REPORT and att.via in ("tag", "referrers")
    # the CLI prints it without running anything (no engine involved)
    r = run_cli("validate", "--from-registry", f"{reg}/team/tiny:v1",
                env={"DOCKER_HOST": "unix:///nope"})
    assert r.returncode == 0, r.stderr
    assert "facts.torch" in r.stdout and "1 passed" in r.stdout
    r = run_cli("validate", "--from-registry", f"{reg}/team/tiny@{digest}", "--json")
    assert json.loads(r.stdout) == REPORT


def test_a_failing_attached_report_exits_1(reg: str, tmp_path: Path) -> None:
    digest = push_tiny_image(reg, "team/failing", "v1", salt="f")
    bad = {**REPORT, "checks": [{"id": "facts.torch", "status": "fail", "title": "torch"}],
           "summary": {"pass": 0, "fail": 1}}
    registry.attach_report(f"{reg}/team/failing:v1", digest, bad)
    junit = tmp_path / "attached.xml"
    r = run_cli("validate", "--from-registry", f"{reg}/team/failing:v1", "--junit", str(junit))
    assert r.returncode == 1 and "fail" in r.stdout
    assert [cases(s) for s in read_junit(junit)] == [[("facts.torch", "failure")]]


def test_missing_things_are_clean_errors(reg: str) -> None:
    r = run_cli("validate", "--from-registry", f"{reg}/team/nothing:here")
    assert r.returncode == 1 and "is not in the registry" in r.stderr
    push_tiny_image(reg, "team/bare", "v1", salt="b")
    r = run_cli("validate", "--from-registry", f"{reg}/team/bare:v1")
    assert r.returncode == 1 and "no validation report" in r.stderr
    r = run_cli("validate", "--from-registry", f"127.0.0.1:{free_port()}/x/y:z")
    assert r.returncode == 3 and "cannot reach the registry" in r.stderr
    r = run_cli("validate", "img", "--from-registry", f"{reg}/x:y")
    assert r.returncode == 2


def test_a_report_digest_mismatch_is_refused(reg: str) -> None:
    c = registry.client(reg)
    push_tiny_image(reg, "team/blob", "v1", salt="m")
    digest = c.put_blob("team/blob", b"real")
    with pytest.raises(EnvbuildError):
        c.get_blob("team/blob", digest.replace(digest[-4:], "0000"))


def test_team_check_junit_counts_what_json_counts(reg: str, tmp_path: Path) -> None:
    """`team check` of a lock against the real registry (images pushed through the client, no
    engine): an image that checks, one whose report fails and whose base tag moved, one gone, a
    multi-platform image; --json and --junit of the same run hold the same checks."""
    base = push_tiny_image(reg, "ci/base", "1", salt="base")
    a = push_tiny_image(reg, "ci/a", "1", salt="a")
    b = push_tiny_image(reg, "ci/b", "1", salt="b")
    registry.attach_report(f"{reg}/ci/a:1", a, REPORT)
    registry.attach_report(f"{reg}/ci/b:1", b, {**REPORT, "summary": {"pass": 0, "fail": 1}})
    m = push_tiny_image(reg, "ci/multi", "1-amd64", salt="m")
    registry.attach_report(f"{reg}/ci/multi:1-amd64", m, REPORT)
    index = registry.push_index(f"{reg}/ci/multi:1", [("linux/amd64", m)])
    gone, old = "sha256:" + "0" * 64, "sha256:" + "1" * 64

    def entry(tag: str, digest: str, base_digest: str) -> str:
        return (f'tag = "{reg}/ci/{tag}"\ndigest = "{digest}"\nbase_image = '
                f'"{reg}/ci/base:1"\nbase_digest = "{base_digest}"\n')

    (tmp_path / "envbuild.lock").write_text(
        f"format = 1\n[image.a]\n{entry('a:1', a, base)}[image.b]\n{entry('b:1', b, old)}"
        f"[image.c]\n{entry('c:1', gone, base)}[image.multi]\ntag = \"{reg}/ci/multi:1\"\n"
        f'digest = "{index}"\n[image.multi.platforms."linux/amd64"]\n'
        + entry("multi:1-amd64", m, base))
    junit = tmp_path / "junit" / "team-check.xml"
    r = run_cli("team", "check", "--file", str(tmp_path / "envbuild.toml"), "--json",
                "--junit", str(junit))
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert [(c["image"], c["check"], c["status"]) for c in data["checks"]] == [
        ("a", "present", "pass"), ("a", "report", "pass"), ("a", "base", "pass"),
        ("b", "present", "pass"), ("b", "report", "fail"), ("b", "base", "fail"),
        ("c", "present", "fail"), ("c", "report", "not_run"), ("c", "base", "pass"),
        ("multi", "tag", "pass"), ("multi", "platform.linux/amd64", "pass"),
        ("multi@linux/amd64", "present", "pass"), ("multi@linux/amd64", "report", "pass"),
        ("multi@linux/amd64", "base", "pass")]
    assert data["problems"] == [
        "b: the attached validation report does not pass",
        f"b: the base image tag {reg}/ci/base:1 moved: locked {old}, now {base}",
        f"c: {reg}/ci/c@{gone} is gone from the registry"]
    assert_matches_team(read_junit(junit), data)


@pytest.fixture(scope="module")
def authreg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    yield from serve(start_login_registry(tmp_path_factory.mktemp("authreg")))


@pytest.mark.parametrize("how", ["auths", "credHelpers", "credsStore"])
def test_a_login_from_the_credential_store_pushes_and_reads_the_report(
        authreg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """issue 11: the report push used `auths` only; a credential helper (credHelpers, or the
    credsStore of Docker Desktop / pass / secretservice) is asked now, as docker asks it."""
    env, calls = _store(tmp_path, monkeypatch, how, authreg)
    repo = f"team/{how.lower()}"
    digest = push_tiny_image(authreg, repo, "v1", salt=how)
    registry.attach_report(f"{authreg}/{repo}:v1", digest, REPORT)
    r = run_cli("validate", "--from-registry", f"{authreg}/{repo}:v1", env=env)
    assert r.returncode == 0, r.stderr
    assert "facts.torch" in r.stdout
    assert PASSWORD not in r.stdout + r.stderr
    if how == "auths":
        assert not calls.exists()
    else:  # asked with the registry host on stdin, once per client (not once per request)
        asked = calls.read_text().splitlines()
        assert asked and set(asked) == {f"get {authreg}"} and len(asked) <= 4


@pytest.mark.parametrize(("how", "password", "needle"), [
    ("none", PASSWORD, "asks for a login and has none here"),
    ("auths", WRONG, "refused access to repository:team/x:pull"),
    ("credHelpers", WRONG, "refused access to repository:team/x:pull"),
    ("credsStore", WRONG, "refused access to repository:team/x:pull"),
])
def test_no_or_a_wrong_login_is_exit_3(authreg: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch, how: str, password: str,
                                       needle: str) -> None:
    env, _ = _store(tmp_path, monkeypatch, how, authreg, password)
    r = run_cli("validate", "--from-registry", f"{authreg}/team/x:1", env=env)
    assert r.returncode == 3, r.stderr
    assert r.stderr.startswith(f"error: the registry {authreg} ") and needle in r.stderr
    assert f"docker login {authreg}" in r.stderr
    assert "Traceback" not in r.stderr and password not in r.stdout + r.stderr


def test_a_helper_without_this_registry_is_no_login(authreg: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    env, calls = _store(tmp_path, monkeypatch, "credsStore", "other.example:5000")
    r = run_cli("validate", "--from-registry", f"{authreg}/team/x:1", env=env)
    assert r.returncode == 3 and "asks for a login and has none here" in r.stderr
    assert "native keychain" not in r.stderr  # the helper's own output is never shown
    assert calls.read_text().split() == ["get", authreg]


@pytest.mark.parametrize(("helper", "code", "needle"), [
    ("not-installed", 3, "docker-credential-not-installed (config.json) is not installed"),
    ("../../bin/sh", 2, "not a helper name"),
    ("x;rm -rf /", 2, "not a helper name"),
    ("a b", 2, "not a helper name"),
    ("-v", 2, "not a helper name"),
])
def test_a_missing_or_hostile_helper_is_one_clear_error(authreg: str, tmp_path: Path,
                                                        helper: str, code: int,
                                                        needle: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"credHelpers": {authreg: helper}}))
    r = run_cli("validate", "--from-registry", f"{authreg}/team/x:1",
                env={"DOCKER_CONFIG": str(tmp_path)})
    assert r.returncode == code and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.splitlines()) <= 2
