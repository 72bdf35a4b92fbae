"""What an image holds, collected inside it in one run (`python -I -c SOURCE REPORT_DIR`): its OS
packages (dpkg's status file, `rpm -qa`), the venv's Python distributions (importlib.metadata),
the interpreter, torch's CUDA/HIP versions (torch/version.py read as text: no torch import) and
the wheels the Dockerfile's pip installs reported (pip-report-*.json). `python -I -c SOURCE
--dists`: the distributions alone (name, version, how installed: the team lock's packages).

On stdout: the MARKER line, then one JSON object on one line. The image's ENTRYPOINT is replaced
for the run, but anything else may print before it (a base image's banner): the host reads only
what follows the last MARKER line.

Standalone: the image's own Python runs it (3.8+), standard library only, nothing of envbuild.
Bounded: every string, list and file read has a cap, so an odd image cannot make it print
without end; the host parses what it prints as untrusted input anyway."""

from __future__ import annotations

import ast
import glob
import json
import os
import platform
import subprocess
import sys
from typing import Any

FORMAT = 1
MARKER = "::envbuild-probe-output-7c1e5a::"  # a line of its own; JSON never holds a raw newline
DISTS_ONLY = "--dists"
MAX_STR = 1024  # one name, version, URL or licence
MAX_ITEMS = 20000  # packages of one kind
MAX_FILE = 64 << 20  # a status file or a pip report
MAX_LISTS = 20000  # dpkg .list files searched for the interpreter's owner
LICENSE_PREFIX = "License :: "
TORCH_FIELDS = ("cuda", "hip", "git_version", "__version__")


def cut(value: object, limit: int = MAX_STR) -> str:
    text = value if isinstance(value, str) else ("" if value is None else str(value))
    return text[:limit]


def read(path: str, limit: int = MAX_FILE) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    return data.decode("utf-8", "replace")


def os_release() -> dict[str, str]:
    out: dict[str, str] = {}
    text = read("/etc/os-release", 1 << 16) or read("/usr/lib/os-release", 1 << 16) or ""
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in ("ID", "VERSION_ID", "VERSION_CODENAME", "PRETTY_NAME",
                                   "ID_LIKE"):
            out[key.strip()] = cut(value.strip().strip("\"'"), 256)
    return out


def dpkg() -> list[dict[str, str]] | None:
    """Installed packages of /var/lib/dpkg/status; None without a dpkg database."""
    text = read("/var/lib/dpkg/status")
    if text is None:
        return None
    out: list[dict[str, str]] = []
    for stanza in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t"):
                continue
            key, sep, value = line.partition(":")
            if sep and key in ("Package", "Status", "Version", "Architecture", "Source"):
                fields[key] = value.strip()
        if not fields.get("Package") or fields.get("Status", "").split()[-1:] != ["installed"]:
            continue
        out.append({"name": cut(fields["Package"]), "version": cut(fields.get("Version")),
                    "arch": cut(fields.get("Architecture")),
                    "source": cut(fields.get("Source", "").split(" ")[0])})
        if len(out) >= MAX_ITEMS:
            break
    return out


RPM_FIELDS = ("name", "epoch", "version", "release", "arch", "license")
RPM_FORMAT = "\\t".join("%{" + f.upper() + "}" for f in RPM_FIELDS) + "\\n"


def rpm() -> tuple[list[dict[str, str]] | None, str]:
    """Installed packages by `rpm -qa`; (None, why) without rpm or when it fails."""
    try:
        r = subprocess.run(["rpm", "-qa", "--queryformat", RPM_FORMAT], capture_output=True,
                           timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, "" if isinstance(exc, FileNotFoundError) else cut(exc, 200)
    if r.returncode != 0:
        return None, cut(r.stderr.decode("utf-8", "replace").strip(), 200)
    out: list[dict[str, str]] = []
    for line in r.stdout[:MAX_FILE].decode("utf-8", "replace").splitlines():
        parts = line.split("\t")
        if len(parts) != len(RPM_FIELDS) or parts[0].startswith("gpg-pubkey"):
            continue
        # enumerate, not zip(strict=...): this runs on Python 3.8
        out.append({RPM_FIELDS[i]: "" if v == "(none)" else cut(v) for i, v in enumerate(parts)})
        if len(out) >= MAX_ITEMS:
            break
    return out, ""


def owner(path: str) -> dict[str, str] | None:
    """The OS package that installed `path` (the interpreter), with its architecture: dpkg's
    file lists (NAME:ARCH.list for a Multi-Arch: same package, NAME.list, no architecture, for
    the one package of that name), else rpm."""
    lists = sorted(glob.glob("/var/lib/dpkg/info/*.list"))[:MAX_LISTS]
    for f in lists:
        text = read(f, 8 << 20)
        if text is not None and path in text.splitlines():
            name, _, arch = os.path.basename(f)[:-5].partition(":")
            return {"manager": "dpkg", "name": cut(name), "arch": cut(arch)}
    try:
        r = subprocess.run(["rpm", "-qf", "--queryformat", "%{NAME}\\t%{ARCH}\\n", path],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    first = r.stdout[:4096].decode("utf-8", "replace").strip().split("\n")[0]
    name, _, arch = first.partition("\t")
    if r.returncode == 0 and name.strip():
        return {"manager": "rpm", "name": cut(name.strip()),
                "arch": cut("" if arch.strip() == "(none)" else arch.strip())}
    return None


def interpreter() -> dict[str, object]:
    real = os.path.realpath(getattr(sys, "_base_executable", "") or sys.executable)
    base = os.path.realpath(sys.base_prefix)
    return {"implementation": platform.python_implementation(),
            "version": platform.python_version(), "executable": cut(real),
            "base_prefix": cut(base), "venv": cut(sys.prefix),
            "owner": owner(real) or (owner(real.replace("/usr/bin/", "/bin/", 1))
                                     if real.startswith("/usr/bin/") else None)}


def direct(dist: Any) -> str:
    """How a distribution installed from a direct reference (PEP 610's direct_url.json) got
    there: archive (a wheel or sdist by path or URL: a compiled extension's wheel), vcs, dir;
    '' from an index or a --find-links directory. The URL itself is left out (a local path,
    maybe a login)."""
    try:
        text = dist.read_text("direct_url.json")
    except Exception:
        return ""
    if not text or len(text) > 1 << 16:
        return "archive" if text else ""
    try:
        data = json.loads(text)
    except ValueError:
        return "archive"
    if not isinstance(data, dict):
        return "archive"
    return "vcs" if "vcs_info" in data else "dir" if "dir_info" in data else "archive"


def distributions(licenses: bool = True) -> list[dict[str, object]]:
    from importlib import metadata

    seen = set()
    out: list[dict[str, object]] = []
    for dist in metadata.distributions():
        try:
            meta: Any = dist.metadata  # an email.message.Message
            name = meta.get("Name") or ""
        except Exception:  # a broken .dist-info: skipped, as pip does
            continue
        key = name.lower().replace("_", "-").replace(".", "-")
        if not name or key in seen:
            continue  # the first on sys.path is the one imported
        seen.add(key)
        row: dict[str, object] = {"name": cut(name), "version": cut(meta.get("Version")),
                                  "direct": direct(dist)}
        if licenses:
            row.update({"license_expression": cut(meta.get("License-Expression")),
                        "license": cut(meta.get("License"), 4096),
                        "classifiers": [cut(c[len(LICENSE_PREFIX):])
                                        for c in (meta.get_all("Classifier") or [])
                                        if isinstance(c, str)
                                        and c.startswith(LICENSE_PREFIX)][:20]})
        out.append(row)
        if len(out) >= MAX_ITEMS:
            break
    return out


def torch_versions() -> dict[str, str]:
    """torch.version's cuda, hip and git_version, from the file itself."""
    for d in sys.path:
        text = read(os.path.join(d, "torch", "version.py"), 1 << 16)
        if text is None:
            continue
        out: dict[str, str] = {}
        try:
            tree = ast.parse(text)
        except SyntaxError:
            return out
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and node.targets else \
                node.target if isinstance(node, ast.AnnAssign) else None
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and target.id in TORCH_FIELDS \
                    and isinstance(value, ast.Constant) and isinstance(value.value, str):
                out[target.id] = cut(value.value, 128)
        return out
    return {}


def table(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def pip_reports(directory: str) -> list[dict[str, object]]:
    """What each pip install reported installing: name, version, where from, its sha256."""
    out: list[dict[str, object]] = []
    for path in sorted(glob.glob(os.path.join(directory, "pip-report-*.json")))[:64]:
        text = read(path)
        step = os.path.basename(path)[len("pip-report-"):-len(".json")]
        try:
            data = json.loads(text) if text is not None else None
        except ValueError:
            data = None
        if not isinstance(data, dict):
            out.append({"step": cut(step), "error": "unreadable"})
            continue
        installed: list[dict[str, object]] = []
        for item in data.get("install") or []:
            if not isinstance(item, dict):
                continue
            meta, info = table(item, "metadata"), table(item, "download_info")
            archive = table(info, "archive_info")
            hashes = table(archive, "hashes")
            sha = hashes.get("sha256") or ""
            legacy = archive.get("hash")
            if not sha and isinstance(legacy, str) and legacy.startswith("sha256="):
                sha = legacy[len("sha256="):]
            installed.append({"name": cut(meta.get("name")), "version": cut(meta.get("version")),
                              "url": cut(info.get("url"), 2048), "sha256": cut(sha, 64),
                              "requested": bool(item.get("requested")),
                              "kind": "archive" if archive else "vcs" if "vcs_info" in info
                              else "dir" if "dir_info" in info else ""})
            if len(installed) >= MAX_ITEMS:
                break
        out.append({"step": cut(step), "pip": cut(data.get("pip_version"), 64),
                    "install": installed})
    return out


def main() -> None:
    arg = sys.argv[1] if len(sys.argv) > 1 else "/opt/envbuild"
    if arg == DISTS_ONLY:
        facts: dict[str, object] = {"format": FORMAT, "dists": distributions(licenses=False)}
    else:
        packages, rpm_error = rpm()
        facts = {"format": FORMAT, "os_release": os_release(), "dpkg": dpkg(), "rpm": packages,
                 "rpm_error": rpm_error, "python": interpreter(), "dists": distributions(),
                 "torch": torch_versions(), "pip_reports": pip_reports(arg),
                 "machine": platform.machine()}
    sys.stdout.write("\n" + MARKER + "\n")  # on a line of its own, whatever came before
    sys.stdout.write(json.dumps(facts, separators=(",", ":")))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
