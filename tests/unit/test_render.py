"""Rendering: golden files for every target x OS x flavor, hadolint, conda specs, atomicity."""

from __future__ import annotations

import yaml

from tests.support.render import HADOLINT_CONFIG


def test_hadolint_ignores_stay_short() -> None:
    ignored = yaml.safe_load(HADOLINT_CONFIG.read_text())["ignored"]
    assert not {"DL3002", "DL3006", "DL3007", "DL4006"} & set(ignored)
    assert len(ignored) <= 4
