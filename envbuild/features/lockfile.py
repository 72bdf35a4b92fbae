"""The team's lock file (`envbuild.lock`) read back: what `team build` wrote (envbuild/features/
team.py writes it, `verify` compares an image's SBOM with it). A module of its own, below both,
so that neither imports the other for it (team -> make -> attach -> team was a cycle)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envbuild.common.errors import UsageError

LOCK_FILE = "envbuild.lock"


def read_lock(path: Path) -> dict[str, Any] | None:
    """The lock at path (None when there is none); an unreadable one is a UsageError."""
    import tomllib

    from envbuild.common.boundedio import load_toml

    try:
        data = load_toml(path, "lock file",
                         hint="remove it and run `envbuild team build` to write a new one")
    except FileNotFoundError:
        return None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not a readable lock file ({exc})",
                         "remove it and run `envbuild team build` to write a new one") from None
    if not isinstance(data.get("image", {}), dict):
        raise UsageError(f"{path}: [image] is not a table",
                         "remove it and run `envbuild team build` to write a new one")
    return data
