"""`envbuild team ci --github | --gitlab`: the pipeline written is valid against the provider's
published schema (check-jsonschema's vendored copies, offline), has the triggers and jobs it
promises, runs only envbuild commands envbuild's own parser accepts, never echoes a secret, and
never replaces a different file without --force."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.support import FIXTURES, run_cli
from tests.support.pipelines import argv_of, dry_parse, envbuild_lines, schema_check

SCHEMA = {"github": "vendor.github-workflows", "gitlab": "vendor.gitlab-ci"}
OUT = {"github": Path(".github/workflows/envbuild.yml"), "gitlab": Path(".gitlab-ci.yml")}
TEAM = """
[defaults]
registry = "ghcr.io/acme/ml"
target = "cuda"
cuda = "12.8"

[image.train]
pip = ["six"]

[image.serve]
registry = "registry.example.com:5000/serving"
"""


def repo(tmp_path: Path, folder: str = "") -> Path:
    """A repository with a team file (in `folder`) and a fleet file next to it."""
    (tmp_path / ".git").mkdir()
    where = tmp_path / folder
    where.mkdir(parents=True, exist_ok=True)
    (where / "envbuild.toml").write_text(TEAM)
    (where / "fleet.toml").write_text((FIXTURES / "fleet" / "fleet.toml").read_text())
    return where / "envbuild.toml"


def load(path: Path) -> dict[str, Any]:
    doc = YAML(typ="safe").load(path.read_text())
    assert isinstance(doc, dict)
    return doc


def commands(doc: dict[str, Any]) -> dict[str, list[str]]:
    """envbuild's command path ("team build") -> the argv of each line that runs it."""
    out: dict[str, list[str]] = {}
    for line in envbuild_lines(doc):
        argv = argv_of(line)
        out.setdefault(dry_parse(argv), []).append(" ".join(argv))
    return out


@pytest.mark.parametrize("provider", ["github", "gitlab"])
@pytest.mark.parametrize("folder", ["", "ml/team"])
def test_the_pipeline_is_valid_and_runs_only_commands_envbuild_accepts(
        tmp_path: Path, provider: str, folder: str) -> None:
    team = repo(tmp_path, folder)
    r = run_cli("team", "ci", f"--{provider}", "--file", str(team), "--json")
    assert r.returncode == 0, r.stderr
    out = tmp_path / OUT[provider]  # at the repository's top, the team file maybe deeper
    assert json.loads(r.stdout) == {
        "provider": provider, "path": str(out), "team": f"{folder}/envbuild.toml".lstrip("/"),
        "registries": ["ghcr.io", "registry.example.com:5000"], "changed": True}
    check = schema_check(out, SCHEMA[provider])
    assert check.returncode == 0, check.stdout + check.stderr
    doc = load(out)
    rel = f"{folder}/".lstrip("/")
    junit = "envbuild-reports/team-check.xml"
    assert commands(doc) == {
        "team build": [f"team build --file {rel}envbuild.toml",
                       f"team build --file {rel}envbuild.toml --push"],
        "team check": [f"team check --file {rel}envbuild.toml --junit {junit}"],
        "plan": [f"plan --fleet {rel}fleet.toml --to {rel}envbuild.toml --file "
                 f"{rel}envbuild.toml --markdown"]}
    for argv in (a for lines in commands(doc).values() for a in lines):
        for word in argv.split():  # every file a command names is the repository's own
            if word.endswith(".toml"):
                assert (tmp_path / word).is_file(), word
    text = out.read_text()
    assert "echo" not in text and "set -x" not in text
    for secret in ("ENVBUILD_REGISTRY_USER", "ENVBUILD_REGISTRY_PASSWORD"):
        uses = [ln.strip() for ln in text.splitlines() if secret in ln and not ln.startswith("#")]
        assert uses, secret
        for ln in uses:  # only handed to a login: the action's input, or docker's stdin
            assert re.fullmatch(r"(username|password): \$\{\{ secrets\.\w+ \}\}", ln) or (
                "| docker login --username" in ln and "--password-stdin" in ln), ln
    (_check_github if provider == "github" else _check_gitlab)(doc, rel, junit)


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["steps"])


def _check_github(doc: dict[str, Any], rel: str, junit: str) -> None:
    on = doc["on"]
    assert set(on) == {"pull_request", "push", "schedule", "workflow_dispatch"}
    assert on["push"]["branches"] == ["main"] and on["schedule"][0]["cron"] == "17 3 * * *"
    jobs = doc["jobs"]
    build = {s.get("run", ""): s.get("if") for s in _steps(jobs["build"])}
    assert build[f"envbuild team build --file {rel}envbuild.toml"] == \
        "github.event_name == 'pull_request'"
    assert build[f"envbuild team build --file {rel}envbuild.toml --push"] == \
        "github.event_name != 'pull_request'"
    logins = [s for s in _steps(jobs["build"]) if s.get("uses", "").startswith("docker/login")]
    assert [s["with"]["registry"] for s in logins] == ["ghcr.io", "registry.example.com:5000"]
    assert all(s["if"] == "github.event_name != 'pull_request'" for s in logins)
    assert jobs["plan"]["if"] == "github.event_name == 'pull_request'"
    (plan,) = [s for s in _steps(jobs["plan"]) if "envbuild plan" in s.get("run", "")]
    assert plan["run"].endswith('>> "$GITHUB_STEP_SUMMARY"')
    assert plan["if"] == f"hashFiles('{rel}fleet.toml') != ''"
    check = jobs["check"]
    assert check["if"] == "github.event_name == 'schedule' || github.event_name == " \
        "'workflow_dispatch'"
    steps = _steps(check)
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    report = [s for s in steps if s.get("uses", "").startswith("mikepenz/action-junit-report")]
    assert [(s["if"], s["with"]["path"]) for s in uploads] == [("always()", "envbuild-reports/")]
    assert [(s["if"], s["with"]["report_paths"]) for s in report] == \
        [("always()", "envbuild-reports/*.xml")]
    assert check["permissions"] == {"contents": "read", "checks": "write"}
    assert any(s.get("run", "").endswith(f"--junit {junit}") for s in steps)


def _check_gitlab(doc: dict[str, Any], rel: str, junit: str) -> None:
    def rules(job: str) -> list[str]:
        return [r["if"] for r in doc[job]["rules"]]

    assert rules("envbuild-build") == ['$CI_PIPELINE_SOURCE == "merge_request_event"']
    assert doc["envbuild-build"]["script"] == [f"envbuild team build --file {rel}envbuild.toml"]
    assert rules("envbuild-build-push") == [
        '$CI_PIPELINE_SOURCE == "schedule"',
        '$CI_PIPELINE_SOURCE == "push" && $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH']
    assert doc["envbuild-build-push"]["script"][-1].endswith("--push")
    assert doc["envbuild-build-push"]["artifacts"]["paths"] == [f"{rel}envbuild.lock"]
    check = doc["envbuild-check"]
    assert rules("envbuild-check") == ['$CI_PIPELINE_SOURCE == "schedule"']
    assert check["script"][-1].endswith(f"--junit {junit}")
    assert check["artifacts"]["reports"]["junit"] == junit
    assert check["artifacts"]["when"] == "always" and check["needs"] == []
    plan = doc["envbuild-plan"]
    assert plan["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"',
                              "exists": [f"{rel}fleet.toml"]}]
    assert plan["script"][-1].endswith("--markdown > envbuild-plan.md")
    assert plan["artifacts"]["paths"] == ["envbuild-plan.md"]
    assert doc[".envbuild"]["services"] == ["docker:27-dind"]
    logins = [ln for ln in check["script"] if "docker login" in ln]
    assert [ln.split()[-1] for ln in logins] == ["ghcr.io", "registry.example.com:5000"]


def test_the_plan_the_pipeline_runs_works_on_the_files_it_names(tmp_path: Path) -> None:
    """The pipeline's `envbuild plan` line, run as written in the repository: the table."""
    team = repo(tmp_path)
    assert run_cli("team", "ci", "--github", "--file", str(team)).returncode == 0
    (line,) = [ln for ln in envbuild_lines(load(tmp_path / OUT["github"]))
               if ln.startswith("envbuild plan")]
    r = run_cli(*argv_of(line), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("### envbuild plan: the team file envbuild.toml")


def test_an_existing_different_file_needs_force(tmp_path: Path) -> None:
    team = repo(tmp_path)
    out = tmp_path / OUT["gitlab"]
    out.write_text("stages: [test]\n")
    r = run_cli("team", "ci", "--gitlab", "--file", str(team))
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: {out} exists and is not the pipeline envbuild writes "
                               "now\nhint: --force replaces it")
    assert out.read_text() == "stages: [test]\n" and len(r.stderr.splitlines()) == 2
    r = run_cli("team", "ci", "--gitlab", "--file", str(team), "--force")
    assert r.returncode == 0 and r.stdout.startswith(f"wrote  {out}")
    r = run_cli("team", "ci", "--gitlab", "--file", str(team))  # the same file: left alone
    assert r.returncode == 0 and r.stdout.startswith(f"unchanged  {out}")
    assert not list(out.parent.glob(".*.tmp"))


def test_out_elsewhere_keeps_the_repository_paths(tmp_path: Path) -> None:
    team = repo(tmp_path, "ml")
    out = tmp_path / "ci" / "envbuild.gitlab-ci.yml"
    r = run_cli("team", "ci", "--gitlab", "--file", str(team), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "envbuild team build --file ml/envbuild.toml" in out.read_text()
    assert not (tmp_path / OUT["gitlab"]).exists()


@pytest.mark.parametrize(("args", "says"), [
    (["--github", "--gitlab"], "choose one of --github and --gitlab"),
    ([], "choose one of --github and --gitlab"),
    (["--github", "--out", "."], "is a directory, not a file"),
    (["--github", "--out", "/dev/null"], "is a character device, not a file"),
    (["--gitlab", "--file", "missing.toml"], "no such team file"),
])
def test_bad_requests_are_one_line_usage_errors(tmp_path: Path, args: list[str],
                                                says: str) -> None:
    repo(tmp_path)
    r = run_cli("team", "ci", *args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and says in r.stderr.splitlines()[0]
    assert r.stderr.splitlines()[1].startswith("hint: ") and len(r.stderr.splitlines()) == 2
    assert not (tmp_path / ".github").exists() and not (tmp_path / ".gitlab-ci.yml").exists()


def test_an_image_without_a_registry_is_refused(tmp_path: Path) -> None:
    (tmp_path / "envbuild.toml").write_text('[image.cpu]\ntarget = "cpu"\n')
    r = run_cli("team", "ci", "--github", cwd=tmp_path)
    assert r.returncode == 2 and "[image.cpu] has no registry" in r.stderr
    assert "hint: set registry in [defaults]" in r.stderr


def test_a_team_file_path_the_pipeline_cannot_name_is_refused(tmp_path: Path) -> None:
    team = repo(tmp_path, "my team")
    r = run_cli("team", "ci", "--github", "--file", str(team))
    assert r.returncode == 2 and "the team file 'my team/envbuild.toml'" in r.stderr
