"""Hostile and careless input, class by class: URLs, credentials, package names, users, bases.

Each class is generated (parametrized products or hypothesis), not a single example; the CLI
tests prove the whole path: exit 2, a one-line error, nothing written, no secret echoed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envbuild.common.errors import EXIT_USAGE
from tests.support import run_cli

URL_FLAGS = ("--pip-index-url", "--torch-index-url", "--pip-extra-index-url")


def _cli_refuses(tmp_path: Path, *args: str, command: str = "render",
                 env: dict[str, str] | None = None) -> str:
    out = tmp_path / "out"
    extra = ["--out", str(out)] if command == "render" else []
    r = run_cli(command, "--target", "cpu", *args, *extra, env=env)
    assert r.returncode == EXIT_USAGE, (args, r.stderr)
    if "--json" in args:
        assert json.loads(r.stdout)["error"]["message"]
    else:
        assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert not out.exists()
    return r.stdout + r.stderr


@pytest.mark.parametrize("value", [
    "https://p.example/simple;touch${IFS}/tmp/pwned;", "https://p.example/simple\nRUN id",
    "https://p.example/simple?token=x", "https://p.exa\u00e9mple/", "https://p.example/'x'",
])
@pytest.mark.parametrize("flag", URL_FLAGS)
def test_cli_refuses_hostile_urls_and_writes_nothing(tmp_path: Path, flag: str,
                                                     value: str) -> None:
    _cli_refuses(tmp_path, flag, value)


@pytest.mark.parametrize(("command", "args"), [
    ("render", ["--pip-index-url", "ftp://bob:SECRET@p.example/simple"]),
    ("render", ["--torch-index-url", "ftp://bob:SECRET@p.example/whl/cpu"]),
    ("render", ["--pip-extra-index-url", "https://bob:SECRET@p.example/simple?x=1"]),
    ("render", ["--pip-index-url", "https://p.example/simple?token=SECRET"]),
    ("render", ["--pip-index-url", "https://bob:SECRET@p.example/" + "x" * 80 + ";"]),
    ("render", ["--pip-index-url", "https://bob:" + "SECRET" * 20 + "@p.example/;"]),
    ("render", ["--pip", "pkg @ https://bob:SECRET@p.example/pkg-1.0-py3-none-any.whl"]),
    ("render", ["--pip", "pkg @ https://bob:SECRET@p.example/pkg.whl", "--allow-url"]),
    ("render", ["--pip", "pkg @ https://p.example/pkg.whl?token=SECRET", "--allow-url"]),
    ("render", ["--pip", "pkg @ ftp://bob:SECRET@p.example/ x;y"]),
    ("render", ["--json", "--torch-index-url", "ftp://bob:SECRET@p.example/"]),
    ("make", ["--pip-index-url", "ftp://bob:SECRET@p.example/simple"]),
    ("make", ["--pip-extra-index-url", "https://bob:SECRET@p.example/simple#frag"]),
    ("make", ["--json", "--torch-index-url", "gopher://bob:SECRET@p.example/"]),
])
def test_errors_never_echo_credentials(tmp_path: Path, command: str, args: list[str]) -> None:
    text = _cli_refuses(tmp_path, *args, command=command,
                        env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert "SECRET" not in text and "bob" not in text


@pytest.mark.parametrize(("flag", "value", "words"), [
    ("--apt", "python3-", "remove"), ("--user", "nobody", "system account"),
    ("--user", "www-data", "system account"), ("--base-image", "scratch", "no shell"),
    ("--conda", "numpy>>=1.26", "MatchSpec"), ("--python", "3.１１", "--python"),
])
def test_cli_refuses_inputs_that_break_later(tmp_path: Path, flag: str, value: str,
                                             words: str) -> None:
    assert words in _cli_refuses(tmp_path, flag, value)


# ---- the CLI path: every user-controlled flag refuses injection payloads, writing nothing ----

CLI_PAYLOADS = ["x;touch /tmp/envbuild-pwned", "$(touch /tmp/envbuild-pwned)", "`id`", "a b'\"",
                "x|y&z>w\\é"]


@pytest.mark.parametrize("payload", CLI_PAYLOADS)
@pytest.mark.parametrize("flag", ["--user", "--base-image", "--python", "--apt",
                                  "--pip-index-url", "--torch-index-url"])
def test_cli_refuses_payloads_in_every_shell_bound_flag(tmp_path: Path, flag: str,
                                                       payload: str) -> None:
    value = f"https://p.example/{payload}" if "url" in flag else payload
    _cli_refuses(tmp_path, flag, value)
    assert not Path("/tmp/envbuild-pwned").exists()


def test_doctor_records_docker_host_without_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.doctor import probes

    monkeypatch.setenv("DOCKER_HOST", "tcp://bob:SECRET@127.0.0.1:9")
    facts = probes.collect()
    assert facts.env["DOCKER_HOST"] == "tcp://***@127.0.0.1:9"
    assert "SECRET" not in repr(facts)
