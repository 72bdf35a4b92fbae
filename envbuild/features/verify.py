"""`envbuild verify IMAGE@DIGEST`: read back what is attached to a pushed image and judge it
(envbuild/core/attachments.py), against the team's lock when there is one."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envbuild.common.errors import EXIT_FAILED, UsageError
from envbuild.common.record import record
from envbuild.core import attachments


@record
class Verified:
    image: str
    digest: str
    via: str
    checks: list[attachments.Check]
    lock: str  # the lock file compared against ('' when none)
    platforms: tuple[str, ...] = ()  # an index: its members, each judged

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if any(c.status == "fail" for c in self.checks) else 0

    def to_json(self) -> dict[str, Any]:
        counts = {s: sum(c.status == s for c in self.checks)
                  for s in ("pass", "fail", "warn", "skip")}
        return {"image": self.image, "digest": self.digest, "found_via": self.via,
                "lock": self.lock or None, "platforms": list(self.platforms) or None,
                "checks": [c.to_json() for c in self.checks],
                "summary": counts, "ok": self.exit_code == 0}


def _entries(lock: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Every (name, entry) of a lock, a multi-platform image's members included."""
    out: list[tuple[str, Mapping[str, Any]]] = []
    images = lock.get("image")
    for name, entry in (images.items() if isinstance(images, dict) else []):
        if not isinstance(entry, dict):
            continue
        plats = entry.get("platforms")
        for e in [entry, *(plats.values() if isinstance(plats, dict) else [])]:
            if isinstance(e, dict):
                out.append((str(name), e))
    return out


def _lock_entry(lock: Mapping[str, Any], digest: str) -> Mapping[str, Any] | None:
    return next((e for _, e in _entries(lock) if e.get("digest") == digest), None)


def _expect(lock_data: Mapping[str, Any] | None, digest: str,
            named: bool) -> attachments.Expect:
    if lock_data is None:
        return attachments.Expect(named=named)
    entry = _lock_entry(lock_data, digest)
    packages = entry.get("packages") if entry is not None else None
    listed = tuple(str(e.get("digest")) for _, e in _entries(lock_data) if e.get("digest"))
    return attachments.Expect(
        attachments.lock_packages(packages) if isinstance(packages, list) and packages else None,
        str(entry.get("signed_by") or "") if entry is not None else "", named, listed)


def verify(image: str, key: Path | None = None, lock: Path | None = None) -> Verified:
    """Read back what is attached to image (IMAGE@DIGEST; a tag is resolved first) and judge
    it: subjects, signatures, the provenance's record of the SBOM and the report, the report
    passing, the SBOM vs the lock (--lock, else ./envbuild.lock when it lists this digest). An
    index (a multi-platform image) is judged member by member."""
    from envbuild.core import refs as refs_core
    from envbuild.engine import registry
    from envbuild.features.attach import load_verifier
    from envbuild.features.lockfile import LOCK_FILE, read_lock

    ref = registry.parse_ref(image)
    verifier = load_verifier(key) if key is not None else None
    lock_path = lock if lock is not None else Path(LOCK_FILE)
    try:
        lock_data = read_lock(lock_path)
    except UsageError:
        if lock is not None:
            raise
        lock_data = None  # ./envbuild.lock of something else: not asked for
    if lock is not None and lock_data is None:
        raise UsageError(f"{lock}: no such lock file", "give the envbuild.lock of the team file "
                         "that built the image (`envbuild team build --push` writes it)")
    digest = ref.digest
    if not digest:
        digest = registry.resolve_digest(str(ref)) or ""
        if not refs_core.is_digest(digest):
            raise UsageError(f"{image[:120]} is not in the registry",
                             "give IMAGE@sha256:<digest> of a pushed image")
    members = registry.manifest_members(ref.name, digest)
    checks: list[attachments.Check] = []
    vias = []
    for platform, d in (members or {"": digest}).items():
        expect = _expect(lock_data, d, named=lock is not None)
        found, sigs, via = registry.fetch_attachments(ref.name, d)
        vias.append(via)
        checks += [attachments.Check(c.id, c.status, c.message, platform)
                   for c in attachments.judge(ref.name, d, found, sigs, verifier, expect)]
    used = lock_data is not None and any(_lock_entry(lock_data, d)
                                         for d in (members or {"": digest}).values())
    return Verified(ref.name, digest, "+".join(sorted(set(vias))), checks,
                    str(lock_path) if used else "", tuple(members or ()))
