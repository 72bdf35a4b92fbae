"""Typed data of the doctor: raw host facts in, findings and a recommendation out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from enum import StrEnum
from typing import Any

from envbuild.common.record import record


class Severity(StrEnum):
    OK = "ok"
    INFO = "info"
    WARN = "warn"
    ERROR = "error"

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Severity.OK: 0, Severity.INFO: 1, Severity.WARN: 2, Severity.ERROR: 3}


@record
class Finding:
    id: str
    severity: Severity
    message: str
    remediation: str = ""
    evidence: tuple[str, ...] = ()

    @property
    def cause(self) -> str:
        """The stable cause code (causes.py; '' when the finding names none)."""
        from envbuild.doctor.causes import cause_of

        return cause_of(self.id)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "severity": str(self.severity), "cause": self.cause,
                "message": self.message, "remediation": self.remediation,
                "evidence": list(self.evidence)}


@record
class Recommendation:
    """The `envbuild make ...` command this host should run, and why."""

    target: str  # cpu | cuda | rocm | mps
    cuda: str = ""
    rocm: str = ""
    torch: str = ""
    reason: str = ""
    alternatives: tuple[str, ...] = ()
    driver: str = ""  # Linux NVIDIA driver: the resolver keeps the image runnable on it
    gpus: tuple[str, ...] = ()  # sm_XY of the host's GPUs: the wheel must cover them
    platform: str = ""  # the host's, when not linux/amd64: the image must be for it

    def argv(self) -> list[str]:
        from envbuild.core.request import Request, make_argv

        return make_argv(Request(target=self.target, cuda=self.cuda or None,
                                 rocm=self.rocm or None, torch=self.torch or None,
                                 driver=self.driver or None, gpus=self.gpus,
                                 platform=self.platform or None))

    @property
    def command(self) -> str:
        return " ".join(self.argv())

    def to_json(self) -> dict[str, Any]:
        return {"command": self.command, "argv": self.argv(), "target": self.target,
                "cuda": self.cuda, "rocm": self.rocm, "torch": self.torch,
                "driver": self.driver, "gpus": list(self.gpus), "platform": self.platform or None,
                "reason": self.reason, "alternatives": list(self.alternatives)}


@record
class Request:
    """What the user asked the doctor: `--cuda X.Y` = can this host run CUDA X.Y?"""

    cuda: str = ""


@record
class Cmd:
    """What one probe command printed. returncode None: it could not run (see error)."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def ran(self) -> bool:
        return self.returncode is not None

    @property
    def text(self) -> str:
        return (self.stdout + "\n" + self.stderr).strip()


@record
class DevNode:
    gid: int
    mode: int
    rw: bool  # this process can open it read-write


@record
class DockerClient:
    path: str
    version: str  # `docker --version` output
    buildx: Cmd  # `docker buildx version`


@record
class HostFacts:
    """Raw facts a probe run collected: texts and small observations, nothing judged yet.

    `outputs` holds command results keyed by their recording file name (see OUTPUTS),
    `files` the texts of files read (keyed the same way, see FILES).
    """

    system: str
    machine: str
    outputs: Mapping[str, Cmd] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    groups: tuple[int, ...] = ()
    group_names: Mapping[int, str] = field(default_factory=dict)
    devices: Mapping[str, DevNode] = field(default_factory=dict)
    dirs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    resolved: Mapping[str, str] = field(default_factory=dict)
    modules: tuple[str, ...] = ()
    pci: tuple[tuple[str, str], ...] = ()  # (vendor id, class id) of GPU-like PCI devices
    docker_clients: tuple[DockerClient, ...] = ()
    python: Mapping[str, str] = field(default_factory=dict)  # executable, version, torch, ...
    shm_bytes: int = 0
    container: str = ""  # docker | podman | "" when not inside a container
    kfd_gfx: tuple[int, ...] = ()  # gfx_target_version of /sys/class/kfd topology GPU nodes

    def out(self, name: str) -> Cmd | None:
        return self.outputs.get(name)

    def file(self, name: str) -> str | None:
        return self.files.get(name)


# Recording names of the probe commands and files (a fixture directory uses these names).
NVSMI_XML = "nvidia-smi-q-x.xml"
NVSMI_CSV = "nvidia-smi-query.csv"
DOCKER_INFO = "docker-info.json"
PODMAN_INFO = "podman-info.json"
ROCMINFO = "rocminfo.txt"
SW_VERS = "sw_vers.txt"
SYSCTL_TRANSLATED = "sysctl-proc_translated.txt"
SYSCTL_CPU = "sysctl-cpu_brand.txt"
DPKG = "dpkg-l.txt"
LDCONFIG = "ldconfig-p.txt"
LSCPU = "lscpu.txt"
TORCH_PROBE = "torch-probe.json"

NVSMI_FIELDS = "index,pci.bus_id,name,compute_cap,memory.total"
OUTPUTS: dict[str, tuple[str, ...]] = {
    NVSMI_XML: ("nvidia-smi", "-q", "-x"),
    NVSMI_CSV: ("nvidia-smi", f"--query-gpu={NVSMI_FIELDS}", "--format=csv,noheader"),
    DOCKER_INFO: ("docker", "info", "--format", "{{json .}}"),
    LSCPU: ("lscpu",),
    PODMAN_INFO: ("podman", "info", "--format", "json"),
    ROCMINFO: ("rocminfo",),
    SW_VERS: ("sw_vers",),
    SYSCTL_TRANSLATED: ("sysctl", "-n", "sysctl.proc_translated"),
    SYSCTL_CPU: ("sysctl", "-n", "machdep.cpu.brand_string"),
    DPKG: ("dpkg", "-l", "nvidia-*", "libnvidia-*", "cuda-drivers*"),
    LDCONFIG: ("ldconfig", "-p"),
    TORCH_PROBE: ("python", "-c", "<torch probe>"),
}

PROC_NVIDIA = "proc_driver_nvidia_version.txt"
OSRELEASE = "osrelease.txt"
MEMINFO = "meminfo.txt"
DAEMON_JSON = "docker-daemon.json"
FILES: dict[str, str] = {
    PROC_NVIDIA: "/proc/driver/nvidia/version",
    OSRELEASE: "/proc/sys/kernel/osrelease",
    MEMINFO: "/proc/meminfo",
    DAEMON_JSON: "/etc/docker/daemon.json",
}
