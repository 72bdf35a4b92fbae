"""Regex search over big logs without scanning them once per regex (pure, stdlib only).

`envbuild explain` runs ~250 case-insensitive regexes; each costs a full scan of the text
(~40 MB/s), so an 8 MiB log took 20 s. Every regex in the catalogue needs some literal (its
*anchor*: "cuda out of memory", "+cu", ...), so a big text is scanned once, casefolded, for all
anchors at a time (one compiled trie of their tails that start with a character rare in this
text). Each regex then runs only on the lines that hold one of
its anchors, with CONTEXT_LINES around them (the multi-line signatures span fewer), in text
order, so the first match is the same one a whole-text search finds.
"""

from __future__ import annotations

import importlib
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

SCAN_FROM = 256 << 10  # smaller texts are searched whole
CONTEXT_LINES = 3
MIN_ANCHOR = 3


def anchor(rx: re.Pattern[str]) -> frozenset[str] | None:
    """Casefolded literals, one of which occurs in every match of rx (None: none found).

    Walks the stdlib's parse of the regex: runs of literal characters in the mandatory
    sequence, groups and repeats of at least one, and alternations whose every branch has one;
    the candidate with the longest shortest literal wins."""
    parser: Any = importlib.import_module("re._parser")
    c: Any = importlib.import_module("re._constants")

    def needs(seq: Any) -> frozenset[str] | None:
        cands: list[frozenset[str]] = []
        run: list[str] = []

        def flush() -> None:
            if len(run) >= MIN_ANCHOR:
                cands.append(frozenset({"".join(run).casefold()}))
            run.clear()

        for op, av in seq:
            if op is c.LITERAL and chr(av) != "\n":
                run.append(chr(av))
                continue
            flush()
            n: frozenset[str] | None = None
            if op is c.SUBPATTERN:
                n = needs(av[-1])
            elif op is c.BRANCH:
                alts = [needs(b) for b in av[1]]
                n = frozenset(x for a in alts if a for x in a) if alts and all(alts) else None
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] >= 1:
                n = needs(av[2])
            if n:
                cands.append(n)
        flush()
        return max(cands, key=lambda s: min(map(len, s))) if cands else None

    try:
        return needs(parser.parse(rx.pattern, rx.flags))
    except Exception:  # a parser detail of another Python: no anchor, whole-text search
        return None


def _trie_regex(words: Iterable[str]) -> str:
    trie: dict[str, Any] = {}
    for w in words:
        node = trie
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def rx(node: dict[str, Any]) -> str:
        alts = [re.escape(k) + rx(v) for k, v in sorted(node.items()) if k]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return rx(trie)


def _overlapping(a: str, words: Iterable[str]) -> tuple[str, ...]:
    """Words that can start inside an occurrence of a (a scan that found a skips them)."""
    out = []
    for b in words:
        if b == a:
            continue
        if any(a[k:k + len(b)] == b[:len(a) - k] for k in range(len(a))):
            out.append(b)
    return tuple(out)


@dataclass(frozen=True)
class Scanner:
    """The anchors of a fixed set of regexes, and the trie that finds them all in one pass."""

    anchors: Mapping[re.Pattern[str], frozenset[str]]

    @classmethod
    def of(cls, regexes: Iterable[re.Pattern[str]]) -> Scanner | None:
        found = {}
        for rx in regexes:
            a = anchor(rx)
            if a is None:
                return None
            found[rx] = a
        return cls(found)

    @cached_property
    def _words(self) -> tuple[str, ...]:
        return tuple(sorted({w for ws in self.anchors.values() for w in ws}))

    @cached_property
    def _overlaps(self) -> dict[tuple[str, ...], dict[str, tuple[str, ...]]]:
        return {}  # per word list, filled per word found: all pairs cost more than a scan

    def _overlapping(self, words: tuple[str, ...], word: str) -> tuple[str, ...]:
        known = self._overlaps.setdefault(words, {})
        found = known.get(word)
        if found is None:
            found = known[word] = _overlapping(word, words)
        return found

    def _keys(self, folded: str) -> dict[str, str]:
        """Each anchor's key: its longest tail of >= MIN_ANCHOR characters that starts with
        the character rarest in (a sample of) this text. A key occurs wherever its anchor
        does, and the trie skips every position whose character starts no key, so keys that
        start with rare characters make the one scan several times faster."""
        freq = Counter(folded[-(64 << 10):] + folded[:16 << 10])
        return {w: w[min(range(len(w) - MIN_ANCHOR + 1), key=lambda i: (freq[w[i]], i)):]
                for w in self._words}

    def haystack(self, text: str) -> Haystack:
        if len(text) < SCAN_FROM:
            return Haystack(text)
        folded = text.casefold()
        if len(folded) != len(text):  # a character folds to several: positions would differ
            return Haystack(text)
        keys = self._keys(folded)
        words = tuple(sorted(set(keys.values())))
        at: dict[str, set[int]] = {}
        for m in _trie(words).finditer(folded):
            start = folded.rfind("\n", 0, m.start()) + 1
            word = m.group()
            at.setdefault(word, set()).add(start)
            others = self._overlapping(words, word)
            if others:
                end = folded.find("\n", m.end())
                line = folded[start:end if end >= 0 else len(folded)]
                for other in others:
                    if other in line:
                        at.setdefault(other, set()).add(start)
        return Haystack(text, self, {w: at[k] for w, k in keys.items() if k in at})


@lru_cache(maxsize=8)
def _trie(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(_trie_regex(words))


@dataclass
class Haystack:
    """A text to search; a big one is searched only where a regex's anchor occurs."""

    text: str
    scanner: Scanner | None = None
    lines: dict[str, set[int]] | None = None  # anchor -> starts of lines that may hold it

    def _windows(self, rx: re.Pattern[str]) -> list[tuple[int, int]] | None:
        if self.scanner is None or self.lines is None or rx not in self.scanner.anchors:
            return None
        starts = sorted({s for w in self.scanner.anchors[rx] for s in self.lines.get(w, ())})
        text = self.text
        out: list[tuple[int, int]] = []
        for s in starts:
            a = s
            for _ in range(CONTEXT_LINES):
                if a == 0:
                    break
                a = text.rfind("\n", 0, a - 1) + 1
            b = s
            for _ in range(CONTEXT_LINES + 1):
                nl = text.find("\n", b)
                b = nl + 1 if nl >= 0 else len(text)
                if nl < 0:
                    break
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    def search(self, rx: re.Pattern[str]) -> re.Match[str] | None:
        windows = self._windows(rx)
        if windows is None:
            return rx.search(self.text)
        for a, b in windows:
            m = rx.search(self.text, a, b)
            if m is not None:
                return m
        return None

    def finditer(self, rx: re.Pattern[str]) -> Iterator[re.Match[str]]:
        windows = self._windows(rx)
        if windows is None:
            yield from rx.finditer(self.text)
            return
        for a, b in windows:
            yield from rx.finditer(self.text, a, b)
