"""Every error is one `error:` line plus a `hint:` and a documented exit code (README, Exit
codes): proved twice. Statically, every construction of an envbuild error in envbuild/ passes a
non-empty hint (the hint is also a required argument, so mypy refuses a call without one). At the
CLI, a generated table of malformed values for every validated option of every command, and
click's own usage errors, each come out as one `error:` line, a `hint:` line and exit 2."""

from __future__ import annotations

import contextlib
import io
import json
import string
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def _run(argv: list[str]) -> tuple[int, str, str]:
    from envbuild.cli import run

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(argv)
    return rc, out.getvalue(), err.getvalue()


def assert_one_error_with_hint(rc: int, stderr: str, want_rc: int = 2) -> None:
    lines = stderr.splitlines()
    assert rc == want_rc, stderr
    assert "Traceback" not in stderr
    assert [ln for ln in lines if ln.startswith("error: ")] == lines[:1], stderr
    assert len(lines) >= 2 and lines[1].startswith("hint: ") and lines[1][6:].strip(), stderr
    assert all(ln.startswith("  - ") for ln in lines[2:]), stderr


WORD = st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=10).map(
    lambda w: "zq" + w)  # no target, GPU, OS, shell or version starts so
CONTROL = st.tuples(WORD, st.sampled_from([chr(c) for c in (*range(0, 9), *range(10, 32), 127)]),
                    WORD).map("".join)
LONG = st.integers(300, 5000).map(lambda n: "9" * n)
FULLWIDTH = st.sampled_from(["１２.２", "３.１１", "٥٣٥.١٠٤", "2.٥"])
BLANK = st.sampled_from(["", " ", "\t"])
OPTION = st.sampled_from(["-x", "--bogus"])
ANY_BAD = st.one_of(WORD, CONTROL, LONG, FULLWIDTH, BLANK)
PACKAGE_BAD = st.one_of(CONTROL, LONG, BLANK, OPTION.map(lambda o: o + "y"))

# Every option whose values envbuild checks, per class of command, with the values that are
# malformed for it. Unknown words are malformed for every option that names a thing.
REQUEST_OPTIONS = {o: ANY_BAD for o in (
    "--target", "--cuda", "--rocm", "--torch", "--python", "--driver", "--os", "--flavor",
    "--gpu", "--without", "--python-source")}
CONTEXT_OPTIONS = {
    "--pip": PACKAGE_BAD, "--apt": st.one_of(PACKAGE_BAD, WORD.map(lambda w: w + "-")),
    "--conda": st.one_of(PACKAGE_BAD, st.sampled_from(["pytorch", "python=3.8", "torch"])),
    "--pip-index-url": ANY_BAD, "--torch-index-url": ANY_BAD, "--pip-extra-index-url": ANY_BAD,
    "--torch-index-kind": ANY_BAD, "--base-image": st.one_of(CONTROL, BLANK, OPTION),
    "--user": st.one_of(CONTROL, LONG, BLANK, st.sampled_from(["root:x", "a b", "nobody"])),
}
TABLE: dict[tuple[str, ...], dict[str, st.SearchStrategy[str]]] = {
    ("resolve",): REQUEST_OPTIONS,
    ("render",): {**REQUEST_OPTIONS, **CONTEXT_OPTIONS, "--format": ANY_BAD,
                  "--cuda-redist-url": st.one_of(CONTROL, BLANK, WORD)},
    ("make",): {**REQUEST_OPTIONS, **CONTEXT_OPTIONS, "--progress": ANY_BAD,
                "--proxy": st.one_of(CONTROL, BLANK, WORD)},
    ("bundle",): {**REQUEST_OPTIONS, **{k: v for k, v in CONTEXT_OPTIONS.items()
                                        if k != "--conda"},
                  "--proxy": st.one_of(CONTROL, BLANK, WORD)},
    ("build", "."): {"--progress": ANY_BAD},
    ("matrix", "refresh"): {"--source": ANY_BAD},
    ("cluster", "render", "img:1", "--k8s"): {"--min-bytes": ANY_BAD, "--max-bytes": ANY_BAD,
                                              "--runtime": st.one_of(WORD, CONTROL, BLANK)},
}
CASES = [(cmd, opt) for cmd, opts in TABLE.items() for opt in opts]


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Nothing a malformed value lets through may reach a real engine or the user's state."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("ENVBUILD_DOCKER", str(tmp_path / "no-docker"))
    return tmp_path


@pytest.mark.parametrize(("cmd", "option"), CASES, ids=[" ".join((*c[:2], o)) for c, o in CASES])
@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_malformed_option_values_are_one_error_with_a_hint(
        cmd: tuple[str, ...], option: str, data: st.DataObject, no_engine: Path) -> None:
    value = data.draw(TABLE[cmd][option], label=option)
    argv = [*cmd, option, value]
    if cmd[0] in ("render", "make", "bundle") and option != "--target":
        argv += ["--target", "cpu"]  # a request that resolves without a host
    if cmd[0] == "render":
        argv += ["--out", str(no_engine / "out")]
    rc, _, err = _run(argv)
    assert_one_error_with_hint(rc, err)
    if cmd == ("resolve",):  # --json: the same error as one object on stdout
        rc, out, _ = _run([*argv, "--json"])
        assert rc == 2 and json.loads(out)["error"]["hint"]


COMMANDS = [("resolve",), ("render",), ("make",), ("bundle",), ("build",), ("validate",),
            ("doctor",), ("explain",), ("matrix", "show"), ("matrix", "check"),
            ("matrix", "refresh"), ("team", "plan"), ("team", "build"), ("cluster", "render"),
            ("cluster", "validate"), ()]


@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_clicks_own_usage_errors_have_a_hint(cmd: tuple[str, ...], no_engine: Path) -> None:
    rc, _, err = _run([*cmd, "--no-such-option"])
    assert_one_error_with_hint(rc, err)
    assert f"envbuild {' '.join(cmd)} --help".replace("  ", " ").strip() in err


@pytest.mark.parametrize("argv", [
    ["resolve", "--cuda"], ["render", "--out"], ["validate", "--timeout", "abc"],
    ["team", "build", "--jobs", "x"], ["cluster", "render", "--nodes", "many"],
    ["matrix", "show"], ["frobnicate"], ["--show-completion", "tcsh"],
    ["--show-completion", "resolve"],
])
def test_missing_values_and_bad_types_have_a_hint(argv: list[str], no_engine: Path) -> None:
    rc, _, err = _run(argv)
    assert_one_error_with_hint(rc, err)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(["pip", "apt", "conda", "gpu", "target", "cuda", "python", "flavor",
                            "without", "python_source", "os", "torch"]),
       value=st.one_of(CONTROL, LONG, BLANK, WORD), as_list=st.booleans())
def test_team_file_values_are_one_error_with_a_hint(key: str, value: str, as_list: bool,
                                                    tmp_path_factory: pytest.TempPathFactory
                                                    ) -> None:
    from envbuild.features.teamfile import LISTS

    if key in ("pip", "apt", "conda") and value.startswith("zq") and not value.endswith("-"):
        value = value + "\x1b[0m"  # a plain word is a valid package name
    if key in ("gpu", "os") and value.startswith("zq"):
        value = value + "\n"
    listed = key in LISTS
    shown = json.dumps([value] if listed or as_list else value)
    path = tmp_path_factory.mktemp("team") / "envbuild.toml"
    other = "" if key == "target" else "target = \"cpu\"\n"
    path.write_text(f"[image.a]\n{other}{key} = {shown}\n")
    rc, _, err = _run(["team", "plan", "--file", str(path)])
    assert_one_error_with_hint(rc, err)
    assert f"[image.a] {key}" in err.splitlines()[0]
