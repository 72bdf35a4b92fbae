"""The builder stage of `envbuild --build-extension` (issue 23), run by the image's venv Python.

usage: build-extensions.py PLAN SRC_DIR WHEEL_DIR [-- PIP_INDEX_OPTIONS...]

PLAN (ext-build.json, rendered by envbuild): {"arch_list": "8.0 9.0", "sources": [directory
names under SRC_DIR], "sdists": [{"requirement", "no_binary", "build_requires", "env"}]}.

Installs nvcc from PyPI at the cuda-toolkit version torch itself pins (so headers and compiler
match torch's CUDA), links libcudart.so (the wheel ships only libcudart.so.N, and CUDAExtension
links -lcudart), sets TORCH_CUDA_ARCH_LIST to exactly the plan's arch list and MAX_JOBS from the
memory the builder has, and builds each source directory, then each sdist (from the index, never
a binary: --no-binary, with its own build requirements and environment), into a wheel in
WHEEL_DIR without build isolation (against the installed torch). Only those wheels leave the
stage.
"""

import importlib.metadata
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

GIB_PER_JOB = 4  # nvcc on a template-heavy kernel file takes up to a few GiB; a job per 4 GiB


def torch_toolkit_pin() -> str:
    for req in importlib.metadata.requires("torch") or []:
        m = re.match(r"^cuda-toolkit\b[^=;]*==\s*([0-9][0-9.]*)", req)
        if m:
            return m.group(1)
    sys.exit("build-extensions: torch pins no cuda-toolkit (a CUDA 13 torch from PyPI does)")


def max_jobs() -> int:
    avail = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) // (1024 * 1024)
    return max(1, min(os.cpu_count() or 1, avail // GIB_PER_JOB))


def main(argv: list) -> int:
    plan_file, src, out = argv[:3]
    pip_opts = argv[4:] if len(argv) > 3 and argv[3] == "--" else []
    with open(plan_file, encoding="utf-8") as f:
        plan = json.load(f)
    pip = [sys.executable, "-m", "pip"]
    pin = torch_toolkit_pin()
    t = time.monotonic()
    needs = sorted({r for b in plan["sdists"] for r in b["build_requires"]})
    subprocess.run([*pip, "install", f"cuda-toolkit[nvcc,cccl]=={pin}", "ninja", "setuptools",
                    "wheel", *needs, *pip_opts, "-c", "/opt/envbuild/constraints.txt"],
                   check=True)
    major = pin.split(".")[0]
    home = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / f"cu{major}"
    lib = home / "lib" / "libcudart.so"
    if not lib.exists():
        lib.symlink_to(f"libcudart.so.{major}")
    env = {**os.environ, "CUDA_HOME": str(home), "TORCH_CUDA_ARCH_LIST": plan["arch_list"],
           "MAX_JOBS": str(max_jobs()),
           "PATH": f"{home / 'bin'}:{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    print(f"build-extensions: nvcc from cuda-toolkit {pin} ({time.monotonic() - t:.0f} s), "
          f"TORCH_CUDA_ARCH_LIST={plan['arch_list']} MAX_JOBS={env['MAX_JOBS']}", flush=True)
    wheel = [*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", out]
    for name in plan["sources"]:
        t = time.monotonic()
        subprocess.run([*wheel, str(Path(src) / name)], check=True, env=env)
        print(f"build-extensions: {name} built in {time.monotonic() - t:.0f} s", flush=True)
    for b in plan["sdists"]:
        t = time.monotonic()
        subprocess.run([*wheel, "--no-binary", b["no_binary"], *pip_opts, b["requirement"]],
                       check=True, env={**env, **b["env"]})
        print(f"build-extensions: {b['requirement']} built in {time.monotonic() - t:.0f} s",
              flush=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except subprocess.CalledProcessError as e:  # pip said why above; no traceback on top of it
        sys.exit(f"build-extensions: {' '.join(map(str, e.cmd[1:4]))} ... failed (exit "
                 f"{e.returncode})")
