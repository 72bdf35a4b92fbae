"""What the Dockerfile depends on in each OS family, the pure parts: the facts of matrix/os.toml
and the rendered steps. The stand-in bases built for real: tests/integration/test_bases.py."""

from __future__ import annotations

import re

import pytest

from envbuild.matrix import Matrix, OsInfo, load
from tests.support.bases import STANDINS, _dockerfile


def _final_stage(dockerfile: str) -> str:
    return dockerfile.rsplit("\nFROM ", 1)[1]


def _install_line(stage: str) -> list[str]:
    m = re.search(r"(?:apt-get install -y --no-install-recommends|dnf install -y "
                  r"--setopt=install_weak_deps=False --setopt=keepcache=True) ([^\\\n]+)", stage)
    assert m, stage
    return m.group(1).split()


# -- the data: every OS row states what the Dockerfile depends on --------------------------------

def _python_cases(m: Matrix) -> list[tuple[str, str, str]]:
    out = []
    for o in m.oses:
        out.append((o.id, o.python, "os"))
        out += [(o.id, py, "os") for py in o.extra_python]
        out.append((o.id, "3.13", "standalone"))
    return out


def test_every_os_states_the_properties_the_dockerfile_depends_on(matrix: Matrix) -> None:
    for o in matrix.oses:
        # The Dockerfile's SHELL line is bash with pipefail: every base must have it.
        assert o.shell == "/bin/bash", o.id
        assert o.package_manager in ("apt", "dnf"), o.id
        assert o.compiler_packages, f"{o.id}: torch.compile needs a C/C++ compiler"
        assert o.headers_suffix, f"{o.id}: Triton needs Python.h"
        # Debian and Ubuntu split ensurepip out of python3; the RHEL family does not.
        assert bool(o.venv_suffix) == (o.family == "debian"), o.id
        assert o.source


def test_ubuntu_2404_is_recorded_with_its_uid_1000_user(matrix: Matrix) -> None:
    """The fact behind the default CUDA >= 12.8 path: nvidia/cuda:*-ubuntu24.04 has user ubuntu."""
    noble = matrix.os_info("ubuntu24.04")
    assert isinstance(noble, OsInfo)
    assert (noble.uid_1000, noble.gid_1000) == ("ubuntu", "ubuntu")
    assert "S-UBUNTU-UID1000" in noble.source
    assert any(i.os == "ubuntu24.04" for i in matrix.images)


@pytest.mark.parametrize(("os_id", "py", "source"), _python_cases(load()))
def test_every_image_gets_compilers_and_python_headers(matrix: Matrix, os_id: str, py: str,
                                                       source: str) -> None:
    o = matrix.os_info(os_id)
    assert o is not None
    dockerfile = _dockerfile(matrix, os_id, py, source)
    final = _install_line(_final_stage(dockerfile))
    for pkg in o.compiler_packages:
        assert pkg in final, (os_id, py, source, final)
    headers = [p for p in final
               if p.endswith(o.headers_suffix) and p not in o.compiler_packages]
    if source == "os":
        # exactly one headers package, the one of the image's Python package
        assert len(headers) == 1 and headers[0][: -len(o.headers_suffix)] in final, final
    else:
        # python-build-standalone brings its own include/; the bootstrap stage gets no compilers
        assert headers == []
        boot = _install_line(dockerfile.split("\nFROM ")[1])
        assert not set(o.compiler_packages) & set(boot), boot


def test_package_names_come_from_the_matrix_row(matrix: Matrix) -> None:
    """Change the row, the Dockerfile follows: no package name for these is a template literal."""
    import dataclasses
    o = matrix.os_info("debian12")
    assert o is not None
    odd = dataclasses.replace(o, compiler_packages=("clang-16",), headers_suffix="-headers",
                              venv_suffix="-ensurepip")
    m2 = dataclasses.replace(matrix, oses=tuple(odd if x.id == "debian12" else x
                                                for x in matrix.oses))
    final = _install_line(_final_stage(_dockerfile(m2, "debian12", "3.11", "os")))
    assert final == ["python3", "python3-ensurepip", "python3-headers", "ca-certificates",
                     "clang-16"]
# What each stand-in reproduces, in os.toml's terms; the test below keeps this honest against the
# matrix: every property value some OS row has is reproduced by at least one stand-in.
COVERS: dict[str, set[str]] = {
    "ubuntu2404": {"uid_1000", "gid_1000", "apt", "no python_in_base", "system python"},
    "odd-ids": {"gid_1000", "uid_1000", "apt", "python_in_base", "named python"},
    "rhel-dnf": {"dnf", "python_in_base", "named python"},
}


def _properties(o: OsInfo) -> set[str]:
    out = {o.package_manager, "python_in_base" if o.python_in_base else "no python_in_base",
           "system python"}
    if o.uid_1000:
        out.add("uid_1000")
    if o.gid_1000:
        out.add("gid_1000")
    if o.extra_python:
        out.add("named python")
    return out


def test_standins_cover_every_property_in_the_matrix(matrix: Matrix) -> None:
    covered = set().union(*COVERS.values())
    for o in matrix.oses:
        assert _properties(o) <= covered, (o.id, _properties(o) - covered)
    assert set(COVERS) == set(STANDINS)
