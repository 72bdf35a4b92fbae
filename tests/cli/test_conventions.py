"""What the README documents works as documented (issue 20, class 4): `--torch X.Y.Z+TAG` as
`pip list` prints it, `resolve --python-source`, the packages envbuild installs itself refused
as user packages, and an option given an empty value refused instead of ignored."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from envbuild.matrix import Matrix


def _run(*argv: str) -> tuple[int, str, str]:
    from envbuild.cli import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_cli_resolve_names_the_variant(matrix: Matrix) -> None:
    rc, out, err = _run("resolve", "--torch", "2.5.1+cu121", "--json")
    assert rc == 0, err
    spec = json.loads(out)
    assert (spec["torch"], spec["variant"], spec["target"]) == ("2.5.1", "cu121", "cuda")
    rc, _, err = _run("resolve", "--torch", "2.5.1+cu121", "--target", "cpu")
    assert rc == 2 and err.startswith("error: --torch 2.5.1+cu121 is a CUDA wheel")
    assert "hint: --torch 2.5.1 alone" in err


# ---------------------------------------------------------------- resolve --python-source


@pytest.mark.parametrize("source", ["os", "standalone"])
def test_resolve_takes_python_source_and_shows_it(source: str) -> None:
    rc, out, err = _run("resolve", "--target", "cpu", "--torch", "2.13.0", "--os", "debian12",
                        "--python", "3.11", "--python-source", source)
    assert rc == 0, err
    assert f"python       3.11 ({source})" in out
    rc, out, _ = _run("resolve", "--target", "cpu", "--torch", "2.13.0", "--os", "debian12",
                      "--python", "3.11", "--python-source", source, "--json")
    assert json.loads(out)["python_source"] == source


def test_resolve_python_source_agrees_with_render(matrix: Matrix, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Generated over OSes x Pythons: `resolve --python-source os` is refused exactly when
    render refuses it (the OS does not ship that Python), with the same exit code."""
    cases = [(o.id, py) for o in matrix.oses if o.id != "macos"
             for py in ("3.10", "3.11", "3.12", "3.13")]
    refused = 0
    for os_id, py in cases:
        args = ["--target", "cpu", "--os", os_id, "--python", py, "--python-source", "os"]
        rc_resolve, _, err = _run("resolve", *args)
        rc_render, _, _ = _run("render", *args, "--out", str(tmp_path / f"{os_id}-{py}"))
        assert rc_resolve == rc_render, (os_id, py, err)
        if rc_resolve == 2:
            refused += 1
            assert f"{os_id} does not ship Python {py}" in err and "hint: " in err
    assert 0 < refused < len(cases)


def test_render_refuses_a_second_torch_or_python(tmp_path) -> None:  # type: ignore[no-untyped-def]
    for flag, value in (("--conda", "pytorch"), ("--conda", "python=3.8"), ("--pip", "torch")):
        rc, _, err = _run("render", "--target", "cpu", flag, value, "--out", str(tmp_path / "o"))
        assert rc == 2 and err.count("error: ") == 1 and "\nhint: " in err, err
        assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- an empty value is not absent


@pytest.mark.parametrize("flag", ["--target", "--cuda", "--rocm", "--torch", "--python",
                                  "--driver", "--os", "--flavor", "--pip-index-url",
                                  "--torch-index-url", "--base-image", "--python-source"])
@pytest.mark.parametrize("value", ["", " "])
def test_an_empty_value_is_a_usage_error(flag: str, value: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rc, _, err = _run("render", "--target", "cpu", flag, value, "--out", str(tmp_path / "o")) \
        if flag != "--target" else _run("render", flag, value, "--out", str(tmp_path / "o"))
    assert rc == 2 and err.startswith("error: ") and "\nhint: " in err, err
