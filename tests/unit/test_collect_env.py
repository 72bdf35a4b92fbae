"""`envbuild doctor --collect-env`: the parser on real reports and generated variations of them,
doctor's rules on what they say, the cause table, and hostile input."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.core.request import Request as Ask
from envbuild.core.resolve import resolve
from envbuild.doctor import causes
from envbuild.doctor.collect_env import LABELS, MAX_VALUE, REPORT_BYTES, Report, parse
from envbuild.doctor.from_report import PastedError, diagnose_report
from envbuild.doctor.model import Recommendation, Severity
from envbuild.features.checkup import doctor_report, pip_line
from envbuild.features.explain import explain
from envbuild.matrix import Matrix, load

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "collect_env"
CASES = tomllib.loads((FIXTURES / "cases.toml").read_text())["case"]
H100 = ROOT / "tests" / "fixtures" / "hosts" / "h100-sxm-driver580-torch2.11-cu130"


@pytest.fixture(scope="module")
def matrix() -> Matrix:
    return load()


def _paste(slug: str) -> str:
    text = (FIXTURES / slug / "report.txt").read_text(encoding="utf-8")
    err = FIXTURES / slug / "error.txt"
    return text + ("\n" + err.read_text(encoding="utf-8") if err.exists() else "")


def _diagnose(text: str, m: Matrix):  # type: ignore[no-untyped-def]
    errors = tuple(PastedError(x.id, x.title, x.cause, x.fix, x.line)
                   for x in explain(text, m) if not x.harmless)
    return diagnose_report(parse(text), m, errors)


def _resolves(rec: Recommendation, m: Matrix) -> None:
    resolve(Ask(target=rec.target, cuda=rec.cuda or None, torch=rec.torch or None,
                rocm=rec.rocm or None, driver=rec.driver or None, gpus=rec.gpus,
                platform=rec.platform or None), m)


# ---------------------------------------------------------------- the real reports


def test_the_real_reports_span_the_causes_and_torch_1_to_today() -> None:
    """At least 12 real reports, every cause code of the issue among their leading causes, and
    torch from 1.x (and older) to 2.x."""
    assert len(CASES) >= 12
    leading = {c["cause"] for c in CASES.values()}
    for code in ("driver_too_old", "no_driver", "cpu_only_build", "arch_not_in_wheel",
                 "mixed_installs", "library_mismatch", ""):
        assert code in leading, code
    assert any(code.startswith("wsl2_") for code in leading)
    torches = {parse(_paste(s)).torch.split(".")[0] for s in CASES}
    assert {"0", "1", "2"} <= torches
    for slug, case in CASES.items():
        source = (FIXTURES / slug / "SOURCE.md").read_text()
        assert case["url"] in source and case["url"].startswith("https://github.com/")
        assert (FIXTURES / slug / "error.txt").exists() == case["error"]


@pytest.mark.parametrize("slug", sorted(CASES))
def test_each_real_report_leads_with_its_established_cause(slug: str, matrix: Matrix) -> None:
    d = _diagnose(_paste(slug), matrix)
    want = CASES[slug]["cause"]
    caused = [f for f in d.findings if f.cause]
    if want:
        assert caused and caused[0].cause == want, [(f.id, f.cause) for f in d.findings]
        assert d.findings[0] is caused[0]  # the leading finding names it
        for also in CASES[slug].get("also", []):
            assert also in {f.cause for f in caused}
    else:  # healthy: no error, and it says what the report could not tell
        assert not [f for f in d.findings if f.severity is Severity.ERROR], d.findings
        assert d.unjudged


@pytest.mark.parametrize("slug", sorted(CASES))
def test_each_real_report_gets_a_command_that_resolves(slug: str, matrix: Matrix) -> None:
    """The recommendation, each alternative and the plain pip line all resolve."""
    d = _diagnose(_paste(slug), matrix)
    _resolves(d.recommendation, matrix)
    for alt in d.recommendation.alternatives:
        argv = alt.split("  (")[0].split()
        assert argv[:2] == ["envbuild", "make"]
        flags = {a: argv[i + 1] for i, a in enumerate(argv) if a.startswith("--")
                 and i + 1 < len(argv) and not argv[i + 1].startswith("--")}
        assert set(flags) | {"--forward-compat"} >= {a for a in argv if a.startswith("--")}
        assert set(flags) <= {"--target", "--cuda", "--torch", "--rocm", "--driver", "--gpu",
                              "--platform"}
        resolve(Ask(target=flags["--target"], cuda=flags.get("--cuda"),
                    torch=flags.get("--torch"), rocm=flags.get("--rocm"),
                    driver=flags.get("--driver"), forward_compat="--forward-compat" in argv,
                    platform=flags.get("--platform"),
                    gpus=tuple(argv[i + 1] for i, a in enumerate(argv) if a == "--gpu")),
                matrix)
    pip = pip_line(d.recommendation, matrix)
    assert pip.startswith("pip install torch==")
    # an Arm host's report: its platform said, and the image made for it
    platform = CASES[slug].get("platform", "")
    assert d.recommendation.platform == ("" if platform == "linux/amd64" else platform)
    found = {f.id: f for f in d.findings}
    if platform:
        assert platform in found["host.platform"].message
        assert ("--platform " + platform) in d.recommendation.command
        assert CASES[slug].get("cpu", "CPU: not reported") in found["host.platform"].message
    else:
        assert "host.platform" not in found


def test_the_arch_list_comes_from_torchs_own_warning(matrix: Matrix) -> None:
    r = parse(_paste("pt150733-sm120-rtx5090d-cu126"))
    assert r.arch_list[-1] == "sm_90" and r.incompatible_ccs == ("12.0",)
    d = _diagnose(_paste("pt150733-sm120-rtx5090d-cu126"), matrix)
    assert d.recommendation.gpus == ("sm_120",)


def test_a_driver_known_only_by_its_cuda_is_inferred_and_said_so(matrix: Matrix) -> None:
    """torch's 'found version 11040' is a CUDA 11.4 driver: at least 11.4's GA driver, and every
    finding says the number is inferred."""
    d = _diagnose(_paste("pt112553-driver-too-old-470-cu121"), matrix)
    lead = d.findings[0]
    assert lead.id == "torch.driver_too_old"
    assert ">= 470.42.01 (its CUDA is 11.4" in lead.message
    assert "525.60.13 through minor-version compatibility" in lead.message
    assert d.recommendation.driver == "470.42.01"


def test_old_cuda_builds_have_no_minor_version_compatibility(matrix: Matrix) -> None:
    d = _diagnose(_paste("pt37320-driver-too-old-p100"), matrix)
    msg = d.findings[0].message
    assert "440.33" in msg and "no minor-version compatibility" in msg
    assert any("after a driver upgrade" in a for a in d.recommendation.alternatives)


@pytest.mark.parametrize(("host", "sm"), [("h100-sxm-driver580-torch2.11-cu130", "sm_90"),
                                           ("h200-driver580-torch2.11-cu130", "sm_90")])
def test_the_real_h100_and_h200_reports_are_healthy(host: str, sm: str, matrix: Matrix) -> None:
    """The recorded hosts' own collect_env: no error (their system cuDNN 9.14 beside the wheel's
    9.19 is one major), the resolver's command for their driver and GPU."""
    text = (ROOT / "tests" / "fixtures" / "hosts" / host / "collect_env.txt").read_text()
    d = _diagnose(text, matrix)
    assert not [f for f in d.findings if f.severity is Severity.ERROR], d.findings
    assert d.recommendation.gpus == (sm,) and d.recommendation.driver == "580.159.04"


# ---------------------------------------------------------------- generated variations

SLUGS = sorted(CASES)


def _fields(r: Report) -> Report:
    from dataclasses import replace

    return replace(r, notes=())


WRAPS = [
    lambda t: "```\n" + t + "\n```\n",
    lambda t: "<details>\n<summary>collect_env</summary>\n\n```text\n" + t + "\n```\n</details>\n",
    lambda t: "\n".join("> " + ln for ln in t.split("\n")),
    lambda t: "\n".join("    " + ln for ln in t.split("\n")),
    lambda t: t.replace("\n", "\r\n"),
    lambda t: "/usr/lib/python3/dist-packages/torch/cuda/__init__.py:52: UserWarning: "
              "something unrelated\n  warnings.warn(\n" + t,
    lambda t: "Here is my env:\n\n" + t + "\n\nThanks for any help!\ncc @someone\n",
]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slug=st.sampled_from(SLUGS), wraps=st.lists(st.sampled_from(range(len(WRAPS))),
                                                   max_size=3))
def test_fences_details_quotes_indent_crlf_and_chatter_parse_the_same(slug: str,
                                                                     wraps: list[int]) -> None:
    text = (FIXTURES / slug / "report.txt").read_text(encoding="utf-8")
    base = parse(text)
    wrapped = text
    for i in wraps:
        wrapped = WRAPS[i](wrapped)
    assert _fields(parse(wrapped)) == _fields(base)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slug=st.sampled_from(SLUGS), data=st.data())
def test_a_truncated_report_keeps_what_it_has(slug: str, data: st.DataObject) -> None:
    """Cut after any line: what came before reads the same; nothing after is invented."""
    lines = (FIXTURES / slug / "report.txt").read_text(encoding="utf-8").split("\n")
    full = parse("\n".join(lines))
    first = next(i for i, ln in enumerate(lines) if ":" in ln or "\uff1a" in ln)
    cut = data.draw(st.integers(first + 3, len(lines)))
    try:
        r = parse("\n".join(lines[:cut]))
    except UsageError:
        return  # too little left to be a report: refused, in one line
    for name in ("torch", "cuda_built", "os", "driver"):
        got = getattr(r, name)
        assert got in ("", getattr(full, name)), name
    assert set(r.packages) <= set(full.packages)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slug=st.sampled_from(SLUGS), label=st.sampled_from(sorted(set(LABELS.values())
                                                              - {"libraries", "cpu"})))
def test_could_not_collect_in_any_field_only_blanks_that_field(slug: str, label: str) -> None:
    text = (FIXTURES / slug / "report.txt").read_text(encoding="utf-8")
    names = [k for k, v in LABELS.items() if v == label]
    lines, hit = [], False
    for ln in text.split("\n"):
        stripped = ln.strip().lstrip("> ").lower()
        if not hit and any(stripped.startswith(n) for n in names) and (":" in ln or
                                                                       "\uff1a" in ln):
            head = ln.split(":", 1)[0] if ":" in ln else ln.split("\uff1a", 1)[0]
            lines.append(head + ": Could not collect")
            hit = True
        else:
            lines.append(ln)
    if not hit or label in ("gpus", "cudnn"):  # a value on the next lines stays a value
        return
    r, base = parse("\n".join(lines)), parse(text)
    for name in ("torch", "os", "driver", "cuda_runtime", "platform"):
        if name != label:
            assert getattr(r, name) == getattr(base, name), name
    if label != "torch":
        assert label in r.uncollected


# ---------------------------------------------------------------- hostile input


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=4000))
def test_any_text_is_a_report_or_one_usage_error(text: str) -> None:
    try:
        r = parse(text)
    except UsageError as exc:
        assert "\n" not in exc.message
        return
    assert all(len(v) <= MAX_VALUE for v in (r.torch, r.os, r.driver, r.platform))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(201, 50_000), field=st.sampled_from(["PyTorch version", "Nvidia driver "
                                                          "version", "OS", "GPU models and "
                                                          "configuration"]))
def test_absurd_values_are_cut_and_judged_without_a_traceback(n: int, field: str,
                                                              matrix: Matrix) -> None:
    text = (FIXTURES / "pt37320-driver-too-old-p100" / "report.txt").read_text()
    value = "9" * n if field != "OS" else "x" * n
    text = re.sub(rf"(?m)^{field}[:\uff1a]?.*$", f"{field}: {value}", text, count=1)
    d = _diagnose(text, matrix)
    for f in d.findings:
        assert len(f.message) < 2000


@pytest.mark.parametrize("size", [REPORT_BYTES + 1, 3 * REPORT_BYTES])
def test_a_report_over_the_cap_is_refused_in_one_line(size: int, tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"PyTorch version: 2.5.1\n" + b"x" * size)
    with pytest.raises(UsageError) as exc:
        doctor_report(str(big))
    assert "\n" not in exc.value.message and "no collect_env report is that long" in \
        exc.value.message


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null", "/", "/nonexistent/env.txt"])
def test_special_files_are_refused_in_one_line(special: str) -> None:
    with pytest.raises(EnvbuildError) as exc:
        doctor_report(special)
    assert "\n" not in exc.value.message


def test_no_report_in_the_text(tmp_path: Path) -> None:
    p = tmp_path / "x.txt"
    p.write_text("RuntimeError: CUDA out of memory\n")
    with pytest.raises(UsageError, match="no collect_env report found"):
        doctor_report(str(p))


# ---------------------------------------------------------------- the cause table


def test_every_cause_id_is_a_finding_doctor_can_give() -> None:
    """Each finding id of the table is emitted by the code, and each explain signature of the
    table exists: a renamed finding cannot leave the table naming nothing."""
    src = "\n".join(p.read_text() for p in (ROOT / "envbuild" / "doctor").glob("*.py")
                    if p.name != "causes.py")
    for code, (_, ids) in causes.CAUSES.items():
        for fid in ids:
            assert f'"{fid}"' in src, (code, fid)
    sigs = set(re.findall(r'(?m)^id = "(\w+)"', (ROOT / "matrix" / "signatures.toml")
                          .read_text()))
    assert set(causes.EXPLAINED) <= sigs
    assert set(causes.WSL_LIBCUDA) <= set(causes.EXPLAINED)


def test_the_docs_print_the_cause_table() -> None:
    page = (ROOT / "docs" / "guides" / "collect-env.md").read_text()
    for code, (meaning, ids) in causes.CAUSES.items():
        row = next((ln for ln in page.splitlines() if ln.startswith(f"| `{code}` |")), "")
        assert row, code
        assert meaning in row
        for fid in ids:
            assert f"`{fid}`" in row, (code, fid)


def test_doctor_json_carries_the_cause_of_each_finding(matrix: Matrix) -> None:
    from envbuild.doctor import evaluate, record

    facts = record.load(ROOT / "tests" / "fixtures" / "doctor" / "driver-too-old-470")
    findings, _ = evaluate.diagnose(facts, matrix)
    for f in findings:
        assert f.to_json()["cause"] == causes.cause_of(f.id)


def test_the_docs_example_is_what_envbuild_prints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  ) -> None:
    """The guide's answer to its real report is today's output, byte for byte."""
    from envbuild.doctor import report

    page = (ROOT / "docs" / "guides" / "collect-env.md").read_text()
    shown = page.split("<!-- answer:start -->\n```text\n")[1].split("\n```\n<!-- answer:end")[0]
    (tmp_path / "env.txt").write_bytes(
        (FIXTURES / "pt150733-sm120-rtx5090d-cu126" / "report.txt").read_bytes())
    monkeypatch.chdir(tmp_path)
    c = doctor_report("env.txt")
    out = report.render(c.findings, c.recommendation, c.facts, heading=report.report_heading(
        c.report, c.facts, c.source), host="that host", after=report.report_after(
        c.report, c.unjudged, c.pip_install, c.facts))
    assert out.rstrip("\n") == shown
    # the report is shown whole, in a fence its own ``` cannot close
    block = page.split("\n````text\n")[1].split("\n````\n")[0]
    assert block == (FIXTURES / "pt150733-sm120-rtx5090d-cu126" / "report.txt").read_text(
        ).rstrip("\n")
    outside = page.replace(block, "")
    fences = [ln for ln in outside.splitlines() if ln.startswith("```")]
    assert fences.count("````text") == fences.count("````") == 1
    assert len(fences) % 2 == 0 and "```text" in fences


# ---------------------------------------------------------------- report-only checks, on real
# reports with one line added (no real report of these shapes was found with its thread)

H100_REPORT = ROOT / "tests" / "fixtures" / "hosts" / "h100-sxm-driver580-torch2.11-cu130" / \
    "collect_env.txt"


@pytest.mark.parametrize(("added", "finding", "cause", "severity"), [
    ("[pip3] nvidia-nccl-cu12==2.29.3", "libs.cuda_wheels_mixed", "library_mismatch",
     Severity.ERROR),
    ("[conda] cudatoolkit               11.8.0              h6a678d5_0",
     "env.conda_cuda_mismatch", "mixed_installs", Severity.WARN),
    ("[conda] pytorch                   2.5.1           py3.12_cuda12.4_cudnn9.1.0_0    pytorch",
     "env.two_torches", "mixed_installs", Severity.ERROR),
])
def test_a_line_added_to_a_healthy_report_is_found(added: str, finding: str, cause: str,
                                                   severity: Severity, matrix: Matrix) -> None:
    text = H100_REPORT.read_text()
    assert not [f for f in _diagnose(text, matrix).findings if f.severity is Severity.ERROR]
    text = text.replace("[conda] Could not collect", added)
    d = _diagnose(text, matrix)
    hit = [f for f in d.findings if f.id == finding]
    assert hit and hit[0].cause == cause and hit[0].severity is severity, d.findings
    assert d.findings[0].cause == cause
    assert added.split()[1] in " ".join(hit[0].evidence) + hit[0].message


def test_a_system_cudnn_of_another_major_is_a_warning(matrix: Matrix) -> None:
    text = H100_REPORT.read_text().replace("libcudnn.so.9.14.0", "libcudnn.so.8.9.7")
    hit = [f for f in _diagnose(text, matrix).findings if f.id == "libs.cudnn_system"]
    assert hit and hit[0].severity is Severity.WARN and "cuDNN 8" in hit[0].message
    same = [f for f in _diagnose(H100_REPORT.read_text(), matrix).findings
            if f.id == "libs.cudnn_system"]
    assert same == []  # 9.14 beside the wheel's 9.19: one major, nothing to say


# ---------------------------------------------------------------- what newer and odder pastes
# add to a real report

REAL = FIXTURES / "pt110792-healthy-4x-rtx3090-1.13" / "report.txt"


@pytest.mark.parametrize("edit", [
    # a label collect_env added later (torch 2.6+), and one it may add tomorrow
    lambda t: t.replace("ROCM used to build PyTorch: N/A", "ROCM used to build PyTorch: N/A\n"
                        "XPU used to build PyTorch: N/A\nSome future label: 42"),
    # MIG devices under a GPU line
    lambda t: re.sub(r"(?m)^(GPU 0: .*)$", r"\1\n  MIG 3g.71gb     Device  0: (UUID: x)", t,
                     count=1),
    # a banner format (vLLM's copy of collect_env): === lines and section titles
    lambda t: "==============================\n        System Info\n"
              "==============================\n" + t.replace("\nOS:", "\n====\n  PyTorch Info\n"
                                                           "====\nOS:"),
    # NUL bytes at line ends, a prose line with a label before the report
    lambda t: t.replace("\n", "\x00\n"),
    lambda t: "I use PyTorch version: 1.13.0 on CentOS\n\n```\n" + t + "\n```",
])
def test_newer_and_odder_pastes_read_the_same_facts(edit: object, matrix: Matrix) -> None:
    text = REAL.read_text()
    base = parse(text)
    got = parse(edit(text))  # type: ignore[operator]
    for name in ("torch", "cuda_built", "os", "driver", "gpus", "cuda_available", "platform"):
        assert getattr(got, name) == getattr(base, name), name
    assert _diagnose(edit(text), matrix).recommendation == _diagnose(text, matrix)\
        .recommendation  # type: ignore[operator]


def test_a_utf16_file_from_windows_powershell_is_read(tmp_path: Path) -> None:
    p = tmp_path / "env.txt"
    p.write_bytes(REAL.read_text().encode("utf-16"))  # with its BOM, as PowerShell 5 writes
    assert doctor_report(str(p)).report == parse(REAL.read_text())


def test_cuda_available_without_driver_lines_is_a_gpu_host(matrix: Matrix) -> None:
    """nvidia-smi missing there ('Could not collect'), yet CUDA works: a GPU host whose driver
    is at least what torch's CUDA needs; never the CPU image."""
    text = re.sub(r"(?m)^(Nvidia driver version|GPU models and configuration):.*$",
                  r"\1: Could not collect", REAL.read_text())
    text = re.sub(r"(?m)^GPU [1-9]: .*\n", "", text)
    d = _diagnose(text, matrix)
    assert d.recommendation.target == "cuda"
    assert not [f for f in d.findings if f.severity is Severity.ERROR]
    assert "the report does not give the driver" in d.recommendation.reason or \
        ">= " in d.recommendation.reason


def test_a_cuda_build_without_gpu_or_driver_is_a_warning_not_an_error(matrix: Matrix) -> None:
    """A laptop without an NVIDIA GPU reports the same as a GPU host without its driver: no
    error, and the message says both."""
    text = re.sub(r"(?m)^(Nvidia driver version|GPU models and configuration):.*$",
                  r"\1: Could not collect", REAL.read_text())
    text = re.sub(r"(?m)^GPU \d: .*\n", "", text).replace("Is CUDA available: True",
                                                          "Is CUDA available: False")
    d = _diagnose(text, matrix)
    nodrv = [f for f in d.findings if f.id == "torch.no_driver"]
    assert nodrv and nodrv[0].severity is Severity.WARN and "without an NVIDIA GPU" in \
        nodrv[0].message
    assert "Is CUDA available: False" in nodrv[0].evidence
    assert not [f for f in d.findings if f.id == "torch.gpu_build_no_gpu"]
