"""Loading the matrix: TOML files in `matrix/` parsed into the typed model.

Parsing is pure (files in, dataclasses out). `check()` returns every problem with its file and
row instead of stopping at the first, so a maintainer fixes a broken matrix in one pass;
`load()` raises on any and caches a matrix that checked clean.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from envbuild.common.echo import shown
from envbuild.common.errors import MatrixError
from envbuild.matrix.cache import cache_path, read_docs, write_cached, write_docs
from envbuild.matrix.model import (
    EXTRA_FILES,
    FILES,
    LAZY_STEMS,
    OPTIONAL_FILES,
    TABLES,
    Matrix,
    Problem,
)


def _type_ok(value: Any, hint: Any) -> Any:
    """Coerce a TOML value to the dataclass field type, or raise TypeError."""
    if hint is str:
        if isinstance(value, str):
            return value
        raise TypeError(f"expected a string, got {shown(value)}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(f"expected true/false, got {shown(value)}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise TypeError(f"expected an integer, got {shown(value)}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise TypeError(f"expected a number, got {shown(value)}")
    # tuple[str, ...]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TypeError(f"expected a list of strings, got {shown(value)}")


@cache
def _field_types(cls: type) -> dict[str, tuple[Any, bool]]:
    hints = typing.get_type_hints(cls)
    out: dict[str, tuple[Any, bool]] = {}
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        hint = hints[f.name]
        out[f.name] = (str if hint is str else hint, required)
    return out


def _row_label(raw: Mapping[str, Any], index: int) -> str:
    for key in ("version", "tag", "name", "id", "cc", "torch", "cuda", "major"):
        if key in raw:
            return f"row {index + 1} ({key}={raw[key]!r})"
    return f"row {index + 1}"


def _parse_rows(cls: type, rows: Any, file: str, table: str,
                problems: list[Problem]) -> list[Any]:
    if not isinstance(rows, list):
        problems.append(Problem(file, f"[[{table}]]", "must be an array of tables"))
        return []
    types = _field_types(cls)
    out = []
    for index, raw in enumerate(rows):
        label = f"[[{table}]] {_row_label(raw, index)}"
        kwargs: dict[str, Any] = {}
        ok = True
        for key, value in raw.items():
            if key not in types:
                problems.append(Problem(file, label, f"unknown key {key!r}"))
                ok = False
                continue
            try:
                kwargs[key] = _type_ok(value, types[key][0])
            except TypeError as exc:
                problems.append(Problem(file, label, f"{key}: {exc}"))
                ok = False
        for key, (_, required) in types.items():
            if required and key not in raw:
                problems.append(Problem(file, label, f"missing required key {key!r}"))
                ok = False
        if ok:
            out.append(cls(**kwargs))
    return out


def _read_toml(path: Path, problems: list[Problem]) -> dict[str, Any]:
    """A matrix file through the bounded reader: a FIFO, device, a file over CONFIG_BYTES, one
    nested too deep or not UTF-8 is refused (UsageError, exit 2), not listed as a problem."""
    import tomllib

    from envbuild.common.boundedio import load_toml

    try:
        return load_toml(path, "matrix file")
    except FileNotFoundError:
        problems.append(Problem(path.name, "-", "file is missing"))
    except tomllib.TOMLDecodeError as exc:
        problems.append(Problem(path.name, "-", f"not valid TOML: {exc}"))
    except OSError as exc:
        problems.append(Problem(path.name, "-", f"cannot read: {exc.strerror}"))
    return {}


def _read_docs(directory: Path, problems: list[Problem],
               stems: tuple[str, ...] = FILES) -> dict[str, dict[str, Any]]:
    return {stem: {} if stem in OPTIONAL_FILES and not (directory / f"{stem}.toml").exists()
            else _read_toml(directory / f"{stem}.toml", problems) for stem in stems}


def _clean_rows(cls: type, rows: list[dict[str, Any]]) -> list[Any]:
    """Rows of documents that checked clean when cached: only the coercions _type_ok makes
    (a list to a tuple, an integer to a float), not its checks. A cache written by another
    version, or bitten by a bad disk, fails the cache's key or sha256 before it gets here."""
    floats = {f.name for f in dataclasses.fields(cls) if f.type in ("float", float)}
    return [cls(**{k: tuple(v) if type(v) is list else float(v) if k in floats else v
                   for k, v in raw.items()}) for raw in rows]


def _from_docs(docs: Mapping[str, Any], problems: list[Problem], *,
               clean: bool = False,
               side: Callable[[], Mapping[str, Any]] | None = None) -> Matrix:
    built: dict[str, Any] = {}
    lazy: dict[str, Callable[[], tuple[Any, ...]]] = {}
    meta: dict[str, Mapping[str, Any]] = {}
    for stem, table, cls, attr in TABLES:
        doc = docs[stem]
        rows = doc.get(table, [])
        if clean and stem in LAZY_STEMS:  # built on the first read (start-up)
            lazy[attr] = functools.partial(_side_rows, side, stem, table, cls) \
                if doc.get(_ASIDE) and side is not None else \
                functools.partial(_clean_tuple, cls, rows)
        elif stem in LAZY_STEMS:  # checked now: its problems are the load's
            lazy[attr] = functools.partial(tuple, _parse_rows(cls, rows, f"{stem}.toml", table,
                                                              problems))
        else:
            built[attr] = tuple(_clean_rows(cls, rows) if clean else
                                _parse_rows(cls, rows, f"{stem}.toml", table, problems))
        meta[stem] = doc.get("meta", {})
    sources = docs["sources"].get("source", {})
    extra = {stem: docs[stem] for stem in EXTRA_FILES}
    return Matrix(sources=sources, meta=meta, extra=extra, lazy=lazy, **built)


def _clean_tuple(cls: type, rows: list[dict[str, Any]]) -> tuple[Any, ...]:
    return tuple(_clean_rows(cls, rows))


# A LAZY_STEMS document in the cache stands aside, in its own file (`side_path`): start-up reads
# and parses only what every command needs. The main cache keeps its [meta] and this mark.
_ASIDE = "__envbuild_aside__"


def side_path(cache_file: Path) -> Path:
    return cache_file.with_name(f"{cache_file.stem}-aside.json")


def _aside(docs: Mapping[str, Any]) -> dict[str, Any]:
    return {stem: {"meta": doc.get("meta", {}), _ASIDE: True} if stem in LAZY_STEMS else doc
            for stem, doc in docs.items()}


def _side_rows(side: Callable[[], Mapping[str, Any]], stem: str, table: str,
               cls: type) -> tuple[Any, ...]:
    return _clean_tuple(cls, side()[stem].get(table, []))


def _side_docs(cache_file: Path, directory: Path) -> Callable[[], Mapping[str, Any]]:
    """The set-aside documents, read once when first needed: from their cache file, else (gone,
    damaged) from the TOML files themselves, which the key says are the ones that checked clean."""
    @functools.cache
    def read() -> Mapping[str, Any]:
        from envbuild.matrix.cache import read_cached

        docs = read_cached(side_path(cache_file))
        if isinstance(docs, dict) and all(isinstance(docs.get(s), dict) for s in LAZY_STEMS):
            return docs
        problems: list[Problem] = []
        docs = _read_docs(directory, problems, LAZY_STEMS)
        if not problems:  # the damaged or missing aside file replaced
            write_cached(side_path(cache_file), docs)
        return docs
    return read


def parse(directory: Path) -> tuple[Matrix, list[Problem]]:
    """Read every matrix file; return the matrix (bad rows dropped) and the schema problems."""
    problems: list[Problem] = []
    docs = _read_docs(directory, problems)
    return _from_docs(docs, problems), problems


def check(directory: Path) -> list[Problem]:
    """Every schema and cross-reference problem of the matrix in `directory`."""
    from envbuild.matrix.crosscheck import cross_check

    matrix, problems = parse(directory)
    return problems + cross_check(matrix)


def snapshot(docs: Mapping[str, Any]) -> str:
    """The matrix's snapshot hash: sha256 of every file's document as parsed (canonical JSON,
    sorted keys; a TOML date as its text). Comments and layout do not count, values do."""
    import hashlib
    import json

    blob = json.dumps(docs, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=str)
    return hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()


def _from_cache(cache_file: Path, directory: Path) -> Matrix | None:
    cached = read_docs(cache_file)
    if cached is None:
        return None
    docs, snap = cached
    problems: list[Problem] = []
    try:
        matrix = dataclasses.replace(_from_docs(docs, problems, clean=True,
                                                side=_side_docs(cache_file, directory)),
                                     snapshot=snap)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return None
    return None if problems else matrix


# Matrices this process loaded, by cache file (whose name is keyed by every file's name, size and
# mtime, so an edited matrix is another key). A Matrix is frozen: sharing it is safe.
_LOADED: dict[Path, Matrix] = {}


def load(directory: Path | None = None) -> Matrix:
    """Load and fully check the matrix; raise MatrixError naming the first problems.

    A matrix that checked clean is cached (its TOML documents as JSON, keyed by the files'
    sizes and mtimes): parsing TOML is most of the start-up time of `envbuild resolve`.
    """
    from envbuild.common.resources import matrix_dir

    d = directory or matrix_dir()
    cache_file = cache_path(d)
    if cache_file is not None:
        if cache_file in _LOADED:  # this process loaded these very files already
            return _LOADED[cache_file]
        cached = _from_cache(cache_file, d)
        if cached is not None:
            _LOADED[cache_file] = cached
            return cached
    from envbuild.matrix.crosscheck import cross_check

    problems: list[Problem] = []
    docs = _read_docs(d, problems)
    matrix = _from_docs(docs, problems)
    problems += cross_check(matrix)
    if problems:
        listed = "; ".join(str(x) for x in problems[:3])
        more = f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""
        raise MatrixError(f"the version matrix in {d} is broken: {listed}{more}")
    snap = snapshot(docs)  # once per matrix, then cached with it
    matrix = dataclasses.replace(matrix, snapshot=snap)
    if cache_file is not None:
        write_cached(side_path(cache_file), {stem: docs[stem] for stem in LAZY_STEMS})
        write_docs(cache_file, _aside(docs), snap)
        _LOADED[cache_file] = matrix
    return matrix
