"""Build logs: per user (XDG state dir, 0700), created exclusively, never through a symlink,
and redacted: a pre-planted symlink or another user's directory cannot capture a log."""

from __future__ import annotations

import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from envbuild.engine import build as build_mod
from envbuild.engine import docker
from envbuild.engine.build import BuildFailed
from tests.support import run_cli


def test_build_writes_its_log_per_user_redacted(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    """The whole build() path with a stand-in engine: where the log goes and what it holds."""
    ctx = tmp_path / "ctx"
    r = run_cli("render", "--target", "cpu", "--out", str(ctx))
    assert r.returncode == 0, r.stderr
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    monkeypatch.setattr(docker, "find_images", lambda labels: [])
    monkeypatch.setattr(docker, "find_builder", lambda: SimpleNamespace(reason="fake builder"))
    monkeypatch.setattr(docker, "build_argv",
                        lambda *a, **kw: ["docker", "build", "https://bob:SECRET@p.example/x"])

    def run_build(builder: object, argv: list[str], sink: object, timeout: float,
                  **kw: object) -> int:
        for line in ("#1 [1/2] FROM x", "#2 pip install --index-url https://bob:SECRET@h/s",
                     "#2 GET https://h/simple?token=SECRET", "#2 ERROR: failed"):
            sink(line)  # type: ignore[operator]
        return 1

    monkeypatch.setattr(docker, "run_build", run_build)
    before = set(Path("/tmp/envbuild-logs").glob("*")) if Path("/tmp/envbuild-logs").exists() \
        else set()
    with pytest.raises(BuildFailed) as info:
        build_mod.build(ctx)
    logs = list((state / "envbuild" / "logs").iterdir())
    assert len(logs) == 1
    text = logs[0].read_text()
    assert "fake builder" in text and "SECRET" not in text and "bob" not in text
    assert "SECRET" not in " ".join([info.value.message, *info.value.alternatives])
    assert stat.S_IMODE(logs[0].stat().st_mode) == 0o600
    after = set(Path("/tmp/envbuild-logs").glob("*")) if Path("/tmp/envbuild-logs").exists() \
        else set()
    assert after == before
