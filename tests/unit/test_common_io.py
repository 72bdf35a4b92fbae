"""The I/O helpers that have one home in envbuild/common: atomic writes (files), the zip reader
of wheels (wheelzip), PEP 503 links (simpleindex) and the TOML writer (tomlwrite)."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import struct
import tomllib
import zipfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common import simpleindex, stabledir, tomlwrite, wheelzip
from envbuild.common.files import atomic_file, write_atomic
from envbuild.common.stabledir import stable_dir


def test_write_atomic_writes_and_keeps_the_mode(tmp_path: Path) -> None:
    p = tmp_path / "f.txt"
    write_atomic(p, "één\n")
    assert p.read_text(encoding="utf-8") == "één\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o644
    p.chmod(0o600)
    write_atomic(p, b"new")
    assert p.read_bytes() == b"new" and stat.S_IMODE(p.stat().st_mode) == 0o600
    write_atomic(p, "x", 0o640)
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    p = tmp_path / "f.txt"
    p.write_text("old")
    with pytest.raises(RuntimeError), atomic_file(p) as fh:
        fh.write(b"half")
        raise RuntimeError("interrupted")
    assert p.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["f.txt"]


def _zip(members: dict[str, bytes], zip64: bool) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    raw = buf.getvalue()
    if not zip64:
        return raw
    # as an archive past 4 GiB ends: a zip64 end record and its locator before the end record,
    # whose 32-bit size and offset are full
    at = raw.rfind(b"PK\x05\x06")
    n, cd_size, cd_offset = struct.unpack_from("<HII", raw, at + 10)
    rec = b"PK\x06\x06" + struct.pack("<QHHIIQQQQ", 44, 45, 45, 0, 0, n, n, cd_size, cd_offset)
    loc = b"PK\x06\x07" + struct.pack("<IQI", 0, at, 1)
    end = raw[at:at + 12] + b"\xff" * 8 + raw[at + 20:]
    return raw[:at] + rec + loc + end


def test_zip64_extra_fields_hold_the_full_ones() -> None:
    name = b"big.bin"
    extra = struct.pack("<HHQQQ", 1, 24, 5 << 32, 4 << 32, 3 << 32)
    cd = (b"PK\x01\x02" + struct.pack("<HHHHHHIIIHHHHHII", 45, 45, 0, 8, 0, 0, 0, 0xFFFFFFFF,
                                       0xFFFFFFFF, len(name), len(extra), 0, 0, 0, 0,
                                       0xFFFFFFFF) + name + extra)
    (e,) = wheelzip.entries(cd)
    assert (e.name, e.method, e.uncompressed, e.compressed, e.offset) == (
        name, 8, 5 << 32, 4 << 32, 3 << 32)


_members = st.dictionaries(st.from_regex(r"[a-z]{1,8}(/[a-z]{1,8})?\.(py|txt)", fullmatch=True),
                           st.binary(max_size=200), min_size=1, max_size=5)


@settings(max_examples=40, deadline=None)
@given(members=_members, zip64=st.booleans(), cut=st.integers(0, 64))
def test_the_zip_reader_reads_what_zipfile_wrote(members: dict[str, bytes], zip64: bool,
                                                 cut: int) -> None:
    raw = _zip(members, zip64)
    start = min(cut, len(raw))
    offset, size = wheelzip.directory_span(raw[start:], start)
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        assert offset == zf.start_dir
        infos = {i.filename: i for i in zf.infolist()}
    got = {e.name.decode(): e for e in wheelzip.entries(raw[offset:offset + size])}
    assert set(got) == set(members)
    for name, e in got.items():
        assert e.uncompressed == len(members[name]) == infos[name].file_size
        assert e.offset == infos[name].header_offset
        assert wheelzip.member(raw[e.offset:], e.compressed, e.method) == members[name]


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=200), start=st.integers(-10, 10**6))
def test_the_zip_reader_refuses_garbage_cleanly(data: bytes, start: int) -> None:
    for blob in (data, b"PK\x06\x07" + data + b"PK\x05\x06" + b"\xff" * 18,
                 b"PK\x05\x06" + data):
        with contextlib.suppress(ValueError):
            wheelzip.directory_span(blob, start)
        list(wheelzip.entries(b"PK\x01\x02" + data))
        out = wheelzip.member(b"PK\x03\x04" + data, len(data), 8)
        assert out is None or isinstance(out, bytes)


def test_simple_index_links() -> None:
    html = ('<html><body><a href="../../packages/torch-2.9.1%2Bcu128-cp312-cp312-'
            'manylinux_2_28_x86_64.whl#sha256=ab" data-requires-python="&gt;=3.10" '
            'data-yanked="">torch-2.9.1+cu128-cp312-cp312-manylinux_2_28_x86_64.whl</a>'
            '<a>no href</a></body></html>')
    (link,) = simpleindex.links(html, "https://idx.example.com/simple/torch/")
    assert link.filename == "torch-2.9.1+cu128-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert link.url == ("https://idx.example.com/packages/torch-2.9.1%2Bcu128-cp312-cp312-"
                        "manylinux_2_28_x86_64.whl")
    assert link.attrs["data-requires-python"] == ">=3.10" and "data-yanked" in link.attrs


_scalars = st.one_of(st.booleans(), st.integers(-10**12, 10**12),
                     st.text(st.characters(exclude_categories=("Cs",)), max_size=20))
_values = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)


@settings(max_examples=150, deadline=None)
@given(k=st.text(min_size=1, max_size=8), v=_values, multiline=st.booleans())
def test_toml_values_read_back(k: str, v: object, multiline: bool) -> None:
    text = f"{tomlwrite.key(k)} = {tomlwrite.value(v, multiline)}\n"
    assert tomllib.loads(text) == {k: v}


# -- stabledir: the build context's directory at one path, one process at a time ---------------

def _dead_pid() -> int:
    """A pid no process has: above the kernel's pid_max."""
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1
    except OSError:
        return 2**22 + 1


def test_stable_dir_is_the_same_path_each_time_and_removed_after(tmp_path: Path) -> None:
    seen = []
    for _ in range(3):
        with stable_dir(tmp_path, "envbuild-ctx-", "abc123") as d:
            (d / "context").mkdir()
            seen.append(d)
    assert seen == [tmp_path / "envbuild-ctx-abc123"] * 3
    assert list(tmp_path.iterdir()) == []


def test_a_held_stable_dir_gives_the_second_taker_a_fresh_one(tmp_path: Path) -> None:
    with stable_dir(tmp_path, "envbuild-ctx-", "k1") as first:
        with stable_dir(tmp_path, "envbuild-ctx-", "k1") as second:
            assert first == tmp_path / "envbuild-ctx-k1"
            assert second != first and second.name.startswith("envbuild-ctx-")
            assert (first / stabledir.OWNER).read_text() == str(os.getpid())
        assert first.is_dir() and not second.exists()  # the second leaves the first alone
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("owner", ["dead", "garbage", "-5", "0"])
def test_a_stable_dir_left_by_a_killed_run_is_taken_over(tmp_path: Path, owner: str) -> None:
    stale = tmp_path / "envbuild-ctx-k2"
    (stale / "context").mkdir(parents=True)
    (stale / "context" / "old.whl").write_bytes(b"x")
    (stale / stabledir.OWNER).write_text(str(_dead_pid()) if owner == "dead" else owner)
    with stable_dir(tmp_path, "envbuild-ctx-", "k2") as d:
        assert d == stale and not (d / "context").exists()
    assert list(tmp_path.iterdir()) == []


def test_a_stable_dir_held_by_a_live_process_is_left_alone(tmp_path: Path) -> None:
    held = tmp_path / "envbuild-ctx-k3"
    held.mkdir()
    (held / stabledir.OWNER).write_text("1")  # init: always alive
    (held / "keep").write_text("theirs")
    with stable_dir(tmp_path, "envbuild-ctx-", "k3") as d:
        assert d != held
    assert (held / "keep").read_text() == "theirs"


def test_a_file_or_link_in_the_way_is_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("mine")
    (tmp_path / "envbuild-ctx-k4").symlink_to(target)
    (tmp_path / "envbuild-ctx-k5").write_text("a file")
    for key in ("k4", "k5"):
        with stable_dir(tmp_path, "envbuild-ctx-", key) as d:
            assert d.name != f"envbuild-ctx-{key}" and d.is_dir()
    assert (target / "precious").read_text() == "mine"
    assert (tmp_path / "envbuild-ctx-k5").read_text() == "a file"


def test_the_stable_dir_goes_on_errors_and_ctrl_c(tmp_path: Path) -> None:
    for exc in (RuntimeError("boom"), KeyboardInterrupt()):
        with pytest.raises(type(exc)), stable_dir(tmp_path, "envbuild-ctx-", "k6") as d:
            (d / "context").mkdir()
            raise exc
        assert list(tmp_path.iterdir()) == []


@given(st.text(max_size=20))
def test_a_key_that_is_not_alphanumeric_is_refused(key: str) -> None:
    if key and key.isascii() and key.isalnum():
        return
    with pytest.raises(ValueError), stable_dir(Path("/nonexistent"), "envbuild-ctx-", key):
        pass


def test_make_writes_a_wheelhouse_context_at_one_path_per_wheelhouse(tmp_path: Path) -> None:
    """What lets BuildKit send only what changed: two builds from one wheelhouse use one path,
    another wheelhouse another; without a wheelhouse, a fresh temporary directory."""
    from envbuild.features.make import context_dir

    a, b = tmp_path / "a" / "wheels", tmp_path / "b" / "wheels"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    seen = []
    for wheelhouse in (a, a, b):
        with context_dir(wheelhouse) as d:
            assert d.parent == wheelhouse.parent and d.name.startswith("envbuild-ctx-")
            seen.append(d)
        assert not d.exists()
    assert seen[0] == seen[1] != seen[2]
    with context_dir(None) as t1, context_dir(None) as t2:
        assert t1 != t2 and t1.name.startswith("envbuild-ctx-")


@pytest.mark.parametrize("owner", ["fifo", "dev-zero", "dir", "link", "missing", "empty"])
def test_an_odd_owner_file_is_never_read_and_the_dir_is_left_alone(tmp_path: Path,
                                                                    owner: str) -> None:
    held = tmp_path / "envbuild-ctx-k7"
    held.mkdir()
    pid = held / stabledir.OWNER
    if owner == "fifo":
        os.mkfifo(pid)
    elif owner == "dev-zero":
        pid.symlink_to("/dev/zero")
    elif owner == "dir":
        pid.mkdir()
    elif owner == "empty":  # a maker between mkdir and its owner file: not taken over
        pid.write_text("")
    elif owner == "missing":
        pass
    else:
        (tmp_path / "elsewhere").write_text(str(_dead_pid()))
        pid.symlink_to(tmp_path / "elsewhere")
    with stable_dir(tmp_path, "envbuild-ctx-", "k7") as d:
        assert d != held
    assert held.is_dir()
