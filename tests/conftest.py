"""What every kind of test shares: the matrix fixture, and the order the suite runs in.

Each kind has its own conftest.py beside its tests: unit/ (pure, no processes), cli/ (the CLI and
other processes, no Docker), integration/ (Docker, a registry, Slurm). Helpers live in
tests/support, never in a test module."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from envbuild.matrix import Matrix, load

# A run started in the background of a script inherits SIGINT ignored, and an ignored signal stays
# ignored across exec: every envbuild the Ctrl-C tests start would then never see their Ctrl-C.
# A handler (not SIG_IGN) resets to the default in a child, so children get Python's own.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def matrix() -> Matrix:
    return load()


# Their platform images share inputs (bases, wheels, options): run together, BuildKit's cache of
# one serves the next before anything prunes it (in file-name order a fresh-clone run spent 546 s
# rebuilding them in the last module).
HEAVY_FIRST = ("test_cuda_image.py", "test_extension_image.py", "test_arm64_image.py",
               "test_team_multiarch.py")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    """The run order is explicit, not a matter of file names: the `slow` tests (real builds) after
    the others, the modules that build CUDA torch images first among them and back to back, and
    the `leak_check` tests at the very end, after everything that could leak. The sort is
    stable: inside each group the collection order stays."""
    def rank(item: pytest.Item) -> tuple[int, int]:
        if item.get_closest_marker("leak_check"):
            return 2, 0
        if not item.get_closest_marker("slow"):
            return 0, 0
        name = Path(item.path).name
        return 1, HEAVY_FIRST.index(name) if name in HEAVY_FIRST else len(HEAVY_FIRST)

    items.sort(key=rank)
