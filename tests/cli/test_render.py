"""Rendering: golden files for every target x OS x flavor, hadolint, conda specs, atomicity."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from tests.support import GOLDEN, ROOT, run_cli
from tests.support.render import HADOLINT_CONFIG

UPDATE = os.environ.get("ENVBUILD_UPDATE_GOLDEN") == "1"
# Files compared byte for byte; validator.pyz and peaks.json are checked against their sources.
COMPARED = ("Dockerfile", ".dockerignore", "environment.yml", "requirements.txt", "constraints.txt",
            "user-requirements.txt", "apt-packages.txt", "envbuild-validate", "spec.json",
            "apptainer.def", "setup-macos.sh", "install-cuda-compat.py",
            "extensions-requirements.txt", "build-extensions.py")

CASES: dict[str, list[str]] = {
    "cuda-base-ubuntu22.04": ["--cuda", "12.2", "--torch", "2.5.1", "--os", "ubuntu22.04"],
    "cuda-devel-ubuntu22.04": ["--cuda", "12.4", "--torch", "2.5.1", "--flavor", "devel"],
    "cuda-base-ubuntu24.04": ["--cuda", "12.8", "--torch", "2.8.0", "--os", "ubuntu24.04"],
    "cuda-devel-ubuntu24.04": ["--cuda", "13.0", "--torch", "2.13.0", "--os", "ubuntu24.04",
                               "--flavor", "devel"],
    "cuda-base-rockylinux9": ["--cuda", "12.6", "--torch", "2.7.1", "--os", "rockylinux9"],
    "cuda-runtime-ubi9-py3.12": ["--cuda", "12.4", "--torch", "2.6.0", "--os", "ubi9",
                                 "--python", "3.12", "--flavor", "runtime"],
    "cuda-standalone-python": ["--cuda", "12.4", "--torch", "2.6.0", "--os", "ubuntu22.04",
                               "--python", "3.12"],
    "cuda-fleet-apptainer": ["--cuda", "12.8", "--torch", "2.7.1", "--gpu", "H100", "--gpu",
                             "RTX 5090", "--format", "apptainer"],
    "cuda-user-packages": ["--cuda", "12.2", "--torch", "2.5.1", "--pip", "numpy<2", "--apt",
                           "curl", "--conda", "ffmpeg", "--ca-cert",
                           "/etc/ssl/certs/ca-certificates.crt", "--pip-index-url",
                           "https://user:s3cret@pypi.example.com/simple"],
    "rocm-ubuntu22.04": ["--rocm", "6.2", "--torch", "2.5.1"],
    "rocm-devel-ubuntu22.04": ["--rocm", "6.2", "--torch", "2.5.1", "--flavor", "devel"],
    # CUDA on a plain OS base (no nvidia/cuda image for debian12): the runtime's settings rendered
    "cuda-plain-debian12": ["--target", "cuda", "--torch", "2.13.0", "--os", "debian12"],
    "cuda-plain-debian12-cu132": ["--target", "cuda", "--torch", "2.15.0", "--os", "debian12"],
    # an H100 on R535 runs the cu130 wheel through NVIDIA's forward-compatibility libraries
    "cuda-forward-compat-r535": ["--forward-compat", "--driver", "535.104.05", "--gpu", "H100",
                                 "--torch", "2.13.0", "--os", "ubuntu22.04"],
    "cpu-debian12": ["--target", "cpu", "--torch", "2.13.0", "--os", "debian12"],
    # linux/arm64: the torch stack from a stage on the build machine (pip --platform --target)
    "cuda-gh200-arm64": ["--gpu", "GH200", "--torch", "2.13.0", "--os", "ubuntu24.04",
                         "--platform", "linux/arm64"],
    "cpu-arm64-debian12": ["--target", "cpu", "--torch", "2.13.0", "--os", "debian12",
                           "--platform", "arm64", "--pip", "numpy<3"],
    "cpu-ubuntu24.04-root": ["--target", "cpu", "--torch", "2.9.1", "--os", "ubuntu24.04",
                             "--user", "root"],
    "mps": ["--target", "mps", "--torch", "2.9.1"],
    # a PyPI mirror as the torch index: the default variant pinned without +cu130
    "cuda-pypi-mirror": ["--cuda", "13.0", "--torch", "2.13.0", "--os", "ubuntu24.04",
                         "--torch-index-url", "https://nexus.example.com/repository/pypi/simple"],
    # --with: prebuilt extension wheels in a layer of their own, constrained by the torch stack
    "cuda-with-extensions": ["--with", "xformers", "--with", "bitsandbytes", "--torch", "2.8",
                             "--os", "ubuntu24.04", "--gpu", "H100"],
    # --build-extension: a builder stage compiles the source for the --gpu archs (nvcc from PyPI)
    "cuda-build-extension": ["--target", "cuda", "--torch", "2.13.0", "--os", "debian12",
                             "--gpu", "A100", "--build-extension",
                             str(ROOT / "tests" / "fixtures" / "extensions" /
                                 "envbuild-tiny-cuda")],
    # --build-extensions: flash-attn has no wheel for torch 2.13, so PyPI's sdist is compiled in
    # the builder stage (its own arch variable and force-build switch from the matrix)
    "cuda-build-extensions-sdist": ["--target", "cuda", "--torch", "2.13.0", "--os", "debian12",
                                    "--gpu", "H100", "--gpu", "A100", "--with", "flash-attn",
                                    "--build-extensions"],
}


def _render(tmp_path: Path, name: str, args: list[str]) -> Path:
    out = tmp_path / name
    r = run_cli("render", *args, "--out", str(out))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("render")
    return {name: _render(base, name, args) for name, args in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(rendered: dict[str, Path], name: str) -> None:
    out = rendered[name]
    golden = GOLDEN / name
    if UPDATE:
        shutil.rmtree(golden, ignore_errors=True)
        golden.mkdir(parents=True)
        for f in COMPARED:
            if (out / f).exists():
                shutil.copy(out / f, golden / f)
    produced = sorted(f for f in COMPARED if (out / f).exists())
    expected = sorted(p.name for p in golden.iterdir())
    assert produced == expected, "set of rendered files changed (make golden, then review)"
    for f in produced:
        assert (out / f).read_text() == (golden / f).read_text(), f"{name}/{f} differs: " \
            "run `make golden` and review the diff"
    from envbuild.matrix import load
    from envbuild.render.context import validator_source

    assert (out / "validator.pyz").read_bytes() == validator_source(load())
    json.loads((out / "peaks.json").read_text())


def test_deterministic(tmp_path: Path) -> None:
    args = CASES["cuda-user-packages"]
    a, b = _render(tmp_path, "a", args), _render(tmp_path, "b", args)
    for f in sorted(p.name for p in a.iterdir()):
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def _hadolint(dockerfile: Path) -> list[dict[str, object]]:
    exe = shutil.which("hadolint") or str(Path(os.sys.executable).parent / "hadolint")
    p = subprocess.run([exe, "--config", str(HADOLINT_CONFIG), "-f", "json", str(dockerfile)],
                       capture_output=True, text=True, timeout=60)
    findings: list[dict[str, object]] = json.loads(p.stdout or "[]")
    return [f for f in findings if f["level"] in ("warning", "error")]


@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "mps"))
def test_hadolint_clean(rendered: dict[str, Path], name: str) -> None:
    assert _hadolint(rendered[name] / "Dockerfile") == []


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN curl -s x | sh\nUSER root\n")
    codes = {f["code"] for f in _hadolint(bad)}
    assert {"DL3006", "DL4006"} <= codes


@pytest.mark.parametrize("name", sorted(CASES))
def test_environment_yml(rendered: dict[str, Path], name: str) -> None:
    from rattler import MatchSpec

    env = yaml.safe_load((rendered[name] / "environment.yml").read_text())
    assert env["channels"] == ["conda-forge"]
    pip_section = None
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip_section = dep["pip"]
            continue
        MatchSpec(dep, strict=True)
    assert pip_section, "torch comes through pip"
    reqs = [Requirement(x) for x in pip_section if not x.startswith("--")]
    assert reqs[0].name == "torch"


def test_secrets_never_rendered(rendered: dict[str, Path]) -> None:
    out = rendered["cuda-user-packages"]
    for f in out.rglob("*"):
        if f.is_file():
            assert "s3cret" not in f.read_text(errors="replace"), f
    dockerfile = (out / "Dockerfile").read_text()
    assert "--mount=type=secret,id=ca" in dockerfile
    assert "--mount=type=secret,id=netrc" in dockerfile
    assert "https://pypi.example.com/simple" in dockerfile


def test_refuses_non_empty_out_without_force(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    r = run_cli("render", "--target", "cpu", "--out", str(out))
    assert r.returncode == 2 and "not empty" in r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    r = run_cli("render", "--target", "cpu", "--out", str(out), "--force")  # not a render
    assert r.returncode == 2 and "not empty" in r.stderr  # --force: tests/cli/test_outputs.py
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]


@pytest.mark.parametrize(("flag", "value"), [
    ("--pip", "vim; curl x|sh"), ("--pip", "$(id)"), ("--apt", "curl\nRUN id"),
    ("--apt", "-o APT::Get::AllowUnauthenticated=1"), ("--pip", "--index-url=https://x"),
    ("--pip", "-r /etc/passwd"), ("--conda", "a" * 10_000), ("--apt", "vim\x00"),
    ("--base-image", "ubuntu:22.04\nRUN id"), ("--user", "root; id"),
    ("--pip-index-url", "file:///etc/passwd"),
])
def test_hostile_input_writes_nothing(tmp_path: Path, flag: str, value: str) -> None:
    out = tmp_path / "out"
    try:
        r = run_cli("render", "--target", "cpu", flag, value, "--out", str(out))
    except ValueError:  # a NUL byte cannot even be passed as an argument: refused by the OS
        return
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert flag in r.stderr or flag.lstrip("-") in r.stderr
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_render_all(tmp_path: Path) -> None:
    r = run_cli("render", "--all", "--torch", ">=2.12", "--out", str(tmp_path / "all"), "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    dirs = data["directories"]
    assert data["count"] == len(dirs) > 20
    assert any(d.startswith("cuda-") for d in dirs) and any(d.startswith("rocm-") for d in dirs)
    assert any(d.startswith("cpu-") for d in dirs) and any(d.startswith("mps-") for d in dirs)
    for d in dirs:
        assert (tmp_path / "all" / d / "spec.json").exists()


def _fake_mac(tmp_path: Path, *, machine: str, translated: str, version: str) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"uname": f'[ "$1" = "-s" ] && echo Darwin || echo {machine}',
             "sysctl": f"echo {translated}", "sw_vers": f"echo {version}"}
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin"}


@pytest.mark.parametrize(("machine", "translated", "version", "message"), [
    ("x86_64", "1", "14.5", "Rosetta"),
    ("x86_64", "0", "14.5", "Apple silicon (arm64) is required"),
    ("arm64", "0", "13.6.1", "macOS 13.6.1 is older than 14.0"),
])
def test_macos_setup_refuses(rendered: dict[str, Path], tmp_path: Path, machine: str,
                             translated: str, version: str, message: str) -> None:
    script = rendered["mps"] / "setup-macos.sh"
    env = _fake_mac(tmp_path, machine=machine, translated=translated, version=version)
    p = subprocess.run(["/bin/bash", str(script), str(tmp_path / "venv")], capture_output=True,
                       text=True, env=env, timeout=30)
    assert p.returncode == 1
    assert message in p.stderr
    assert not (tmp_path / "venv").exists()


@pytest.mark.parametrize("validator_rc", [0, 1, 3, 2, 127])
def test_macos_setup_is_ready_only_after_a_passing_validation(
        rendered: dict[str, Path], tmp_path: Path, validator_rc: int) -> None:
    """setup-macos.sh on a stand-in Mac (uname, sysctl, sw_vers, and a python that makes a venv
    whose python is a stand-in validator exiting validator_rc): "ready" and exit 0 only when
    the validation passed; otherwise the validator's exit code and no "ready"."""
    script = rendered["mps"] / "setup-macos.sh"
    spec = json.loads((rendered["mps"] / "spec.json").read_text())
    env = _fake_mac(tmp_path, machine="arm64", translated="0", version="26.1")
    ran = tmp_path / "validator-ran"
    stub = {"pip": "exit 0",
            "python": f'echo "validator $*"; touch {ran}; exit {validator_rc}'}
    make_venv = " ; ".join(f"printf '#!/bin/sh\\n%s\\n' '{body}' > \"$3/bin/{name}\"; "
                           f"chmod +x \"$3/bin/{name}\"" for name, body in stub.items())
    fake_python = tmp_path / "bin" / f"python{spec['python']}"
    fake_python.write_text(f'#!/bin/sh\ncase "$1" in\n  -c) echo arm64 ;;\n'
                           f'  -m) mkdir -p "$3/bin"; {make_venv} ;;\nesac\n')
    fake_python.chmod(0o755)
    p = subprocess.run(["/bin/bash", str(script), str(tmp_path / "venv")], capture_output=True,
                       text=True, env=env, timeout=30)
    assert ran.exists(), p.stderr  # the stand-ins reached the validation step
    assert ("ready:" in p.stdout) == (validator_rc == 0), p.stdout
    assert p.returncode == validator_rc, p.stderr
    if validator_rc:
        assert "did not pass validation" in p.stderr and "hint: " in p.stderr


def test_build_refuses_a_context_whose_secrets_are_missing(tmp_path: Path) -> None:
    ctx = tmp_path / "ctx"
    r = run_cli("render", "--target", "cpu", "--ca-cert", "/etc/ssl/certs/ca-certificates.crt",
                "--out", str(ctx))
    assert r.returncode == 0, r.stderr
    r = run_cli("build", str(ctx), env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert r.returncode == 2
    assert "build secret(s) ca, which were not given" in r.stderr and "--ca-cert" in r.stderr


@pytest.mark.parametrize("name", sorted(n for n in CASES if n != "mps"))
def test_every_file_the_dockerfile_reads_is_in_the_context(rendered: dict[str, Path],
                                                          name: str) -> None:
    """The .dockerignore is an allow-list: every COPY source and bind-mount source of the
    Dockerfile (not another stage's) must be on it and rendered, or the build fails with
    'not found' (as the first --build-extension build did)."""
    out = rendered[name]
    allowed = {line[1:].strip() for line in (out / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    text = (out / "Dockerfile").read_text()
    read: set[str] = set()
    for m in re.finditer(r"^COPY (.+) \S+$", text, re.MULTILINE):
        words = m.group(1).split()
        if not any(w.startswith("--from") for w in words):
            read.update(w for w in words if not w.startswith("--"))
    for m in re.finditer(r"--mount=type=bind,source=([^,\s]+),(?!.*from=)", text):
        read.add(m.group(1))
    for src in read:
        top = src.split("/")[0]
        assert top in allowed, f"{name}: the Dockerfile reads {src}, the .dockerignore drops it"
        assert (out / top).exists() or top == "wheelhouse", f"{name}: {top} is not rendered"
