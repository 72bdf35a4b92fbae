"""What a `--base-image` really is, read from the image rather than assumed. Pure.

`make` (through envbuild.engine.docker.probe_base) runs PROBE in the base once and reads its config;
`parse()` turns that into BaseFacts: its OS (by /etc/os-release against matrix/os.toml's
`os_release`), its python3, its glibc, who holds uid/gid 1000, and whether it is an nvidia/cuda
base (CUDA_VERSION and NVIDIA_REQUIRE_CUDA in its environment). The resolver then renders for
the real base, and the spec records it by id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from envbuild.common.errors import UsageError
from envbuild.common.record import record
from envbuild.matrix import Matrix, OsInfo
from envbuild.validator.rules import parse_require_cuda, version_parts

# The sh script make runs in the base (fixed text: no value of the user's reaches it): markers,
# then os-release. Everything it prints is capped (PROBE_MAX bytes): a base whose os-release is a
# link to /dev/zero must not fill memory or the engine's log.
PROBE_MAX = 65536


def probe_script(os_release: str = "/etc/os-release",
                 fallback: str = "/usr/lib/os-release") -> str:
    return (
        '{ echo "@@python=$(python3 -c \'import sys; print("%d.%d" % sys.version_info[:2])\' '
        '2>/dev/null | head -c 64)"; '
        'echo "@@glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | head -c 64)"; '
        'echo "@@uid1000=$(getent passwd 1000 2>/dev/null | cut -d: -f1 | head -c 64)"; '
        'echo "@@gid1000=$(getent group 1000 2>/dev/null | cut -d: -f1 | head -c 64)"; '
        'echo "@@bash=$(command -v bash)"; '
        'echo "@@pm=$(command -v apt-get || command -v dnf || command -v microdnf || '
        'command -v yum)"; '
        f'head -c 16384 {os_release} 2>/dev/null || head -c 16384 {fallback} 2>/dev/null; '
        f'}} | head -c {PROBE_MAX}'
    )


PROBE = probe_script()
_MARK = re.compile(r"^@@([a-z0-9]+)=(.*)$", re.ASCII)
_OS_LINE = re.compile(r'^([A-Z_]+)=(?:"([^"]*)"|\'([^\']*)\'|(\S*))\s*$', re.ASCII)
# What the base reports is the base author's text: only printable ASCII is kept (a terminal
# escape in /etc/os-release must not reach an error message), each value at most 80 characters.
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def _clean(text: str) -> str:
    return _UNPRINTABLE.sub("?", text)[:80]


@record
class BaseFacts:
    ref: str
    image_id: str  # sha256:... of the local image: what the spec records
    os_id: str | None  # the matrix's OS id, None when the matrix has no such OS
    os_release: str  # "debian 12" (ID VERSION_ID), for messages
    python: str  # the base's python3 X.Y ("" = none)
    glibc: str  # "2.36" ("" = unknown: musl, or no getconf)
    uid_1000: str
    gid_1000: str
    bash: bool
    package_manager: str  # apt | dnf | "" (microdnf, yum and none are "")
    cuda_version: str  # CUDA_VERSION from the image's environment ("" = none)
    require_cuda: str  # the X.Y of its NVIDIA_REQUIRE_CUDA ("" = none: a plain base)

    @property
    def nvidia(self) -> bool:
        """An nvidia/cuda base (or a copy of one): it sets NVIDIA_REQUIRE_CUDA itself."""
        return bool(self.require_cuda)


def os_release(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _OS_LINE.match(line.strip())
        if m:
            out[m.group(1)] = next(g for g in m.groups()[1:] if g is not None)
    return out


def _name(text: str) -> str:
    """A user or group name as the base reports it; anything else is shown as '?'."""
    return text if re.fullmatch(r"[a-z_][a-z0-9_.-]{0,31}\$?", text, re.ASCII) else \
        ("?" if text else "")


def match_os(release: Mapping[str, str], m: Matrix) -> OsInfo | None:
    ident, version = release.get("ID", ""), release.get("VERSION_ID", "")
    for o in m.oses:
        if len(o.os_release) == 2 and o.os_release[0] == ident and (
                version == o.os_release[1] or version.startswith(o.os_release[1] + ".")):
            return o
    return None


def parse(ref: str, image_id: str, output: str, env: Mapping[str, str], m: Matrix) -> BaseFacts:
    marks: dict[str, str] = {}
    for line in output.splitlines()[:400]:
        hit = _MARK.match(line.strip())
        if hit:
            marks[hit.group(1)] = _clean(hit.group(2).strip())
    release = {k: _clean(v) for k, v in os_release("\n".join(output.splitlines()[:400])).items()}
    info = match_os(release, m)
    glibc = marks.get("glibc", "")
    pm = marks.get("pm", "").rsplit("/", 1)[-1]
    return BaseFacts(
        ref=ref, image_id=image_id, os_id=info.id if info else None,
        os_release=f"{release.get('ID', '?')} {release.get('VERSION_ID', '?')}",
        python=marks.get("python", "") if re.fullmatch(r"[0-9]+\.[0-9]+", marks.get("python", ""))
        else "",
        glibc=glibc.split()[-1] if re.fullmatch(r"glibc [0-9]+\.[0-9]+", glibc) else "",
        uid_1000=_name(marks.get("uid1000", "")), gid_1000=_name(marks.get("gid1000", "")),
        bash=bool(marks.get("bash")),
        package_manager={"apt-get": "apt", "dnf": "dnf"}.get(pm, ""),
        cuda_version=env.get("CUDA_VERSION", "") if re.fullmatch(
            r"[0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?", env.get("CUDA_VERSION", "")) else "",
        require_cuda=parse_require_cuda(env.get("NVIDIA_REQUIRE_CUDA")) or "",
    )


def check(facts: BaseFacts, requested_os: str | None, m: Matrix) -> str:
    """The OS id to render for; UsageError (exit 2) when the base cannot take the Dockerfile or
    contradicts --os."""
    flag = f"--base-image {facts.ref}"
    if not facts.bash:
        raise UsageError(f"{flag} has no bash, which every build step runs",
                         "use a distribution image (debian, ubuntu, rockylinux, ubi) or its "
                         "mirror; alpine and distroless bases cannot take the Dockerfile")
    if facts.os_id is None:
        known = ", ".join(o.id for o in m.oses)
        raise UsageError(f"{flag} is {facts.os_release} (/etc/os-release), an OS envbuild has "
                         "no package facts for", f"use a base of a known OS ({known})")
    if requested_os is not None and requested_os != facts.os_id:
        raise UsageError(f"--os {requested_os} but {flag} is {facts.os_id} "
                         f"({facts.os_release}, from its /etc/os-release)",
                         f"drop --os (the base's OS is used), or give --os {facts.os_id}")
    return facts.os_id


def glibc_ok(base_glibc: str, wheel_glibc: str) -> bool:
    """A manylinux_2_N wheel needs glibc >= 2.N; an unknown glibc ('') is not refused here
    (pip refuses the wheel at build time, naming its tag)."""
    if not base_glibc or not wheel_glibc:
        return True
    return version_parts(base_glibc) >= version_parts(wheel_glibc)
