"""HostFacts to and from a directory of raw tool outputs (`doctor --save/--facts`, fixtures).

Layout: `host.json` (small facts), one file per command output named as in model.OUTPUTS
(stdout; `<name>.stderr` and `<name>.rc` beside it when not empty / not 0; `<name>.error` when
the command could not run), one file per read file named as in model.FILES.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envbuild.doctor import model
from envbuild.doctor.model import Cmd, DevNode, DockerClient, HostFacts
from envbuild.errors import UsageError


def _cmd_json(c: Cmd) -> dict[str, Any]:
    return {"rc": c.returncode, "stdout": c.stdout, "stderr": c.stderr, "error": c.error}


def _cmd_from(argv: tuple[str, ...], d: dict[str, Any]) -> Cmd:
    return Cmd(argv, d.get("rc"), d.get("stdout", ""), d.get("stderr", ""), d.get("error", ""))


def save(facts: HostFacts, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    host = {
        "system": facts.system, "machine": facts.machine, "env": dict(facts.env),
        "groups": list(facts.groups),
        "group_names": {str(k): v for k, v in facts.group_names.items()},
        "devices": {p: {"gid": d.gid, "mode": oct(d.mode), "rw": d.rw}
                    for p, d in facts.devices.items()},
        "dirs": {k: list(v) for k, v in facts.dirs.items()},
        "resolved": dict(facts.resolved), "modules": list(facts.modules),
        "pci": [list(p) for p in facts.pci],
        "docker_clients": [{"path": c.path, "version": c.version, "buildx": _cmd_json(c.buildx)}
                           for c in facts.docker_clients],
        "python": dict(facts.python), "shm_bytes": facts.shm_bytes,
        "container": facts.container, "kfd_gfx": list(facts.kfd_gfx),
    }
    (directory / "host.json").write_text(json.dumps(host, indent=2) + "\n")
    for name, text in facts.files.items():
        (directory / name).write_text(text)
    for name, cmd in facts.outputs.items():
        if not cmd.ran:
            (directory / f"{name}.error").write_text(cmd.error + "\n")
            continue
        (directory / name).write_text(cmd.stdout)
        if cmd.stderr:
            (directory / f"{name}.stderr").write_text(cmd.stderr)
        if cmd.returncode:
            (directory / f"{name}.rc").write_text(f"{cmd.returncode}\n")


def load(directory: Path) -> HostFacts:
    host_file = directory / "host.json"
    try:
        host: dict[str, Any] = json.loads(host_file.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{host_file}: not a recorded doctor directory ({exc})",
                         "record one with `envbuild doctor --save DIR`") from exc
    outputs: dict[str, Cmd] = {}
    for name, argv in model.OUTPUTS.items():
        out, err = directory / name, directory / f"{name}.error"
        if err.exists():
            outputs[name] = Cmd(argv, None, error=err.read_text().strip())
        elif out.exists():
            stderr = directory / f"{name}.stderr"
            rc = directory / f"{name}.rc"
            outputs[name] = Cmd(argv, int(rc.read_text()) if rc.exists() else 0,
                                out.read_text(), stderr.read_text() if stderr.exists() else "")
    files = {name: (directory / name).read_text() for name in model.FILES
             if (directory / name).exists()}
    return HostFacts(
        system=host.get("system", "Linux"), machine=host.get("machine", "x86_64"),
        outputs=outputs, files=files, env=host.get("env", {}),
        groups=tuple(host.get("groups", ())),
        group_names={int(k): v for k, v in host.get("group_names", {}).items()},
        devices={p: DevNode(d["gid"], int(str(d["mode"]), 8) if isinstance(d["mode"], str)
                            else int(d["mode"]), bool(d["rw"]))
                 for p, d in host.get("devices", {}).items()},
        dirs={k: tuple(v) for k, v in host.get("dirs", {}).items()},
        resolved=host.get("resolved", {}), modules=tuple(host.get("modules", ())),
        pci=tuple((p[0], p[1]) for p in host.get("pci", ())),
        docker_clients=tuple(
            DockerClient(c["path"], c.get("version", ""),
                         _cmd_from((c["path"], "buildx", "version"), c.get("buildx", {})))
            for c in host.get("docker_clients", ())),
        python=host.get("python", {}), shm_bytes=int(host.get("shm_bytes", 0)),
        container=host.get("container", ""), kfd_gfx=tuple(host.get("kfd_gfx", ())),
    )
