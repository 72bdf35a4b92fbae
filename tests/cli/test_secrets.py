"""Secrets through the CLI (issue #20, class 3): the generated URLs of
tests/unit/test_secrets.py given to the commands that print, log or
write them: no login or token shows."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.support import run_cli
from tests.support.secrets import leaks, urls

# -- the issue's own examples, as a user runs them (a separate process) -------------------------

@pytest.mark.parametrize(("args", "secret"), [
    (["--conda", "https://user:ZqSecret1@host.example/chan::numpy"], "ZqSecret1"),
    (["--pip-index-url", "user:ZqPW1234@host.example/simple"], "ZqPW1234"),
    (["--pip-index-url", "https://user:ZqPass1 ZqTail99@host.example/simple"], "ZqTail99"),
    (["--pip-index-url", "https://user:ZqPass1 ZqTail99@host.example/simple"], "ZqPass1"),
    (["--pip-index-url", "https://ZqTok/en99@host.example/simple"], "ZqTok"),
    (["--pip-index-url", "https://ZqTok/en99@host.example/simple"], "en99"),
])
def test_issue_examples(tmp_path: Path, args: list[str], secret: str) -> None:
    out = tmp_path / "out"
    r = run_cli("render", "--target", "cpu", *args, "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and "\nhint: " in r.stderr
    assert secret not in r.stdout + r.stderr
    assert not out.exists()


def test_a_conda_login_is_refused_with_the_safe_way(tmp_path: Path) -> None:
    r = run_cli("render", "--target", "cpu", "--conda",
                "https://user:ZqSecret1@host.example/chan::numpy", "--out", str(tmp_path / "o"))
    assert r.returncode == 2
    assert "environment.yml" in r.stderr and "~/.condarc" in r.stderr
    assert "https://***@host.example/chan::numpy" in r.stderr


# -- every entry point, through the real CLI (in process: many examples) -----------------------

NO_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/envbuild-test.sock",
             "ENVBUILD_DOCKER": "/nonexistent/docker"}


def _cli(argv: list[str]) -> tuple[int, str]:
    """envbuild argv in this process, without a Docker engine: (exit code, stdout + stderr)."""
    from envbuild.cli import run

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.dict(os.environ, NO_ENGINE), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        try:
            rc = run(argv)
        except SystemExit as exc:  # pragma: no cover - run() turns errors into codes
            rc = int(exc.code or 0)
    return rc, out.getvalue() + err.getvalue()


def _files(root: Path) -> str:
    """Every file envbuild wrote under root (not the team file the test wrote)."""
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*"))
                     if p.is_file() and p.name not in ("validator.pyz", "envbuild.toml"))


def _team_file(root: Path, key: str, value: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "envbuild.toml"
    listed = key in ("pip", "conda", "pip_extra_index_url")
    field = f"{key} = {json.dumps([value] if listed else value)}"  # JSON strings are TOML's
    path.write_text(f'[defaults]\ntarget = "cpu"\nos = "debian12"\n\n[image.app]\n{field}\n',
                    encoding="utf-8")
    return path


# (command, how the URL is given): each a place a user can hand envbuild a URL
ENTRIES = [
    ("render", "--pip-index-url"), ("render", "--torch-index-url"),
    ("render", "--pip-extra-index-url"), ("render", "--conda"), ("render", "--pip @"),
    ("render", "--pip --extra-index-url="), ("render", "--pip -i"),
    ("render", "--json --pip-index-url"), ("make", "--pip-index-url"),
    ("make", "--torch-index-url"), ("make", "--proxy"), ("team", "pip_index_url"),
    ("team", "torch_index_url"), ("team", "pip_extra_index_url"), ("team", "conda"),
    ("team", "pip"),
]


def _argv(command: str, how: str, url: str, root: Path) -> list[str]:
    out = ["--out", str(root / "out")]
    base = ["--target", "cpu", "--os", "debian12", "--torch", "2.13.0", "--pip", "six==1.16.0"]
    if command == "team":
        key = how
        value = f"{url}::numpy" if key == "conda" else f"pkg @ {url}" if key == "pip" else url
        return ["team", "plan", "--file", str(_team_file(root, key, value))]
    flag, _, form = how.partition(" ")
    if flag == "--json":
        return [command, "--json", *base, form, url, *out]
    value = {"--conda": f"{url}::numpy", "--pip": {"@": f"pkg @ {url}", "-i": f"-i {url}",
                                                   "--extra-index-url=": f"--extra-index-url={url}"
                                                   }.get(form, url)}.get(flag, url)
    extra = ["--allow-url"] if form == "@" else []
    if command == "make":
        extra += ["--no-validate"]
    return [command, *base, flag, value, *extra, *out]


@given(url=urls(), entry=st.sampled_from(ENTRIES))
# found by this test: rattler's error quoted '<user>@<part of the password>' of a --conda value
@example(url=("ZqBkj3b@ZqCg5FP#ZqEegoW@pypi.example.com/simple",
              ["ZqBkj3b", "ZqCg5FP", "ZqEegoW"]), entry=("render", "--conda"))
@settings(max_examples=250, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
def test_no_entry_point_shows_a_secret(url: tuple[str, list[str]],
                                       entry: tuple[str, str]) -> None:
    value, chunks = url
    with tempfile.TemporaryDirectory(prefix="envbuild-secrets-") as tmp:
        root = Path(tmp)
        argv = _argv(*entry, value, root)
        rc, output = _cli(argv)
        event(f"exit {rc}")  # --hypothesis-show-statistics: refused (2), rendered (0), ...
        assert "Traceback" not in output, output
        assert rc in (0, 1, 2, 3), (rc, output)
        found = leaks(chunks, output, _files(root))
        assert not found, (argv, rc, output)


def test_entries_reach_their_surfaces(tmp_path: Path) -> None:
    """The property above is not vacuous: a clean URL renders, and a login one renders too
    (into a build secret), for every flag that takes an index URL; the login one through a
    team file too; a --conda login is refused."""
    for flag in ("--pip-index-url", "--torch-index-url", "--pip-extra-index-url"):
        for i, url in enumerate(("https://p.example.com/whl/cpu",
                                 "https://alice:ZqSecret1@p.example.com/whl/cpu")):
            root = tmp_path / f"{flag}-{i}"
            rc, output = _cli(_argv("render", flag, url, root))
            assert rc == 0, output
            files = _files(root / "out")
            assert "https://p.example.com/whl/cpu" in files
            assert not leaks(["ZqSecret1"], output, files)
    rc, output = _cli(_argv("team", "pip_index_url",
                            "https://alice:ZqSecret1@p.example.com/whl/cpu", tmp_path / "team"))
    assert rc == 0, output
    rc, output = _cli(_argv("render", "--conda", "https://alice:ZqSecret1@h.example/chan",
                            tmp_path / "conda"))
    assert rc == 2 and "login" in output and "ZqSecret1" not in output
