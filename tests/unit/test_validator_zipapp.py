"""The artifact images carry: one deterministic zipapp of envbuild/validator/, which agrees with
the package (same checks, same verdicts) and runs without the rest of envbuild."""

from __future__ import annotations

import io
import json
import os
import shutil
import zipfile
from pathlib import Path

from envbuild.render.context import validator_source
from envbuild.validator import zipapp
from tests.support.validator import PACKAGE_DIR


def test_zipapp_is_byte_identical_across_builds(tmp_path: Path) -> None:
    """Same sources, other checkout (other mtimes, umask): same bytes, so the spec hash, the
    build context and the image layer do not move."""
    first = zipapp.build()
    copy = tmp_path / "validator"
    shutil.copytree(PACKAGE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    for i, path in enumerate(sorted(p for p in copy.rglob("*") if p.is_file())):
        os.utime(path, (1_000_000_000 + i, 1_700_000_000 + i * 7))
        path.chmod(0o600 if i % 2 else 0o755)
    (copy / "__pycache__").mkdir()
    (copy / "__pycache__" / "rules.cpython-311.pyc").write_bytes(b"junk")
    assert zipapp.build(copy) == first == zipapp.build()
    from envbuild.matrix import load
    from envbuild.validator import rules

    m = load()
    data = json.dumps(rules.linux_driver_rule(m.extra["wsl2"]), sort_keys=True).encode()
    assert validator_source(m) == zipapp.build(data={rules.LINUX_DRIVER_DATA: data})
    assert data in validator_source(m)  # the matrix's driver packages travel in the zipapp


def test_zipapp_entries_are_sorted_with_fixed_metadata() -> None:
    with zipfile.ZipFile(io.BytesIO(zipapp.build())) as zf:
        infos = zf.infolist()
        names = [i.filename for i in infos]
        assert names == sorted(names)
        assert "__main__.py" in names and "envbuild/__init__.py" in names
        assert {f"envbuild/validator/{p.relative_to(PACKAGE_DIR).as_posix()}"
                for p in PACKAGE_DIR.rglob("*.py")} <= set(names)
        assert not any(n.endswith(".pyc") for n in names)
        assert {i.date_time for i in infos} == {zipapp.FIXED_TIME}
        assert {i.external_attr >> 16 for i in infos} == {0o100644}
        assert "validator" not in zf.read("envbuild/__init__.py").decode().split('"""')[0]
