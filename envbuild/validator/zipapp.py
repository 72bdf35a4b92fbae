"""Build the validator as one deterministic zipapp (stdlib only).

Images carry the validator as a single file, /opt/envbuild/validator.pyz, that Python runs
directly. The archive is reproducible byte for byte: entries sorted, fixed timestamps and
permissions, stored uncompressed (deflate output may differ between zlib versions), so the
build context, the spec hash and the image layers do not change unless the validator does.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Mapping
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
MAIN = (
    '"""envbuild\'s validator as a zipapp: python validator.pyz --help"""\n'
    "import sys\n\n"
    "from envbuild.validator.supervisor import main\n\n"
    "sys.exit(main())\n"
)
STUB_INIT = ('"""Only envbuild\'s validator (envbuild.validator) is in this archive; the rest of '
             'envbuild is not."""\n')


def entries(package_dir: Path = PACKAGE_DIR,
            data: Mapping[str, bytes] | None = None) -> dict[str, bytes]:
    """Archive name -> content: a __main__.py, a stub envbuild/__init__.py, the package's
    modules, its subpackages' included (sources only, no caches), and `data` files beside them
    (matrix facts it reads)."""
    files = {"__main__.py": MAIN.encode(), "envbuild/__init__.py": STUB_INIT.encode()}
    files.update({f"envbuild/validator/{name}": content for name, content in (data or {}).items()})
    for path in sorted(package_dir.rglob("*.py")):
        files[f"envbuild/validator/{path.relative_to(package_dir).as_posix()}"] = path.read_bytes()
    return files


def build(package_dir: Path = PACKAGE_DIR, data: Mapping[str, bytes] | None = None) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        for name, content in sorted(entries(package_dir, data).items()):
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.create_system = 3  # Unix, wherever it is built
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_STORED
            zf.writestr(info, content)
    return buf.getvalue()
