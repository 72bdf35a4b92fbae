"""`envbuild doctor`: pure evaluation on recorded host fixtures, probes on this host, the CLI."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import MatrixError, UsageError
from envbuild.core import compat, gpus
from envbuild.core.spec import Spec
from envbuild.doctor import evaluate, model, parse, record, report, view
from envbuild.doctor.model import Cmd, HostFacts, Request, Severity
from envbuild.matrix import Matrix, load
from envbuild.validator import rules
from tests.support import doctor as shared
from tests.support.doctor import FIXTURES, RECORDED, _as_other_user

small = shared.small  # a fixture, shared with the other kind's test_doctor.py

CASES = sorted(p.name for p in FIXTURES.iterdir() if (p / "expected.json").exists())


def _expected(case: str) -> dict[str, object]:
    return json.loads((FIXTURES / case / "expected.json").read_text())


def _run(case: str, m: Matrix) -> tuple[list[model.Finding], model.Recommendation]:
    exp = _expected(case)
    req = Request(**exp.get("request", {}))  # type: ignore[arg-type]
    return evaluate.diagnose(record.load(FIXTURES / case), m, req)


def test_the_required_host_fixtures_exist() -> None:
    for case in ("h100-healthy", "driver-too-old-470", "driver-library-mismatch", "wsl2-healthy",
                 "wsl2-linux-driver", "no-docker", "docker-daemon-down", "mi300x", "mac-m2",
                 "mac-rosetta", "pascal-gtx1080", "cpu-host-docker", *FAILURES):
        assert case in CASES


# issue 26: each WSL2 / macOS failure case, built from a public record (see the fixture's
# README.md), and the one finding that names its cause
FAILURES = {
    "wsl2-linux-driver": ("wsl.linux_driver_installed", Severity.ERROR),
    "wsl2-tcc": ("wsl.gpu_blocked", Severity.ERROR),
    "wsl2-docker-blocked": ("wsl.gpu_blocked_in_container", Severity.ERROR),
    "wsl2-libcuda-unversioned": ("wsl.libcuda_unversioned", Severity.WARN),
    "mac-rosetta": ("macos.rosetta", Severity.ERROR),
    "mac-mps-unavailable": ("macos.mps_unavailable", Severity.ERROR),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_failure_case_gives_one_finding_with_cause_and_fix(case: str, small: Matrix,
                                                            matrix: Matrix) -> None:
    """Exactly one warning or error names the cause (docker.not_found, where the record has no
    Docker, is a separate fact), with its fix; the recommended command resolves (see also
    test_recommendation_is_a_command_make_accepts, which runs every fixture's)."""
    want, sev = FAILURES[case]
    for m in (small, matrix):
        findings, rec = _run(case, m)
        bad = [f for f in findings if f.severity in (Severity.WARN, Severity.ERROR)
               and f.id != "docker.not_found"]
        assert [(f.id, f.severity) for f in bad] == [(want, sev)], findings
        assert bad[0].remediation and bad[0].message
        spec = _resolved(rec, m)
        assert spec.target == rec.target


def test_wsl_gpu_blocked_causes_are_told_apart(small: Matrix) -> None:
    """The same NVML text: a Linux driver (dpkg), a container, else a checklist."""
    tcc = next(f for f in _run("wsl2-tcc", small)[0] if f.id == "wsl.gpu_blocked")
    assert "TCC" in tcc.remediation and "-dm WDDM" in tcc.remediation
    assert "nvidia-smi: Failed to properly shut down NVML" in tcc.evidence[0]
    box = next(f for f in _run("wsl2-docker-blocked", small)[0]
               if f.id == "wsl.gpu_blocked_in_container")
    assert "outside the container" in box.remediation and "container: docker" in box.evidence
    # doctor has not run nvidia-smi outside the container: it says "if", never that it works
    assert "nvidia-smi works in the WSL 2 distribution" not in box.message + box.remediation
    assert "if nvidia-smi works there" in box.remediation


@pytest.mark.parametrize("case", CASES)
def test_wsl_commands_are_runnable_as_shown(case: str, small: Matrix) -> None:
    """`wsl.exe --...` (a Windows program), never a bare `wsl --...`; placeholders explained."""
    for f in _run(case, small)[0]:
        text = f"{f.message} {f.remediation}"
        assert not re.search(r"`wsl --", text), f
        assert "<index>" not in text or "first column" in text, f
        assert "<distro>" not in text or "`wsl.exe -l -v`" in text, f


MS_KERNELS = ("5.15.90.1-microsoft-standard-WSL2", "6.6.87.2-microsoft-standard-WSL2",
              "5.10.16.3-microsoft-standard-WSL2")
OTHER_KERNELS = ("6.1.38-microsoft-standard", "5.15.153.1", "6.1.21-custom-wsl",
                 "5.10.102.1", "6.6.87.2-microsoft-standard-WSL2-dirty")


@pytest.mark.parametrize("release", MS_KERNELS + OTHER_KERNELS)
def test_wsl_gpu_blocked_is_an_ordered_checklist(release: str, small: Matrix,
                                                 matrix: Matrix) -> None:
    """microsoft/WSL#10289: a GTX 1060 in WDDM mode, blocked on the custom kernel
    6.1.38-microsoft-standard. No single cause is asserted: TCC, then a custom kernel (the
    recorded release as evidence when it lacks -WSL2), then an old WSL."""
    facts = record.load(FIXTURES / "wsl2-tcc")
    facts = replace(facts, files={**facts.files, model.OSRELEASE: release + "\n"})
    for m in (small, matrix):
        f = next(f for f in evaluate.evaluate(facts, m) if f.id == "wsl.gpu_blocked")
        assert "the known cause is" not in f.message and "TCC" not in f.message
        fix = f.remediation
        at = [fix.index(x) for x in ("(1) ", "TCC", "(2) ", "custom WSL kernel", "(3) ",
                                     "`wsl.exe --update`")]
        assert at == sorted(at), fix
        assert f"/proc/sys/kernel/osrelease: {release}" in f.evidence
        assert (f"this kernel, {release}, has no -WSL2 suffix" in fix) == (
            release in OTHER_KERNELS), fix
        assert "`nvidia-smi -i <index> -dm WDDM`" in fix and "administrator PowerShell" in fix
        assert "first column" in fix  # where <index> comes from
    for case in ("wsl2-linux-driver", "wsl2-tcc", "wsl2-docker-blocked"):
        findings, rec = _run(case, small)
        ids = {f.id for f in findings}
        assert "nvidia.smi_failed" not in ids and "gpu.none" not in ids
        assert rec.target == "cpu" and "doctor` again" in rec.reason


def test_wsl_detected_without_the_kernel_suffix(small: Matrix) -> None:
    """microsoft/WSL#11865 reports kernel 5.15.153.1: /dev/dxg and the WSL_DISTRO_NAME tell."""
    facts = record.load(FIXTURES / "wsl2-tcc")
    assert facts.file(model.OSRELEASE) == "5.15.153.1\n"
    assert view.build_view(facts, small).wsl


def test_wsl_unversioned_libcuda_fix_is_the_matrix_one(small: Matrix) -> None:
    f = next(f for f in _run("wsl2-libcuda-unversioned", small)[0]
             if f.id == "wsl.libcuda_unversioned")
    assert "LD_LIBRARY_PATH=/usr/lib/wsl/lib" in f.remediation
    assert "cannot open shared object file" in f.message
    healthy = {f.id for f in _run("wsl2-healthy", small)[0]}
    assert "wsl.libcuda" in healthy and "wsl.libcuda_unversioned" not in healthy


def test_wsl_memory_and_limits_come_from_the_matrix(small: Matrix) -> None:
    findings, _ = _run("wsl2-healthy", small)
    mem = next(f for f in findings if f.id == "wsl.memory")
    assert "31.3 GiB" in mem.message and ".wslconfig" in mem.message and "50%" in mem.message
    limits = next(f for f in findings if f.id == "wsl.limits")
    assert "pinned" in limits.message and "NCCL" in limits.message
    runtime = next(f for f in findings if f.id == "docker.gpu_runtime")
    assert "Docker Engine inside this WSL2 distribution" in runtime.message
    desktop = record.load(FIXTURES / "wsl2-healthy")
    info = json.loads(desktop.outputs[model.DOCKER_INFO].stdout)
    info.update(OperatingSystem="Docker Desktop", Runtimes={"runc": {"path": "runc"}})
    outputs = dict(desktop.outputs)
    outputs[model.DOCKER_INFO] = replace(outputs[model.DOCKER_INFO], stdout=json.dumps(info))
    found = evaluate.evaluate(replace(desktop, outputs=outputs), small)
    runtime = next(f for f in found if f.id == "docker.gpu_runtime")
    assert "Docker Desktop" in runtime.message and "WSL 2 backend" in runtime.message


def test_mps_unavailable_names_the_floor_and_the_command(small: Matrix, matrix: Matrix) -> None:
    """pytorch/pytorch#164943: a 2.10 nightly on macOS 13.7.4; 2.9+ needs macOS 14.0
    (matrix/mps.toml [[macos_floor]], which covers nightlies torch.toml does not list)."""
    for m, torch in ((small, "2.7"), (matrix, "2.8")):
        findings, rec = _run("mac-mps-unavailable", m)
        f = next(f for f in findings if f.id == "macos.mps_unavailable")
        assert "13.7.4" in f.message and "MPS floor, macOS 14.0 (envbuild's matrix" in f.message
        # pytorch/pytorch#164943's torch said "MacOS 13.0+": no quote is put in torch's mouth
        assert "supported on macOS" not in f.message and "older floor" in f.message
        assert f"`envbuild make --target mps --torch {torch}`" in f.remediation
        assert rec.command == f"envbuild make --target mps --torch {torch}"
        assert not any(x.id.startswith("macos.mps_too_old") for x in findings)


def test_rosetta_says_what_torch_sees(small: Matrix) -> None:
    findings, rec = _run("mac-rosetta", small)
    f = next(f for f in findings if f.id == "macos.rosetta")
    assert "Apple M2 Pro" in f.message and "10.16" in f.message  # pytorch/pytorch#146236
    assert rec.command == "envbuild make --target mps" and "arm64 Python" in rec.reason


@pytest.mark.parametrize("macos", ["12.3", "13.0", "14.0", "15.3", "26.3.1"])
def test_rosetta_never_says_mps_works(macos: str, small: Matrix, matrix: Matrix) -> None:
    """Under Rosetta torch sees macOS 10.16 (macos.rosetta): no 'ok macos.mps ... MPS works'
    beside that error, on any macOS; macos.mps says the floor holds for an arm64 Python only."""
    facts = record.load(FIXTURES / "mac-rosetta")
    outputs = dict(facts.outputs)
    outputs[model.SW_VERS] = replace(outputs[model.SW_VERS], stdout=f"ProductName:\tmacOS\n"
                                     f"ProductVersion:\t{macos}\n")
    for m in (small, matrix):
        found = evaluate.evaluate(replace(facts, outputs=outputs), m)
        assert not [f for f in found if f.id.startswith("macos.mps") and f.severity is
                    Severity.OK], found
        mps = [f for f in found if f.id == "macos.mps"]
        assert all("arm64 Python only" in f.message and "Rosetta" in f.message for f in mps)


def test_the_mps_floor_has_one_owner(matrix: Matrix) -> None:
    """compat.mps_floor owns the MPS macOS floor: torch.toml's mps_min_macos and mps.toml's
    [[macos_floor]] ranges agree on every release, and no other module reads mps_min_macos
    (doctor, explain, the resolver and validate --host ask compat.mps_floor)."""
    rows = matrix.extra["mps"]["macos_floor"]
    for rel in matrix.torch:
        if not rel.mps_min_macos:
            continue
        ranged = [r["macos"] for r in rows if compat.at_least(rel.version, r["torch_min"])
                  and (not r["torch_max"] or compat.at_least(r["torch_max"], rel.version))]
        assert ranged == [rel.mps_min_macos] == [compat.mps_floor(matrix, rel.version)]
        for tail in ("", ".0", ".1+cpu", ".0.dev20251008", "a0"):
            assert compat.mps_floor(matrix, rel.version + tail) == rel.mps_min_macos
    readers = sorted(str(p.relative_to(shared.TESTS.parent)) for p in
                     (shared.TESTS.parent / "envbuild").rglob("*.py")
                     if ".mps_min_macos" in p.read_text())
    assert readers == ["envbuild/core/compat.py", "envbuild/matrix/views.py"]


@pytest.mark.parametrize("case", ["mac-m2", "mac-mps-unavailable", "mac-rosetta",
                                  "wsl2-healthy", "h100-healthy"])
@pytest.mark.parametrize("probe", ["", "not json", "{", "[1, 2]", "null", "{\"version\": ",
                                   "Traceback (most recent call last):\n  ...\n"])
def test_a_malformed_torch_probe_is_reported_as_such(case: str, probe: str,
                                                     small: Matrix) -> None:
    """An invalid torch-probe.json: one finding says so, and nothing claims what the build is
    (before: 'torch 2.2.2 is a CUDA build' on a Mac)."""
    facts = record.load(FIXTURES / case)
    if not facts.python.get("torch"):
        facts = replace(facts, python={**facts.python, "torch": "2.7.1"})
    outputs = dict(facts.outputs)
    outputs[model.TORCH_PROBE] = Cmd(argv=("python",), returncode=0, stdout=probe)
    found = evaluate.evaluate(replace(facts, outputs=outputs), small)
    torch = [f for f in found if f.id.startswith("torch.")]
    assert [f.id for f in torch] == ["torch.probe_malformed"], torch
    assert "not a JSON object" in torch[0].message
    assert not any("CUDA build" in f.message or "ROCm build" in f.message for f in found)


@pytest.mark.parametrize("torch", ["", "nightly", "2.x", "abc.def", "2", "+cpu"])
def test_mps_unavailable_with_an_unknown_torch_version_prints_no_placeholder(
        torch: str, small: Matrix) -> None:
    """An unparsable torch version has no MPS floor: doctor says so, not 'floor (?)'."""
    facts = record.load(FIXTURES / "mac-mps-unavailable")
    facts = replace(facts, python={**facts.python, "torch": torch or "weird"})
    for f in evaluate.evaluate(facts, small):
        assert "(?)" not in f.message and "(?)" not in f.remediation, f
    f = next(f for f in evaluate.evaluate(facts, small) if f.id == "macos.mps_unavailable")
    assert "knows no MPS floor" in f.message


@pytest.mark.parametrize("case", CASES)
def test_fixture_findings_and_recommendation(case: str, small: Matrix) -> None:
    exp = _expected(case)
    findings, rec = _run(case, small)
    assert [[f.id, str(f.severity)] for f in findings] == exp["findings"]
    assert rec.command == exp["recommend"]
    for f in findings:
        if f.severity in (Severity.WARN, Severity.ERROR):
            assert f.remediation, f"{f.id} needs a remediation"


@pytest.mark.parametrize("case", CASES)
def test_fixture_against_the_real_matrix(case: str, matrix: Matrix) -> None:
    """The shipped matrix may recommend newer versions, but the diagnosis must not change."""
    exp = _expected(case)
    findings, rec = _run(case, matrix)
    errors = {f.id for f in findings if f.severity is Severity.ERROR}
    assert errors == {i for i, s in exp["findings"] if s == "error"}  # type: ignore[misc]
    assert rec.argv()[:4] == str(exp["recommend"]).split()[:4]


def test_arch_aware_pascal_gets_a_wheel_with_its_sass(small: Matrix, matrix: Matrix) -> None:
    for m in (small, matrix):
        findings, rec = _run("pascal-gtx1080", m)
        assert rec.gpus == ("sm_61",)
        arch = next(f for f in findings if f.id == "torch.arch_missing")
        assert "6.1" in arch.message and "GTX 1080" in arch.message
        spec = _resolved(rec, m)  # the command, as `envbuild make` reads it
        assert spec.torch_cuda == "12.6" and any(a.startswith("sm_6") for a in spec.archs)


def _resolved(rec: model.Recommendation, m: Matrix) -> Spec:
    from envbuild.core.request import Request as Resolve
    from envbuild.core.resolve import resolve

    return resolve(Resolve(target=rec.target, cuda=rec.cuda or None, torch=rec.torch or None,
                           rocm=rec.rocm or None, driver=rec.driver or None, gpus=rec.gpus), m)


def test_driver_too_old_names_the_numbers(small: Matrix) -> None:
    findings, rec = _run("driver-too-old-470", small)
    f = next(f for f in findings if f.id == "nvidia.driver_too_old")
    assert "470.182.03" in f.message and "535.54.03" in f.message and "525.60.13" in f.message
    assert "CUDA <= 11.4" in f.message
    assert "minor-version compatibility" in rec.reason


def test_request_that_runs_natively_is_kept(small: Matrix) -> None:
    findings, rec = evaluate.diagnose(record.load(FIXTURES / "h100-healthy"), small,
                                      Request(cuda="12.6"))
    assert any(f.id == "cuda.request_ok" and f.severity is Severity.OK for f in findings)
    assert rec.command == "envbuild make --target cuda --cuda 12.6 --driver 580.95.05 --gpu sm_90"


def test_request_through_mvc_is_a_warning(small: Matrix) -> None:
    findings, _ = evaluate.diagnose(record.load(FIXTURES / "driver-library-mismatch"), small,
                                    Request(cuda="12.4"))
    f = next(f for f in findings if f.id == "cuda.request_mvc")
    assert f.severity is Severity.WARN and "550.54.14" in f.remediation


def test_request_on_a_host_without_gpu(small: Matrix) -> None:
    findings, rec = evaluate.diagnose(record.load(FIXTURES / "no-docker"), small,
                                      Request(cuda="12.8"))
    assert [f.severity for f in findings if f.id == "cuda.request_no_gpu"] == [Severity.WARN]
    assert rec.target == "cpu"


def test_unknown_cuda_request_is_a_usage_error(small: Matrix) -> None:
    with pytest.raises(UsageError) as exc:
        evaluate.diagnose(record.load(FIXTURES / "no-docker"), small, Request(cuda="12.7"))
    assert "12.8" in exc.value.alternatives


def test_wsl_uses_the_windows_driver_columns(small: Matrix) -> None:
    findings, rec = _run("wsl2-healthy", small)
    driver = next(f for f in findings if f.id == "nvidia.driver")
    # microsoft/WSL#11277: nvidia-smi in WSL2 prints the Windows driver (537.13, CUDA 12.2)
    assert "Windows driver 537.13" in driver.message and "12.2" in driver.message
    assert rec.cuda == "12.1" and rec.gpus == ("sm_75",)


def test_wsl_linux_driver_evidence(small: Matrix) -> None:
    findings, _ = _run("wsl2-linux-driver", small)
    f = next(f for f in findings if f.id == "wsl.linux_driver_installed")
    assert any("nvidia-utils-510" in e for e in f.evidence)  # microsoft/WSL#9166
    assert any("GPU access blocked by the operating system" in e for e in f.evidence)
    assert not any("container-toolkit" in e for e in f.evidence)
    # the purge command removes exactly what was found (quoted), and names what never to install
    found = [e.removeprefix("dpkg: ").removesuffix(" installed") for e in f.evidence
             if e.startswith("dpkg: ")]
    assert f"apt-get purge {' '.join(found)}`" in f.remediation and "(never " in f.remediation


def test_mismatch_reads_both_versions(small: Matrix) -> None:
    findings, _ = _run("driver-library-mismatch", small)
    f = findings[0]
    assert f.id == "nvidia.driver_library_mismatch"
    assert "535.104.05" in f.message and "535.129.03" in f.message


def test_rocm_permission_problem(small: Matrix) -> None:
    facts = record.load(FIXTURES / "mi300x")
    devices = {p: replace(d, rw=False) if p == "/dev/kfd" else d
               for p, d in facts.devices.items()}
    facts = replace(facts, devices=devices, groups=(1000,))
    findings, rec = evaluate.diagnose(facts, small)
    f = next(f for f in findings if f.id == "rocm.device_permission")
    assert "render" in f.message and "usermod -aG render" in f.remediation
    assert rec.target == "rocm"


def test_rocm_target_without_any_wheel(small: Matrix) -> None:
    facts = replace(record.load(FIXTURES / "mi300x"), outputs={}, kfd_gfx=(100301,))
    findings, rec = evaluate.diagnose(facts, small)
    assert any(f.id == "rocm.gfx_unsupported" for f in findings)
    assert rec.target == "cpu"


def test_stub_and_cudnn_shadowing(small: Matrix) -> None:
    facts = record.load(FIXTURES / "pascal-gtx1080")
    path = "/usr/local/cuda/lib64/stubs:/usr/local/cuda/lib64"
    facts = replace(facts, env={"LD_LIBRARY_PATH": path},
                    dirs={**facts.dirs,
                          "/usr/local/cuda/lib64/stubs": ("libcuda.so",),
                          "/usr/local/cuda/lib64": ("libcudnn.so.8", "libnvJitLink.so.12")})
    ids = {f.id: f.severity for f in evaluate.evaluate(facts, small)}
    assert ids["libs.stub_libcuda"] is Severity.ERROR
    assert ids["libs.cudnn_shadow"] is Severity.WARN
    assert ids["libs.nvjitlink_shadow"] is Severity.WARN


def test_docker_without_gpu_runtime_on_a_gpu_host(small: Matrix) -> None:
    facts = record.load(FIXTURES / "pascal-gtx1080")
    info = json.loads(facts.outputs[model.DOCKER_INFO].stdout)
    info["Runtimes"] = {"runc": {"path": "runc"}}
    outputs = dict(facts.outputs)
    outputs[model.DOCKER_INFO] = replace(outputs[model.DOCKER_INFO], stdout=json.dumps(info))
    findings = evaluate.evaluate(replace(facts, outputs=outputs), small)
    f = next(f for f in findings if f.id == "docker.no_gpu_runtime")
    assert f.severity is Severity.ERROR and "nvidia-ctk runtime configure" in f.remediation


def test_no_buildkit_client(small: Matrix) -> None:
    facts = record.load(FIXTURES / "docker-daemon-down")
    facts = replace(facts, docker_clients=facts.docker_clients[:1])
    findings = evaluate.evaluate(facts, small)
    assert [f.severity for f in findings if f.id == "docker.no_buildkit"] == [Severity.ERROR]


def test_hung_tools_are_not_mistaken_for_missing_ones(small: Matrix) -> None:
    facts = record.load(FIXTURES / "pascal-gtx1080")
    outputs = dict(facts.outputs)
    outputs[model.NVSMI_XML] = Cmd(("nvidia-smi",), None,
                                   error="nvidia-smi did not finish within 10 s")
    outputs[model.DOCKER_INFO] = Cmd(("docker",), None, error="docker did not finish within 10 s")
    ids = {f.id: f for f in evaluate.evaluate(replace(facts, outputs=outputs), small)}
    assert ids["nvidia.smi_failed"].evidence == ("nvidia-smi did not finish within 10 s",)
    assert "docker did not finish" in ids["docker.daemon_unreachable"].evidence[0]
    assert "nvidia.smi_missing" not in ids and "docker.not_found" not in ids


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_recorded_gpu_hosts_replay_to_a_healthy_judgement(case: str, matrix: Matrix) -> None:
    """`doctor --save` on a real H100 and H200 (no Docker there): nothing but docker.not_found
    is wrong, and the recommendation is the image those hosts can run."""
    findings, rec = evaluate.diagnose(record.load(FIXTURES / case), matrix)
    bad = {f.id for f in findings if f.severity in (Severity.ERROR, Severity.WARN)}
    assert bad == {"docker.not_found"}
    gpus = next(f for f in findings if f.id == "nvidia.gpus")
    assert f"1 x {RECORDED[case]} (compute capability 9.0" in gpus.message
    assert rec.argv() == ["envbuild", "make", "--target", "cuda", "--driver", "580.159.04",
                          "--gpu", "sm_90"]
    spec = _resolved(rec, matrix)  # one voice: what `resolve --driver --gpu` gives
    assert spec.cuda_image is not None and spec.cuda_image.startswith("13.0.")
    assert f"torch {spec.torch} ({spec.variant})" in rec.reason


@pytest.mark.parametrize("case", sorted(RECORDED))
def test_recorded_hosts_as_an_ordinary_user(case: str, matrix: Matrix) -> None:
    """On the H100 an ordinary user was told it cannot open /dev/nvidia-caps (the MIG capability
    directory, root-only by design): no CUDA process opens it, so it is no finding."""
    facts = _as_other_user(record.load(FIXTURES / case))
    assert not facts.devices["/dev/nvidia-caps"].rw  # the recording's mode: 0o40755
    findings = evaluate.evaluate(facts, matrix)
    assert not [f for f in findings if f.id == "nvidia.device_permission"]
    assert {f.id for f in findings if f.severity is Severity.ERROR} == {"docker.not_found"}


CUDA_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia0")
OTHER_NODES = ("/dev/nvidia-caps", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
               "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap2")


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(closed=st.sets(st.sampled_from(CUDA_NODES + OTHER_NODES)))
def test_permission_is_judged_on_the_nodes_cuda_opens(closed: set[str], small: Matrix) -> None:
    facts = record.load(FIXTURES / "h100-sxm-recorded")
    devices = dict(facts.devices)
    for p in OTHER_NODES:
        devices.setdefault(p, model.DevNode(0, 0o20600, True))
    devices = {p: replace(d, rw=p not in closed) for p, d in devices.items()}
    findings = evaluate.evaluate(replace(facts, devices=devices), small)
    found = [f for f in findings if f.id == "nvidia.device_permission"]
    denied = sorted(closed & set(CUDA_NODES))
    if not denied:
        assert found == []
        return
    assert len(found) == 1 and found[0].severity is Severity.ERROR
    assert found[0].message == ("this user cannot open " + ", ".join(denied)
                                + ", which every CUDA process opens")
    assert [e.split(":")[0] for e in found[0].evidence] == denied
    assert "usermod -aG root" in found[0].remediation


def test_device_permission_rules_are_data(small: Matrix) -> None:
    """The nodes judged and the default mode come from signatures.toml [doctor]."""
    from envbuild.features.explain import load_catalogue

    table = dict(load_catalogue().doctor)
    rules = evaluate.HostRules.from_table(table)
    assert rules.is_cuda_node("/dev/nvidia0") and not rules.is_cuda_node("/dev/nvidia-caps")
    facts = record.load(FIXTURES / "h100-sxm-recorded")
    devices = {p: replace(d, rw=False) for p, d in facts.devices.items()}
    facts = replace(facts, devices=devices)
    found = [f for f in evaluate.evaluate(facts, small, rules=rules)
             if f.id == "nvidia.device_permission"]
    assert found[0].message.startswith("this user cannot open /dev/nvidia-uvm, /dev/nvidia0, "
                                       "/dev/nvidiactl,")
    assert f"mode {table['nvidia_device_mode']} (NVreg_DeviceFileMode)" in found[0].remediation
    only_ctl = evaluate.HostRules.from_table({**table, "cuda_device_nodes": ["/dev/nvidiactl"],
                                          "nvidia_device_mode": "0660"})
    found = [f for f in evaluate.evaluate(facts, small, rules=only_ctl)
             if f.id == "nvidia.device_permission"]
    assert found[0].message.startswith("this user cannot open /dev/nvidiactl,")
    assert "mode 0660" in found[0].remediation
    with pytest.raises(MatrixError, match="cuda_device_nodes"):
        evaluate.HostRules.from_table({k: v for k, v in table.items() if k != "cuda_device_nodes"})


def test_small_shm_threshold_is_data(small: Matrix) -> None:
    from envbuild.features.explain import load_catalogue

    table = dict(load_catalogue().doctor)
    facts = replace(record.load(FIXTURES / "h100-sxm-recorded"), shm_bytes=512 << 20)
    rules = evaluate.HostRules.from_table(table)
    ids = {f.id for f in evaluate.evaluate(facts, small, rules=rules)}
    assert "host.shm_small" in ids
    lax = evaluate.HostRules.from_table({**table, "shm_min_mb": 256})
    assert "host.shm_small" not in {f.id for f in evaluate.evaluate(facts, small, rules=lax)}


# ---------------------------------------------------------------- parsers


def test_proc_driver_version_both_module_flavours() -> None:
    assert parse.proc_driver_version(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023"
    ) == "535.104.05"
    assert parse.proc_driver_version(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
        "(dvs-builder@U22)  Tue Sep 23 09:41:50 UTC 2025") == "580.95.05"
    assert parse.proc_driver_version("") == ""


def test_nvsmi_xml_and_csv() -> None:
    smi = parse.nvsmi_xml((FIXTURES / "h100-healthy" / model.NVSMI_XML).read_text())
    assert smi is not None and smi.driver == "580.95.05" and smi.cuda == "13.0"
    assert len(smi.gpus) == 8 and smi.gpus[3].index == 3
    g = smi.gpus[0]
    assert (g.name, g.memory_mib, g.persistence, g.mig, g.pcie_width, g.pcie_width_max) == (
        "NVIDIA H100 80GB HBM3", 81559, "Enabled", "Disabled", 16, 16)
    rows = parse.nvsmi_csv((FIXTURES / "h100-healthy" / model.NVSMI_CSV).read_text())
    assert rows[7] == {"index": "7", "bus_id": "00000000:DB:00.0",
                       "name": "NVIDIA H100 80GB HBM3", "cc": "9.0", "memory": "81559 MiB"}
    assert parse.nvsmi_xml("Failed to initialize NVML: Driver/library version mismatch") is None
    assert parse.nvsmi_csv('Field "compute_cap" is not a valid field to query.') == []


def test_rocminfo_gpu_agents_only() -> None:
    agents = parse.rocminfo_gpus((FIXTURES / "mi300x" / model.ROCMINFO).read_text())
    assert [a.name for a in agents] == ["gfx942"] * 8
    assert agents[0].marketing == "AMD Instinct MI300X"


def test_small_parsers() -> None:
    assert parse.sw_vers("ProductName:\t\tmacOS\nProductVersion:\t\t14.6.1\n")[
        "ProductVersion"] == "14.6.1"
    assert parse.docker_cli_version("Docker version 20.10.24+dfsg1, build 297e128") == "20.10.24"
    assert parse.lib_version_from_path("/usr/lib/libnvidia-ml.so.535.129.03") == "535.129.03"
    assert parse.nvml_library_version("NVML library version: 535.129\n") == "535.129"
    text = ("\tlibcuda.so.1 (libc6) => /usr/lib32/libcuda.so.1\n"
            "\tlibcuda.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libcuda.so.1\n")
    assert parse.ldconfig_paths(text, "libcuda.so.1") == ["/lib/x86_64-linux-gnu/libcuda.so.1"]
    assert parse.meminfo_kib("MemTotal:       32786520 kB\n") == 32786520
    assert parse.json_object('{"a": 1}\nCannot connect') == {"a": 1}
    assert parse.json_object("garbage") is None
    assert view.gfx_name(90402) == "gfx942" and view.gfx_name(90010) == "gfx90a"
    assert view.gfx_name(100300) == "gfx1030"


def test_arch_coverage_rules(small: Matrix) -> None:
    cu126 = compat.variant(small, "2.14", "cu126")
    cu130 = compat.variant(small, "2.14", "cu130")
    assert cu126 is not None and cu130 is not None
    assert compat.covers(cu126, "6.1") and not compat.covers(cu130, "6.1")
    assert compat.covers(cu126, "8.9")  # sm_86 cubins run on 8.9
    assert not compat.covers(cu126, "12.0") and compat.covers(cu130, "12.1")  # PTX 12.0
    assert rules.cc_of("sm_120") == "12.0" and rules.cc_of("sm_90a") == "9.0"
    assert compat.cuda_for_driver(small, "470.182.03") == "11.4"
    assert compat.cuda_for_driver(small, "572.16", windows=True) == "12.8"
    assert compat.how_runs(small, "535.104.05", "12.4") == "mvc"
    assert compat.how_runs(small, "470.182.03", "12.2") == ""


def test_gpu_names_resolve_through_the_matrix(matrix: Matrix) -> None:
    assert gpus.gpu_cc(matrix, "NVIDIA H100 80GB HBM3") == "9.0"
    assert gpus.gpu_cc(matrix, "NVIDIA GeForce GTX 1080 Ti") == "6.1"
    assert gpus.gpu_cc(matrix, "NVIDIA A100-SXM4-80GB") == "8.0"
    assert gpus.gpu_cc(matrix, "Tesla V100-SXM2-16GB") == "7.0"


# ---------------------------------------------------------------- robustness, recording


@pytest.mark.parametrize("case", CASES)
def test_record_round_trip(case: str, tmp_path: Path) -> None:
    facts = record.load(FIXTURES / case)
    record.save(facts, tmp_path)
    assert record.load(tmp_path) == facts


junk = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(xml=junk, csv=junk, info=junk, rocm=junk, proc=junk, probe=junk, rc=st.integers(-9, 255))
def test_garbage_tool_output_never_crashes(xml: str, csv: str, info: str, rocm: str, proc: str,
                                           probe: str, rc: int, small: Matrix) -> None:
    argv = ("x",)
    facts = HostFacts(
        system="Linux", machine="x86_64",
        outputs={model.NVSMI_XML: Cmd(argv, rc, xml), model.NVSMI_CSV: Cmd(argv, rc, csv),
                 model.DOCKER_INFO: Cmd(argv, rc, info), model.ROCMINFO: Cmd(argv, rc, rocm),
                 model.TORCH_PROBE: Cmd(argv, rc, probe)},
        files={model.PROC_NVIDIA: proc}, python={"torch": "2.9.1+cu128"})
    findings, rec = evaluate.diagnose(facts, small)
    assert rec.target in ("cpu", "cuda", "rocm", "mps")
    report.render(findings, rec, facts)


@pytest.mark.parametrize("case", sorted(p.name for p in FIXTURES.iterdir()
                                        if (p / "expected.json").is_file()))
def test_recommendation_is_a_command_make_accepts(case: str, matrix: Matrix) -> None:
    """What the doctor recommends resolves on the shipped matrix (no dead-end advice)."""
    from envbuild.core.request import Request as Resolve
    from envbuild.core.resolve import resolve

    _, rec = _run(case, matrix)
    spec = resolve(Resolve(target=rec.target, cuda=rec.cuda or None, torch=rec.torch or None,
                           rocm=rec.rocm or None, driver=rec.driver or None, gpus=rec.gpus),
                   matrix)
    assert spec.target == rec.target
    if rec.driver:
        from envbuild.common.versions import version_key
        assert spec.min_driver is not None
        assert version_key(spec.min_driver) <= version_key(rec.driver)


def _with_driver(tmp_path: Path, case: str, old: str, new: str) -> HostFacts:
    """A recorded host whose driver is replaced everywhere it appears (module, NVML, smi)."""
    d = tmp_path / case
    shutil.copytree(FIXTURES / case, d)
    for p in d.rglob("*"):
        if p.is_file():
            try:
                text = p.read_text()
            except UnicodeDecodeError:
                continue
            if old in text:
                p.write_text(text.replace(old, new))
    return record.load(d)


@pytest.mark.parametrize(("case", "old", "new", "finding", "says"), [
    ("pascal-gtx1080", "580.95.05", "590.44.01", "nvidia.driver_too_new_for_gpu",
     "to R580"),
    ("h100-sxm-recorded", "580.159.04", "515.65.01", "nvidia.driver_too_old_for_gpu",
     "branches from R520"),
])
def test_doctor_uses_the_resolvers_driver_window(tmp_path: Path, case: str, old: str, new: str,
                                                  finding: str, says: str) -> None:
    """A Pascal host on R590, or an H100 on a driver older than R520, cannot exist: the doctor
    says so with the same window the resolver uses."""
    m = load()
    findings, _ = evaluate.diagnose(_with_driver(tmp_path, case, old, new), m, Request())
    hit = [f for f in findings if f.id == finding]
    assert hit and hit[0].severity == Severity.ERROR and says in hit[0].message, findings
    healthy, _ = evaluate.diagnose(record.load(FIXTURES / case), m, Request())
    assert not [f for f in healthy if f.id.startswith("nvidia.driver_too_")]


def test_host_rules_load_once_as_typed_data() -> None:
    """The [doctor] table is read once (cached) and typed; the engine's BuildKit thresholds and
    the doctor's device rules come from the same object."""
    compat.host_rules.cache_clear()
    first = compat.host_rules()
    assert first is compat.host_rules()
    assert isinstance(first.docker_default_shm_mb, int) and first.cuda_device_nodes
    from envbuild.engine import docker

    classic, buildx = docker._buildkit_rules()
    assert classic == tuple(int(x) for x in first.buildkit_classic_min.split(".")[:2])
    assert buildx == tuple(int(x) for x in first.buildx_required_from.split(".")[:2])


@pytest.mark.parametrize(("case", "file", "pattern"), [
    ("mac-m2", "sw_vers.txt", r"(ProductVersion:\s*)\S+"),
    ("h100-healthy", "proc_driver_nvidia_version.txt", r"(Kernel Module\s+)\S+"),
])
@pytest.mark.parametrize("digits", [19, 4301, 100_000])
def test_a_version_of_absurd_length_in_a_recording_is_no_traceback(
        tmp_path: Path, small: Matrix, case: str, file: str, pattern: str, digits: int) -> None:
    """A hostile recording's version (int() refuses over 4300 digits) is judged like any other
    odd value: findings, never an exception."""
    import re
    import shutil

    shutil.copytree(FIXTURES / case, tmp_path / case)
    path = tmp_path / case / file
    text, n = re.subn(pattern, lambda m: m.group(1) + "7" * digits, path.read_text(), count=1)
    assert n == 1, f"{file} of {case} has no version to replace"
    path.write_text(text)
    findings, _ = evaluate.diagnose(record.load(tmp_path / case), small, Request())
    assert findings


_HOSTILE_TAIL = st.text(st.characters(blacklist_categories=("Z", "C"), blacklist_characters=":"),
                        min_size=1, max_size=40)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=_HOSTILE_TAIL, prefix=st.sampled_from(["nvidia-driver-", "nvidia-utils-",
                                                   "libnvidia-compute-"]))
def test_a_recorded_package_name_reaches_the_purge_command_only_when_debian_allows_it(
        tail: str, prefix: str, small: Matrix) -> None:
    """A dpkg recording is user input: a driver package name with shell or Markdown characters
    (`$(...)`, backticks, quotes, `;`, unicode) matches the driver glob but is no Debian package
    name, so it goes into no command; the command printed is one the shell splits into exactly
    `sudo apt-get purge NAMES` of Debian names."""
    import shlex

    facts = record.load(FIXTURES / "wsl2-linux-driver")
    name = prefix + tail
    dpkg = facts.outputs[model.DPKG]
    facts = replace(facts, outputs={**facts.outputs, model.DPKG: replace(
        dpkg, stdout=dpkg.stdout + f"ii  {name}  535.183.01  amd64  NVIDIA\n")})
    f = next(f for f in evaluate.diagnose(facts, small)[0] if f.id == "wsl.linux_driver_installed")
    command = re.search(r"`(sudo apt-get purge [^`]*)`", f.remediation)
    assert command, f.remediation
    argv = shlex.split(command.group(1))
    assert argv[:3] == ["sudo", "apt-get", "purge"] and argv[3:]
    from envbuild.core.packages import apt_name

    for word in argv[3:]:
        assert apt_name(word) or "*" in word, word
    assert (name in argv) == apt_name(name)


def test_an_arm_host_says_its_platform_and_names_the_grace_beside_its_gh200(
        matrix: Matrix) -> None:
    """gh200-fasrc: a published lscpu (72 x Neoverse-V2) beside a GH200: the CPU is named as
    the module's, and the image recommended is for linux/arm64 (and resolves there)."""
    findings, rec = evaluate.diagnose(record.load(FIXTURES / "gh200-fasrc"), matrix)
    # judged on the shipped matrix (the small one has no GH200 and no arm64 wheels)
    assert [[f.id, str(f.severity)] for f in findings] == [
        ["host.platform", "info"], ["nvidia.driver", "ok"], ["nvidia.gpus", "ok"],
        ["nvidia.persistence_off", "info"], ["docker.not_found", "error"],
        ["torch.not_installed", "info"]]
    found = {f.id: f for f in findings}
    assert "linux/arm64 (aarch64)" in found["host.platform"].message
    assert "72 x Neoverse-V2: Grace, the CPU of the GH200" in found["host.platform"].message
    assert rec.platform == "linux/arm64" and rec.command.endswith("--platform linux/arm64")
    from envbuild.core.request import Request as Ask
    from envbuild.core.resolve import resolve

    spec = resolve(Ask(target="cuda", driver=rec.driver, gpus=rec.gpus, platform=rec.platform),
                   matrix)
    assert spec.platform == "linux/arm64" and "sm_90" in spec.archs


@pytest.mark.parametrize("lscpu,want", [
    ("Model name: Neoverse-V2\nCore(s) per socket: 72\nSocket(s): 1\n", [("Neoverse-V2", 72)]),
    # GB10's two core types, each its own block (util-linux's tree layout, indented)
    ("Vendor ID: ARM\n  Model name: Cortex-X925\n    Core(s) per socket: 5\n    Socket(s): 2\n"
     "  Model name: Cortex-A725\n    Core(s) per socket: 5\n    Socket(s): 2\n",
     [("Cortex-X925", 10), ("Cortex-A725", 10)]),
    ("Model name: -\n", []), ("", []),
    ("Model name: ARMv8 Processor rev 1 (v8l)\nCore(s) per cluster: 4\nCluster(s): 3\n",
     [("ARMv8 Processor rev 1 (v8l)", 12)]),
])
def test_lscpu_core_counts(lscpu: str, want: list[tuple[str, int]]) -> None:
    from envbuild.doctor.checks_host import lscpu_cores

    assert lscpu_cores(lscpu) == want


def test_an_x86_host_has_no_platform_finding(matrix: Matrix) -> None:
    findings, rec = evaluate.diagnose(record.load(FIXTURES / "h100-sxm-recorded"), matrix)
    assert "host.platform" not in {f.id for f in findings} and rec.platform == ""
