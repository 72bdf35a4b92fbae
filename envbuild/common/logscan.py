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
from functools import cached_property, lru_cache
from typing import Any

from envbuild.common.record import record

_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
SCAN_FROM = 256 << 10  # smaller texts are searched whole
CONTEXT_LINES = 3
MIN_ANCHOR = 3


def _longest(cands: list[frozenset[str]]) -> frozenset[str]:
    return max(cands, key=lambda s: min(map(len, s)))


def candidates(rx: re.Pattern[str]) -> list[frozenset[str]]:
    """Sets of casefolded literals such that every match of rx contains one literal of each
    set ([] when none is found).

    Walks the stdlib's parse of the regex: runs of literal characters in the mandatory
    sequence, inside groups and repeats of at least one, and alternations whose every branch
    has one (that set is the branches' longest)."""
    parser: Any = importlib.import_module("re._parser")
    c: Any = importlib.import_module("re._constants")

    def needs(seq: Any) -> list[frozenset[str]]:
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
            if op is c.SUBPATTERN:
                cands += needs(av[-1])
            elif op is c.BRANCH:
                alts = [needs(b) for b in av[1]]
                if alts and all(alts):
                    cands.append(frozenset(x for a in alts for x in _longest(a)))
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] >= 1:
                cands += needs(av[2])
        flush()
        return cands

    try:
        return needs(parser.parse(rx.pattern, rx.flags))
    except Exception:  # a parser detail of another Python: no anchor, whole-text search
        return []


def anchor(rx: re.Pattern[str]) -> frozenset[str] | None:
    """The longest of candidates(rx) (None: rx has no literal to search by)."""
    cands = candidates(rx)
    return _longest(cands) if cands else None


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


@record
class Scanner:
    """The literal candidates of a fixed set of regexes; per text, the rarest candidate of
    each regex is looked for, all at once with one compiled trie."""

    cands: Mapping[re.Pattern[str], tuple[frozenset[str], ...]]

    @classmethod
    def of(cls, regexes: Iterable[re.Pattern[str]]) -> Scanner | None:
        found = {}
        for rx in regexes:
            c = candidates(rx)
            if not c:
                return None
            found[rx] = tuple(c)
        return cls(found)

    @cached_property
    def _overlaps(self) -> dict[tuple[str, ...], dict[str, tuple[str, ...]]]:
        return {}  # per word list, filled per word found: all pairs cost more than a scan

    def _overlapping(self, words: tuple[str, ...], word: str) -> tuple[str, ...]:
        known = self._overlaps.setdefault(words, {})
        found = known.get(word)
        if found is None:
            found = known[word] = _overlapping(word, words)
        return found

    @staticmethod
    def _keys(words: Iterable[str], sample: str) -> dict[str, str]:
        """Each word's key: its longest tail of >= MIN_ANCHOR characters that starts with the
        character rarest in the sample. A key occurs wherever its word does, and the trie
        skips every position whose character starts no key, so keys that start with rare
        characters make the one scan several times faster."""
        freq = Counter(sample)
        return {w: w[min(range(len(w) - MIN_ANCHOR + 1), key=lambda i: (freq[w[i]], i)):]
                for w in words}

    def choose(self, sample: str) -> dict[re.Pattern[str], frozenset[str]]:
        """Each regex's candidate with the fewest occurrences in the sample (then the longest)."""
        counts: dict[str, int] = {}

        def cost(cand: frozenset[str]) -> tuple[int, int]:
            for w in cand:
                if w not in counts:
                    counts[w] = sample.count(w)
            return sum(counts[w] for w in cand), -min(map(len, cand))

        return {rx: min(cs, key=cost) for rx, cs in self.cands.items()}

    def haystack(self, text: str) -> Haystack:
        if len(text) < SCAN_FROM:
            return Haystack(text)
        folded = text.casefold()
        if len(folded) != len(text):  # a character folds to several ('ß'): keep positions
            folded = text.translate(_ASCII_LOWER)
        sample = folded[-(64 << 10):] + "\n" + folded[:16 << 10]
        chosen = self.choose(sample)
        keys = self._keys({w for ws in chosen.values() for w in ws}, sample)
        words = tuple(sorted(set(keys.values())))
        at: dict[str, list[int]] = {}
        for m in _trie(words).finditer(folded):
            at.setdefault(m.group(), []).append(m.start())
        # the trie steps over a key that starts inside another one it found: find those fully
        for other in {o for found in list(at) for o in self._overlapping(words, found)}:
            at[other] = _find_all(folded, other)
        lines = {w: _line_starts(folded, at[k]) for w, k in keys.items() if at.get(k)}
        return Haystack(text, chosen, lines)


def _find_all(text: str, word: str) -> list[int]:
    out = []
    i = text.find(word)
    while i >= 0:
        out.append(i)
        i = text.find(word, i + 1)
    return out


def _line_starts(text: str, positions: list[int]) -> list[int]:
    out: list[int] = []
    end = -1  # the end of the line of the last position
    for p in sorted(positions):
        if p < end:
            continue
        start = text.rfind("\n", 0, p) + 1
        nl = text.find("\n", p)
        end = nl if nl >= 0 else len(text)
        out.append(start)
    return out


@lru_cache(maxsize=8)
def _trie(words: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile(_trie_regex(words))


@record(frozen=False)
class Haystack:
    """A text to search; a big one is searched only where a regex's chosen literal occurs."""

    text: str
    chosen: Mapping[re.Pattern[str], frozenset[str]] | None = None  # regex -> its literals
    lines: dict[str, list[int]] | None = None  # literal -> starts of lines that may hold it

    @cached_property
    def folded(self) -> str:
        """The text casefolded, as anchors are: a regex whose every anchor is missing here
        cannot match."""
        return self.text.casefold()

    def _windows(self, rx: re.Pattern[str]) -> list[tuple[int, int]] | None:
        if self.chosen is None or self.lines is None or rx not in self.chosen:
            return None
        starts = sorted({s for w in self.chosen[rx] for s in self.lines.get(w, ())})
        text = self.text
        out: list[tuple[int, int]] = []
        for s in starts:
            if out and s < out[-1][1]:
                a = out[-1][0]
            else:
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
