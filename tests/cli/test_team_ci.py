"""`envbuild team ci --github | --gitlab --install SPEC`: the pipeline written is valid against
the provider's published schema (check-jsonschema's vendored copies, offline), has the triggers
and jobs it promises (nightly: check first, build without push; pushes only from the default
branch, the lock committed back), installs what --install says, runs only envbuild commands
envbuild's own parser accepts, logs in to each registry host with its own secrets and never
echoes one, and never replaces a different file without --force."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.support import FIXTURES, run_cli
from tests.support.pipelines import argv_of, dry_parse, envbuild_lines, schema_check

SCHEMA = {"github": "vendor.github-workflows", "gitlab": "vendor.gitlab-ci"}
INSTALL = "envbuild @ git+https://github.com/ORG/envbuild@v0.1.0"
BASE = {"github": "$RUNNER_TEMP/envbuild-base/", "gitlab": "/tmp/envbuild-base/"}
SLUG = "ENVBUILD_REGISTRY_REGISTRY_EXAMPLE_COM_5000"
PUSH = ("(github.event_name == 'push' || github.event_name == 'workflow_dispatch') && "
        "github.ref == format('refs/heads/{0}', github.event.repository.default_branch)")
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


def ci(*args: str, cwd: Path | None = None) -> Any:
    return run_cli("team", "ci", *args, "--install", INSTALL, cwd=cwd)


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
@pytest.mark.parametrize("folder", ["", "ml/team", ".ci"])
def test_the_pipeline_is_valid_and_runs_only_commands_envbuild_accepts(
        tmp_path: Path, provider: str, folder: str) -> None:
    team = repo(tmp_path, folder)
    r = ci(f"--{provider}", "--file", str(team), "--json")
    assert r.returncode == 0, r.stderr
    out = tmp_path / OUT[provider]  # at the repository's top, the team file maybe deeper
    ghcr = ({"host": "ghcr.io", "user": "github.actor", "password": "GITHUB_TOKEN",
             "set_by": "the CI"} if provider == "github" else
            {"host": "ghcr.io", "user": "ENVBUILD_REGISTRY_GHCR_IO_USER",
             "password": "ENVBUILD_REGISTRY_GHCR_IO_PASSWORD", "set_by": "you"})
    assert json.loads(r.stdout) == {
        "provider": provider, "path": str(out), "team": f"{folder}/envbuild.toml".lstrip("/"),
        "registries": ["ghcr.io", "registry.example.com:5000"],
        "logins": [ghcr, {"host": "registry.example.com:5000", "user": f"{SLUG}_USER",
                          "password": f"{SLUG}_PASSWORD", "set_by": "you"}],
        "install": INSTALL, "warnings": [], "changed": True}
    check = schema_check(out, SCHEMA[provider])
    assert check.returncode == 0, check.stdout + check.stderr
    doc = load(out)
    rel = f"{folder}/".lstrip("/")
    junit = "envbuild-reports/team-check.xml"
    base = BASE[provider] + rel
    assert commands(doc) == {
        "team build": [f"team build --file {rel}envbuild.toml",
                       f"team build --file {rel}envbuild.toml --push"],
        "team check": [f"team check --file {rel}envbuild.toml --junit {junit}"],
        "plan": [f"plan --fleet {rel}fleet.toml --file {base}envbuild.toml --to "
                 f"{rel}envbuild.toml --markdown"]}
    for argv in (a for lines in commands(doc).values() for a in lines):
        for word in argv.split():  # every file a command names is the repository's own
            if word.endswith(".toml"):  # (the base branch's, in its checkout)
                assert (tmp_path / word.removeprefix(BASE[provider])).is_file(), word
    text = out.read_text()
    assert "echo" not in text and "set -x" not in text
    _check_secrets(text, provider)
    assert _install_lines(doc) == [INSTALL] * (3 if provider == "github" else 2)
    (_check_github if provider == "github" else _check_gitlab)(doc, rel, junit)


def _check_secrets(text: str, provider: str) -> None:
    """Each host's own secrets, only ever handed to a login (the action's input, docker's
    stdin) or tested for being set; ghcr.io on GitHub with the workflow's token."""
    names = [f"{SLUG}_USER", f"{SLUG}_PASSWORD"] + (
        ["GITHUB_TOKEN"] if provider == "github" else
        ["ENVBUILD_REGISTRY_GHCR_IO_USER", "ENVBUILD_REGISTRY_GHCR_IO_PASSWORD",
         "CI_REGISTRY_PASSWORD", "ENVBUILD_GIT_TOKEN"])
    assert "ENVBUILD_REGISTRY_USER" not in text and "ENVBUILD_REGISTRY_PASSWORD" not in text
    for secret in names:
        uses = [ln.strip() for ln in text.splitlines() if secret in ln and not ln.startswith("#")]
        assert uses, secret
        for ln in uses:
            assert (re.fullmatch(r"(username|password): \$\{\{ secrets\.\w+ \}\}", ln)
                    or ("| docker login --username" in ln and "--password-stdin" in ln)
                    or re.fullmatch(r'(el)?if \[ -n "\$\{\w+:-\}" \].*; then', ln)
                    or ("credential.helper='!f() { printf" in ln and "$ENVBUILD_GIT_TOKEN\"; }"
                        in ln)), ln


def _install_lines(doc: dict[str, Any]) -> list[str]:
    """What each `pip install` line of the pipeline installs, as the shell reads it."""
    out = []
    for node in _strings(doc):
        for ln in node.splitlines():
            words = shlex.split(ln)
            if len(words) > 2 and words[-2] == "install" and (
                    words[-3] == "pip" or words[-3].endswith("/pip")):
                out.append(words[-1])
    return out


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() if k in ("run", "script", "before_script")
                or isinstance(v, (dict, list)) for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


def _steps(job: dict[str, Any]) -> list[dict[str, Any]]:
    return list(job["steps"])


def _check_github(doc: dict[str, Any], rel: str, junit: str) -> None:
    on = doc["on"]
    assert set(on) == {"pull_request", "push", "schedule", "workflow_dispatch"}
    assert on["push"] is None and on["schedule"][0]["cron"] == "17 3 * * *"  # no branch name
    assert doc["concurrency"]["group"] == \
        "envbuild-${{ github.workflow }}-${{ github.event_name }}-${{ github.ref }}"
    jobs = doc["jobs"]
    build = jobs["build"]
    assert build["needs"] == "check"  # nightly: the check of the committed lock comes first
    assert build["if"] == ("${{ !cancelled() && (github.event_name != 'push' || github.ref == "
                           "format('refs/heads/{0}', github.event.repository.default_branch)) }}")
    assert build["env"] == {"ENVBUILD_CI_PUSH": "${{ " + PUSH + " }}"}
    assert build["permissions"] == {"contents": "write", "packages": "write"}
    runs = {s.get("run", ""): s.get("if") for s in _steps(build)}
    assert runs[f"envbuild team build --file {rel}envbuild.toml"] == \
        "env.ENVBUILD_CI_PUSH != 'true'"  # pull requests, the schedule: never a push
    assert runs[f"envbuild team build --file {rel}envbuild.toml --push"] == \
        "env.ENVBUILD_CI_PUSH == 'true'"
    (commit,) = [s for s in _steps(build) if s.get("name") == "Commit the lock"]
    assert commit["if"] == "!cancelled() && env.ENVBUILD_CI_PUSH == 'true'"
    assert f"git add -- {rel}envbuild.lock" in commit["run"]
    assert "github-actions[bot]" in commit["run"] and "[skip ci]" in commit["run"]
    assert 'git push --quiet origin "HEAD:$GITHUB_REF"' in commit["run"]
    logins = [s for s in _steps(build) if s.get("uses", "").startswith("docker/login")]
    assert [(s["with"]["registry"], s["with"]["username"], s["with"]["password"])
            for s in logins] == [
        ("ghcr.io", "${{ github.actor }}", "${{ secrets.GITHUB_TOKEN }}"),
        ("registry.example.com:5000", "${{ secrets." + SLUG + "_USER }}",
         "${{ secrets." + SLUG + "_PASSWORD }}")]
    assert all(s["if"] == "github.event_name != 'pull_request'" for s in logins)
    assert not [s for s in _steps(build) if "qemu" in s.get("uses", "")]  # no arm64 image
    assert jobs["plan"]["if"] == "github.event_name == 'pull_request'"
    assert jobs["plan"]["permissions"] == {"contents": "read", "pull-requests": "write"}
    plan_steps = _steps(jobs["plan"])
    (plan,) = [s for s in plan_steps if "envbuild plan" in s.get("run", "")]
    assert 'cat envbuild-plan.md >> "$GITHUB_STEP_SUMMARY"' in plan["run"]
    assert plan["if"] == f"hashFiles('{rel}fleet.toml') != ''"
    (comment,) = [s for s in plan_steps if "gh pr comment" in s.get("run", "")]
    assert comment["run"] == 'gh pr comment "$PR" --body-file envbuild-plan.md'
    assert comment["env"] == {"GH_TOKEN": "${{ github.token }}",
                              "PR": "${{ github.event.pull_request.number }}"}
    check = jobs["check"]
    assert check["if"] == "github.event_name == 'schedule' || github.event_name == " \
        "'workflow_dispatch'"
    steps = _steps(check)
    uploads = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact")]
    report = [s for s in steps if s.get("uses", "").startswith("mikepenz/action-junit-report")]
    assert [(s["if"], s["with"]["path"]) for s in uploads] == [("always()", "envbuild-reports/")]
    assert [(s["if"], s["with"]["report_paths"]) for s in report] == \
        [("always()", "envbuild-reports/*.xml")]
    assert check["permissions"] == {"contents": "read", "checks": "write", "packages": "read"}
    assert any(s.get("run", "").endswith(f"--junit {junit}") for s in steps)
    assert {j: jobs[j]["timeout-minutes"] for j in jobs} == {"check": 60, "build": 240,
                                                             "plan": 20}


def _check_gitlab(doc: dict[str, Any], rel: str, junit: str) -> None:
    def rules(job: str) -> list[str]:
        return [r["if"] for r in doc[job]["rules"]]

    assert doc["stages"] == ["plan", "check", "build"]  # a manual run: the check first
    assert rules("envbuild-build") == [
        '$CI_PIPELINE_SOURCE == "merge_request_event"', '$CI_PIPELINE_SOURCE == "schedule"',
        '$CI_PIPELINE_SOURCE == "web" && $CI_COMMIT_BRANCH != $CI_DEFAULT_BRANCH']
    assert doc["envbuild-build"]["script"][-1] == f"envbuild team build --file {rel}envbuild.toml"
    assert rules("envbuild-build-push") == [  # never on a schedule
        '$CI_PIPELINE_SOURCE == "push" && $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH',
        '$CI_PIPELINE_SOURCE == "web" && $CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH']
    push = doc["envbuild-build-push"]["script"][-1]
    assert f"envbuild team build --file {rel}envbuild.toml --push || status=$?" in push
    assert 'if [ -n "${ENVBUILD_GIT_TOKEN:-}" ]' in push and "[skip ci]" in push
    assert push.rstrip().endswith('exit "$status"')
    assert doc["envbuild-build-push"]["artifacts"]["paths"] == [f"{rel}envbuild.lock"]
    check = doc["envbuild-check"]
    assert rules("envbuild-check") == ['$CI_PIPELINE_SOURCE == "schedule"',
                                       '$CI_PIPELINE_SOURCE == "web"']
    assert check["script"][-1].endswith(f"--junit {junit}")
    assert check["artifacts"]["reports"]["junit"] == junit
    assert check["artifacts"]["when"] == "always" and check["needs"] == []
    plan = doc["envbuild-plan"]
    assert plan["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"',
                              "exists": [f"{rel}fleet.toml"]}]
    assert "--markdown > envbuild-plan.md || status=$?" in plan["script"][-1]
    assert plan["artifacts"]["paths"] == ["envbuild-plan.md"]
    assert doc[".envbuild"]["services"] == ["docker:27-dind"]
    logins = [ln.strip() for block in check["script"] for ln in block.splitlines()
              if "docker login" in ln]
    assert [shlex.split(ln)[-1] for ln in logins] == [
        "ghcr.io", "ghcr.io", "registry.example.com:5000", "registry.example.com:5000"]
    assert [ln.split("--username ")[1].split()[0] for ln in logins] == [
        '"$CI_REGISTRY_USER"', '"$ENVBUILD_REGISTRY_GHCR_IO_USER"', '"$CI_REGISTRY_USER"',
        f'"${SLUG}_USER"']
    assert {j: doc[j]["timeout"] for j in doc if j.startswith("envbuild-")} == {
        "envbuild-plan": "20m", "envbuild-check": "1h", "envbuild-build": "4h",
        "envbuild-build-push": "4h"}


@pytest.mark.parametrize("provider", ["github", "gitlab"])
def test_the_plan_compares_the_base_branch_s_team_file_with_the_request_s(
        tmp_path: Path, provider: str) -> None:
    """The pipeline's `envbuild plan` line, run as written in the repository, with the base
    branch checked out where the job puts it: the table of what the request's team file (here:
    torch 2.12 -> its default) changes, against the base's lock."""
    (tmp_path / "repo").mkdir()
    team = repo(tmp_path / "repo", "ml")
    base = tmp_path / "base"  # the base branch's checkout
    (base / "ml").mkdir(parents=True)
    (base / "ml" / "envbuild.toml").write_text(TEAM.replace('cuda = "12.8"',
                                                            'cuda = "12.8"\ntorch = "2.12"'))
    assert ci(f"--{provider}", "--file", str(team)).returncode == 0
    (line,) = [ln for ln in envbuild_lines(load(tmp_path / "repo" / OUT[provider]))
               if ln.startswith("envbuild plan")]
    argv = [w.replace(BASE[provider], f"{base}/") for w in argv_of(line)]
    assert argv[argv.index("--file") + 1] == str(base / "ml" / "envbuild.toml")
    r = run_cli(*argv, cwd=tmp_path / "repo")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("### envbuild plan: the team file ml/envbuild.toml")
    assert "**Lock** " + str(base / "ml" / "envbuild.lock") in r.stdout  # the base's lock


@pytest.mark.parametrize("provider", ["github", "gitlab"])
def test_arm64_images_get_binfmt_and_gpu_gated_ones_a_warning(tmp_path: Path,
                                                              provider: str) -> None:
    team = repo(tmp_path)
    team.write_text(TEAM.replace('pip = ["six"]', 'pip = ["six"]\nplatforms = ["linux/amd64", '
                                 '"linux/arm64"]\npush_requires = "gpu"'))
    r = ci(f"--{provider}", "--file", str(team))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ('warning: [image.train]: push_requires = "gpu", and the pipeline\'s '
                        "runners have no GPU: `team build --push` there never pushes it; run "
                        "the build job on a GPU runner (GitHub: its runs-on label; GitLab: its "
                        "tags)\n")
    doc = load(tmp_path / OUT[provider])
    if provider == "github":
        (qemu,) = [s for s in doc["jobs"]["build"]["steps"] if "qemu" in s.get("uses", "")]
        assert qemu["uses"] == "docker/setup-qemu-action@v3"
        assert qemu["with"] == {"platforms": "arm64"}
    else:
        binfmt = "docker run --privileged --rm tonistiigi/binfmt --install arm64"
        for job in ("envbuild-build", "envbuild-build-push"):
            script = doc[job]["script"]
            assert script.index(binfmt) < len(script) - 1, job  # before the build
        assert binfmt not in doc["envbuild-check"]["script"]
    assert schema_check(tmp_path / OUT[provider], SCHEMA[provider]).returncode == 0


def test_an_existing_different_file_needs_force(tmp_path: Path) -> None:
    team = repo(tmp_path)
    out = tmp_path / OUT["gitlab"]
    out.write_text("stages: [test]\n")
    r = ci("--gitlab", "--file", str(team))
    assert r.returncode == 2
    assert r.stderr.startswith(f"error: {out} exists and is not the pipeline envbuild writes "
                               "now\nhint: --force replaces it")
    assert out.read_text() == "stages: [test]\n" and len(r.stderr.splitlines()) == 2
    r = ci("--gitlab", "--file", str(team), "--force")
    assert r.returncode == 0 and r.stdout.startswith(f"wrote  {out}")
    assert f"login     registry.example.com:5000: set the CI/CD variables {SLUG}_USER and " \
        f"{SLUG}_PASSWORD" in r.stdout
    r = ci("--gitlab", "--file", str(team))  # the same file: left alone
    assert r.returncode == 0 and r.stdout.startswith(f"unchanged  {out}")
    assert not list(out.parent.glob(".*.tmp"))


def test_out_elsewhere_keeps_the_repository_paths(tmp_path: Path) -> None:
    team = repo(tmp_path, "ml")
    out = tmp_path / "ci" / "envbuild.gitlab-ci.yml"
    r = ci("--gitlab", "--file", str(team), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "envbuild team build --file ml/envbuild.toml" in out.read_text()
    assert not (tmp_path / OUT["gitlab"]).exists()


def test_the_out_path_is_printed_escaped(tmp_path: Path) -> None:
    team = repo(tmp_path)
    out = tmp_path / "ci\x1b[31m.yml"
    r = ci("--github", "--file", str(team), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and r.stdout.startswith(f"wrote  {tmp_path}/ci\\x1b[31m.yml ")
    assert out.is_file()


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
    r = ci(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: ") and says in r.stderr.splitlines()[0]
    assert r.stderr.splitlines()[1].startswith("hint: ") and len(r.stderr.splitlines()) == 2
    assert not (tmp_path / ".github").exists() and not (tmp_path / ".gitlab-ci.yml").exists()


def test_without_install_a_usage_error_whose_example_envbuild_accepts(tmp_path: Path) -> None:
    repo(tmp_path)
    r = run_cli("team", "ci", "--github", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    error, hint = r.stderr.splitlines()
    assert error == ("error: --install is required: the pipeline installs envbuild with pip, "
                     "and envbuild is not published on PyPI")
    example = re.search(r"e\.g\. (--install '[^']+')", hint)
    assert example is not None, hint
    argv = ["team", "ci", "--github", *shlex.split(example.group(1))]
    assert dry_parse(argv) == "team ci"
    r = run_cli(*argv, cwd=tmp_path)  # the example, as given, writes the pipeline
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / ".gitlab-ci.yml").exists()


@pytest.mark.parametrize(("spec", "says"), [
    ("envbuild==0.1.0; rm -rf ~", "not a requirement"),
    ("--index-url=https://evil.example/simple", "an option, not what to install"),
    ("git+https://tok:x@github.com/ORG/envbuild@v1", "no user, token or query in it"),
    ("https://example.com/envbuild-0.1.0-py3-none-any.whl?token=x", "no user, token or query"),
    ("git+ssh://git@github.com/ORG/envbuild", "https:// or git+https:// only"),
    ("envbuild @ file:///etc/passwd", "https:// or git+https:// only"),
    ("torch==2.5", "installs torch, not envbuild"),
    ("envbuild==$(id)", "a character the pipeline cannot quote safely"),
    ("${{ secrets.X }}", "a character the pipeline cannot quote safely"),
    ("../envbuild-0.1.0-py3-none-any.whl", "relative to the repository"),
])
def test_an_install_spec_pip_should_not_get_is_refused(tmp_path: Path, spec: str,
                                                       says: str) -> None:
    team = repo(tmp_path)
    r = run_cli("team", "ci", "--gitlab", "--file", str(team), "--install", spec)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: --install ") and says in r.stderr.splitlines()[0]
    assert len(r.stderr.splitlines()) == 2 and not (tmp_path / OUT["gitlab"]).exists()


def test_a_wheel_in_the_repository_is_installed_from_the_checkout(tmp_path: Path) -> None:
    team = repo(tmp_path)
    wheel = "dist/envbuild-0.1.0-py3-none-any.whl"
    r = run_cli("team", "ci", "--github", "--file", str(team), "--install", wheel)
    assert r.returncode == 0 and "not in the repository" in r.stderr  # not committed yet
    assert _install_lines(load(tmp_path / OUT["github"])) == [wheel] * 3
    (tmp_path / "dist").mkdir()
    shutil.copy(team, tmp_path / wheel)
    r = run_cli("team", "ci", "--github", "--file", str(team), "--install", wheel)
    assert r.returncode == 0 and r.stderr == ""


def test_an_image_without_a_registry_is_refused(tmp_path: Path) -> None:
    (tmp_path / "envbuild.toml").write_text('[image.cpu]\ntarget = "cpu"\n')
    r = ci("--github", cwd=tmp_path)
    assert r.returncode == 2 and "[image.cpu] has no registry" in r.stderr
    assert "hint: set registry in [defaults]" in r.stderr


def test_a_team_file_path_the_pipeline_cannot_name_is_refused(tmp_path: Path) -> None:
    team = repo(tmp_path, "my team")
    r = ci("--github", "--file", str(team))
    assert r.returncode == 2 and "the team file 'my team/envbuild.toml'" in r.stderr
