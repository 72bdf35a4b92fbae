"""The version matrix: TOML files in `matrix/` loaded into typed, frozen rows.

model (the row types and the Matrix), loader (parse, check, load), cache (the per-user cache
of a clean matrix), crosscheck (rows well formed and referencing each other), rules (semantic
rules), views (`envbuild matrix show`). This module only names what callers use.
"""

from envbuild.matrix.loader import check, load, parse
from envbuild.matrix.model import (
    Arch,
    CompatPackage,
    CudaCompat,
    CudaImage,
    CudaRelease,
    Extension,
    ExtensionLibrary,
    ExtensionRelease,
    Gpu,
    Matrix,
    OsInfo,
    Problem,
    RocmRelease,
    TorchPatch,
    TorchRelease,
    Variant,
    WheelPlatform,
)

__all__ = [
    "Arch", "CompatPackage", "CudaCompat", "CudaImage", "CudaRelease", "Extension",
    "ExtensionLibrary", "ExtensionRelease", "Gpu", "Matrix", "OsInfo",
    "Problem", "RocmRelease", "TorchPatch", "TorchRelease", "Variant", "WheelPlatform", "check",
    "load", "parse",
]
