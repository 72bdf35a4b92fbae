"""One voice: every command envbuild prints as a suggestion resolves when run.

Refusals carry alternatives (with their changes as data), doctor recommends a command, explain's
fixes quote commands, hints, the README and the docs show commands. Each is generated over the
matrix (GPUs x drivers x torch x CUDA) and run back through the CLI's own `resolve`.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import ConflictError, EnvbuildError
from envbuild.core.alternatives import apply_changes
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix, load
from tests.support import ROOT

# `envbuild make ...` / `envbuild resolve ...` quoted in backticks, or a whole line of a block
_QUOTED = re.compile(r"`(envbuild (?:make|resolve)\b[^`]*)`")


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load()


def _resolve_options() -> set[str]:
    """The option names `envbuild resolve` takes (from the CLI itself)."""
    import typer.main

    from envbuild.cli import _app, load_commands

    load_commands(["resolve"])
    cmd = typer.main.get_command(_app.app).commands["resolve"]  # type: ignore[attr-defined]
    return {o for p in cmd.params for o in p.opts}


def _make_only_flags() -> dict[str, bool]:
    """make's options that resolve does not take: name -> whether it takes a value."""
    import typer.main

    from envbuild.cli import _app, load_commands

    load_commands(["make"])
    cmd = typer.main.get_command(_app.app).commands["make"]  # type: ignore[attr-defined]
    keep = _resolve_options()
    out: dict[str, bool] = {}
    for p in cmd.params:
        for o in p.opts:
            if o not in keep:
                out[o] = not getattr(p, "is_flag", False)
    return out


def resolves(command: str) -> tuple[bool, str]:
    """Run a printed `envbuild make|resolve ...` as `envbuild resolve` (make's build-only
    options set aside): (accepted, what it said)."""
    from envbuild.cli import run

    argv = shlex.split(command)
    assert argv[0] == "envbuild" and argv[1] in ("make", "resolve"), command
    make_only = _make_only_flags() if argv[1] == "make" else {}
    args: list[str] = []
    it = iter(argv[2:])
    for a in it:
        name = a.split("=", 1)[0]
        if name in make_only:
            if make_only[name] and "=" not in a:
                next(it, None)
            continue
        args.append(a)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(["resolve", *args, "--json"])
    return rc == 0, err.getvalue() + out.getvalue()[:300]


def commands_in(text: str) -> list[str]:
    return [c.strip().rstrip(".,;") for c in _QUOTED.findall(text)]


def check_error(err: EnvbuildError, request: Request, m: Matrix) -> None:
    """The refusal's suggestions all resolve, and it says only what it shows."""
    assert len(err.fixes) == len(err.alternatives)
    if "below" in err.hint:
        assert err.alternatives, f"{err.hint!r} with no alternatives"
    assert err.hint, err.message
    for fix in err.fixes:
        for changes in fix["requests"]:  # type: ignore[union-attr]
            asked = apply_changes(request, {k: tuple(v) if isinstance(v, list) else v
                                            for k, v in changes.items()}.items())
            try:
                resolve(asked, m)
            except EnvbuildError as again:
                raise AssertionError(f"{request} -> suggested {fix['text']!r} -> refused: "
                                     f"{again.message}") from None
    for text in (err.message, err.hint, *err.alternatives):
        for cmd in commands_in(text):
            ok, said = resolves(cmd)
            assert ok, f"suggested `{cmd}` is refused: {said}"


def _gpus(m: Matrix) -> list[str]:
    return sorted({g.name for g in m.gpus if g.vendor == "nvidia"})


def _drivers(m: Matrix) -> list[str]:
    return sorted({r.ga_driver_linux for r in m.cuda if r.ga_driver_linux})


def _requests(m: Matrix) -> st.SearchStrategy[Request]:
    cudas = [*sorted({r.version for r in m.cuda}), "12", "13", "12.2.0", "13.0.1"]
    torches = [*sorted({r.version for r in m.torch}), "2.15.0", "2.5.1", ">=2.9"]
    pythons = sorted({p for r in m.torch for p in r.python})
    opt = st.none
    return st.builds(
        Request,
        target=st.just("cuda"),
        cuda=opt() | st.sampled_from(cudas),
        torch=opt() | st.sampled_from(torches),
        python=opt() | st.sampled_from(pythons),
        driver=opt() | st.sampled_from(_drivers(m)),
        gpus=st.lists(st.sampled_from(_gpus(m)), max_size=4, unique=True).map(tuple),
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_alternative_resolves(data: st.DataObject, m: Matrix) -> None:
    """GPUs x drivers x torch x CUDA x Python: a refusal's every alternative resolves."""
    request = data.draw(_requests(m))
    try:
        resolve(request, m)
    except ConflictError as err:
        check_error(err, request, m)


def test_the_reported_examples(m: Matrix) -> None:
    """The issue's examples: the newest torch resolves; suggestions are the nearest; only the
    blocking GPUs are dropped; the fleet splits per generation; --cuda 13 keeps the floor."""
    assert resolve(Request(torch="2.15.0"), m).torch == "2.15.0"
    assert resolve(Request(torch="2.15", driver="580.65.06"), m).torch.startswith("2.15")

    with pytest.raises(ConflictError) as e:
        resolve(Request(cuda="12.2.0"), m)
    assert e.value.alternatives[0].startswith("--cuda 12.2:")

    request = Request(gpus=("V100", "T4", "A100"), cuda="13.0")
    with pytest.raises(ConflictError) as e:
        resolve(request, m)
    drops = [a for a in e.value.alternatives if a.startswith("without --gpu")]
    assert drops and all(a.startswith("without --gpu V100:") for a in drops)

    request = Request(gpus=("GTX 1080", "RTX 5090"))
    with pytest.raises(ConflictError) as e:
        resolve(request, m)
    split = [f for f in e.value.fixes if len(f["requests"]) > 1]  # type: ignore[arg-type]
    assert split and [r["gpus"] for r in split[0]["requests"]] == [  # type: ignore[index]
        ["GTX 1080"], ["RTX 5090"]]
    assert not any(a.startswith("without --gpu GTX 1080 RTX 5090") for a in e.value.alternatives)
    check_error(e.value, request, m)

    major = resolve(Request(cuda="13"), m)
    exact = resolve(Request(cuda=major.torch_cuda), m)
    assert (major.torch, major.variant) == (exact.torch, exact.variant)
    assert major.min_driver == exact.min_driver  # no newer image that only raises the floor


def test_alternatives_are_ordered_by_distance(m: Matrix) -> None:
    """The first value tried for an option is its nearest neighbour that fits."""
    with pytest.raises(ConflictError) as e:
        resolve(Request(torch="2.15.0", python="3.9"), m)
    pys = [a for a in e.value.alternatives if a.startswith("--python ")]
    supported = sorted(next(r for r in m.torch if r.version == "2.15").python,
                       key=lambda v: tuple(map(int, v.split("."))))
    assert pys == [pys[0]] and pys[0].startswith(f"--python {supported[0]}:")
    check_error(e.value, Request(torch="2.15.0", python="3.9"), m)


# ---------------------------------------------------------------- doctor

DOCTOR = ROOT / "tests" / "fixtures" / "doctor"


def _hosts() -> list[str]:
    return sorted(p.name for p in DOCTOR.iterdir() if (p / "expected.json").is_file())


def _driver_of(d: Path) -> str | None:
    f = d / "proc_driver_nvidia_version.txt"
    if not f.is_file():
        return None
    found = re.search(r"Kernel Module\s+(\d+\.\d+(?:\.\d+)?)", f.read_text())
    return found.group(1) if found else None


def _doctor_commands(d: Path, m: Matrix) -> Iterator[str]:
    from envbuild.doctor import evaluate, record

    _, rec = evaluate.diagnose(record.load(d), m)
    yield rec.command
    for alt in rec.alternatives:
        yield alt.split("  (", 1)[0]
    yield from commands_in(rec.reason)


@pytest.mark.parametrize("host", _hosts())
def test_doctor_speaks_with_the_resolver(host: str, m: Matrix, tmp_path: Path) -> None:
    """Every host fixture, and the NVIDIA ones again on every driver the matrix names: what
    doctor recommends resolves, and on Linux it is the resolver's own pick for that host."""
    import shutil

    from envbuild.doctor import evaluate, record

    src = DOCTOR / host
    old = _driver_of(src)
    drivers = [None] + (_drivers(m) if old else [])
    for drv in drivers:
        d = src
        if drv is not None:
            d = tmp_path / f"{host}-{drv}"
            shutil.copytree(src, d)
            for p in d.rglob("*"):
                if p.is_file():
                    with contextlib.suppress(UnicodeDecodeError):
                        text = p.read_text()
                        if old and old in text:
                            p.write_text(text.replace(old, drv))
        for cmd in _doctor_commands(d, m):
            ok, said = resolves(cmd)
            assert ok, f"{host} driver {drv}: doctor suggests `{cmd}`, refused: {said}"
        _, rec = evaluate.diagnose(record.load(d), m)
        if rec.target == "cuda" and rec.driver and not rec.cuda:
            spec = resolve(Request(target="cuda", driver=rec.driver, gpus=rec.gpus), m)
            assert f"torch {spec.torch} ({spec.variant})" in rec.reason


def test_h100_on_535_agrees_with_resolve(m: Matrix, tmp_path: Path) -> None:
    """The reported case: doctor said torch 2.5 where resolve gives the newest torch."""
    import shutil

    from envbuild.doctor import evaluate, record

    d = tmp_path / "h535"
    shutil.copytree(DOCTOR / "h100-healthy", d)
    for p in d.rglob("*"):
        if p.is_file():
            with contextlib.suppress(UnicodeDecodeError):
                p.write_text(p.read_text().replace("580.95.05", "535.104.05"))
    _, rec = evaluate.diagnose(record.load(d), m)
    spec = resolve(Request(driver="535.104.05", gpus=("sm_90",)), m)
    assert rec.command == "envbuild make --target cuda --driver 535.104.05 --gpu sm_90"
    assert f"torch {spec.torch} ({spec.variant})" in rec.reason


# ---------------------------------------------------------------- explain

EXPLAIN = ROOT / "tests" / "fixtures" / "explain"


def _explain_fixes(text: str, m: Matrix) -> list[str]:
    from envbuild.features.explain import explain

    return [x.fix for x in explain(text, m)]


def test_explain_fixtures_suggest_commands_that_resolve(m: Matrix) -> None:
    seen = 0
    for f in sorted(EXPLAIN.glob("*.txt")):
        for fix in _explain_fixes(f.read_text(errors="replace"), m):
            for cmd in commands_in(fix):
                seen += 1
                ok, said = resolves(cmd)
                assert ok, f"{f.name}: explain suggests `{cmd}`, refused: {said}"
    assert seen >= 5  # the fixtures do quote commands


@pytest.mark.parametrize("gpu", ["sm_50", "sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86",
                                 "sm_89", "sm_90", "sm_100", "sm_120", "sm_121", "sm_35"])
def test_explain_arch_errors_suggest_commands_that_resolve(gpu: str, m: Matrix) -> None:
    log = (f"NVIDIA GeForce X with CUDA capability {gpu} is not compatible with the current "
           "PyTorch installation.\nThe current PyTorch install supports CUDA capabilities "
           "sm_50 sm_60.\nRuntimeError: CUDA error: no kernel image is available for execution "
           "on the device\n")
    fixes = _explain_fixes(log, m)
    assert fixes
    for fix in fixes:
        for cmd in commands_in(fix):
            ok, said = resolves(cmd)
            assert ok, f"{gpu}: explain suggests `{cmd}`, refused: {said}"


@pytest.mark.parametrize("driver", ["470.182.03", "525.60.13", "535.104.05", "550.144.03",
                                    "560.35.03", "570.124.06", "580.95.05"])
def test_explain_driver_errors_suggest_commands_that_resolve(driver: str, m: Matrix) -> None:
    logs = [
        ("RuntimeError: The NVIDIA driver on your system is too old (found version 12020). "
         "Please update your GPU driver\n"),
        (f"nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.8, please "
         f"update your driver to a newer version\nDriver Version: {driver}\n"),
        (f"torch.cuda.is_available() False\nDriver Version: {driver}\nCUDA driver version is "
         "insufficient for CUDA runtime version\n"),
    ]
    for log in logs:
        for fix in _explain_fixes(log, m):
            for cmd in commands_in(fix):
                ok, said = resolves(cmd)
                assert ok, f"driver {driver}: explain suggests `{cmd}`, refused: {said}"


# ---------------------------------------------------------------- README and docs

# Every page a reader copies commands from: the README and the docs' Markdown sources.
DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _refusal_examples() -> list[tuple[str, list[str]]]:
    """Blocks `$ envbuild ...` followed by the refusal it prints, in the README and the docs."""
    out = []
    for page in DOC_PAGES:
        lines = page.read_text().splitlines()
        for i, line in enumerate(lines):
            if line.startswith("$ envbuild") and i + 1 < len(lines) \
                    and lines[i + 1].startswith("error:"):
                shown = list(itertools.takewhile(lambda x: not x.startswith("```"),
                                                 lines[i + 1:]))
                out.append((line.removeprefix("$ "), shown))
    return out


@pytest.mark.parametrize(("cmd", "shown"), _refusal_examples())
def test_doc_refusals_are_what_envbuild_prints(cmd: str, shown: list[str]) -> None:
    from tests.support import run_cli

    r = run_cli(*shlex.split(cmd)[1:])
    assert r.returncode == 1
    printed = [x for x in r.stderr.splitlines() if not x.startswith("warning:")]
    assert printed[:len(shown)] == shown


def _doc_commands() -> list[str]:
    text = "\n".join(page.read_text() for page in DOC_PAGES)
    refused = {c for c, _ in _refusal_examples()}
    found = set(commands_in(text))
    for line in text.splitlines():  # code blocks and printed hints: whole lines
        line = line.strip().removeprefix("$ ")
        if line in refused:
            continue
        if re.match(r"envbuild (make|resolve)\b", line) and "`" not in line:
            found.add(line.split("  #", 1)[0].split(" # ", 1)[0].strip())
        if line.startswith(("hint:", "  - ", "or:")):
            found.update(commands_in(line))
    return sorted(found)


_DOC_SKIP = ("--from-bundle", "--team", "...", "<", "$", "|", "\\")


def _placeholder(cmd: str) -> bool:
    """`envbuild make --torch X`, `--cuda X.Y`, `--out DIR`: a form, not a command."""
    return any(re.fullmatch(r"[A-Z][A-Z_.Y]*", tok) for tok in cmd.split())


@pytest.mark.parametrize("cmd", [c for c in _doc_commands()
                                 if not any(s in c for s in _DOC_SKIP)
                                 and not _placeholder(c)])
def test_doc_commands_resolve(cmd: str) -> None:
    """Every make/resolve command the README and the docs show (examples, hints) is accepted."""
    ok, said = resolves(cmd)
    assert ok, f"the docs show `{cmd}`, refused: {said}"


def test_docs_have_commands_to_check() -> None:
    assert len(_doc_commands()) >= 10
    assert any("envbuild" in page.read_text() for page in DOC_PAGES[1:])  # docs/ was read


def test_no_hint_promises_alternatives_it_lacks(m: Matrix) -> None:
    """Across a grid of refusals: a hint never points below at nothing."""
    for cuda, torch in itertools.product(["11.8", "12.2", "12.4", "13.2"], ["2.0", "2.5", "2.15"]):
        try:
            resolve(Request(cuda=cuda, torch=torch), m)
        except ConflictError as err:
            check_error(err, Request(cuda=cuda, torch=torch), m)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_pypi_index_hint_resolves(target: str, m: Matrix) -> None:
    """The PyPI-like index refusal names the build PyPI has: that command resolves, for every
    torch release whose non-default build is asked for."""
    from envbuild.core.torch_index import plan

    checked = 0
    for rel in m.torch:
        for v in m.variants_of(rel.version):
            if v.kind != target or v.tag == rel.default_variant:
                continue
            try:
                spec = resolve(Request(target=target, torch=rel.version,
                                       cuda=v.version if target == "cuda" else None), m)
            except ConflictError:
                continue
            if spec.variant == rel.default_variant:
                continue
            try:
                plan(spec, m, "https://nexus.corp/repository/pypi/simple", None)
            except ConflictError as err:
                for cmd in commands_in(err.hint):
                    checked += 1
                    ok, said = resolves(cmd)
                    assert ok, f"torch {rel.version} {v.tag}: hint `{cmd}` refused: {said}"
    assert checked
