"""The stable cause codes of doctor's findings (pure data, the one home of the table).

A cause names why CUDA is unavailable or broken, in words a bug tracker uses; several findings can
share one (a driver older than torch's CUDA is `driver_too_old` whether doctor saw it on the host
or in a collect_env report). Findings without a cause (ok and info lines, the container engine)
have none. The order is the order of precedence when a report shows several: the first cause on
the path from the driver to torch comes first, because fixing it can clear the rest.
docs/guides/collect-env.md prints this table; a test keeps them equal.
"""

from __future__ import annotations

CAUSES: dict[str, tuple[str, tuple[str, ...]]] = {
    "no_driver": ("a CUDA build and no NVIDIA driver seen",
                  ("torch.no_driver", "nvidia.no_driver")),
    "driver_mismatch": ("the loaded kernel module and the user-space driver differ",
                        ("nvidia.driver_library_mismatch",)),
    "driver_too_old": ("torch's CUDA needs a newer driver than the host's",
                       ("torch.driver_too_old", "nvidia.driver_too_old")),
    "driver_gpu_window": ("the driver branch does not drive the GPU (too old or too new for it)",
                          ("nvidia.driver_too_old_for_gpu", "nvidia.driver_too_new_for_gpu")),
    "wsl2_no_gpu": ("WSL 2 shows the distribution no GPU (no Windows driver, or WSL 1)",
                    ("wsl.no_gpu", "wsl.no_gpu_bridge")),
    "wsl2_linux_driver": ("a Linux NVIDIA driver is installed inside WSL 2",
                          ("wsl.linux_driver_installed",)),
    "wsl2_gpu_blocked": ("WSL 2 blocks the GPU (TCC mode, a custom kernel, a container)",
                         ("wsl.gpu_blocked", "wsl.gpu_blocked_in_container")),
    "wsl2_libcuda": ("the unversioned libcuda.so of /usr/lib/wsl/lib is not on the loader's path",
                     ("wsl.libcuda_unversioned",)),
    "cpu_only_build": ("a CPU-only torch on a host with an NVIDIA (or AMD) GPU",
                       ("torch.cpu_wheel",)),
    "arch_not_in_wheel": ("the GPU's compute capability (or gfx target) is not in the wheel",
                          ("torch.arch_missing", "torch.gfx_missing")),
    "mixed_installs": ("two torches, or a conda CUDA that disagrees with the torch in use",
                       ("env.two_torches", "env.conda_cuda_mismatch")),
    "library_mismatch": ("a CUDA library of another version shadows the wheel's",
                         ("libs.cuda_wheels_mixed", "libs.cudnn_system", "libs.cudnn_shadow",
                          "libs.nvjitlink_shadow", "libs.stub_libcuda")),
    "macos_rosetta": ("an x86_64 Python under Rosetta 2 on Apple silicon (no MPS, old wheels)",
                      ("macos.rosetta",)),
    "mps_unavailable": ("MPS is not available: a macOS older than the torch release's floor",
                        ("macos.mps_unavailable", "macos.mps_too_old")),
    # symptoms, last: what the report shows when no cause above explains it
    "torch_import": ("torch is installed but `import torch` fails",
                     ("torch.not_imported", "torch.import_failed")),
    "cuda_unavailable": ("CUDA is unavailable although GPU, driver and wheel match",
                         ("torch.cuda_unavailable",)),
}

# explain's signatures (matrix/signatures.toml) that name a cause, as the findings a pasted
# error gives (`envbuild doctor --collect-env` reads the errors pasted with a report):
# finding id "explain.<signature>".
EXPLAINED: dict[str, str] = {
    "no_driver": "no_driver", "driver_library_mismatch": "driver_mismatch",
    "driver_too_old": "driver_too_old", "wsl_no_adapters": "wsl2_no_gpu",
    "wsl_gpu_access_blocked": "wsl2_gpu_blocked", "wsl_libcuda_unversioned": "wsl2_libcuda",
    "torch_cpu_only": "cpu_only_build", "no_kernel_image": "arch_not_in_wheel",
    "rocm_no_binary": "arch_not_in_wheel", "torchvision_operator_missing": "mixed_installs",
    "cudnn_version_mismatch": "library_mismatch", "nvjitlink_undefined_symbol": "library_mismatch",
    "cuda_lib_missing": "library_mismatch", "stub_libcuda": "library_mismatch",
    "driver_api_libcuda": "library_mismatch", "torch_cuda_lib_symbol": "library_mismatch",
}
# Signatures of a libcuda.so the loader cannot open: on WSL 2, doctor's wsl.libcuda_unversioned.
WSL_LIBCUDA = ("wsl_libcuda_unversioned", "driver_api_libcuda")

_BY_ID = {fid: code for code, (_, ids) in CAUSES.items() for fid in ids}
_BY_ID.update({f"explain.{sig}": code for sig, code in EXPLAINED.items()})
_ORDER = {code: i for i, code in enumerate(CAUSES)}


def cause_of(finding_id: str) -> str:
    """The cause code of a finding ('' when it has none)."""
    return _BY_ID.get(finding_id, "")


def rank(finding_id: str) -> int:
    """Precedence of a finding's cause (findings without a cause come after every cause)."""
    return _ORDER.get(cause_of(finding_id), len(_ORDER))
