"""Helpers shared by the render tests and others (moved out of test_render.py)."""

from __future__ import annotations

from tests.support import TESTS

HADOLINT_CONFIG = TESTS / "hadolint.yaml"

