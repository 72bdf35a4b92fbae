"""`envbuild run`'s preflight, a pure function of the image's recorded spec and the doctor's host
facts: judged on the recorded H100 and H200 hosts (driver 580, torch 2.11 cu130) and on the
doctor's fixtures for the failures (an old driver, a GPU outside the arch list, a small /dev/shm,
a low memlock, no NVIDIA runtime, CDI, rootless Docker, WSL 2). Every nearest variant it names
resolves as typed."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.core import compat
from envbuild.core.spec import Spec, from_json
from envbuild.doctor import model, record
from envbuild.doctor.model import Cmd, HostFacts
from envbuild.doctor.view import build_view
from envbuild.features import run
from envbuild.matrix import Matrix, load
from tests.support import FIXTURES

DOCTOR = FIXTURES / "doctor"
SPEC_H100 = FIXTURES / "hosts" / "h100-sxm-driver580-torch2.11-cu130" / "spec-cu130.json"
SPEC_H200 = FIXTURES / "hosts" / "h200-driver580-torch2.11-cu130" / "spec-cu130.json"
NVIDIA_DOCKER: dict[str, object] = {"ServerVersion": "27.3.1", "OperatingSystem": "Ubuntu 24.04",
                 "Runtimes": {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {}},
                 "DefaultRuntime": "runc", "CgroupDriver": "systemd", "CgroupVersion": "2"}


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load()


def spec_of(path: Path) -> Spec:
    return from_json(json.loads(path.read_text()))


def host(name: str, docker: Mapping[str, object] | None = None,
         daemon: Mapping[str, object] | None = None) -> HostFacts:
    """A recorded host; `docker`: its `docker info` replaced (the recorded H100/H200 had no
    Docker), `daemon`: its /etc/docker/daemon.json."""
    facts = record.load(DOCTOR / name)
    outputs, files = dict(facts.outputs), dict(facts.files)
    if docker is not None:
        outputs[model.DOCKER_INFO] = Cmd(model.OUTPUTS[model.DOCKER_INFO], 0, json.dumps(docker))
    if daemon is not None:
        files[model.DAEMON_JSON] = json.dumps(daemon)
    return replace(facts, outputs=outputs, files=files)


def check(m: Matrix, spec: Spec, facts: HostFacts, **req: object) -> run.Preflight:
    image = run.ImageFacts("envbuild/cu130:test", spec)
    return run.preflight(image, facts, m, compat.host_rules(),
                         run.RunRequest(**req))  # type: ignore[arg-type]


def ids(pre: run.Preflight) -> dict[str, str]:
    return {f.id: str(f.severity) for f in pre.findings}


def flags(pre: run.Preflight) -> list[str]:
    return [a.flag for a in pre.added]


@pytest.mark.parametrize(("fixture", "spec"), [("h100-sxm-recorded", SPEC_H100),
                                               ("h200-recorded", SPEC_H200)])
def test_the_recorded_h100_and_h200_run_their_cu130_image(m: Matrix, fixture: str,
                                                          spec: Path) -> None:
    pre = check(m, spec_of(spec), host(fixture, NVIDIA_DOCKER), command=("python", "train.py"))
    assert not pre.blocked, pre.findings
    found = {f.id: f.message for f in pre.findings}
    assert "driver 580.159.04 runs the image's CUDA 13.0 (cu130) natively" in found["image.driver"]
    assert "(sm_90) runs its cubin sm_90" in found["image.arch"]
    assert flags(pre) == ["--shm-size=8g", "--ulimit memlock=-1", "--ulimit stack=67108864"]
    argv = pre.plan.argv()
    assert argv[-3:] == ["envbuild/cu130:test", "python", "train.py"]
    assert shlex.join(argv).count("--gpus all") == 1 and argv.count("--shm-size=8g") == 1


def test_the_recorded_hosts_without_docker_are_refused_before_the_start(m: Matrix) -> None:
    pre = check(m, spec_of(SPEC_H100), host("h100-sxm-recorded"))
    assert pre.blocked and ids(pre)["docker.not_found"] == "error"


def test_a_too_old_driver_and_a_gpu_outside_the_arch_list(m: Matrix) -> None:
    pre = check(m, spec_of(SPEC_H100), host("driver-too-old-470"))
    assert pre.blocked
    found = {f.id: f.message for f in pre.findings}
    assert "needs driver >= 580.65.06 natively; the driver is 470.182.03" in \
        found["torch.driver_too_old"]
    assert "GPU 0, 1, 2, 3 Tesla V100-SXM2-16GB (compute capability 7.0)" in \
        found["torch.arch_missing"]  # one line for four identical GPUs
    assert pre.nearest.startswith("envbuild make --target cuda ") and "--driver 470.182.03" \
        in pre.nearest and "--gpu sm_70" in pre.nearest


def test_an_arch_not_in_the_list_and_one_reached_through_ptx(m: Matrix) -> None:
    facts = host("h100-sxm-recorded", NVIDIA_DOCKER)
    spec = spec_of(SPEC_H100)
    pre = check(m, replace(spec, archs=("sm_80", "sm_86")), facts)
    assert ids(pre)["torch.arch_missing"] == "error" and pre.nearest
    pre = check(m, replace(spec, archs=("sm_80", "compute_80")), facts)
    assert not pre.blocked
    assert "runs PTX JIT of compute_80" in {f.id: f.message for f in pre.findings}["image.arch"]


def test_the_container_toolkit_requirement_and_minor_version_compatibility(m: Matrix) -> None:
    """A cu126 wheel on driver 580 runs natively; a CUDA 13.0 base needs 580 natively (the
    toolkit refuses a 470); a CUDA 12.x wheel on a plain base runs through minor-version
    compatibility on a 12.0-era driver."""
    spec = spec_of(SPEC_H100)
    facts = host("pascal-gtx1080")  # driver 580.95.05
    cu126 = replace(spec, torch_cuda="12.6", variant="cu126", cuda_image="12.6.3",
                    archs=("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"))
    assert "natively" in {f.id: f.message for f in check(m, cu126, facts).findings}[
        "image.driver"]
    plain = replace(cu126, cuda_image=None, require_cuda="12.0")
    how = compat.how_runs(m, "525.60.13", "12.6")
    assert how == "mvc"
    old = host("driver-library-mismatch")  # 535.104.05: CUDA 12.2 natively
    pre = check(m, plain, old)
    msgs = {f.id: f.message for f in pre.findings}
    assert "through minor-version compatibility" in msgs.get("image.driver", ""), msgs
    strict = check(m, replace(plain, cuda_image="12.6.3", require_cuda=None), old)
    assert "refuses to start it ('unsatisfied condition: cuda>=12.6')" in {
        f.id: f.message for f in strict.findings}["torch.driver_too_old"]


def test_forward_compat_images_are_judged_by_the_branches_their_libraries_serve(
        m: Matrix) -> None:
    pkg = next(c for c in m.compat_packages if c.arch == "linux-x86_64"
               and "470" not in c.host_branches)
    spec = replace(spec_of(SPEC_H100), forward_compat=pkg.version, cuda_image=None,
                   require_cuda="13.0")
    pre = check(m, spec, host("driver-too-old-470"))
    assert f"forward-compatibility libraries {pkg.version} serve" in {
        f.id: f.message for f in pre.findings}["torch.driver_too_old"]


def test_shm_the_daemon_default_the_users_size_and_ipc_host(m: Matrix) -> None:
    spec = spec_of(SPEC_H100)
    big = check(m, spec, host("h100-sxm-recorded", NVIDIA_DOCKER, {"default-shm-size": "8G"}))
    assert "--shm-size=8g" not in flags(big) and ids(big)["shm.ok"] == "ok"
    small = check(m, spec, host("h100-sxm-recorded", NVIDIA_DOCKER), shm_size="64m")
    assert ids(small)["shm.small"] == "warn" and small.plan.shm_size == 64 << 20
    assert not any(f.startswith("--shm-size") for f in flags(small))
    facts = replace(host("h100-sxm-recorded", NVIDIA_DOCKER), shm_bytes=64 << 20)
    ipc = check(m, spec, facts, ipc_host=True)
    assert ids(ipc)["host.shm_small"] == "warn" and "--ipc=host" in ipc.plan.argv()


def test_memlock_and_stack(m: Matrix) -> None:
    spec = spec_of(SPEC_H100)
    low = {"default-ulimits": {"memlock": {"Name": "memlock", "Soft": 65536, "Hard": 65536}}}
    pre = check(m, spec, host("h100-sxm-recorded", NVIDIA_DOCKER, low))
    assert "--ulimit memlock=-1" in flags(pre)
    high = {"default-ulimits": {"memlock": {"Name": "memlock", "Soft": -1, "Hard": -1},
                                "stack": {"Name": "stack", "Soft": 67108864, "Hard": 67108864}}}
    pre = check(m, spec, host("h100-sxm-recorded", NVIDIA_DOCKER, high))
    assert not [f for f in flags(pre) if f.startswith("--ulimit")]
    rootless = {**NVIDIA_DOCKER, "SecurityOptions": ["name=seccomp,profile=builtin",
                                                     "name=rootless"]}
    pre = check(m, spec, host("h100-sxm-recorded", rootless))
    assert ids(pre)["ulimit.memlock"] == "warn" and not pre.plan.ulimits


def test_no_nvidia_runtime_cdi_and_no_gpu(m: Matrix) -> None:
    spec = spec_of(SPEC_H100)
    bare = {**NVIDIA_DOCKER, "Runtimes": {"runc": {}}}
    pre = check(m, spec, host("h100-sxm-recorded", bare))
    assert pre.blocked and ids(pre)["docker.no_gpu_runtime"] == "error"
    facts = host("h100-sxm-recorded", {**bare, "CDISpecDirs": ["/etc/cdi"]})
    facts = replace(facts, dirs={**facts.dirs, "/etc/cdi": ("nvidia.yaml",)})
    pre = check(m, spec, facts)
    assert not pre.blocked and "--device nvidia.com/gpu=all" in shlex.join(pre.plan.argv())
    pre = check(m, spec, host("h100-sxm-recorded", bare), no_gpu=True)
    assert not pre.blocked and pre.plan.gpus == "" and not pre.plan.ulimits


def test_a_cuda_image_on_a_cpu_host_and_a_cpu_image(m: Matrix) -> None:
    facts = host("cpu-host-docker")
    pre = check(m, spec_of(SPEC_H100), facts)
    assert ids(pre)["image.no_gpu"] == "warn" and pre.plan.gpus == "" and not pre.plan.ulimits
    cpu = run.nearest_variant(spec_of(SPEC_H100), build_view(facts, m), m)[1]
    assert cpu is not None
    cpu_spec = replace(cpu, target="cpu", variant="cpu", torch_cuda=None, archs=())
    pre = check(m, cpu_spec, facts)
    assert flags(pre) == ["--shm-size=8g"] and not pre.blocked


def test_wsl2(m: Matrix) -> None:
    pre = check(m, spec_of(SPEC_H100), host("wsl2-healthy"))
    found = ids(pre)
    assert "wsl.detected" in found and "wsl.limits" in found
    assert "--cuda " in pre.nearest  # the CUDA the Windows driver runs, as the doctor says
    blocked = check(m, spec_of(SPEC_H100), host("wsl2-docker-blocked"))
    assert blocked.blocked


NEAREST_HOSTS = ["driver-too-old-470", "pascal-gtx1080", "wsl2-healthy", "h100-healthy",
                 "gh200-fasrc", "cpu-host-docker", "mi300x"]


@pytest.mark.parametrize("fixture", NEAREST_HOSTS)
@pytest.mark.parametrize("spec_path", [SPEC_H100, SPEC_H200])
def test_every_nearest_variant_resolves_as_typed(m: Matrix, fixture: str,
                                                 spec_path: Path) -> None:
    from envbuild.cli import run as cli

    v = build_view(host(fixture), m)
    command, spec = run.nearest_variant(spec_of(spec_path), v, m)
    if not command:
        return
    words = shlex.split(command)
    assert words[:2] == ["envbuild", "make"] and spec is not None
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli(["resolve", *words[2:], "--json"]) == 0, (command, err.getvalue())
    assert json.loads(out.getvalue())["spec_hash"] == spec.hash


def test_image_facts_refuse_foreign_and_damaged_labels() -> None:
    with pytest.raises(UsageError, match="not built by envbuild"):
        run.image_facts("debian:12", {}, "linux/amd64")
    for bad in ("{", "[]", '{"target": "cuda"}', json.dumps({"target": "quantum"})):
        with pytest.raises(UsageError, match="is not a spec"):
            run.image_facts("x:1", {run.SPEC_LABEL: bad}, None)
    text = json.dumps(spec_of(SPEC_H100).identity())
    assert run.image_facts("x:1", {run.SPEC_LABEL: text}, None).spec == replace(
        spec_of(SPEC_H100), trace=(), warnings=())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_hostile_image_names_mounts_and_env_are_usage_errors(text: str) -> None:
    for call in (lambda: run.check_image_ref(text), lambda: run.parse_mount(text, Path("/")),
                 lambda: run.parse_env(text, {"HOME": "/root"})):
        try:
            call()
        except UsageError as err:
            assert "\n" not in err.message and "\x1b" not in err.message
    with contextlib.suppress(UsageError):
        mount = run.parse_mount(text, Path("/"))
        assert mount.target.startswith("/") and mount.source.startswith("/")
        assert all(c.isprintable() and c not in ":," for c in mount.source + mount.target)


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[A-Z_][A-Z0-9_]{0,20}", fullmatch=True),
       st.text(min_size=1, max_size=40).filter(lambda s: "\0" not in s))
def test_env_values_are_never_printed(name: str, secret: str) -> None:
    from envbuild.engine.docker import ContainerPlan

    key, value = run.parse_env(f"{name}={secret}", {})
    assert (key, value) == (name, secret)
    plan = ContainerPlan(image="x:1", env={key: value})
    argv = plan.argv()
    assert argv[argv.index("-e") + 1] == name
    if len(secret) > 3 and secret not in ("x:1", "run", "docker"):
        assert secret not in " ".join(argv[:argv.index("-e")] + argv[argv.index("-e") + 2:])


SIZE_UNITS = ("", "b", "k", "kb", "kib", "m", "mb", "mib", "g", "gb", "gib")


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=1 << 20), st.sampled_from(SIZE_UNITS),
       st.sampled_from(("", " ")), st.booleans())
def test_every_shm_size_spelling_becomes_bytes_and_dockers_own_spelling(
        m: Matrix, number: int, unit: str, space: str, upper: bool) -> None:
    """Each spelling sizes.py takes (2GiB, 64 mb, 1048576, ...) reaches the SDK as bytes (docker-py
    refuses "2GiB": 'should specify the units'), and the printed command says Docker's spelling
    of the same bytes."""
    from envbuild.common.sizes import docker_size, size_bytes
    from envbuild.engine.docker import run_flags

    text = f"{number}{space}{unit.upper() if upper else unit}"
    want = size_bytes(text, "--shm-size")
    plan = check(m, _cpu_spec(m), host("cpu-host-docker"), shm_size=text).plan
    assert plan.shm_size == want and isinstance(plan.shm_size, int)
    flag = next(f for f in run_flags(plan) if f.startswith("--shm-size="))
    spelled = flag.removeprefix("--shm-size=")
    assert spelled == docker_size(want) and size_bytes(spelled, "x") == want
    assert re.fullmatch(r"\d+[kmg]?", spelled)  # what Docker's RAMInBytes reads as binary units


def _cpu_spec(m: Matrix) -> Spec:
    from envbuild.core.request import Request
    from envbuild.core.resolve import resolve

    return resolve(Request(target="cpu"), m)


def test_a_rocm_image_without_this_hosts_gfx_names_its_nearest_variant(m: Matrix) -> None:
    """torch.gfx_missing says "run the nearest variant below": one is computed, with this
    host's gfx, and it resolves as typed to a spec that covers the GPU."""
    from envbuild.cli import run as cli
    from envbuild.core.request import Request
    from envbuild.core.resolve import resolve

    spec = resolve(Request(target="rocm"), m)
    pre = check(m, replace(spec, archs=("gfx908", "gfx90a")), host("mi300x"))
    assert pre.blocked and ids(pre)["torch.gfx_missing"] == "error"
    assert pre.nearest.startswith("envbuild make --target rocm ") and "--gpu gfx942" in pre.nearest
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli(["resolve", *shlex.split(pre.nearest)[2:], "--json"]) == 0, err.getvalue()
    assert "gfx942" in json.loads(out.getvalue())["archs"]


@pytest.mark.parametrize("argv", [["run", "Bad!Name", "python", "x.py", "--json"],
                                  ["run", "-e", "X=1", "Bad!Name", "sh", "--json"],
                                  ["run", "--shm-size", "--json", "Bad!Name"],
                                  ["run", "Bad!Name", "--", "x", "--json"]])
def test_json_after_the_image_is_the_commands_not_envbuilds(argv: list[str]) -> None:
    from envbuild.cli import run as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli(argv) == 2
    assert out.getvalue() == "" and err.getvalue().startswith("error: ")


def test_json_before_the_image_is_envbuilds() -> None:
    from envbuild.cli import run as cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        assert cli(["run", "--json", "Bad!Name", "python", "x.py"]) == 2
    assert "is not an image reference" in json.loads(out.getvalue())["error"]["message"]


class _FakeContainer:
    def __init__(self, log: list[str]) -> None:
        self.id, self.log = "c0ffee", log

    def start(self) -> None:
        self.log.append("start")

    def remove(self, force: bool = False) -> None:
        self.log.append("remove")


class _FakeEngine:
    """The SDK calls run_attached makes: what it creates, and a wait that answers `waited`."""

    def __init__(self, waited: dict[str, object], chunks: int = 1) -> None:
        self.waited, self.log, self.kwargs = waited, [], {}  # type: ignore[var-annotated]
        self.chunks = chunks
        self.containers, self.api = self, self

    def create(self, image: str, command: object, **kwargs: object) -> _FakeContainer:
        self.kwargs = kwargs
        return _FakeContainer(self.log)

    def attach(self, cid: str, **kwargs: object) -> object:
        return iter([(b"out\n", None)] * self.chunks)

    def wait(self, cid: str, condition: str = "") -> dict[str, object]:
        self.log.append(f"wait {condition}")
        return self.waited


def _run_on(monkeypatch: pytest.MonkeyPatch, engine: _FakeEngine, **plan: object) -> int:
    from envbuild.engine import docker

    monkeypatch.setattr(docker, "client", lambda: engine)
    return docker.run_attached(docker.ContainerPlan(image="x:1", **plan),  # type: ignore[arg-type]
                               lambda b: None, lambda b: None)


def test_the_container_is_created_with_rm_and_shm_in_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = _FakeEngine({"StatusCode": 7})
    assert _run_on(monkeypatch, engine, shm_size=2 << 30) == 7
    assert engine.kwargs["auto_remove"] is True and engine.kwargs["shm_size"] == 2 << 30
    assert "wait removed" in engine.log and engine.log[-1] == "remove"


@pytest.mark.parametrize("answer", [{}, {"StatusCode": None}, {"StatusCode": -1},
                                    {"Error": {"Message": "container gone"}}])
def test_an_engine_that_does_not_say_the_exit_code_is_exit_3(
        monkeypatch: pytest.MonkeyPatch, answer: dict[str, object]) -> None:
    from envbuild.common.errors import EXIT_CANNOT_RUN, EnvironmentProblem

    engine = _FakeEngine(answer)
    with pytest.raises(EnvironmentProblem, match="did not say how the container") as info:
        _run_on(monkeypatch, engine)
    assert info.value.exit_code == EXIT_CANNOT_RUN and engine.log[-1] == "remove"
    if "Error" in answer:
        assert "container gone" in info.value.message


def test_sigterm_and_sighup_unwind_as_ctrl_c_and_the_handlers_come_back() -> None:
    import os
    import signal

    from envbuild.common import signals

    for sig in (signal.SIGTERM, signal.SIGHUP):
        before = signal.getsignal(sig)
        with pytest.raises(KeyboardInterrupt) as info, signals.raised():
            os.kill(os.getpid(), sig)  # its handler runs at once, in this (the main) thread
        assert isinstance(info.value, signals.Terminated)
        assert info.value.exit_code == 128 + sig and signal.getsignal(sig) is before


def podman_host(version: str, cdi: bool) -> HostFacts:
    """The recorded H100 (no Docker) with a working Podman, and an NVIDIA CDI spec or not."""
    facts = host("h100-sxm-recorded")
    info = {"version": {"Version": version}, "host": {"cgroupManager": "systemd",
                                                      "cgroupVersion": "v2"}}
    outputs = {**facts.outputs, model.PODMAN_INFO: Cmd(model.OUTPUTS[model.PODMAN_INFO], 0,
                                                       json.dumps(info))}
    dirs = {**facts.dirs, "/etc/cdi": ("nvidia.yaml",)} if cdi else facts.dirs
    return replace(facts, outputs=outputs, dirs=dirs)


def test_a_podman_only_host_is_refused_with_the_podman_command_line(m: Matrix) -> None:
    """run drives the Docker engine only: on a host with only Podman it says so (not a start
    that fails later) and prints the `podman run` line, with CDI's GPU flag where it works."""
    spec = spec_of(SPEC_H100)
    pre = check(m, spec, podman_host("4.9.3", cdi=True), command=("python", "train.py"))
    found = {f.id: f for f in pre.findings}
    assert pre.blocked and found["engine.podman_only"].severity.rank == 3
    assert "Podman 4.9.3 and no Docker engine" in found["engine.podman_only"].message
    line = found["engine.podman_only"].remediation.split(": ", 1)[1]
    words = shlex.split(line)
    assert words[:3] == ["podman", "run", "--rm"] and words[-2:] == ["python", "train.py"]
    assert "--device nvidia.com/gpu=all" in line and "--shm-size=8g" in words
    assert ids(pre)["docker.not_found"] == "info"
    no_cdi = check(m, spec, podman_host("4.9.3", cdi=False))
    assert ids(no_cdi)["podman.no_cdi"] == "warn"
    assert "nvidia.com/gpu" not in {f.id: f.remediation for f in no_cdi.findings}[
        "engine.podman_only"]
    old = check(m, spec, podman_host("3.4.4", cdi=True))
    assert ids(old)["podman.old"] == "warn" and "nvidia.com/gpu" not in {
        f.id: f.remediation for f in old.findings}["engine.podman_only"]
    docker_too = replace(podman_host("4.9.3", cdi=True), outputs={
        **podman_host("4.9.3", cdi=True).outputs,
        **host("h100-sxm-recorded", NVIDIA_DOCKER).outputs})
    assert "engine.podman_only" not in ids(check(m, spec, docker_too))


def test_a_podman_only_host_without_a_docker_engine_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from envbuild.common import proc
    from envbuild.common.errors import EnvironmentProblem
    from envbuild.engine import docker

    def no_engine(ref: str) -> None:
        raise EnvironmentProblem("cannot reach the Docker engine (No such file or directory)",
                                 "start it")

    monkeypatch.setattr(docker, "local_image", no_engine)
    monkeypatch.setattr(proc, "which", lambda name: "/usr/bin/podman" if name == "podman"
                        else None)
    with pytest.raises(EnvironmentProblem, match="only Podman: envbuild run starts") as info:
        run.check("envbuild/cu130:test", run.RunRequest())
    assert "podman run --rm --device nvidia.com/gpu=all --shm-size=8g IMAGE" in info.value.hint
    monkeypatch.setattr(proc, "which", lambda name: None)
    with pytest.raises(EnvironmentProblem, match="cannot reach the Docker engine"):
        run.check("envbuild/cu130:test", run.RunRequest())
