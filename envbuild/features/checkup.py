"""The checks that only read and report: this host (`envbuild doctor`) and the version matrix
(`envbuild matrix check`). Nothing here prints."""

from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.common.errors import UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    from envbuild.doctor.collect_env import Report
    from envbuild.doctor.model import Finding, HostFacts, Recommendation
    from envbuild.matrix import Matrix, Problem


@record
class Diagnosis:
    findings: list[Finding]
    recommendation: Recommendation
    facts: HostFacts
    host: dict[str, object] = field(default_factory=dict)  # driver, GPUs, hostname as data

    @property
    def failed(self) -> bool:
        from envbuild.doctor.model import Severity

        return any(f.severity is Severity.ERROR for f in self.findings)


def doctor(*, cuda: str = "", facts_dir: Path | None = None, save: Path | None = None,
           matrix_dir: Path | None = None) -> Diagnosis:
    """Probe this host (or read facts recorded with `save` from facts_dir), record them into
    `save` if given, and diagnose them; `cuda` asks whether the host can run CUDA X.Y."""
    from envbuild import matrix
    from envbuild.doctor import evaluate, probes, record
    from envbuild.doctor.model import Request

    facts = record.load(facts_dir) if facts_dir is not None else probes.collect()
    if save is not None:
        record.save(facts, save)
    m = matrix.load(matrix_dir)
    findings, rec = evaluate.diagnose(facts, m, Request(cuda=cuda.strip()))
    host = evaluate.gpu_facts(facts, m)
    if facts_dir is None:  # a live probe names its host (recorded facts keep no hostname)
        import platform

        host["hostname"] = platform.node()
    return Diagnosis(findings, rec, facts, host)


@record
class ReportCheck:
    """`envbuild doctor --collect-env`: a collect_env report judged by doctor's rules."""

    findings: list[Finding]
    recommendation: Recommendation
    facts: HostFacts
    report: Report
    unjudged: tuple[str, ...]
    pip_install: str  # the plain pip line of the recommendation ('' when there is none)
    source: str  # the file's name, or "stdin"
    size: int  # bytes read

    @property
    def failed(self) -> bool:
        """The report shows a broken setup: an error, or a warning that names a cause."""
        from envbuild.doctor.model import Severity

        return any(f.severity is Severity.ERROR or (f.severity is Severity.WARN and f.cause)
                   for f in self.findings)


def doctor_report(source: str, *, matrix_dir: Path | None = None) -> ReportCheck:
    """Read a collect_env report from the file `source` ('-': stdin), at most REPORT_BYTES,
    and judge it with doctor's rules; the recommendation comes with its plain pip line."""
    from envbuild import matrix
    from envbuild.doctor.collect_env import parse
    from envbuild.doctor.from_report import PastedError, diagnose_report
    from envbuild.features.explain import explain

    data, name = _read_report(source)
    text = _decode(data)
    report = parse(text)
    m = matrix.load(matrix_dir)
    errors = tuple(PastedError(x.id, x.title, x.cause, x.fix, x.line)
                   for x in explain(text, m) if not x.harmless)
    d = diagnose_report(report, m, errors)
    python = ".".join(d.facts.python.get("version", "").split(".")[:2])
    return ReportCheck(d.findings, d.recommendation, d.facts, report, d.unjudged,
                       pip_line(d.recommendation, m, python, d.facts.system), name, len(data))


def _decode(data: bytes) -> str:
    """UTF-8 (bad bytes replaced), or UTF-16 as Windows PowerShell 5's `>` writes it."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(data) > 64 and data[1:64:2].count(0) > 24):
        codec = "utf-16" if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "utf-16-le"
        return data.decode(codec, errors="replace").lstrip("\ufeff")
    return data.decode("utf-8", errors="replace").lstrip("\ufeff")


def _read_report(source: str) -> tuple[bytes, str]:
    import os
    import sys

    from envbuild.common import boundedio
    from envbuild.doctor.collect_env import REPORT_BYTES

    what, hint = "collect_env report", ("save it with `python -m torch.utils.collect_env > "
                                        "env.txt`, or pipe it on stdin")
    if not source:
        raise UsageError("--collect-env needs a file name (or - for stdin)", hint)
    if source == "-":
        if sys.stdin is None or sys.stdin.isatty():
            raise UsageError("no collect_env report on stdin",
                             "pipe it in: `python -m torch.utils.collect_env | envbuild doctor "
                             "--collect-env -`, or give a file")
        boundedio.check_stream(sys.stdin.fileno(), "stdin", what, hint)
        stream, name = sys.stdin.buffer, "stdin"
        data = stream.read(REPORT_BYTES + 1)
    else:
        path = Path(source)
        with boundedio.open_log(path, what, hint) as fh:
            try:
                data = fh.read(REPORT_BYTES + 1)
            except OSError as exc:
                raise UsageError(f"cannot read {boundedio.path_text(path)}: "
                                 f"{os.strerror(exc.errno or 5)}", hint) from None
        name = str(path)
    if len(data) > REPORT_BYTES:
        raise UsageError(f"{boundedio.path_text(name)}: more than "
                         f"{boundedio.size_text(REPORT_BYTES)}: no collect_env report is that "
                         "long (a real one is 2-30 KB)",
                         "give only the report: the output of `python -m torch.utils.collect_env`")
    if not data.strip():
        raise UsageError(f"{boundedio.path_text(name)}: the report is empty", hint)
    return data, name


def pip_line(rec: Recommendation, m: Matrix, python: str = "", system: str = "Linux") -> str:
    """The recommendation as one `pip install` for people who do not use envbuild, in that
    host's Python (`python`: its X.Y) on that host's system: the exact torch builds and their
    index; '' when no torch envbuild knows installs there."""
    import shlex

    from envbuild.common.errors import EnvbuildError
    from envbuild.core.request import Request as Ask
    from envbuild.core.resolve import resolve
    from envbuild.render.context import torch_pins

    try:
        spec = resolve(Ask(target=rec.target, cuda=rec.cuda or None, torch=rec.torch or None,
                           rocm=rec.rocm or None, driver=rec.driver or None, gpus=rec.gpus,
                           python=python or None, platform=rec.platform or None), m)
    except EnvbuildError:
        return ""
    if system == "Darwin":  # PyPI's macOS wheels: no local tag, no index of PyTorch's own
        pins = [p.partition("+")[0] for p in torch_pins(spec)]
        return " ".join(shlex.quote(a) for a in ["pip", "install", *pins])
    # PyPI's wheels carry no local version (+cu130): pinned without it where PyPI is the index
    args = ["pip", "install", *torch_pins(spec, "pypi.org" not in (spec.index_url or ""))]
    if spec.index_url and "pypi.org" not in spec.index_url:
        args += ["--index-url", spec.index_url]
    return " ".join(shlex.quote(a) for a in args)


@record
class MatrixCheck:
    directory: Path
    problems: list[Problem]
    unverified: list[tuple[str, str, tuple[str, ...]]]  # (file, row, sources)


def check_matrix(directory: Path | None = None) -> MatrixCheck:
    """Schema, cross references and the semantic rules of the matrix in `directory` (default:
    the shipped one): every problem, and the rows not verified against a primary source."""
    from envbuild.common.resources import matrix_dir
    from envbuild.matrix import check, parse
    from envbuild.matrix.rules import unverified

    d = directory or matrix_dir()
    if not d.is_dir():
        raise UsageError(f"{d} is not a directory", "give --dir the folder with the *.toml files")
    problems = check(d)
    return MatrixCheck(d, problems, unverified(parse(d)[0]))
