"""HostFacts to and from a directory of raw tool outputs (`doctor --save/--facts`, fixtures).

Layout: `host.json` (small facts), one file per command output named as in model.OUTPUTS
(stdout; `<name>.stderr` and `<name>.rc` beside it when not empty / not 0; `<name>.error` when
the command could not run), one file per read file named as in model.FILES.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envbuild.common import boundedio
from envbuild.common.errors import UsageError
from envbuild.common.outputs import OutFile, write_tree
from envbuild.doctor import model
from envbuild.doctor.model import Cmd, DevNode, DockerClient, HostFacts


def _cmd_json(c: Cmd) -> dict[str, Any]:
    return {"rc": c.returncode, "stdout": c.stdout, "stderr": c.stderr, "error": c.error}


def _cmd_from(argv: tuple[str, ...], d: dict[str, Any]) -> Cmd:
    return Cmd(argv, d.get("rc"), d.get("stdout", ""), d.get("stderr", ""), d.get("error", ""))


_HINT = "record one with `envbuild doctor --save DIR`"


class _Bad(ValueError):
    """A recorded fact of the wrong shape; the message names the key."""


def _str(v: Any, key: str) -> str:
    if not isinstance(v, str):
        raise _Bad(f"{key!r} must be a string")
    return v


def _int(v: Any, key: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool):
        raise _Bad(f"{key!r} must be an integer")
    return v


def _strs(v: Any, key: str) -> tuple[str, ...]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise _Bad(f"{key!r} must be a list of strings")
    return tuple(v)


def _ints(v: Any, key: str) -> tuple[int, ...]:
    if not isinstance(v, list):
        raise _Bad(f"{key!r} must be a list of integers")
    return tuple(_int(x, key) for x in v)


def _str_map(v: Any, key: str) -> dict[str, str]:
    if not isinstance(v, dict) or not all(isinstance(x, str) for x in v.values()):
        raise _Bad(f"{key!r} must be an object of strings")
    return dict(v)


def _obj(v: Any, key: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise _Bad(f"{key!r} must be an object")
    return v


def _device(v: Any, key: str) -> DevNode:
    d = _obj(v, key)
    mode = d.get("mode")
    if isinstance(mode, str):
        try:
            mode_int = int(mode, 8)
        except ValueError:
            raise _Bad(f"{key!r}: mode {mode[:20]!r} is not an octal number") from None
    else:
        mode_int = _int(mode, f"{key}.mode")
    rw = d.get("rw")
    if not isinstance(rw, bool):
        raise _Bad(f"{key!r}: rw must be true or false")
    return DevNode(_int(d.get("gid"), f"{key}.gid"), mode_int, rw)


def _client(v: Any, key: str) -> DockerClient:
    c = _obj(v, key)
    path = _str(c.get("path"), f"{key}.path")
    bx = _obj(c.get("buildx", {}), f"{key}.buildx")
    rc = bx.get("rc")
    if rc is not None:
        _int(rc, f"{key}.buildx.rc")
    for k in ("stdout", "stderr", "error"):
        _str(bx.get(k, ""), f"{key}.buildx.{k}")
    return DockerClient(path, _str(c.get("version", ""), f"{key}.version"),
                        _cmd_from((path, "buildx", "version"), bx))


def _pci(v: Any, key: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(v, list) or not all(
            isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
            for p in v):
        raise _Bad(f"{key!r} must be a list of [vendor, class] string pairs")
    return tuple((p[0], p[1]) for p in v)


def _text(path: Path) -> str:
    """A recorded text file, through the bounded reader (a regular file of at most RECORD_BYTES);
    binary garbage is refused, not decoded into nonsense."""
    data = boundedio.read_bytes(path, "recorded file", cap=boundedio.RECORD_BYTES,
                                hint=_HINT)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad(f"{path.name} is not UTF-8 text") from None


def save(facts: HostFacts, directory: Path) -> None:
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
    files = {"host.json": json.dumps(host, indent=2) + "\n", **facts.files}
    for name, cmd in facts.outputs.items():
        if not cmd.ran:
            files[f"{name}.error"] = cmd.error + "\n"
            continue
        files[name] = cmd.stdout
        if cmd.stderr:
            files[f"{name}.stderr"] = cmd.stderr
        if cmd.returncode:
            files[f"{name}.rc"] = f"{cmd.returncode}\n"
    # All or nothing, into a new or empty DIR or over a previous recording (by its manifest).
    write_tree({n: OutFile(t) for n, t in files.items()}, directory, force=True, flag="--save")


def load(directory: Path) -> HostFacts:
    """Read a recording; any file of the wrong shape is a UsageError (exit 2) naming it."""
    try:
        return _load(directory)
    except _Bad as exc:
        raise UsageError(f"{directory}: not a valid doctor recording: {exc}",
                         "record one with `envbuild doctor --save DIR`") from None
    except OSError as exc:
        raise UsageError(f"{directory}: cannot read the recording: "
                         f"{exc.filename or ''} {exc.strerror or exc}".replace("  ", " "),
                         "record one with `envbuild doctor --save DIR`") from None


def _load(directory: Path) -> HostFacts:
    host_file = directory / "host.json"
    try:
        host_any: Any = boundedio.parse_json(_text(host_file))  # TooDeep: a ValueError
    except (OSError, ValueError) as exc:
        raise UsageError(f"{host_file}: not a recorded doctor directory ({exc})",
                         "record one with `envbuild doctor --save DIR`") from exc
    host = _obj(host_any, "host.json")
    outputs: dict[str, Cmd] = {}
    for name, argv in model.OUTPUTS.items():
        out, err = directory / name, directory / f"{name}.error"
        if err.exists():
            outputs[name] = Cmd(argv, None, error=_text(err).strip())
        elif out.exists():
            stderr = directory / f"{name}.stderr"
            rc_file = directory / f"{name}.rc"
            rc = 0
            if rc_file.exists():
                try:
                    rc = int(_text(rc_file).strip())
                except ValueError:
                    raise _Bad(f"{rc_file.name} is not an exit status") from None
            outputs[name] = Cmd(argv, rc, _text(out), _text(stderr) if stderr.exists() else "")
    files = {name: _text(directory / name) for name in model.FILES
             if (directory / name).exists()}
    group_names = {}
    for k, v in _str_map(host.get("group_names", {}), "group_names").items():
        if not k.lstrip("-").isascii() or not k.lstrip("-").isdigit():
            raise _Bad(f"'group_names' key {k[:20]!r} is not a group id")
        group_names[int(k)] = v
    clients = host.get("docker_clients", [])
    if not isinstance(clients, list):
        raise _Bad("'docker_clients' must be a list")
    dirs = {k: _strs(v, f"dirs.{k}") for k, v in _obj(host.get("dirs", {}), "dirs").items()}
    return HostFacts(
        system=_str(host.get("system", "Linux"), "system"),
        machine=_str(host.get("machine", "x86_64"), "machine"),
        outputs=outputs, files=files, env=_str_map(host.get("env", {}), "env"),
        groups=_ints(host.get("groups", []), "groups"),
        group_names=group_names,
        devices={p: _device(d, f"devices.{p}")
                 for p, d in _obj(host.get("devices", {}), "devices").items()},
        dirs=dirs,
        resolved=_str_map(host.get("resolved", {}), "resolved"),
        modules=_strs(host.get("modules", []), "modules"),
        pci=_pci(host.get("pci", []), "pci"),
        docker_clients=tuple(_client(c, f"docker_clients[{i}]")
                             for i, c in enumerate(clients)),
        python=_str_map(host.get("python", {}), "python"),
        shm_bytes=_int(host.get("shm_bytes", 0), "shm_bytes"),
        container=_str(host.get("container", ""), "container"),
        kfd_gfx=_ints(host.get("kfd_gfx", []), "kfd_gfx"),
    )
