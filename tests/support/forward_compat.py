"""Helpers shared by the forward_compat tests and others (moved out of test_forward_compat.py)."""

from __future__ import annotations

import io
import tarfile

from tests.support import FIXTURES

MANIFEST = FIXTURES / "compat" / "redistrib_13.2.2.json"


def _standin_archive(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:xz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buf.getvalue()


TOP = "cuda_compat-linux-x86_64-595.71.05_cuda13.2-archive"

