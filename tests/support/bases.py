"""Helpers shared by the bases tests and others (moved out of test_bases.py)."""

from __future__ import annotations

from envbuild.core.spec import Spec
from envbuild.matrix import Matrix
from envbuild.render.context import RenderOptions, render


def _spec(os_id: str, python: str, source: str) -> Spec:
    return Spec(target="cpu", torch="2.13.0", torchvision=None, torchaudio=None, python=python,
                python_source=source, variant="cpu", torch_cuda=None, rocm=None,
                cuda_image=None, cudnn=None, nccl=None, os=os_id, flavor=None,
                base_image="example/base:1", index_url="https://download.pytorch.org/whl/cpu",
                min_driver=None, min_macos=None, archs=(), gpus=(), components=("torch",),
                trace=())


def _dockerfile(m: Matrix, os_id: str, python: str, source: str, user: str = "envbuild") -> str:
    return render(_spec(os_id, python, source), RenderOptions(user=user), m)["Dockerfile"].content


# -- stand-in bases, and the real rendered CPU image built on each ------------------------------

# RHEL 9 package names, written here independently of os.toml (S-RH-RHEL9-PYTHON: python3.11 in
# AppStream from 9.2; S-RHEL-DEV-PACKAGES: -devel headers, gcc-c++, glibc-devel).
RHEL9_NAMES = ("python3.11", "python3.11-devel", "gcc", "gcc-c++", "glibc-devel")

# make reads a --base-image's /etc/os-release to know its OS: a stand-in for another OS says
# which one it stands for (os.toml's os_release), as that OS's image does.
OS_RELEASE = ("RUN rm -f /etc/os-release && printf 'ID={id}\\nVERSION_ID=\"{version}\"\\n"
              "PRETTY_NAME=\"envbuild stand-in\"\\n' >/etc/os-release\n")

# name -> (Dockerfile body after FROM, envbuild make arguments). Each reproduces os.toml properties:
STANDINS: dict[str, tuple[str, list[str]]] = {
    # ubuntu:24.04 / nvidia/cuda:*-ubuntu24.04: user and group `ubuntu` with uid/gid 1000 (exactly
    # the stock passwd line), no python3 at all, so no python3-venv. Built with the debian12 row
    # (system python3 path).
    "ubuntu2404": (
        "RUN groupadd --gid 1000 ubuntu \\\n"
        " && useradd --uid 1000 --gid 1000 --create-home --comment Ubuntu \\\n"
        "    --shell /bin/bash ubuntu\n",
        ["--os", "debian12", "--python", "3.11"]),
    # Odd ids: a gid-1000 group that is nobody's own group (and the primary group of uid 1001), a
    # uid-1000 user whose primary group is 100; python3 already in the base (as on RHEL 9) without
    # venv/ensurepip (as Debian and Ubuntu split it). Built with the ubuntu22.04 row and Python
    # 3.11, i.e. the path where the image's Python is not the OS default python3 but its named
    # package (python3.11, python3.11-venv, python3.11-dev: the same names exist in bookworm).
    "odd-ids": (
        "RUN groupadd --gid 1000 devs \\\n"
        " && useradd --uid 1000 --gid 100 --no-create-home olduser \\\n"
        " && useradd --uid 1001 --gid 1000 --no-create-home other \\\n"
        " && apt-get update && apt-get install -y --no-install-recommends python3-minimal \\\n"
        " && rm -rf /var/lib/apt/lists/* \\\n"
        " && ! python3 -c 'import ensurepip'\n" + OS_RELEASE.format(id="ubuntu", version="22.04"),
        ["--os", "ubuntu22.04", "--python", "3.11"]),
    # The dnf family (rockylinux9 row, Python 3.11 from its python3.11 package): Debian's real dnf 4
    # and rpm, with a local repository of EMPTY packages carrying RHEL 9's names (RHEL9_NAMES); the
    # files they stand for come from Debian's packages, and apt-get is removed so the rendered
    # Dockerfile can only use dnf. This proves dnf accepts the rendered command line, cache mount
    # and names; it cannot prove what RHEL's packages contain.
    "rhel-dnf": (
        "RUN apt-get update && apt-get install -y --no-install-recommends dnf rpm createrepo-c "
        "python3.11 python3.11-venv python3.11-dev gcc g++ libc6-dev ca-certificates "
        "&& rm -rf /var/lib/apt/lists/*\n"
        "RUN mkdir -p /tmp/rpmb /srv/rhel-standin /etc/yum.repos.d \\\n"
        " && for p in " + " ".join(RHEL9_NAMES) + "; do \\\n"
        "      printf 'Name: %s\\nVersion: 1\\nRelease: 1\\nSummary: stand-in\\nLicense: none\\n"
        "BuildArch: noarch\\n%%description\\nstand-in\\n%%files\\n' \"$p\" >/tmp/rpmb/$p.spec \\\n"
        "   && rpmbuild --quiet --define '_topdir /tmp/rpmb' --define '_rpmdir /srv/rhel-standin' "
        "-bb /tmp/rpmb/$p.spec 2>/dev/null || exit 1; done \\\n"
        " && createrepo_c -q /srv/rhel-standin && rm -rf /tmp/rpmb \\\n"
        " && printf '[rhel-standin]\\nname=stand-in\\nbaseurl=file:///srv/rhel-standin\\n"
        "gpgcheck=0\\nenabled=1\\n' >/etc/yum.repos.d/rhel-standin.repo \\\n"
        " && rm /usr/bin/apt-get /usr/bin/apt\n" + OS_RELEASE.format(id="rocky", version="9.4"),
        ["--os", "rockylinux9", "--python", "3.11"]),
}

