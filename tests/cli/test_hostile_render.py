"""The quoting wall: every template rendered with injection payloads in every user-controlled field,
bypassing the validators, and its shell lines run under bash with stand-ins for the real tools.

The renderer is called directly (no validator runs), so each payload reaches the templates as is.
The generated shell code (the Dockerfile's RUN commands, apptainer's %environment and %test, the
setup-macos.sh script, the envbuild-validate wrapper) then runs under `bash` with PATH starting at a
directory of shims (pip, uv, apt-get, dnf, useradd, ...) that only record their argv. Proof: no
payload's `touch MARKER` ever runs, and the shims receive each payload as one literal argument.
A value that no quoting can make safe in its position (a newline, a FROM image with a space) is
refused by the renderer instead (UsageError): that is the other acceptable outcome.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import UsageError
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.core.spec import Spec
from envbuild.matrix import Matrix
from envbuild.render.context import RenderOptions, render

M = "@MARK@"  # replaced by the marker file's path
BREAKERS = [";", "|", "&&", "||", "&", "\n", "`", "$(", "'", '"', "'\"", ")", "}", "\\", "'$(",
            "\"$(", "\\';", "${IFS};", "<(", ">", "#\n"]
PREFIXES = ["", "https://p.example/simple", "a b"]
SUFFIXES = ["", ";", "`", ")", "'", '"', "#"]


def _payloads() -> list[str]:
    out = [f"{p}{b}touch {M}{s}" for p, b, s in
           itertools.product(PREFIXES, BREAKERS, SUFFIXES[:2])]
    out += [f"$(touch {M})", f"`touch {M}`", f"${{IFS}}$(touch${{IFS}}{M})", f">{M}",
            f"x'\"'\"';touch {M};'", f"{{touch,{M}}}", f"*;touch {M}", f"-o;touch {M}",
            f"x\\\ntouch {M}", f"x\rtouch {M}", f"$'\\x3b'touch {M}", f"!$(touch {M})"]
    return out


PAYLOADS = _payloads()
SHIMS = ["apt-get", "dnf", "xargs", "useradd", "install", "rm", "ln", "python3", "uv", "pip",
         "uname", "sysctl", "sw_vers"]
SHIM = """#!/bin/bash
{ printf '%s\\0' "${0##*/}" "$#" "$@"; } >> "$SHIM_LOG"
case "${0##*/}" in
  uname) [ "${1:-}" = "-s" ] && echo Darwin || echo arm64 ;;
  sysctl) echo 0 ;;
  sw_vers) echo 99.0 ;;
  python*) [ "${1:-}" = "-c" ] && echo arm64 ;;
esac
exit 0
"""


@dataclasses.dataclass
class Sandbox:
    root: Path
    marker: Path
    log: Path
    env: dict[str, str]

    def calls(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        parts = self.log.read_bytes().split(b"\0")
        out, i = [], 0
        while i + 1 < len(parts):
            n = int(parts[i + 1])
            out.append([parts[i].decode(errors="surrogateescape")]
                       + [p.decode(errors="surrogateescape") for p in parts[i + 2:i + 2 + n]])
            i += 2 + n
        return out

    def mapped(self, text: str) -> str:
        """text as the sandbox runs it: paths under /opt and /run point into the sandbox."""
        return text.replace("/opt/", f"{self.root}/opt/").replace("/run/", f"{self.root}/run/")

    def shell(self, code: str) -> None:
        """Run code under bash, mapped into the sandbox."""
        subprocess.run(["bash", "-o", "pipefail", "-c", self.mapped(code)], env=self.env,
                       cwd=self.root,
                       capture_output=True, timeout=30, check=False)

    def fresh(self) -> None:
        self.log.unlink(missing_ok=True)
        self.marker.unlink(missing_ok=True)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Sandbox]:
    root = tmp_path / "sb"
    shims = root / "shims"
    dirs = [shims, root / "opt/venv/bin", root / "opt/uv/bin", root / "opt/python",
            root / "venv/bin"]
    dirs += [root / f"opt/python/3.{n}/bin" for n in range(8, 15)]  # standalone interpreters
    for d in dirs:
        d.mkdir(parents=True)
    names = [shims / n for n in SHIMS] + [root / "opt/venv/bin/pip", root / "opt/venv/bin/python",
             root / "opt/uv/bin/pip", root / "opt/uv/bin/uv", root / "venv/bin/pip",
             root / "venv/bin/python"]
    names += [root / f"opt/python/3.{n}/bin/python3.{n}" for n in range(8, 15)]
    names += [shims / f"python3.{n}" for n in range(8, 15)]
    for n in names:
        n.write_text(SHIM)
        n.chmod(0o755)
    marker = tmp_path / "pwned"
    env = {"PATH": f"{shims}:/usr/bin:/bin", "SHIM_LOG": str(tmp_path / "shim.log"),
           "HOME": str(root), "LC_ALL": "C"}
    yield Sandbox(root, marker, tmp_path / "shim.log", env)


def run_instructions(dockerfile: str) -> list[str]:
    """The shell commands of every RUN instruction, parsed as Docker does (\\-newline joins)."""
    out: list[str] = []
    buf = ""
    for line in dockerfile.split("\n"):
        if line.lstrip().startswith("#") or (not buf and not line.strip()):
            continue
        if line.endswith("\\"):
            buf += line[:-1]
            continue
        instr, buf = buf + line, ""
        m = re.match(r"^RUN\s+((?:--\S+\s+)*)(.*)$", instr, re.DOTALL)
        if m:
            out.append(m.group(2))
    return out


def sections(definition: str, *names: str) -> list[str]:
    out, cur = [], None
    for line in definition.split("\n"):
        if line.startswith("%"):
            cur = line.split()[0][1:]
            if cur in names:
                out.append("")
            continue
        if cur in names:
            out[-1] += line + "\n"
    return out


@pytest.fixture(scope="module")
def specs(matrix: Matrix) -> dict[str, Spec]:
    return {"apt": resolve(Request(target="cpu", os="debian12", python="3.12"), matrix),
            "dnf": resolve(Request(target="cpu", os="rockylinux9", python="3.12"), matrix),
            "mps": resolve(Request(target="mps"), matrix)}


def _render(spec: Spec, opts: RenderOptions, m: Matrix) -> dict[str, str] | None:
    try:
        return {k: f.content for k, f in render(spec, opts, m).items()
                if isinstance(f.content, str)}  # the validator zipapp is bytes, not a script
    except UsageError:
        return None  # refused by the renderer's own wall: an acceptable outcome


def _run_all(sb: Sandbox, files: dict[str, str]) -> None:
    for cmd in run_instructions(files.get("Dockerfile", "")):
        sb.shell(cmd)
    for body in sections(files.get("apptainer.def", ""), "environment", "test", "runscript"):
        sb.shell(body)
    for name in ("setup-macos.sh", "envbuild-validate"):
        if name in files:
            for rel, text in files.items():
                (sb.root / rel).write_text(text)
            sb.shell(f"bash {sb.root / name} {sb.root / 'venv'}")


def _literal(sb: Sandbox, payload: str, tool: str) -> bool:
    """tool got payload as one argument (mapped as the sandbox maps every command: a payload
    holding "/run/" reaches the tool with the sandbox's path there)."""
    return any(c[0] == tool and sb.mapped(payload) in c[1:] for c in sb.calls())


@pytest.mark.parametrize(("family", "payload"),  # dnf differs only in its OS-package line
                         [("apt", p) for p in PAYLOADS] + [("dnf", p) for p in PAYLOADS[::3]])
def test_index_urls_in_run_lines_stay_one_argument(matrix: Matrix, specs: dict[str, Spec],
                                                   sandbox: Sandbox, family: str,
                                                   payload: str) -> None:
    p = payload.replace(M, str(sandbox.marker))
    opts = RenderOptions(torch_index_url=p, pip_index_url=p, pip_extra_index_urls=(p,),
                         index_credentials=True, ca_cert=True, python_source="standalone",
                         apptainer=True, image_ref="envbuild/x:1", apt=("curl",))
    spec = dataclasses.replace(specs[family], torch=p, variant=p, torchvision=p)
    files = _render(spec, opts, matrix)
    if files is None:
        assert "\n" in p or "\r" in p, "only a control character may stop the render here"
        return
    _run_all(sandbox, files)
    assert not sandbox.marker.exists(), f"payload executed: {p!r}"
    assert _literal(sandbox, p, "pip"), "pip did not get the URL as one argument"
    pairs = {(c[i - 1], a) for c in sandbox.calls() if c[0] == "pip" for i, a in enumerate(c)}
    assert ("--index-url", p) in pairs and ("--extra-index-url", p) in pairs


@pytest.mark.parametrize("payload", PAYLOADS[::2])
def test_python_version_in_run_lines_stays_one_argument(matrix: Matrix, specs: dict[str, Spec],
                                                       sandbox: Sandbox, payload: str) -> None:
    p = "3." + payload.replace(M, str(sandbox.marker))
    spec = dataclasses.replace(specs["apt"], python=p, index_url=p)
    files = _render(spec, RenderOptions(python_source="standalone", apptainer=True,
                                                   image_ref="envbuild/x:1"), matrix)
    if files is None:
        assert "\n" in p or "\r" in p
        return
    _run_all(sandbox, files)
    assert not sandbox.marker.exists(), f"payload executed: {p!r}"
    assert _literal(sandbox, p, "uv"), "uv did not get the Python version as one argument"


@pytest.mark.parametrize("payload", PAYLOADS[1::2])
def test_setup_macos_quotes_every_value(matrix: Matrix, specs: dict[str, Spec],
                                        sandbox: Sandbox, payload: str) -> None:
    p = payload.replace(M, str(sandbox.marker))
    files = _render(specs["mps"], RenderOptions(torch_index_url=p), matrix)
    if files is None:
        assert "\n" in p or "\r" in p
        return
    _run_all(sandbox, files)
    assert not sandbox.marker.exists(), f"payload executed: {p!r}"
    assert _literal(sandbox, p, "pip"), "pip did not get the index URL as one argument"
    sandbox.fresh()
    spec = dataclasses.replace(specs["mps"], torch=p, min_macos=p, python="3." + p)
    files = _render(spec, RenderOptions(), matrix)
    assert files is not None
    _run_all(sandbox, files)
    assert not sandbox.marker.exists(), f"payload executed: {p!r}"


@pytest.mark.parametrize("payload", PAYLOADS[::5])
@pytest.mark.parametrize("field", ["user", "base_image", "image_ref", "apt"])
def test_word_positions_refuse_what_they_cannot_hold(matrix: Matrix, specs: dict[str, Spec],
                                                     sandbox: Sandbox, field: str,
                                                     payload: str) -> None:
    """FROM, WORKDIR, mount targets and the xargs package list take no quoting: refused."""
    p = payload.replace(M, str(sandbox.marker))
    value: object = (p,) if field == "apt" else p
    opts = dataclasses.replace(RenderOptions(apptainer=True), **{field: value})
    files = _render(specs["apt"], opts, matrix)
    if files is not None:  # only if the value is a plain word; then it must be inert
        _run_all(sandbox, files)
        assert not sandbox.marker.exists()
    else:
        assert not re.fullmatch(r"[A-Za-z0-9._:/@+=~-]+", p)


@given(text=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40))
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(text="/run/")
@example(text="/opt/")
def test_arbitrary_text_never_runs(matrix: Matrix, specs: dict[str, Spec], sandbox: Sandbox,
                                   text: str) -> None:
    p = f"{text};touch {sandbox.marker};{text}"
    opts = RenderOptions(torch_index_url=p, pip_index_url=p, pip_extra_index_urls=(p, text),
                         python_source="standalone")
    hostile_python = dataclasses.replace(specs["apt"], python="3." + p)
    for spec, tool, literal in ((specs["apt"], "pip", p), (hostile_python, "uv", "3." + p)):
        sandbox.fresh()
        files = _render(spec, opts, matrix)
        if files is None:
            assert re.search(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]", text)
            return
        _run_all(sandbox, files)
        assert not sandbox.marker.exists(), f"payload executed: {p!r}"
        assert _literal(sandbox, literal, tool)


def test_the_harness_would_see_an_unquoted_value(sandbox: Sandbox) -> None:
    """The proof can fail: the same payload pasted without quoting does run."""
    dockerfile = f"FROM x\nRUN pip install --index-url https://p.example/;touch {sandbox.marker};\n"
    for cmd in run_instructions(dockerfile):
        sandbox.shell(cmd)
    assert sandbox.marker.exists()
    assert os.path.getsize(sandbox.log) > 0
