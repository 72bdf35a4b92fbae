"""What `envbuild verify` reads from files the user names, as classes of hostile input: --key
(a PEM public key) and --lock (the team's envbuild.lock). Each file of any content or kind (a
device, a directory, a FIFO, a huge or deeply nested one, random bytes) is read bounded and is
a UsageError (one line, exit 2) or a value; a lock of any shape is judged without an exception
(its entries are checked, not trusted)."""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.features import attach, verify
from envbuild.features.lockfile import read_lock

DIGEST = "sha256:" + "ab" * 32
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
KINDS = ["/dev/zero", "/dev/null", "{dir}", "{fifo}", "{huge}", "{deep}", "{badutf8}"]


def _special(kind: str, tmp: Path) -> str:
    """The path of one kind of file that is no key and no lock (only that one is made)."""
    if kind == "{fifo}":
        os.mkfifo(tmp / "fifo")
    elif kind == "{huge}":
        (tmp / "huge").write_bytes(b"#" * (65 << 20))
    elif kind == "{deep}":
        (tmp / "deep").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    elif kind == "{badutf8}":
        (tmp / "badutf8").write_bytes(b"\xff\xfe[image]\n\x80\x81")
    return kind.format(dir=tmp, fifo=tmp / "fifo", huge=tmp / "huge", deep=tmp / "deep",
                       badutf8=tmp / "badutf8")


@pytest.mark.parametrize("kind", KINDS)
def test_a_key_or_lock_that_is_no_file_of_its_kind_is_one_usage_error(tmp_path: Path,
                                                                       kind: str) -> None:
    path = Path(_special(kind, tmp_path))
    for read in (attach.load_verifier, read_lock):
        with pytest.raises(UsageError) as refused:
            read(path)
        assert "\n" not in refused.value.message and len(refused.value.message) < 400


@SETTINGS
@given(data=st.binary(max_size=4096))
def test_any_bytes_as_a_key_are_refused_in_one_line(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "key.pem"
    path.write_bytes(data)
    with pytest.raises(UsageError) as refused:
        attach.load_verifier(path)
    assert "\n" not in refused.value.message


@SETTINGS
@given(text=st.text(string.printable, max_size=2000))
def test_any_text_as_a_lock_is_a_lock_or_one_usage_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "envbuild.lock"
    path.write_text(text)
    try:
        data = read_lock(path)
    except UsageError as exc:
        assert "\n" not in exc.message
        return
    assert data is None or isinstance(data, dict)


LEAF = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20),
                 st.just(DIGEST))
VALUES = st.recursive(LEAF, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(
        st.sampled_from(["digest", "packages", "signed_by", "platforms", "name", "version",
                         "linux/amd64", "a"]), kids, max_size=5)), max_leaves=30)


@SETTINGS
@given(lock=st.dictionaries(st.sampled_from(["image", "meta", "x"]), VALUES, max_size=3),
       named=st.booleans())
def test_a_lock_of_any_shape_is_judged_without_an_exception(lock: dict[str, Any],
                                                           named: bool) -> None:
    """What verify takes from a lock (the expected packages, the signer, the digests it lists)
    for any document a TOML file can hold."""
    expect = verify._expect(lock, DIGEST, named)
    assert expect.named == named
