"""Pure: a matrix TOML text and changes in, the TOML text out, editing only the affected lines
so comments, order and sources stay as they are."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from envbuild.common.record import record
from envbuild.common.tomlwrite import value as toml_value
from envbuild.common.versions import version_key
from envbuild.features.refresh.facts import Change

_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\"-]+)\s*\]\]?\s*(#.*)?$")
_KEYLINE = re.compile(r"^([A-Za-z0-9_-]+)\s*=\s*(.*)$")


@record(frozen=False)
class _Block:
    table: str
    start: int  # header line index
    end: int  # one past the last line of the block (next header)
    values: dict[str, Any]

    def last_key_line(self, lines: list[str]) -> int:
        last = self.start
        for i in range(self.start + 1, self.end):
            if _KEYLINE.match(lines[i]):
                last = i
        return last


def _blocks(lines: list[str]) -> list[_Block]:
    from envbuild.common.boundedio import parse_toml

    heads = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _HEADER.match(line))
             and line.lstrip().startswith("[")]
    out = []
    for n, (i, name) in enumerate(heads):
        end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
        body = "\n".join(lines[i + 1:end])
        try:
            values = parse_toml(body)
        except ValueError:  # TOMLDecodeError, TooDeep: not a block this can edit
            values = {}
        out.append(_Block(name, i, end, values))
    return out


def _matches(block: _Block, table: str, key: Sequence[tuple[str, str]]) -> bool:
    return block.table == table and all(str(block.values.get(k)) == v for k, v in key)


def _set_key(lines: list[str], block: _Block, name: str, value: Any) -> None:
    text = f"{name} = {toml_value(value)}"
    for i in range(block.start + 1, block.end):
        m = _KEYLINE.match(lines[i])
        if m and m.group(1) == name:
            lines[i] = text
            return
    at = block.last_key_line(lines) + 1
    lines.insert(at, text)
    block.end += 1


def apply_changes(text: str, changes: Sequence[Change], source_id: str) -> str:
    """Apply the applicable changes of one file to its TOML text. Only the changed lines are
    rewritten: comments, key order and other rows stay byte for byte. Every edited row gets
    ``source_id`` (which carries the date) appended to its ``source`` list; ``verify`` changes set
    ``verified = true`` on a row whose every fact the source confirmed, and a new row is written
    with ``verified = true``. An edited row's ``verified`` flag is otherwise kept: the refresh
    confirms some of its facts (pins), not all (arch lists)."""
    lines = text.split("\n")
    for ch in changes:
        if not ch.applicable:
            continue
        blocks = _blocks(lines)
        if ch.kind in ("changed", "verify"):
            block = next((b for b in blocks if _matches(b, ch.table, ch.key)), None)
            if block is None:
                raise ValueError(f"row {ch.label} of [[{ch.table}]] not found")
            _set_key(lines, block, ch.field, ch.new)
            block = next(b for b in _blocks(lines) if _matches(b, ch.table, ch.key))
            srcs = list(block.values.get("source", []))
            if source_id not in srcs:
                _set_key(lines, block, "source", [*srcs, source_id])
        elif ch.kind == "new-patch" and ch.row:
            same = [b for b in blocks if b.table == ch.table]
            kv = version_key(str(ch.row["torch"]))
            before = [b for b in same if version_key(str(b.values.get("torch", "0"))) < kv]
            anchor = max(before, key=lambda b: version_key(str(b.values.get("torch", "0"))),
                         default=None) or (same[0] if same else None)
            row = [f"[[{ch.table}]]", *(f"{k} = {toml_value(v)}" for k, v in ch.row.items()),
                   "verified = true", f"source = {toml_value([source_id])}",
                   f"note = {toml_value('Added by envbuild matrix refresh: ' + ch.evidence)}"]
            if anchor is None:
                lines += ["", *row]
            elif before:
                at = anchor.last_key_line(lines) + 1
                lines[at:at] = ["", *row]
            else:
                lines[anchor.start:anchor.start] = [*row, ""]
    return "\n".join(lines)


def source_entry(source_id: str, title: str, url: str, read: str) -> str:
    return (f"\n[source.{toml_value(source_id)}]\ntitle = {toml_value(title)}\n"
            f"url = {toml_value(url)}\nread = {toml_value(read)}\n")


