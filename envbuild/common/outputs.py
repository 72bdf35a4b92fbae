"""Writing a rendered tree to the user's disk, and the manifest that makes `--force` safe.

Guarantees (README, "What --force may touch"):
- the output path is resolved (symlinks, `..`) before anything is created: `A/../../B` creates no
  `A`;
- a new or empty directory is filled; a non-empty one is refused unless `--force` is given AND it
  holds an envbuild manifest (`.envbuild-manifest.json`) whose listed files are unchanged since
  envbuild wrote them; files the manifest does not list are never written, replaced or removed;
- files are written in place (temporary file + os.replace per replaced file), so the directory
  itself (its inode, mode, owner, a shell's cwd inside it) stays; files the old manifest listed
  and the new render does not are removed;
- any failure before the commit removes what this call created and leaves the old files as they
  were; every OS error becomes a one-line UsageError (exit 2) or, for a full disk, exit 3.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from envbuild.common import boundedio
from envbuild.common.boundedio import parse_json
from envbuild.common.echo import shown
from envbuild.common.errors import EnvbuildError, EnvironmentProblem, UsageError
from envbuild.common.record import record


class RenderedFile(Protocol):
    """What write_tree needs of a file: envbuild.render.context.RenderedFile or OutFile."""

    @property
    def content(self) -> str | bytes: ...

    @property
    def mode(self) -> int: ...


@record
class OutFile:
    content: str
    mode: int = 0o644

MANIFEST = ".envbuild-manifest.json"
_FORMAT = 1
_TMP_SUFFIX = ".envbuild-tmp"
_MAX_MANIFEST_BYTES = 16 << 20


@record
class _Entry:
    rel: str
    content: bytes | None  # rendered content, or None for a linked input file
    source: Path | None  # the input file a linked entry is hard-linked (or copied) from
    mode: int
    record: Mapping[str, Any]  # what the manifest says about it


def _clean_rel(rel: str) -> str | None:
    """A safe relative POSIX path (no absolute, no `..`, no empty parts), or None."""
    if not isinstance(rel, str) or not rel or "\\" in rel or "\x00" in rel:
        return None
    p = PurePosixPath(rel)
    if p.is_absolute() or any(part in ("", ".", "..") for part in rel.split("/")):
        return None
    return str(p)


def _plan(files: Mapping[str, RenderedFile], links: Mapping[str, Path]) -> list[_Entry]:
    sha: dict[str | bytes, str] = {}  # the same large contents (validator, peaks) recur: hash once
    raw: dict[str | bytes, bytes] = {}
    out: list[_Entry] = []
    for rel, f in files.items():
        clean = _clean_rel(rel)
        if clean is None or clean == MANIFEST:
            raise ValueError(f"bad rendered path {rel!r}")  # a bug, not a user error
        data = raw.get(f.content)
        if data is None:
            data = raw[f.content] = (f.content if isinstance(f.content, bytes)
                                     else f.content.encode())
            sha[f.content] = hashlib.sha256(data).hexdigest()
        out.append(_Entry(clean, data, None, f.mode,
                          {"sha256": sha[f.content], "mode": f"{f.mode:04o}"}))
    for rel, src in links.items():
        try:
            items = sorted(src.iterdir())
        except OSError as exc:
            raise os_error(exc, src, "read", "--wheelhouse") from None
        for item in items:
            if not item.is_file():
                continue
            st = item.stat()
            out.append(_Entry(f"{rel}/{item.name}", None, item, 0o644,
                              {"linked": True, "size": st.st_size}))
    out.sort(key=lambda e: e.rel)
    return out


def os_error(exc: OSError, path: Path | str, doing: str = "write",
              flag: str = "--out") -> EnvbuildError:
    where = boundedio.path_text(exc.filename or path)
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
        return EnvironmentProblem(f"cannot {doing} {where}: {reason}",
                                  f"free some space (or choose another {flag}) and try again")
    hints = {
        errno.EACCES: "choose a directory you can write to",
        errno.EPERM: "choose a directory you can write to",
        errno.EROFS: f"that file system is read-only; choose another {flag}",
        errno.ENOTDIR: f"a part of that path is a file, not a directory; choose another {flag}",
        errno.ENOENT: f"that location cannot hold files (e.g. /proc, /sys); choose another {flag}",
        errno.ELOOP: f"the path has a symlink loop; choose another {flag}",
        errno.ENAMETOOLONG: f"choose a shorter {flag}",
    }
    return UsageError(f"cannot {doing} {where}: {reason}",
                      hints.get(exc.errno or 0, f"choose another {flag}"))


def resolve_out(out: Path, flag: str = "--out") -> Path:
    """The absolute, symlink- and `..`-free path `out` names, checked before anything is made."""
    text = str(out)
    if "\x00" in text or not text.strip():
        raise UsageError(f"{flag} {shown(text)} is not a path", f"e.g. {flag} ./out")
    try:
        target = Path(os.path.realpath(text))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{flag} {shown(text)} cannot be resolved: {exc}",
                         f"choose another {flag}") from None
    # The nearest existing ancestor must be a directory: `--out FILE/sub` is refused here.
    probe = target
    while not os.path.lexists(probe):
        probe = probe.parent
    if probe != target and not probe.is_dir():
        raise UsageError(f"cannot create {target}: {probe} is not a directory",
                         f"choose a {flag} whose parent is a directory")
    return target


def _read_manifest(target: Path) -> dict[str, dict[str, Any]] | None:
    """The listed files of a previous render, or None when there is no valid manifest."""
    path = target / MANIFEST
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_MANIFEST_BYTES:
            return None
        data = parse_json(path.read_bytes())  # TooDeep: a ValueError
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("generator") != "envbuild" \
            or data.get("format") != _FORMAT or not isinstance(data.get("files"), dict):
        return None
    files: dict[str, dict[str, Any]] = {}
    for rel, rec in data["files"].items():
        clean = _clean_rel(rel)
        if clean is None or clean != rel or clean == MANIFEST or not isinstance(rec, dict):
            return None  # a hand-made manifest naming ../ or / is not ours: touch nothing
        files[clean] = rec
    return files


def _file_digest(path: Path, st: os.stat_result, cache: dict[tuple[int, int], str]) -> str:
    key = (st.st_dev, st.st_ino)
    hit = cache.get(key)
    if hit is None:
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        hit = cache[key] = h.hexdigest()
    return hit


def _unchanged(path: Path, st: os.stat_result, rec: Mapping[str, Any], new: _Entry | None,
               cache: dict[tuple[int, int], str]) -> bool:
    """Whether a file the manifest lists is still what envbuild wrote (or what it will write)."""
    if not stat.S_ISREG(st.st_mode):
        return False
    if rec.get("linked"):
        return bool(rec.get("size") == st.st_size)
    digest = _file_digest(path, st, cache)
    return digest == rec.get("sha256") or (new is not None and digest == new.record.get("sha256"))


def _check_replace(target: Path, plan: list[_Entry], old: dict[str, dict[str, Any]],
                   cache: dict[tuple[int, int], str], verb: str) -> list[str]:
    """Refuse (UsageError) unless every path this render writes or removes is envbuild's own.
    Returns the listed files to remove afterwards."""
    def refuse(rel: str, why: str) -> UsageError:
        return UsageError(f"{verb} refused: {target / rel} {why}; nothing was changed",
                          f"{verb} only replaces files envbuild wrote there and nobody changed "
                          "since: move that file away, or choose another directory")

    new = {e.rel: e for e in plan}
    dirs_ok: set[str] = set()
    for e in plan:
        parts = e.rel.split("/")
        for i in range(1, len(parts)):
            d = "/".join(parts[:i])
            if d in dirs_ok:
                continue
            try:
                st = os.lstat(target / d)
            except FileNotFoundError:
                dirs_ok.add(d)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise refuse(d, "is in the way and is not a directory envbuild made")
            dirs_ok.add(d)
    stale: list[str] = []
    for rel in sorted(set(new) | set(old)):
        path = target / rel
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        except NotADirectoryError:
            continue  # a parent is a file: checked above for new paths; old ones are gone
        if rel not in old:
            raise refuse(rel, "exists and was not written by envbuild")
        if not _unchanged(path, st, old[rel], new.get(rel), cache):
            raise refuse(rel, "was changed since envbuild wrote it")
        if rel not in new:
            stale.append(rel)
    return stale


def _manifest_bytes(plan: list[_Entry]) -> bytes:
    doc = {"generator": "envbuild", "format": _FORMAT,
           "note": "written by envbuild render; `--force` replaces only the files listed here",
           "files": {e.rel: dict(e.record) for e in plan}}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


class _Writer:
    """Writes entries; remembers everything it made so that a failure can undo it."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.made_dirs: list[Path] = []
        self.made_files: list[Path] = []
        self.temps: list[tuple[Path, Path]] = []  # (temporary file, final path)
        self.known_dirs: set[Path] = set()
        self.first: dict[tuple[int, bytes], Path] = {}  # large identical content -> hard link
        self.counter = 0

    def mkdirs(self, d: Path) -> None:
        if d in self.known_dirs:
            return
        missing = []
        probe = d
        while not os.path.lexists(probe):
            missing.append(probe)
            probe = probe.parent
        for m in reversed(missing):
            os.mkdir(m)
            self.made_dirs.append(m)
        self.known_dirs.add(d)

    def _create(self, path: Path, e: _Entry) -> None:
        """Create `path` (which must not exist): link, copy or write, never through a symlink."""
        if e.source is not None:
            try:
                os.link(e.source, path)
            except OSError:
                shutil.copyfile(e.source, path, follow_symlinks=True)
                os.chmod(path, e.mode)
            return
        assert e.content is not None
        big = len(e.content) > 4096
        key = (e.mode, e.content)
        same = self.first.get(key) if big else None
        if same is not None:
            try:
                os.link(same, path)
                return
            except OSError:
                pass
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.fchmod(fd, e.mode)
            view = memoryview(e.content)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
        if big:
            self.first[key] = path

    def put(self, e: _Entry, exists: bool) -> None:
        final = self.target / e.rel
        self.mkdirs(final.parent)
        if not exists:
            self.made_files.append(final)
            self._create(final, e)
            return
        self.counter += 1
        tmp = final.with_name(f".{final.name}.{os.getpid()}-{self.counter}{_TMP_SUFFIX}")
        self.temps.append((tmp, final))
        self._create(tmp, e)

    def put_bytes(self, rel: str, data: bytes) -> None:
        self.put(_Entry(rel, data, None, 0o644, {}), os.path.lexists(self.target / rel))

    def undo(self) -> None:
        for path in [t for t, _ in self.temps] + self.made_files:
            with contextlib.suppress(OSError):
                os.unlink(path)
        for d in reversed(self.made_dirs):
            with contextlib.suppress(OSError):
                os.rmdir(d)

    def commit(self) -> None:
        for tmp, final in self.temps:
            os.replace(tmp, final)
        self.temps = []


def write_tree(files: Mapping[str, RenderedFile], out: Path, force: bool = False,
               links: Mapping[str, Path] | None = None, flag: str = "--out") -> Path:
    """Write `files` (and the hard-linked `links` directories) into `out`; return the real path.

    All or nothing: on any error, what this call created is removed and old files stay.
    """
    target = resolve_out(out, flag)
    plan = _plan(files, links or {})
    try:
        st = os.lstat(target) if os.path.lexists(target) else None
        if st is not None and not stat.S_ISDIR(st.st_mode):
            raise UsageError(f"{target} exists and is not a directory",
                             f"choose another {flag}")
        stale: list[str] = []
        digests: dict[tuple[int, int], str] = {}
        existing: set[str] = set()
        if st is not None:
            with os.scandir(target) as it:
                non_empty = any(True for _ in it)
            if non_empty:
                if not force:
                    raise UsageError(
                        f"{target} is not empty",
                        f"choose a new or empty {flag}; --force replaces a previous envbuild "
                        f"render there (one with {MANIFEST}), never other files")
                old = _read_manifest(target)
                verb = "--force" if flag == "--out" else flag
                if old is None:
                    raise UsageError(
                        f"{verb} refused: {target} is not empty and holds no envbuild output "
                        f"(no valid {MANIFEST}); nothing was changed",
                        f"{verb} only replaces what envbuild wrote before: choose a new or "
                        f"empty {flag}")
                stale = _check_replace(target, plan, old, digests, verb)
                existing = {rel for rel in (*old, MANIFEST)
                            if os.path.lexists(target / rel)}
        writer = _Writer(target)
        try:
            writer.mkdirs(target)
            for e in plan:
                if e.rel in existing and e.content is not None:
                    path = target / e.rel
                    cur = os.lstat(path)
                    if stat.S_IMODE(cur.st_mode) == e.mode and \
                            _file_digest(path, cur, digests) == e.record["sha256"]:
                        continue  # already exactly this: keep it (and its mtime)
                writer.put(e, e.rel in existing)
            writer.put_bytes(MANIFEST, _manifest_bytes(plan))
        except BaseException:
            writer.undo()
            raise
        # Commit: a handful of renames, then the files the new render no longer has.
        writer.commit()
        for rel in stale:
            path = target / rel
            os.unlink(path)
            for parent in PurePosixPath(rel).parents:
                if str(parent) == ".":
                    break
                try:
                    os.rmdir(target / parent)  # only if now empty
                except OSError:
                    break
    except OSError as exc:
        raise os_error(exc, target, flag=flag) from None
    return target
