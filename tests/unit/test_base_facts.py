"""An inspected --base-image (pure): the probe's output parsed, the OS matched against
os.toml's os_release, and the resolver rendering for the real base (the engine side runs in
tests/integration/test_cuda_image.py and test_bases.py)."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envbuild.common.errors import ConflictError, UsageError
from envbuild.core.base_facts import BaseFacts, check, glibc_ok, match_os, os_release, parse
from envbuild.core.candidate import wheel_glibc
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix

DEBIAN = """@@python=3.11
@@glibc=glibc 2.36
@@uid1000=
@@gid1000=
@@bash=/usr/bin/bash
@@pm=/usr/bin/apt-get
PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
ID=debian
"""
NVIDIA_ENV = {"CUDA_VERSION": "13.0.2", "NVIDIA_REQUIRE_CUDA":
              "cuda>=13.0 brand=unknown,driver>=535,driver<536"}


def _facts(m: Matrix, output: str = DEBIAN, env: dict[str, str] | None = None) -> BaseFacts:
    return parse("local/debian:bookworm", "sha256:" + "a" * 64, output, env or {}, m)


def test_parse_debian(matrix: Matrix) -> None:
    f = _facts(matrix)
    assert (f.os_id, f.python, f.glibc, f.package_manager, f.bash) == \
        ("debian12", "3.11", "2.36", "apt", True)
    assert not f.nvidia and f.require_cuda == "" and f.uid_1000 == ""


def test_every_os_row_is_recognised_from_its_os_release(matrix: Matrix) -> None:
    for o in matrix.oses:
        ident, version = o.os_release
        for v in (version, f"{version}.4") if "." not in version else (version,):
            text = f'ID={ident}\nVERSION_ID="{v}"\n'
            assert match_os(os_release(text), matrix) == o, (o.id, text)


@given(ident=st.from_regex(r"[a-z]{2,10}", fullmatch=True),
       version=st.from_regex(r"[0-9]{1,2}(\.[0-9]{1,2})?", fullmatch=True))
def test_unknown_oses_are_refused_with_a_hint(ident: str, version: str) -> None:
    from envbuild.matrix import load

    m = load()
    text = f"@@bash=/bin/bash\nID={ident}\nVERSION_ID={version}\n"
    f = parse("x/y:z", "sha256:" + "b" * 64, text, {}, m)
    if f.os_id is None:
        with pytest.raises(UsageError) as info:
            check(f, None, m)
        assert f"{ident} {version}" in info.value.message and info.value.hint


def test_no_bash_and_contradicting_os_are_refused(matrix: Matrix) -> None:
    with pytest.raises(UsageError, match="no bash"):
        check(_facts(matrix, DEBIAN.replace("@@bash=/usr/bin/bash", "@@bash=")), None, matrix)
    with pytest.raises(UsageError) as info:
        check(_facts(matrix), "ubuntu24.04", matrix)
    assert "give --os debian12" in info.value.hint


def test_nvidia_base_is_told_by_its_environment(matrix: Matrix) -> None:
    f = _facts(matrix, env=NVIDIA_ENV)
    assert f.nvidia and (f.cuda_version, f.require_cuda) == ("13.0.2", "13.0")
    s = resolve(Request(torch="2.13.0", base=f), matrix)
    assert (s.target, s.os, s.base_image, s.cuda_image) == \
        ("cuda", "debian12", "local/debian:bookworm", "13.0.2")
    assert s.require_cuda is None and s.base_id == f.image_id
    # the base's CUDA major rules the wheel: torch 2.5 has no CUDA 13 wheel
    with pytest.raises(ConflictError):
        resolve(Request(torch="2.5.1", base=f), matrix)


def test_plain_base_gets_require_cuda_and_its_own_ref(matrix: Matrix) -> None:
    s = resolve(Request(target="cuda", torch="2.13.0", base=_facts(matrix)), matrix)
    assert (s.os, s.base_image, s.require_cuda, s.cuda_image) == \
        ("debian12", "local/debian:bookworm", "13.0", None)
    assert any("inspected" in line for line in s.trace)
    cpu = resolve(Request(target="cpu", torch="2.13.0", base=_facts(matrix)), matrix)
    assert (cpu.os, cpu.base_image, cpu.base_id) == ("debian12", "local/debian:bookworm",
                                                     "sha256:" + "a" * 64)


@given(minor=st.integers(min_value=0, max_value=40))
def test_old_glibc_is_refused_naming_both(minor: int) -> None:
    from envbuild.matrix import load

    m = load()
    f = dataclasses.replace(_facts(m), glibc=f"2.{minor}")
    need = wheel_glibc(m, "2.13")
    assert need == "2.28"
    if glibc_ok(f.glibc, need):
        resolve(Request(target="cpu", torch="2.13.0", base=f), m)
    else:
        with pytest.raises(ConflictError) as info:
            resolve(Request(target="cpu", torch="2.13.0", base=f), m)
        assert f"glibc 2.{minor}" in info.value.message and "2.28" in info.value.message


def test_unknown_glibc_is_left_to_pip() -> None:
    assert glibc_ok("", "2.28") and glibc_ok("2.28", "2.28") and not glibc_ok("2.17", "2.28")


@given(junk=st.text(min_size=1, max_size=40))
def test_what_a_base_reports_never_reaches_a_message_raw(junk: str) -> None:
    """os-release values, user names and the NVIDIA environment are the base author's text:
    non-ASCII digits are no version, control characters never reach a message or the spec."""
    from envbuild.matrix import load

    m = load()
    out = (f"@@python=3.1{junk}\n@@glibc=glibc 2.{junk}\n@@uid1000={junk}\n@@bash=/bin/bash\n"
           f"ID=debian{junk}\nVERSION_ID=\"12{junk}\"\n")
    env = {"CUDA_VERSION": f"1{junk}", "NVIDIA_REQUIRE_CUDA": f"cuda>=1{junk}"}
    f = parse("x/y:z", "sha256:" + "c" * 64, out, env, m)
    for value in (f.os_release, f.uid_1000, f.python, f.glibc, f.cuda_version, f.require_cuda):
        assert value.isascii() and value.isprintable(), value
    assert f.python == "" or re.fullmatch(r"[0-9]+\.[0-9]+", f.python)
    assert f.cuda_version == "" or re.fullmatch(r"[0-9.]+", f.cuda_version)
    if f.os_id is None:
        with pytest.raises(UsageError) as info:
            check(f, None, m)
        assert info.value.message.isprintable()


@pytest.mark.parametrize(("env", "nvidia"), [
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=١٢.٤"}, False), ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.4"}, True),
    ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.45"}, True), ({"CUDA_VERSION": "١٢.٤.١"}, False)])
def test_only_ascii_versions_make_an_nvidia_base(matrix: Matrix, env: dict[str, str],
                                                 nvidia: bool) -> None:
    assert _facts(matrix, env=env).nvidia == nvidia or "CUDA_VERSION" in env


def test_an_nvidia_base_of_an_unknown_cuda_or_another_cuda_is_refused(matrix: Matrix) -> None:
    f = _facts(matrix, env={"NVIDIA_REQUIRE_CUDA": "cuda>=13.9"})
    with pytest.raises(ConflictError, match="no driver facts"):
        resolve(Request(torch="2.15.0", base=f), matrix)
    f = _facts(matrix, env=NVIDIA_ENV)
    with pytest.raises(ConflictError, match=r"is CUDA 13\.0"):
        resolve(Request(torch="2.15.0", cuda="13.2", base=f), matrix)
    with pytest.raises(UsageError, match="--flavor devel"):
        resolve(Request(torch="2.15.0", flavor="devel", base=f), matrix)
