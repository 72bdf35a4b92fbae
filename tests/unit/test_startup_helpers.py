"""The start-up helpers of envbuild.common: lazyre (a regex compiled at its first use) and digest
(a small text's SHA-256 without OpenSSL)."""

from __future__ import annotations

import re

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
