"""CLI tests: the real `envbuild` (and the validator, the packaging tools) as separate processes,
no Docker. The runner is tests.support.run_cli; the matrix fixture comes from tests/conftest.py."""
