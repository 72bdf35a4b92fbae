"""Unit tests: pure, in this process (no CLI, no other process, no Docker). The shared fixtures
(matrix) come from tests/conftest.py."""
