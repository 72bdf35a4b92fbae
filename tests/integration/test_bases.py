"""Real base images: what the Dockerfile depends on in each OS family, proved on stand-in bases.

matrix/os.toml records, per OS, what the rendered Dockerfile depends on in the stock image (a user
or group that already has uid/gid 1000, whether python3 and its venv are there, the package names
of the Python headers and the compilers). No image registry is reachable here, so the real bases
(ubuntu:24.04, nvidia/cuda:*-ubuntu24.04, rockylinux, ubi) cannot be pulled: the engine tests build
stand-ins FROM the local debootstrap Debian that reproduce those properties, then build the real
rendered CPU Dockerfile on each and check the image user, `import torch` and `torch.compile`.

What the stand-ins cannot reproduce (said here and in the report): dnf and RPM repositories (Debian
has a `dnf` package but no RHEL repository is reachable, so the dnf family's package names stay
matrix facts, checked only by rendering); a system python3 older than the image's Python beside it
(bookworm ships only CPython 3.11, the only version the offline torch wheelhouse has).
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from collections.abc import Iterator

import pytest

from envbuild.matrix import Matrix
from tests.support import IN_CI, run_cli, work_dir
from tests.support.bases import STANDINS, _dockerfile

DOCKER = "/usr/bin/docker"
BASE = os.environ.get("ENVBUILD_TEST_BASE", "local/debian:bookworm")


def docker(*args: str, check: bool = True, timeout: float = 600,
           input_text: str | None = None) -> subprocess.CompletedProcess[str]:
    # BuildKit: its build cache outlives the images removed at teardown, so a re-run rebuilds
    # the stand-ins and the CPU images from cache.
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check,
                          timeout=timeout, input=input_text,
                          env={**os.environ, "DOCKER_BUILDKIT": "1"})


def _run_step(dockerfile: str, marker: str) -> str:
    """The shell of the RUN instruction containing `marker`, continuation lines joined."""
    joined = dockerfile.replace("\\\n", "")
    line = next(ln for ln in joined.splitlines() if ln.startswith("RUN ") and marker in ln)
    return line[len("RUN "):]


# -- the user step against every kind of existing uid/gid 1000, with the real shadow tools --------

# (name, setup run as root in the base, user asked for). Each is a /etc/passwd + /etc/group state a
# real base can have.
USER_CASES: list[tuple[str, str, str]] = [
    ("no-1000", "", "envbuild"),
    ("ubuntu2404", "groupadd -g 1000 ubuntu && useradd -u 1000 -g 1000 -m -c Ubuntu "
                   "-s /bin/bash ubuntu && touch /home/ubuntu/.keep", "envbuild"),
    ("ubuntu2404-same-name", "groupadd -g 1000 ubuntu && useradd -u 1000 -g 1000 -m ubuntu",
     "ubuntu"),
    ("group-only", "groupadd -g 1000 devs", "envbuild"),
    ("user-in-group-100", "useradd -u 1000 -g 100 -M olduser", "envbuild"),
    ("user-100-and-group-1000", "groupadd -g 1000 devs && useradd -u 1000 -g 100 -M olduser",
     "envbuild"),
    ("group-1000-primary-of-other", "groupadd -g 1000 devs && useradd -u 1001 -g 1000 -M other",
     "envbuild"),
    ("group-named-like-user", "groupadd -g 1000 envbuild", "envbuild"),
    ("user-already-there", "groupadd -g 1000 envbuild && useradd -u 1000 -g 1000 -m envbuild",
     "envbuild"),
    ("user-1000-group-named-other", "groupadd -g 1000 staff2 && useradd -u 1000 -g 1000 -M alice",
     "dev-user"),
]


@pytest.mark.docker
def test_user_step_copes_with_every_existing_uid_gid_1000(matrix: Matrix,
                                                          docker_engine: None) -> None:
    """The rendered user step, run by bash with the real useradd/userdel/groupmod of a Debian base,
    from each passwd/group state in one container (each case in a fresh copy of /etc)."""
    if docker("image", "inspect", BASE, check=False).returncode != 0:
        if IN_CI:
            pytest.fail(f"base image {BASE} missing (make fixtures)")
        pytest.skip(f"base image {BASE} missing (make fixtures)")
    files = "passwd group shadow gshadow"
    script = ["set -u", "mkdir /etc.orig", f"for f in {files}; do cp -a /etc/$f /etc.orig/; done"]
    for name, setup, user in USER_CASES:
        step = _run_step(_dockerfile(matrix, "debian12", "3.11", "os", user), "useradd")
        check = (f'[ "$(id -u {user}):$(id -g {user})" = 1000:1000 ] '
                 f'&& [ "$(getent passwd 1000 | cut -d: -f1)" = {user} ] '
                 f'&& [ "$(getent group 1000 | cut -d: -f1)" = {user} ] '
                 f'&& [ "$(stat -c %u:%g /home/{user} /opt/venv | sort -u)" = 1000:1000 ] '
                 f'&& [ "$(getent passwd | cut -d: -f3 | grep -cx 1000)" = 1 ]')
        script.append(textwrap.dedent(f"""\
            rm -rf /home/* /opt/venv /opt/envbuild /var/mail/*
            for f in {files}; do cp -a /etc.orig/$f /etc/; done
            if ! ( {setup or 'true'} ) >/dev/null 2>&1; then echo "SETUP-FAILED {name}"
            elif ! bash -o pipefail -c {_shq(step)} >/tmp/out 2>&1; then
              echo "STEP-FAILED {name}: $(tr '\\n' ' ' </tmp/out)"
            elif ! ( {check} ); then echo "WRONG {name}: $(id {user}) $(getent group 1000)"
            else echo "OK {name}"; fi"""))
    p = docker("run", "--rm", "-i", "--network", "none", BASE, "bash", "-s",
               input_text="\n".join(script) + "\n", timeout=300)
    lines = p.stdout.splitlines()
    assert lines == [f"OK {name}" for name, _, _ in USER_CASES], p.stdout + p.stderr


def _shq(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.mark.docker
def test_existing_uid_1000_user_is_removed_its_files_kept(matrix: Matrix,
                                                          docker_engine: None) -> None:
    """The policy: the base's uid-1000 user leaves the user database; nothing of the base's files is
    deleted (a base's user may own application files), and they belong to the new user."""
    if docker("image", "inspect", BASE, check=False).returncode != 0:
        _skip_or_fail(f"base image {BASE} missing (make fixtures)")
    step = _run_step(_dockerfile(matrix, "debian12", "3.11", "os"), "useradd")
    script = ("groupadd -g 1000 ubuntu && useradd -u 1000 -g 1000 -m ubuntu >/dev/null 2>&1 && "
              "mkdir /app && touch /home/ubuntu/data /app/model && "
              "chown -R 1000:1000 /app /home/ubuntu && "
              f"bash -o pipefail -c {_shq(step)} && "
              "(getent passwd ubuntu || echo no-ubuntu-user) && "
              "stat -c '%n %U:%G' /home/ubuntu/data /app/model")
    p = docker("run", "--rm", "--network", "none", BASE, "bash", "-c", script, check=False)
    assert p.stdout.splitlines() == ["no-ubuntu-user", "/home/ubuntu/data envbuild:envbuild",
                                     "/app/model envbuild:envbuild"], p.stdout + p.stderr
    assert p.stderr == ""


COMPILE_SMOKE = """
import sysconfig, os, shutil, torch
assert os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")), "no Python.h"
assert shutil.which("cc") and shutil.which("g++"), "no C/C++ compiler"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
x = torch.randn(4, 8)
eager = model(x).sum()
eager.backward()
grads = [p.grad.clone() for p in model.parameters()]
model.zero_grad()
out = torch.compile(model)(x).sum()
out.backward()
assert torch.allclose(out, eager, atol=1e-5), (out, eager)
assert all(torch.allclose(g, p.grad, atol=1e-5) for g, p in zip(grads, model.parameters()))
print("compile-ok", os.getuid(), os.getgid())
"""


def _skip_or_fail(msg: str) -> None:
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


@pytest.fixture(scope="module")
def standin_images(docker_engine: None, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[dict[str, tuple[str, str]]]:
    """Each stand-in base, and the CPU image `envbuild make` built on it: name -> (base, image).

    One build per stand-in (different bases share no layers); the apt and pip cache mounts are
    shared, so the second build downloads nothing.
    """
    wheelhouse = work_dir() / "wheelhouse"
    if docker("image", "inspect", BASE, check=False).returncode != 0 or \
            not list(wheelhouse.glob("torch-2.13.0*.whl")):
        _skip_or_fail(f"base {BASE} or the torch wheelhouse missing (make fixtures)")
    built: dict[str, tuple[str, str]] = {}
    failures: dict[str, str] = {}
    for name, (body, args) in STANDINS.items():
        base = f"envbuild-bases-test/standin:{name}"
        ctx = tmp_path_factory.mktemp(f"standin-{name}")
        (ctx / "Dockerfile").write_text(f"FROM {BASE}\nSHELL [\"/bin/bash\", \"-o\", "
                                        f"\"pipefail\", \"-c\"]\n{body}")
        docker("build", "-q", "-t", base, str(ctx))
        image = f"envbuild-bases-test/cpu:{name}"
        r = run_cli("make", "--target", "cpu", "--torch", "2.13.0", *args, "--without",
                    "torchvision", "--without", "torchaudio", "--base-image", base,
                    "--wheelhouse", str(wheelhouse), "--tag", image, "--no-validate",
                    "--progress", "plain", "--json", timeout=1800)
        if r.returncode != 0:
            failures[name] = r.stderr[-2500:]
        built[name] = (base, image)
    yield {**built, **{f"!{k}": ("", v) for k, v in failures.items()}}
    for base, image in built.values():
        docker("rmi", "-f", image, base, check=False)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STANDINS))
def test_cpu_image_builds_on_standin(standin_images: dict[str, tuple[str, str]],
                                     name: str) -> None:
    failure = standin_images.get(f"!{name}")
    assert failure is None, f"make on stand-in {name} failed:\n{failure[1] if failure else ''}"
    _, image = standin_images[name]
    p = docker("run", "--rm", image, "python", "-c",
               "import os, pwd, grp, torch; u = pwd.getpwuid(os.getuid()); "
               "print(torch.__version__, os.getuid(), os.getgid(), u.pw_name, u.pw_dir, "
               "grp.getgrgid(os.getgid()).gr_name)")
    version, uid, gid, user, home, group = p.stdout.split()
    assert version.startswith("2.13.0")
    assert (uid, gid, user, home, group) == ("1000", "1000", "envbuild", "/home/envbuild",
                                             "envbuild")
    user_cfg = json.loads(docker("image", "inspect", image, "--format",
                                 "{{json .Config.User}}").stdout)
    assert user_cfg == "1000:1000"


@pytest.mark.docker
@pytest.mark.slow
def test_torch_compile_works_in_the_cpu_image(standin_images: dict[str, tuple[str, str]]) -> None:
    """Inductor's C++ backend needs g++, Triton needs cc and Python.h: forward and backward
    through torch.compile match eager in the image built on the ubuntu:24.04 stand-in."""
    assert "!ubuntu2404" not in standin_images, standin_images["!ubuntu2404"][1]
    _, image = standin_images["ubuntu2404"]
    p = docker("run", "--rm", "--network", "none", image, "python", "-c", COMPILE_SMOKE,
               check=False)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    assert p.stdout.split()[-3:] == ["compile-ok", "1000", "1000"]
