"""`--junit FILE` through the real CLI: the file parses and holds the same checks, failures and
skips as --json of the same run; it is written when checks fail (the exit code unchanged) and
when the run stops on an error; a FILE that is a directory or a special file is refused before
anything runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support import run_cli
from tests.support.cluster import ar_line, node_line
from tests.support.junit import (
    assert_matches_cluster,
    assert_matches_report,
    assert_matches_team,
    cases,
    read,
)


def test_validate_host_junit_counts_what_json_counts(tmp_path: Path) -> None:
    """A CUDA spec on this CPU host: passes, failures (CPU torch), skips and GPU checks not
    run, all in one run."""
    pytest.importorskip("torch")
    spec = tmp_path / "spec.json"
    r = run_cli("resolve", "--cuda", "12.8", "--json")
    assert r.returncode == 0, r.stderr
    spec.write_text(r.stdout)
    junit = tmp_path / "reports" / "validate.xml"  # its directory is made
    r = run_cli("validate", "--host", "--spec", str(spec), "--json", "--junit", str(junit))
    assert r.returncode == 1, r.stderr  # the CPU torch fails the CUDA spec: exit code unchanged
    report = json.loads(r.stdout)
    s = report["summary"]
    assert s["pass"] and s["fail"] and s["skip"] and s["not_run"]
    root = read(junit)
    (suite,) = root
    assert_matches_report(suite, report)
    assert suite.get("time") == f"{report['duration_s']:.3f}"
    assert not list(junit.parent.glob(".*.tmp"))


@pytest.mark.parametrize("argv", [
    ["validate", "--host"], ["validate", "some/image:1"],
    ["cluster", "validate", "--slurm", "img:1"], ["cluster", "collect", "-"],
    ["team", "check"]])
@pytest.mark.parametrize("where", ["dir", "device"])
def test_a_junit_file_that_is_a_directory_or_device_is_refused_first(
        tmp_path: Path, argv: list[str], where: str) -> None:
    junit = str(tmp_path) if where == "dir" else "/dev/null"
    t0 = time.monotonic()
    r = run_cli(*argv, "--junit", junit, cwd=tmp_path, timeout=60,
                env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock", "PATH": "/nonexistent"})
    assert r.returncode == 2, (r.stdout, r.stderr)
    kind = "a directory" if where == "dir" else "a character device"
    assert r.stderr.startswith(f"error: --junit {junit}: is {kind}, not a file\nhint: ")
    assert len(r.stderr.splitlines()) == 2 and "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 30  # nothing ran


def test_validate_without_an_engine_writes_the_error(tmp_path: Path) -> None:
    junit = tmp_path / "v.xml"
    r = run_cli("validate", "envbuild-test/none:1", "--junit", str(junit),
                env={"DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock",
                     "XDG_STATE_HOME": str(tmp_path / "state")})
    assert r.returncode == 3, (r.stdout, r.stderr)
    root = read(junit)
    assert [cases(s) for s in root] == [[("envbuild.run", "error")]]
    error = root.find("testsuite/testcase/error")
    assert error is not None and r.stderr.startswith(f"error: {error.get('message')}")


def test_team_check_without_a_lock_writes_the_error(tmp_path: Path) -> None:
    junit = tmp_path / "team.xml"
    r = run_cli("team", "check", "--file", str(tmp_path / "envbuild.toml"), "--junit", str(junit))
    assert r.returncode == 2 and r.stderr.startswith("error: no lock file")
    assert [cases(s) for s in read(junit)] == [[("envbuild.run", "error")]]


def test_team_check_of_a_lock_without_digests_counts_what_json_counts(tmp_path: Path) -> None:
    """Images built without --push: each fails `present`, its report is not run; a base pinned
    by digest is skipped. No registry is asked."""
    (tmp_path / "envbuild.lock").write_text(
        'format = 1\n[image.cpu]\ntag = "team/cpu:1"\ndigest = ""\nbase_image = '
        f'"debian@sha256:{"a" * 64}"\n[image.gpu]\ntag = "team/gpu:1"\ndigest = ""\n')
    junit = tmp_path / "team.xml"
    r = run_cli("team", "check", "--file", str(tmp_path / "envbuild.toml"), "--json",
                "--junit", str(junit))
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert_matches_team(read(junit), data)
    assert [c["status"] for c in data["checks"]] == ["fail", "not_run", "skip"] * 2


def test_cluster_collect_junit_counts_what_json_counts(tmp_path: Path) -> None:
    """Recorded H100 reports: a healthy node, a node with a failed check, a node that reported
    another torch (drift), a missing one."""
    fail = node_line("gpu2")
    fail["report"]["checks"][0]["status"] = "fail"
    fail["report"]["summary"].update(status="fail", fail=1,
                                     **{"pass": fail["report"]["summary"]["pass"] - 1})
    lines = [node_line("gpu1"), fail, node_line("gpu3", torch="2.12.0+cu130"),
             *(ar_line(r, 4) for r in range(3))]
    log = tmp_path / "task.log"
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    junit = tmp_path / "cluster.xml"
    r = run_cli("cluster", "collect", str(log), "--nodes", "gpu[1-4]", "--world-size", "4",
                "--json", "--junit", str(junit))
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["drift"] and {n["status"] for n in data["nodes"]} == {"pass", "fail", "missing"}
    root = read(junit)
    assert_matches_cluster(root, data)
    assert [s.get("hostname") for s in root][:4] == ["gpu1", "gpu2", "gpu3", "gpu4"]


@pytest.mark.parametrize("argv", [
    ["team", "check", "--junit", "envbuild.lock"],
    ["team", "check", "--junit", "envbuild.toml"],
    ["team", "check", "--file", "ml/envbuild.toml", "--junit", "ml/../ml/envbuild.lock"],
    ["validate", "--host", "--spec", "s.json", "--junit", "s.json"],
    ["cluster", "collect", "task.log", "--junit", "./task.log"],
])
def test_a_junit_file_that_is_the_command_s_input_is_refused(tmp_path: Path,
                                                             argv: list[str]) -> None:
    (tmp_path / "ml").mkdir()
    files = {"envbuild.lock": "format = 1\n", "envbuild.toml": "[image.a]\n",
             "ml/envbuild.lock": "format = 1\n", "s.json": "{}", "task.log": "{}\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    r = run_cli(*argv, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith(f"error: --junit {Path(argv[-1])} is the command's own input ")
    assert len(r.stderr.splitlines()) == 2 and r.stderr.splitlines()[1].startswith("hint: ")
    assert {n: (tmp_path / n).read_text() for n in files} == files  # nothing replaced


def test_a_symlink_junit_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "envbuild.lock").write_text("format = 1\n")
    (tmp_path / "report.xml").symlink_to("envbuild.lock")
    r = run_cli("team", "check", "--junit", "report.xml", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: --junit report.xml: is a symlink")
    assert (tmp_path / "report.xml").is_symlink()
    assert (tmp_path / "envbuild.lock").read_text() == "format = 1\n"


def test_a_junit_file_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    """No lock here: the run would stop on that error; the unwritable --junit comes first."""
    r = run_cli("team", "check", "--junit", "/proc/self/status", cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stderr.startswith("error: --junit /proc/self/status: cannot create a file in "
                               "/proc/self: ")
    assert "no lock file" not in r.stderr


def test_an_error_before_the_run_leaves_no_stale_junit_file(tmp_path: Path) -> None:
    old = tmp_path / "v.xml"
    old.write_text('<testsuites tests="1" failures="0" errors="0" skipped="0"/>')
    r = run_cli("validate", "some/image:1", "--from-registry", "reg.example/a:1", "--junit",
                str(old), cwd=tmp_path)
    assert r.returncode == 2 and "--from-registry takes the image itself" in r.stderr
    assert not old.exists()  # CI finds no report, never the last run's passing one
