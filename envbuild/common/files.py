"""Writing one file atomically (readers see the old content or the new, never a part): the
host's door to the helper the validator carries, since the validator is the bottom layer and
ships alone in images."""

from envbuild.validator.files import NEW_FILE_MODE, atomic_file, write_atomic

__all__ = ["NEW_FILE_MODE", "atomic_file", "write_atomic"]
