"""`--python-source standalone` from the CLI, no Docker: the refusals and the rendered context.
The builds, and what the stand-in proves: tests/integration/test_standalone.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from envbuild.engine import build as build_mod
from envbuild.engine import docker as engine
from envbuild.engine.build import ENV_BUILD_ARGS, BuildFailed
from tests.support import run_cli
from tests.support.docker_helpers import BASE


def _render(out: Path) -> None:
    r = run_cli("render", "--target", "cpu", "--torch", "2.13.0", "--python", "3.11", "--os",
                "debian12", "--python-source", "standalone", "--without", "torchvision",
                "--without", "torchaudio", "--base-image", BASE, "--out", str(out))
    assert r.returncode == 0, r.stderr


def test_build_passes_names_only_values_in_client_env(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The value travels in the docker client's environment, never on its command line; the
    build log shows it redacted."""
    ctx = tmp_path / "ctx"
    _render(ctx)
    seen: dict[str, Any] = {}

    def run_build(builder: engine.Builder, argv: list[str], on_line: Any, timeout: float,
                  extra_env: dict[str, str] | None = None) -> int:
        seen.update(argv=argv, env=dict(extra_env or {}))
        return 1

    monkeypatch.setattr(engine, "find_builder",
                        lambda: engine.Builder("/usr/bin/docker", False, "20.10", "test"))
    monkeypatch.setattr(engine, "run_build", run_build)
    url = "https://bob:S3CRETtok@pbs.corp/downloads.json"
    with pytest.raises(BuildFailed) as e:
        build_mod.build(ctx, rebuild=True, log_dir=tmp_path / "logs",
                        env={"UV_PYTHON_DOWNLOADS_JSON_URL": url, "PATH": "/bin"})
    argv = seen["argv"]
    pairs = [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"]
    assert pairs == ["UV_PYTHON_DOWNLOADS_JSON_URL"]
    assert "S3CRETtok" not in " ".join(argv)
    assert seen["env"] == {"UV_PYTHON_DOWNLOADS_JSON_URL": url}
    log = "".join(p.read_text() for p in (tmp_path / "logs").iterdir())
    assert "# UV_PYTHON_DOWNLOADS_JSON_URL=https://***@pbs.corp/downloads.json" in log
    assert "S3CRETtok" not in log + str(e.value)


@pytest.mark.parametrize("name", ENV_BUILD_ARGS)
def test_cli_bad_value_exit_2_before_any_build(name: str, tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    _render(ctx)
    r = run_cli("build", str(ctx), env={name: "https://bob:S3CRETtok@pbs corp/x"})
    assert r.returncode == 2 and r.stderr.startswith("error: "), r.stderr
    assert "hint:" in r.stderr and "Traceback" not in r.stderr
    assert "S3CRETtok" not in r.stderr + r.stdout


def test_stage_installs_then_links_only_a_managed_python(tmp_path: Path) -> None:
    """The OS's own Python of the same X.Y (in the bootstrap stage for the venv uv runs from)
    is never what /opt/python/X.Y points at: it is absent from the final image."""
    _render(tmp_path / "ctx")
    text = (tmp_path / "ctx" / "Dockerfile").read_text()
    stage = text.split("\nFROM ", 2)[1]
    assert "ARG UV_PYTHON_INSTALL_MIRROR\nARG UV_PYTHON_DOWNLOADS_JSON_URL\n" in stage
    assert "uv python find --managed-python 3.11" in stage
    assert 'ln -s "${py%/bin/*}" /opt/python/3.11' in stage
    # the venv is made from a bin/ inside the installation (its stdlib is found from `home`)
    assert "/opt/python/3.11/bin/python3.11 -m venv /opt/venv" in text
    assert "UV_PYTHON" not in text.split("\nFROM ", 2)[2]  # nothing of it in the final stage
