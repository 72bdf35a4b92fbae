"""Helpers shared by the doctor tests and others (moved out of test_doctor.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from envbuild.doctor.model import HostFacts
from envbuild.matrix import Matrix, load
from tests.support import TESTS

FIXTURES = TESTS / "fixtures" / "doctor"


@pytest.fixture(scope="module")
def small() -> Matrix:
    """A small, consistent matrix made for these tests (fixtures/doctor/matrix)."""
    return load(FIXTURES / "matrix")


# ---------------------------------------------------------------- real GPU recordings

RECORDED = {"h100-sxm-recorded": "NVIDIA H100 80GB HBM3", "h200-recorded": "NVIDIA H200"}


def _as_other_user(facts: HostFacts) -> HostFacts:
    """The same host seen by an ordinary user in no extra group: rw from the 'other' bits."""
    devices = {p: replace(d, rw=d.mode & 0o006 == 0o006) for p, d in facts.devices.items()}
    return replace(facts, devices=devices, groups=())

