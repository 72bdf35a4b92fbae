"""`envbuild team plan | build | check` as use cases, with envbuild.lock's policy in one place:
the lock lives next to the team file; `plan` reads it (what a build would change); `build`
writes it, except with --locked, where the lock is the input and stays as it is; `check` needs
one. Nothing here prints: progress goes through the hooks and callbacks the caller gives."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild.common.errors import UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    from envbuild.features.make import Hooks
    from envbuild.features.team import Built, Indexed

DEFAULT_TEAM_FILE = Path("envbuild.toml")
OUT_DIR = "envbuild-out"  # next to the team file: each image's SBOM, provenance and report


def lock_path(team_file: Path) -> Path:
    from envbuild.features.team import LOCK_FILE

    return team_file.parent / LOCK_FILE


@record
class TeamPlan:
    lock: Path
    data: dict[str, Any]  # team.plan_json: images, shared layers, lock changes


def plan(file: Path | None, only: Iterable[str] = ()) -> TeamPlan:
    """Resolve every image of the team file, with its cache state and what the lock would
    change. No engine needed."""
    from envbuild.features import teamfile
    from envbuild.features.team import cache_state, lock_changes, plan_json, read_lock
    from envbuild.features.team import plan as plan_images
    from envbuild.matrix import load

    only = tuple(only)
    team = teamfile.load(file)
    path = lock_path(team.path)
    planned = plan_images(team, load(), only)
    changes = lock_changes(planned, read_lock(path), only)
    states = {p.key: cache_state(p) for p in planned}
    return TeamPlan(path, plan_json(planned, changes, states))


@record
class TeamBuild:
    built: list[Built]
    lock: Path | None  # the lock written; None with --locked (it was the input)
    indexes: list[Indexed] = field(default_factory=list)  # multi-platform images' one tag
    out: Path | None = None  # where the images' SBOMs, provenance and reports went

    @property
    def failed(self) -> bool:
        return any(b.error is not None or b.validation()["status"] != "pass" for b in self.built)

    def to_json(self) -> dict[str, Any]:
        return {"images": [b.to_json() for b in self.built],
                "indexes": [{"name": ix.name, "tag": ix.tag, "digest": ix.digest,
                             "platforms": ix.platforms} for ix in self.indexes],
                "lock": str(self.lock) if self.lock is not None else None,
                "out": str(self.out) if self.out is not None else None}


def build(file: Path | None, only: Iterable[str] = (), *, push: bool, jobs: int = 1,
          locked: bool = False, rebuild: bool = False, revalidate: bool = False,
          hooks_for: Callable[[str], Hooks] | None = None,
          on_done: Callable[[Built], None] | None = None, out: Path | None = None,
          sign_key: Path | None = None) -> TeamBuild:
    """Build every image (shared layers once), validate each, push the validated ones with their
    reports attached; then write the lock (never with `locked`: it rebuilds what the lock pins).
    Each image's SBOM, provenance and validation report go to OUT/NAME (default: envbuild-out
    next to the team file); with push, they are attached to the pushed image, the provenance
    (and the image) signed with sign_key when one is given."""
    from envbuild.features import team as t
    from envbuild.features import teamfile
    from envbuild.features.attest import out_dir
    from envbuild.matrix import load

    signer = None
    if sign_key is not None:  # a bad key or password stops before anything is built
        if not push:
            raise UsageError("--sign-key signs what is pushed: nothing is without --push",
                             "add --push, or leave --sign-key out")
        from envbuild.features.attach import load_signer

        signer = load_signer(sign_key)
    team = teamfile.load(file)
    path = lock_path(team.path)
    out = out_dir(out if out is not None else team.path.parent / OUT_DIR, "--out")
    old = t.read_lock(path)
    if locked:
        team = t.locked_team(team, old, path)
    m = load()
    planned = t.plan(team, m, tuple(only))
    built = t.build(planned, m, push=push, jobs=jobs, rebuild=rebuild, revalidate=revalidate,
                    hooks_for=hooks_for, on_done=on_done,
                    cache_from=t.registry_images(old) if push else (), out=out, signer=signer)
    indexes = t.push_indexes(built) if push else []
    if locked:
        return TeamBuild(built, None, indexes, out)
    t.write_lock(path, t.updated_lock(old, built, indexes))
    return TeamBuild(built, path, indexes, out)


def inputs(file: Path | None) -> tuple[Path, Path]:
    """The files `team check` reads: the team file and its lock (a --junit file must be
    neither)."""
    team = file or DEFAULT_TEAM_FILE
    return team, lock_path(team)


def check(file: Path | None) -> dict[str, Any]:
    """Is what the lock next to the team file pins still true in the registry? {images,
    problems}; no lock is a usage error."""
    from envbuild.features.team import check as check_lock
    from envbuild.features.team import read_lock

    path = lock_path(file or DEFAULT_TEAM_FILE)
    lock = read_lock(path)
    if lock is None:
        raise UsageError(f"no lock file {path}", "run `envbuild team build --push` first")
    return check_lock(lock, path)
