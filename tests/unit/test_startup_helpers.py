"""The start-up helpers of envbuild.common: lazyre (a regex compiled at its first use) and digest
(a small text's SHA-256 without OpenSSL)."""

from __future__ import annotations

import re

import pytest

from envbuild.common.lazyre import LazyPattern, lazy


def test_a_lazy_pattern_is_compiled_at_its_first_use_and_acts_as_the_compiled_one() -> None:
    rx = lazy(r"(?P<n>\d+)", re.ASCII)
    assert isinstance(rx, LazyPattern) and rx._compiled is None
    assert rx.search("ab 12")["n"] == "12"
    assert rx._compiled is not None and rx.pattern == r"(?P<n>\d+)" and rx.flags & re.ASCII
    assert rx.sub("#", "1 and 22") == "# and #"


def test_the_builtin_sha256_is_hashlibs() -> None:
    import hashlib

    from envbuild.common.digest import sha256_hex

    for data in (b"", b"abc", bytes(range(256)) * 33):
        assert sha256_hex(data) == hashlib.sha256(data).hexdigest()


def test_the_entry_point_turns_garbage_collection_back_on_before_the_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """envbuild/_start.py: collection is off while the CLI starts, on again when `started` is
    called (before the command runs), and a process that had it off keeps it off."""
    import gc

    import envbuild.cli
    from envbuild import _start

    seen: list[tuple[bool, object]] = []
    monkeypatch.setattr(envbuild.cli, "main",
                        lambda started=None: seen.append((gc.isenabled(), started)))
    try:
        gc.enable()
        _start.main()
        assert seen == [(False, gc.enable)]
        gc.disable()
        _start.main()
        assert seen[1] == (False, None)
    finally:
        gc.enable()


def test_run_calls_started_once_the_command_is_built(capsys: pytest.CaptureFixture[str]) -> None:
    from envbuild.cli import run

    calls: list[int] = []
    assert run(["matrix", "show", "torch"], started=lambda: calls.append(1)) == 0
    assert calls == [1] and capsys.readouterr().out
