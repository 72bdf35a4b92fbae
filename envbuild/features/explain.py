"""`envbuild explain`: name the cause and the fix of pasted error text (pure matcher).

The knowledge is data: matrix/signatures.toml holds each failure signature (id, title, regexes,
cause, fix templates, sources) and the extractors that pull versions out of the text. Version
numbers in a fix (driver floors, CUDA for a driver, wheels covering an arch, MPS floors, the
toolkits that compile for an arch) are computed here from the version Matrix, never written as
literals.

Logs can be large (whole training runs pasted or piped in); read_log() keeps the head and the
tail of an input over the limit, because the traceback that matters is at the end.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from functools import cache, cached_property
from pathlib import Path
from typing import Any, BinaryIO

from envbuild.common import boundedio, logscan
from envbuild.common.echo import escaped
from envbuild.common.errors import MatrixError
from envbuild.common.logscan import MIN_ANCHOR, Haystack, Scanner, anchor
from envbuild.common.record import record
from envbuild.common.versions import branch_of, major_of, minor_of, version_key
from envbuild.core import compat, gpus, wsl
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix
from envbuild.validator import rules

FLAGS = re.IGNORECASE | re.MULTILINE
# A version, a package or an op name found in the text is at most this long; a longer one is no
# real value (a hostile paste) and is not put into a fix.
MAX_FIELD = 80
# Fields derive() computes from the matrix; fix templates may use these and extractor groups.
DERIVED = frozenset({
    "index_base", "driver_cuda", "driver_branch", "cuda", "cuda_major", "cuda_floor",
    "cuda_floor_branch", "require_driver", "require_floor", "fallback_cuda", "fallback_tag",
    "fallback_driver", "fallback_torch", "fallback_how", "cc", "cover_tag", "cover_torch",
    "cover_cuda",
    "cover_none", "jit_cuda", "newest_torch", "mps_min", "mps_torch", "mps_none", "macos_meets",
    "rocm_cover",
    "rocm_cover_torch", "gfx_none", "arch_cc", "arch_name", "arch_min_cuda", "arch_removed_after",
    "arch_unknown", "xf_same", "xf_cpu_over", "xf_envbuild_torch", "wsl_purge",
    "wsl_driver_families", "wsl_tcc_fix", "wsl_blocked_checklist"})


@record
class Rx:
    """A catalogue regex, compiled at its first search (~250 compiles were most of explain's
    start-up). `anchor`: casefolded literals one of which every match holds (logscan.anchor),
    None when it has none; a text holding none of them is not searched, nor the regex
    compiled."""

    pattern: str
    where: str  # where signatures.toml has it, for a bad regex's message
    anchor: frozenset[str] | None

    @cached_property
    def compiled(self) -> re.Pattern[str]:
        return _compile(self.pattern, self.where)

    def search(self, hay: Haystack) -> re.Match[str] | None:
        return hay.search(self.compiled) if self._may_match(hay) else None

    def finditer(self, hay: Haystack) -> Iterator[re.Match[str]]:
        return hay.finditer(self.compiled) if self._may_match(hay) else iter(())

    def _may_match(self, hay: Haystack) -> bool:
        return self.anchor is None or any(a in hay.folded for a in self.anchor)


@record
class Signature:
    id: str
    title: str
    # any entry matching is a hit; an entry is one regex or several that must all match
    patterns: tuple[tuple[Rx, ...], ...]
    cause: str
    fix: tuple[str, ...]  # templates, most specific first; the first whose fields are known wins
    source: tuple[str, ...]
    confidence: float
    unless: tuple[Rx, ...] = ()  # any of these in the text: not this signature
    # a message that is no error (a warning printed on healthy hosts): named when seen, listed
    # after every real error, and marked harmless in the output
    harmless: bool = False

    def regexes(self) -> tuple[re.Pattern[str], ...]:
        return tuple(rx.compiled for entry in self.patterns for rx in entry)


@record
class Catalogue:
    signatures: tuple[Signature, ...]
    extractors: tuple[Rx, ...]
    sources: Mapping[str, Mapping[str, Any]]
    doctor: Mapping[str, Any]

    scan: bool = True  # search big texts by anchor (logscan); False: search them whole

    @cached_property
    def scanner(self) -> Scanner | None:
        """Built at the first big text: parsing ~250 regexes costs start-up time otherwise."""
        return Scanner.of(self.regexes()) if self.scan else None

    def regexes(self) -> tuple[re.Pattern[str], ...]:
        return (*(rx.compiled for rx in self.extractors),
                *(rx for sig in self.signatures
                  for rx in (*sig.regexes(), *(u.compiled for u in sig.unless))))


@record
class Match:
    id: str
    title: str
    cause: str
    fix: str
    confidence: float
    line: str  # the log line that matched
    harmless: bool = False  # the signature's: this message is no error

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "cause": self.cause, "fix": self.fix,
                "confidence": self.confidence, "harmless": self.harmless}


def default_path() -> Path:
    from envbuild.common.resources import matrix_dir

    return matrix_dir() / "signatures.toml"


def _compile(pattern: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, FLAGS)
    except re.error as exc:
        raise MatrixError(f"signatures.toml: {where}: bad regex {pattern!r}: {exc}") from exc


# pattern -> its anchor as a sorted list (None: no anchor): what a catalogue cache keeps
Anchors = Mapping[str, list[str] | None]


def _rx(pattern: str, where: str, anchors: Anchors | None) -> Rx:
    if anchors is not None and pattern in anchors:
        found = anchors[pattern]
        return Rx(pattern, where, None if found is None else frozenset(found))
    return Rx(pattern, where, anchor(_compile(pattern, where)))


def _entry(pattern: str | list[str], where: str, anchors: Anchors | None) -> tuple[Rx, ...]:
    if isinstance(pattern, list):
        if not pattern:
            raise MatrixError(f"signatures.toml: {where}: an all-of pattern list is empty")
        return tuple(_rx(str(p), where, anchors) for p in pattern)
    return (_rx(pattern, where, anchors),)


def _flag(raw: Mapping[str, Any], key: str, sid: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise MatrixError(f"signatures.toml: signature {sid}: {key} must be true or false, "
                          f"not {value!r}")
    return value


def parse_catalogue(doc: Mapping[str, Any], anchors: Anchors | None = None) -> Catalogue:
    """The catalogue of a signatures document. Without `anchors` every regex is compiled here
    (a bad one is a MatrixError now); with the anchors a cache kept for this very document,
    each is compiled at its first search."""
    sigs = []
    for i, raw in enumerate(doc.get("signature", [])):
        sid = str(raw.get("id", f"#{i + 1}"))
        try:
            fix = raw["fix"]
            sigs.append(Signature(
                id=sid, title=str(raw["title"]),
                patterns=tuple(_entry(p, sid, anchors) for p in raw["patterns"]),
                cause=str(raw["cause"]),
                fix=tuple(fix) if isinstance(fix, list) else (str(fix),),
                source=tuple(raw.get("source", ())),
                confidence=float(raw.get("confidence", 0.9)),
                unless=tuple(_rx(p, sid, anchors) for p in raw.get("unless", ())),
                harmless=_flag(raw, "harmless", sid),
            ))
        except KeyError as exc:
            raise MatrixError(f"signatures.toml: signature {sid}: missing key {exc}") from exc
    extractors = tuple(_rx(p, "[extract]", anchors) for ps in doc.get("extract", {}).values()
                       for p in ps)
    return Catalogue(tuple(sigs), extractors, doc.get("source", {}), doc.get("doctor", {}))


def _anchors(cat: Catalogue) -> dict[str, list[str] | None]:
    every = (*cat.extractors, *(rx for sig in cat.signatures
                                for rx in (*(r for e in sig.patterns for r in e), *sig.unless)))
    return {rx.pattern: None if rx.anchor is None else sorted(rx.anchor) for rx in every}


@cache
def _load(path: Path) -> Catalogue:
    from envbuild.matrix.cache import file_cache_path, read_cached, write_cached

    cache_file = file_cache_path("signatures", path)
    cached = read_cached(cache_file) if cache_file is not None else None
    if isinstance(cached, dict) and isinstance(cached.get("doc"), dict) \
            and isinstance(cached.get("anchors"), dict):
        try:
            return parse_catalogue(cached["doc"], cached["anchors"])
        except (MatrixError, TypeError, ValueError, AttributeError):
            pass  # a cache of another shape: parsed again from the TOML
    import tomllib

    try:
        doc = boundedio.load_toml(path, "signature catalogue")
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise MatrixError(f"cannot read the error-signature catalogue {path}: {exc}") from exc
    cat = parse_catalogue(doc)
    if cache_file is not None:
        write_cached(cache_file, {"doc": doc, "anchors": _anchors(cat)})
    return cat


def load_catalogue(path: Path | None = None) -> Catalogue:
    return _load((path or default_path()).resolve())


# ---------------------------------------------------------------- version fields


def extract(text: str | Haystack, catalogue: Catalogue) -> dict[str, str]:
    """Named groups of the catalogue's extractors; the first pattern to set a name wins."""
    hay = _haystack(text, catalogue)
    out: dict[str, str] = {}
    for rx in catalogue.extractors:
        for m in rx.finditer(hay):
            for k, v in m.groupdict().items():
                if v and k not in out and len(v) <= MAX_FIELD:
                    out[k] = v.strip()
    return out


def _api_to_cuda(value: str) -> str:
    """cudaDriverGetVersion() numbers: 11040 -> '11.4', 12010 -> '12.1', 9000 -> '9.0'."""
    v = int(value)
    return f"{v // 1000}.{(v % 1000) // 10}"


def _tuple_version(text: str) -> str:
    """cuDNN version codes: '(8, 9, 2)' / 8902 -> '8.9.2'; from cuDNN 9 the code is
    major*10000 + minor*100 + patch: 90100 -> '9.1.0' (not '90.1.0')."""
    nums = re.findall(r"\d+", text)
    if len(nums) == 1 and len(nums[0]) >= 4:  # a version code: 8902, 90100
        return rules.version_code_str(int(nums[0]))
    return ".".join(nums)


def derive(f: dict[str, str], m: Matrix) -> dict[str, str]:
    """Add the fields computed from the matrix to those found in the text."""
    f = dict(f)
    f.setdefault("index_base", str(m.meta.get("torch", {}).get("index_base", "")))
    if not f["index_base"]:
        del f["index_base"]
    if "driver_api" in f and "driver_cuda" not in f:
        f["driver_cuda"] = _api_to_cuda(f["driver_api"])
    if "cu_tag" in f and "cuda" not in f:
        f["cuda"] = rules.cuda_of_tag("cu" + f["cu_tag"])
    if "require_cuda" in f:
        f.setdefault("cuda", f["require_cuda"])
        ga = compat.ga_driver(m, f["require_cuda"])
        if ga:
            f["require_driver"] = ga
        floor = compat.mvc_floor(m, major_of(f["require_cuda"]))
        if floor:
            f["require_floor"] = floor
    if f.get("cuda"):
        major = major_of(f["cuda"])
        f["cuda_major"] = str(major)
        floor = compat.mvc_floor(m, major)
        if floor:
            f["cuda_floor"] = floor
            f["cuda_floor_branch"] = str(branch_of(floor))
    driver = f.get("driver", "")
    if driver:
        f["driver_branch"] = str(branch_of(driver))
        if "driver_cuda" not in f:
            native = compat.cuda_for_driver(m, driver.replace(".x", ""))
            if native:
                f["driver_cuda"] = native
    proxy = driver.replace(".x", "")
    if not proxy and f.get("driver_cuda"):
        proxy = compat.ga_driver(m, f["driver_cuda"]) or \
            compat.mvc_floor(m, major_of(f["driver_cuda"]))
    if proxy:
        spec = _resolved(m, target="cuda", driver=proxy)
        if spec is not None and spec.torch_cuda and spec.torch_cuda != f.get("cuda"):
            f["fallback_cuda"], f["fallback_tag"] = spec.torch_cuda, spec.variant
            f["fallback_torch"], f["fallback_driver"] = minor_of(spec.torch), proxy
            f["fallback_how"] = ("natively" if compat.how_runs(m, proxy, spec.torch_cuda)
                                 == "native" else "through minor-version compatibility")
    _derive_arch(f, m)
    _derive_nvcc_arch(f, m)
    if "cudnn_compiled" in f:
        f["cudnn_compiled"] = _tuple_version(f["cudnn_compiled"])
    if "cudnn_runtime" in f:
        f["cudnn_runtime"] = _tuple_version(f["cudnn_runtime"])
    if "jit_major" in f and "jit_minor" in f:
        f["jit_cuda"] = f"{f['jit_major']}.{f['jit_minor']}"
    _derive_mac(f, m)
    _derive_xformers(f, m)
    _derive_wsl(f, m)
    if "gfx" in f:
        spec = _resolved(m, target="rocm", gpus=(f["gfx"].lower(),))
        if spec is None or not spec.rocm or \
                _resolved(m, target="rocm", rocm=spec.rocm) is None:
            f["gfx_none"] = f["gfx"]
        else:
            f["rocm_cover"], f["rocm_cover_torch"] = spec.rocm, minor_of(spec.torch)
    return f


def _derive_arch(f: dict[str, str], m: Matrix) -> None:
    cc = rules.cc_of(f.get("sm", "")) or rules.cc_of(f.get("cc", ""))
    if not cc and f.get("gpu"):
        cc = gpus.gpu_cc(m, f["gpu"])
    if not cc:
        return
    f["cc"] = cc
    if "supported" in f:
        f["supported"] = " ".join(f["supported"].split())
    sm = rules.arch_name(cc)
    spec = _resolved(m, target="cuda", gpus=(sm,))
    if spec is None or not spec.torch_cuda:
        f["cover_none"] = cc
        return
    # the command the fix prints, checked here: it must resolve to a wheel covering the GPU
    cmd = _resolved(m, target="cuda", cuda=spec.torch_cuda, torch=minor_of(spec.torch),
                    gpus=(sm,))
    if cmd is None:
        f["cover_none"] = cc
        return
    f["cover_tag"], f["cover_torch"], f["cover_cuda"] = (
        cmd.variant, minor_of(cmd.torch), spec.torch_cuda)


def _resolved(m: Matrix, **ask: Any) -> Spec | None:
    """What the resolver gives for a request (None when it refuses): every command explain
    suggests is made of its picks, so `envbuild make` accepts it."""
    from envbuild.common.errors import EnvbuildError
    from envbuild.core.request import Request
    from envbuild.core.resolve import resolve

    try:
        return resolve(Request(**ask), m)
    except EnvbuildError:
        return None


def _derive_nvcc_arch(f: dict[str, str], m: Matrix) -> None:
    """An arch nvcc refused: when the toolkits that compile for it start (gpus.toml min_cuda)
    or, for an arch a newer nvcc dropped, the last toolkit that still did (last_cuda)."""
    if "nvcc_arch" not in f:
        return
    cc = rules.cc_of(f["nvcc_arch"])
    arch = m.arch(cc) if cc else None
    if arch is None:
        f["arch_unknown"] = f["nvcc_arch"]
        return
    f["arch_cc"], f["arch_name"] = arch.cc, arch.name
    nvcc = f.get("nvcc_cuda", "")
    removed = bool(arch.last_cuda) and (not nvcc or not compat.at_least(arch.last_cuda, nvcc))
    if removed:
        f["arch_removed_after"] = arch.last_cuda
    else:
        f["arch_min_cuda"] = arch.min_cuda


def _derive_xformers(f: dict[str, str], m: Matrix) -> None:
    """xFormers' "built for PyTorch X (you have Y)": the same build (something else is wrong),
    or X as an envbuild --torch when the resolver accepts it (the fix may then suggest it)."""
    built, have = f.get("xf_built"), f.get("xf_have")
    if not built or not have:
        return
    if built.lower() == have.lower():
        f["xf_same"] = have
        return
    from envbuild.common.errors import EnvbuildError
    from envbuild.core.request import Request
    from envbuild.core.resolve import resolve

    if rules.local_tag(have.lower()) == "cpu" and rules.local_tag(built.lower()) != "cpu":
        f["xf_cpu_over"] = have
    try:
        resolve(Request(torch=built), m)
    except EnvbuildError:
        return
    f["xf_envbuild_torch"] = built


def _derive_wsl(f: dict[str, str], m: Matrix) -> None:
    """The WSL 2 advice in doctor's words (envbuild/core/wsl.py, from matrix/wsl2.toml): the
    purge command for a driver package the log names, the driver families, the TCC switch and
    the checklist of "GPU access blocked"."""
    if wsl.driver_globs(m):
        f["wsl_driver_families"] = wsl.families(m)
        if "wsl_linux_driver" in f and rules.driver_package(f["wsl_linux_driver"],
                                                            wsl.driver_globs(m)):
            f["wsl_purge"] = wsl.purge([f["wsl_linux_driver"]])
    if wsl.tcc_fix(m):
        f["wsl_tcc_fix"] = wsl.tcc_fix(m)
    checklist = wsl.blocked_checklist(m)
    if checklist:
        f["wsl_blocked_checklist"] = wsl.numbered(checklist)


def _derive_mac(f: dict[str, str], m: Matrix) -> None:
    newest = compat.newest_torch(m)
    if newest is not None and ("macos" in f or "macos_need" in f):
        f["newest_torch"] = newest.version
        floor = compat.mps_floor(m, newest.version)
        if floor:
            f["mps_min"] = floor
    if "macos" in f:
        rel = compat.mps_torch(m, f["macos"])
        if rel is not None:
            f["mps_torch"] = rel.version
        else:
            f["mps_none"] = f["macos"]
        floors = [version_key(x) for x in (compat.mps_floor(m, r.version) for r in m.torch) if x]
        if floors and version_key(f["macos"]) >= max(floors):
            f["macos_meets"] = f["macos"]  # no torch release's floor explains "needs macOS"


def _fields_of(template: str) -> set[str]:
    import string  # here: explain's start-up does not need it

    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def render_fix(sig: Signature, fields: Mapping[str, str]) -> str:
    for template in sig.fix:
        if _fields_of(template) <= fields.keys():
            return template.format_map(dict(fields))
    return sig.fix[-1]


# ---------------------------------------------------------------- reading a log

MAX_LOG_BYTES = 8 << 20  # what is matched at most: the head and the tail of a larger input
HEAD_BYTES = 1 << 20  # of which the start (versions printed at start-up); the rest is the end
CHUNK = 1 << 20


@record
class LogText:
    text: str
    total_bytes: int  # the size of the whole input
    cut: bool = False  # only the start and the end were read:
    head_bytes: int = 0  # the bytes kept from the start ...
    tail_bytes: int = 0  # ... and from the end

    def to_json(self) -> dict[str, Any]:
        return {"bytes": self.total_bytes, "cut": self.cut,
                "kept_head_bytes": self.head_bytes if self.cut else self.total_bytes,
                "kept_tail_bytes": self.tail_bytes if self.cut else 0}

    def note(self) -> str:
        def mib(n: int) -> str:
            return f"{n / (1 << 20):.1f} MiB"

        return (f"the input is {mib(self.total_bytes)}: read its first {mib(self.head_bytes)} "
                f"and its last {mib(self.tail_bytes)} (where the traceback is); "
                f"{mib(self.total_bytes - self.head_bytes - self.tail_bytes)} in the middle "
                "were skipped")


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _join(head: bytes, tail: bytes, total: int) -> LogText:
    """Cut at line ends so no half line is matched; mark the gap in the text."""
    nl = head.rfind(b"\n")
    head = head[:nl + 1] if nl >= 0 else head
    nl = tail.find(b"\n")
    tail = tail[nl + 1:] if 0 <= nl < len(tail) - 1 else tail
    gap = total - len(head) - len(tail)
    marker = f"\n[... envbuild explain: {gap} bytes of the log left out here ...]\n"
    return LogText(_decode(head) + marker + _decode(tail), total, True, len(head), len(tail))


def _size(stream: BinaryIO, name: str) -> int:
    """The size of a regular file (or an in-memory buffer); -1 for a pipe, FIFO or socket,
    which are streamed. A device (/dev/zero seeks to 0 and never ends) or a directory is
    refused (UsageError)."""
    try:
        fd = stream.fileno()
    except (OSError, ValueError):  # io.UnsupportedOperation: a BytesIO
        fd = -1
    if fd >= 0:
        if not boundedio.check_stream(fd, name):
            return -1
        stream.seek(0)
        return os.fstat(fd).st_size
    try:
        size = stream.seek(0, 2)
        stream.seek(0)
    except (OSError, ValueError):
        return -1
    return size


def read_log(stream: BinaryIO, limit: int = MAX_LOG_BYTES, head: int = HEAD_BYTES,
             name: str = "stdin", most: int = boundedio.STREAM_BYTES) -> LogText:
    """The whole input if it fits in `limit` bytes, else its first `head` and last
    `limit - head` bytes. A regular file is not read in the middle; a pipe is streamed once,
    keeping only the tail window, and refused past `most` bytes (UsageError); a device is
    refused before a byte is read."""
    head = min(head, limit)
    keep_tail = limit - head
    size = _size(stream, name)
    if size >= 0:
        if size <= limit:
            data = stream.read(limit)  # a file grown since: what fits
            return LogText(_decode(data), len(data))
        first = stream.read(head)
        stream.seek(max(size - keep_tail, len(first)))
        return _join(first, stream.read(keep_tail), size)
    first = stream.read(head)
    total = len(first)
    if total < head:
        return LogText(_decode(first), total)
    window = bytearray()
    while chunk := stream.read(CHUNK):
        total += len(chunk)
        if total > most:
            raise boundedio.too_long_stream(name)
        window += chunk
        if len(window) > keep_tail + CHUNK:
            del window[:len(window) - keep_tail]
    if total <= limit:
        return LogText(_decode(first + bytes(window)), total)
    return _join(first, bytes(window[len(window) - keep_tail:] if keep_tail else b""), total)


# ---------------------------------------------------------------- matching


def _haystack(text: str | Haystack, cat: Catalogue) -> Haystack:
    if isinstance(text, Haystack):
        return text
    if len(text) < logscan.SCAN_FROM or cat.scanner is None:
        return Haystack(text)
    return cat.scanner.haystack(text)


def _line_of(text: str, start: int) -> str:
    """The matched line as a report shows it: terminal escapes and other controls of the log
    escaped (\\x1b), at most 240 characters."""
    begin = text.rfind("\n", 0, start) + 1
    end = text.find("\n", start)
    line = escaped(text[begin:end if end >= 0 else len(text)].strip())
    return line if len(line) <= 240 else line[:237] + "..."


def explain(text: str, matrix: Matrix, catalogue: Catalogue | None = None) -> list[Match]:
    """Every signature the text shows, best first, with its fix filled from text and matrix;
    harmless messages (no error) after every real one, whatever their confidence."""
    cat = catalogue or load_catalogue()
    hay = _haystack(text, cat)
    base = extract(hay, cat)
    found: list[tuple[bool, float, int, Match]] = []
    for order, sig in enumerate(cat.signatures):
        if any(rx.search(hay) for rx in sig.unless):
            continue
        hits = []
        for entry in sig.patterns:
            found_all = [m for rx in entry if (m := rx.search(hay)) is not None]
            if len(found_all) == len(entry):
                hits.append(found_all)
        if not hits:
            continue
        groups = {k: v.strip() for h in hits for m in h for k, v in m.groupdict().items()
                  if v and len(v) <= MAX_FIELD}
        fields = derive({**base, **groups}, matrix)
        confidence = round(min(0.99, sig.confidence + 0.02 * (len(hits) - 1)), 2)
        first = min((h[0] for h in hits), key=lambda m: m.start())
        found.append((sig.harmless, confidence, order, Match(
            sig.id, sig.title, sig.cause, escaped(render_fix(sig, fields)), confidence,
            _line_of(text, first.start()), sig.harmless)))
    found.sort(key=lambda t: (t[0], -t[1], t[2]))
    return [m for _, _, _, m in found]


def check_catalogue(cat: Catalogue, known_sources: set[str]) -> list[str]:
    """Integrity problems: duplicate ids, unknown source ids, templates without a fallback."""
    problems = [f"[doctor]: source {s!r} is not defined" for s in cat.doctor.get("source", ())
                if s not in cat.sources and s not in known_sources]
    seen: set[str] = set()
    for sig in cat.signatures:
        if sig.id in seen:
            problems.append(f"{sig.id}: duplicate id")
        seen.add(sig.id)
        if not sig.patterns:
            problems.append(f"{sig.id}: no patterns")
        if not sig.source:
            problems.append(f"{sig.id}: no source")
        for s in sig.source:
            if s not in cat.sources and s not in known_sources:
                problems.append(f"{sig.id}: source {s!r} is not defined")
        if _fields_of(sig.fix[-1]):
            problems.append(f"{sig.id}: the last fix template must need no fields")
        groups = {g for rx in (*(x.compiled for x in cat.extractors), *sig.regexes())
                  for g in rx.groupindex}
        for template in sig.fix:
            unknown = _fields_of(template) - groups - DERIVED
            if unknown:
                problems.append(f"{sig.id}: fix uses unknown fields {sorted(unknown)}")
        if not 0 < sig.confidence <= 1:
            problems.append(f"{sig.id}: confidence must be in (0, 1]")
        problems += [f"{sig.id}: regex {rx.pattern!r} needs a literal of >= {MIN_ANCHOR} "
                     "characters (big logs are searched by it)"
                     for rx in (*(r for e in sig.patterns for r in e), *sig.unless)
                     if rx.anchor is None]
    problems += [f"[extract]: regex {rx.pattern!r} needs a literal of >= {MIN_ANCHOR} characters"
                 for rx in cat.extractors if rx.anchor is None]
    return problems
