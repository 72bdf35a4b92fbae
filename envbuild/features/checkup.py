"""The checks that only read and report: this host (`envbuild doctor`) and the version matrix
(`envbuild matrix check`). Nothing here prints."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from envbuild.common.errors import UsageError
from envbuild.common.record import record

if TYPE_CHECKING:
    from envbuild.doctor.model import Finding, HostFacts, Recommendation
    from envbuild.matrix import Problem


@record
class Diagnosis:
    findings: list[Finding]
    recommendation: Recommendation
    facts: HostFacts

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
    findings, rec = evaluate.diagnose(facts, matrix.load(matrix_dir), Request(cuda=cuda.strip()))
    return Diagnosis(findings, rec, facts)


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
