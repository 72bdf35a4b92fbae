"""The lines of a BuildKit `--progress plain` log that envbuild reads (pure, stdlib only): a step
`#N [stage k/n] RUN ...` and its failure `#N ERROR: ...`."""

from __future__ import annotations

import re

STEP = re.compile(r"^#(\d+) (\[[^\]]+\] .*)$")
ERROR = re.compile(r"^#(\d+) ERROR: (.*)$")


def step_title(line: str) -> str | None:
    """`[stage k/n] RUN ...` of a step line; None for any other line."""
    m = STEP.match(line)
    return m.group(2) if m else None
