"""The one exception family of envbuild, and its documented exit codes.

Every error a user can cause carries a one-line message and a hint; the CLI
catches them at the edge and never shows a traceback.
"""

from __future__ import annotations

from dataclasses import field

from envbuild.common.record import record

EXIT_OK = 0
EXIT_FAILED = 1  # unsatisfiable request, a failed check, a failed build
EXIT_USAGE = 2  # malformed input, unknown option values, hostile package names
EXIT_CANNOT_RUN = 3  # the environment is missing something: Docker engine, BuildKit client, ...
EXIT_INTERRUPTED = 130  # Ctrl-C


@record(frozen=False)
class EnvbuildError(Exception):
    message: str
    hint: str  # required: every error says what to do next (tests/{unit,cli}/test_hints.py)
    alternatives: list[str] = field(default_factory=list)
    exit_code: int = EXIT_FAILED
    # each alternative as data: {"text", "requests": [{option: value}, ...]} (what to change)
    fixes: list[dict[str, object]] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, object]:
        return {
            "message": self.message,
            "hint": self.hint,
            "alternatives": list(self.alternatives),
            "fixes": list(self.fixes),
            "exit_code": self.exit_code,
        }


class UsageError(EnvbuildError):
    """Malformed or hostile input: exit 2."""

    def __init__(self, message: str, hint: str, alternatives: list[str] | None = None):
        super().__init__(message, hint, list(alternatives or []), EXIT_USAGE)


class ConflictError(EnvbuildError):
    """A well-formed request that the matrix cannot satisfy: exit 1."""

    def __init__(self, message: str, hint: str, alternatives: list[str] | None = None):
        super().__init__(message, hint, list(alternatives or []), EXIT_FAILED)


class MatrixError(EnvbuildError):
    """The shipped or given matrix data is broken: exit 1."""

    def __init__(self, message: str, hint: str = "run `envbuild matrix check` for every problem"):
        super().__init__(message, hint, [], EXIT_FAILED)


class EnvironmentProblem(EnvbuildError):
    """Something outside envbuild is missing (Docker engine, a tool): exit 3."""

    def __init__(self, message: str, hint: str):
        super().__init__(message, hint, [], EXIT_CANNOT_RUN)
