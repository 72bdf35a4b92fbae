"""Images for another platform on this host: qemu's user-mode emulator, registered with the
kernel's binfmt_misc, runs their binaries (BuildKit's RUN steps, the check's container).

What an emulated torch needs: oneDNN's CPU detection reads each CPU's MIDR_EL1 from sysfs, which
qemu does not provide, and `import torch` (aarch64) dies with SIGSEGV without it. The check
mounts a stand-in /sys/devices/system/cpu holding the matrix's MIDR (torch.toml
[meta] emulated_arm64_midr) and says so in its report.
"""

from __future__ import annotations

from pathlib import Path

from envbuild.common.errors import EnvironmentProblem, UsageError
from envbuild.core import platforms

BINFMT = Path("/proc/sys/fs/binfmt_misc")
STANDIN_TARGET = "/sys/devices/system/cpu"


def emulated(platform: str | None) -> bool:
    """Whether an image for `platform` runs emulated on this host (None: this host's)."""
    return platform is not None and platform != platforms.host()


def ready(platform: str, remote: bool = False) -> str:
    """How this host runs `platform` binaries ('qemu-aarch64 through binfmt_misc'), or an
    EnvironmentProblem (exit 4) that says how to get there. A remote engine (tcp://, ssh://)
    is its own machine: not checked here ('')."""
    if remote:
        return ""
    from envbuild.common.boundedio import read_text

    machine = platforms.WHEEL_MACHINES.get(platform)
    if machine is None:
        raise UsageError(f"no emulation is known for {platform}",
                         f"build on a native {platform} machine")
    entry = BINFMT / f"qemu-{machine}"
    hint = ("install emulation: `apt-get install qemu-user-static binfmt-support` (Debian, "
            "Ubuntu), or `docker run --privileged --rm tonistiigi/binfmt --install "
            f"{platform.rsplit('/', 1)[-1]}`; or build on a native {platform} machine")
    try:
        text = read_text(entry, "binfmt_misc entry", cap=4096)
    except (OSError, UsageError):
        raise EnvironmentProblem(f"this host ({platforms.host()}) cannot run {platform} "
                                 f"binaries: no qemu-{machine} in {BINFMT}", hint) from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "enabled":
        raise EnvironmentProblem(f"qemu-{machine} is registered in {BINFMT} but disabled",
                                 f"enable it: update-binfmts --enable qemu-{machine}")
    return f"qemu-{machine} through binfmt_misc"


def cpu_standin(directory: Path, midr: str, cpus: int) -> None:
    """Write a stand-in for /sys/devices/system/cpu into `directory`: each CPU's
    regs/identification/midr_el1, and online, possible, present."""
    span = f"0-{cpus - 1}\n" if cpus > 1 else "0\n"
    for name in ("online", "possible", "present"):
        (directory / name).write_text(span)
    for n in range(cpus):
        regs = directory / f"cpu{n}" / "regs" / "identification"
        regs.mkdir(parents=True)
        (regs / "midr_el1").write_text(midr + "\n")
