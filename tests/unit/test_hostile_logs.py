"""Build logs: per user (XDG state dir, 0700), created exclusively, never through a symlink,
and redacted: a pre-planted symlink or another user's directory cannot capture a log."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from envbuild.common.errors import EnvironmentProblem
from envbuild.engine.build import default_log_dir, open_log


def test_default_log_dir_is_per_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_log_dir() == tmp_path / "state" / "envbuild" / "logs"
    for value in ("", "relative/state"):  # the spec says: ignore a relative XDG path
        monkeypatch.setenv("XDG_STATE_HOME", value)
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert default_log_dir() == tmp_path / "home" / ".local/state/envbuild/logs"
    assert not str(default_log_dir()).startswith("/tmp/envbuild-logs")


@pytest.mark.parametrize("existing_mode", [None, 0o755, 0o777, 0o700])
def test_log_dir_is_0700_and_file_0600(tmp_path: Path, existing_mode: int | None) -> None:
    d = tmp_path / "logs"
    if existing_mode is not None:
        d.mkdir()
        d.chmod(existing_mode)
    path, fh = open_log(d, "build-x")
    fh.close()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("kind", ["to-file", "dangling", "to-dir", "loop"])
def test_a_planted_symlink_is_never_followed(tmp_path: Path, kind: str) -> None:
    d = tmp_path / "logs"
    d.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    if kind == "to-file":
        victim.write_text("precious\n")
    elif kind == "to-dir":
        victim.mkdir()
    planted = [d / "build-x.log", d / "build-x-1.log"]
    for p in planted:
        os.symlink(p if kind == "loop" else victim, p)
    path, fh = open_log(d, "build-x")
    fh.write("log line\n")
    fh.close()
    assert path not in planted and not path.is_symlink() and path.read_text() == "log line\n"
    if kind == "to-file":
        assert victim.read_text() == "precious\n"
    elif kind == "dangling":
        assert not victim.exists()
    elif kind == "to-dir":
        assert list(victim.iterdir()) == []
    assert all(p.is_symlink() for p in planted)


def test_an_existing_log_is_never_overwritten(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    paths = []
    for _ in range(5):
        path, fh = open_log(d, "build-same-second")
        fh.write(str(path))
        fh.close()
        paths.append(path)
    assert len(set(paths)) == 5 and all(p.read_text() == str(p) for p in paths)


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to make a directory someone else's")
def test_another_users_log_dir_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "logs"
    d.mkdir(mode=0o777)
    os.chown(d, 65534, 65534)
    with pytest.raises(EnvironmentProblem, match="not a directory of this user's"):
        open_log(d, "build-x")
    assert list(d.iterdir()) == []


def test_log_dir_that_is_a_file_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("not a dir")
    with pytest.raises(EnvironmentProblem):
        open_log(tmp_path / "state" / "logs", "build-x")
