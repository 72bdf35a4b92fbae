"""ext.load and ext.kernel: the spec's --with extensions inside the image (issue 23).

ext.load, with or without a GPU: each extension imports, is the version the spec resolved, its
native library loads (xformers' C++ library, the bitsandbytes CUDA library of torch's CUDA,
flash-attn's CUDA module, vLLM's _C), its metadata's torch requirement holds for the installed
torch, and torch is still the spec's (an extension never replaced it).
ext.kernel, on a GPU: a tiny kernel of each, compared with a plain torch reference.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from typing import Any

from .context import TorchContext
from .judges import Outcome, _err, failed, no_gpu_outcome, passed, skipped

NO_EXTENSIONS = "the spec names no --with extensions and the image built none"


def _public(version: str) -> str:
    return version.split("+", 1)[0]


_CLAUSE = re.compile(r"^\s*(===|==|!=|~=|>=|<=|>|<)\s*([0-9][0-9A-Za-z.*+!-]*)\s*$")


def _holds(op: str, want: str, have: Any, version: Callable[[str], Any]) -> bool:
    """One PEP 440 clause against a parsed version (the operators Requires-Dist uses)."""
    if want.endswith(".*"):  # ==2.8.* / !=2.8.*
        prefix = want[:-2].split(".")
        same = have.release[:len(prefix)] == tuple(int(x) for x in prefix)
        return same if op == "==" else not same
    w = version(want)
    if op == "~=":
        upper = w.release[:-1]
        return bool(have >= w and have.release[:len(upper)] == upper)
    return {"==": have == w, "===": str(have) == want, "!=": have != w, ">=": have >= w,
            "<=": have <= w, ">": have > w, "<": have < w}[op] is True


def _torch_requirement(dist: str, torch_version: str) -> str:
    """'' when the extension's Requires-Dist on torch holds for torch_version, else what it
    requires. torch vendors packaging's Version only: the clauses are read here; a line with an
    environment marker (an extra, a platform) is not judged."""
    from importlib import metadata

    try:
        from torch._vendor.packaging.version import Version
    except ImportError:
        return ""
    have = Version(_public(torch_version))
    for line in metadata.requires(dist) or []:
        head, _, marker = line.partition(";")
        m = re.match(r"^\s*torch\s*\(?([^)]*)\)?\s*$", head)
        if not m or marker.strip():
            continue
        for clause in filter(None, (c.strip() for c in m.group(1).split(","))):
            parsed = _CLAUSE.match(clause)
            if parsed and not _holds(parsed.group(1), parsed.group(2), have, Version):
                return f"{dist} requires torch{m.group(1).replace(' ', '')}"
    return ""


def _xformers(mod: Any, entry: dict[str, str]) -> str:
    if getattr(mod, "_has_cpp_library", False):
        return "C++ library loaded"
    cause = getattr(getattr(mod, "_cpp_lib", None), "_cpp_library_load_exception", None)
    raise RuntimeError(f"xformers' C++ library did not load: {cause}")


def _bitsandbytes(mod: Any, entry: dict[str, str]) -> str:
    """The CUDA library the spec resolved for torch's CUDA: present and loadable here (without
    a GPU bitsandbytes itself loads its CPU library, so the CUDA one is loaded directly)."""
    import ctypes
    from pathlib import Path

    want = entry.get("cuda", "").replace(".", "")
    lib = Path(mod.__file__).parent / f"libbitsandbytes_cuda{want}.so"
    if not want or not lib.is_file():
        raise RuntimeError(f"{lib.name} is not in the installed wheel")
    handle = ctypes.CDLL(str(lib))
    if not hasattr(handle, "get_context"):
        raise RuntimeError(f"{lib.name} loaded but is not a CUDA build")
    return f"{lib.name} loads"


def _module(name: str) -> Callable[[Any, dict[str, str]], str]:
    def load(mod: Any, entry: dict[str, str]) -> str:
        importlib.import_module(name)
        return f"{name} loads"
    return load


def _imported(mod: Any, entry: dict[str, str]) -> str:
    return "imported"


NATIVE: dict[str, Callable[[Any, dict[str, str]], str]] = {
    "xformers": _xformers, "bitsandbytes": _bitsandbytes,
    "flash-attn": _module("flash_attn_2_cuda"), "vllm": _module("vllm._C"),
}


BUILT = "/opt/envbuild/ext-wheels"  # where the image keeps the wheels its builder stage made


def built_extensions(directory: str = BUILT) -> list[dict[str, str]]:
    """The --build-extension wheels an image installed, as spec entries: the distribution and
    version from the wheel's name, the module from the installed top_level.txt."""
    from importlib import metadata
    from pathlib import Path

    out = []
    for wheel in sorted(Path(directory).glob("*.whl")):
        dist, version = wheel.name.split("-")[:2]
        name = dist.replace("_", "-")
        try:
            top = (metadata.distribution(name).read_text("top_level.txt") or "").split()
        except metadata.PackageNotFoundError:
            top = []
        out.append({"name": name, "version": version, "where": "built",
                    "module": top[0] if top else dist})
    return out


def t_ext_load(ctx: TorchContext) -> Outcome:
    from importlib import metadata

    wanted = list(ctx.spec.get("extensions") or []) + built_extensions()
    if not wanted:
        return skipped(NO_EXTENSIONS)
    torch_version = str(ctx.torch.__version__)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    for entry in wanted:
        name = entry["name"]
        row: dict[str, Any] = {"name": name, "expected": entry.get("version")}
        try:
            row["installed"] = metadata.version(name)
            mod = importlib.import_module(entry.get("module") or name.replace("-", "_"))
            row["native"] = NATIVE.get(name, _imported)(mod, entry)
            need = _torch_requirement(name, torch_version)
            if need:
                problems.append(f"{need}, the image has {torch_version}")
            if _public(row["installed"]) != _public(str(entry.get("version"))):
                problems.append(f"{name} {row['installed']} is installed, the spec resolved "
                                f"{entry.get('version')}")
        except Exception as e:
            row["error"] = _err(e)[:600]
            problems.append(f"{name}: {row['error'][:200]}")
        rows.append(row)
    if _public(torch_version) != _public(str(ctx.spec.get("torch"))):
        problems.append(f"torch is {torch_version}, the spec's is {ctx.spec.get('torch')}: an "
                        "extension replaced it")
    ev = {"extensions": rows, "torch": torch_version}
    if problems:
        return failed("rebuild the image from its spec (`envbuild make`); an extension that "
                      "does not load here has no wheel for this torch/CUDA: see `envbuild "
                      "resolve --with ...`", "; ".join(problems)[:300], ev)
    return passed(", ".join(f"{r['name']} {r['installed']} ({r['native']})" for r in rows), ev)


def _attention_reference(torch: Any, q: Any, k: Any, v: Any) -> Any:
    """softmax(q k^T / sqrt(d)) v in float32, for (batch, seq, heads, dim) tensors."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    w = torch.softmax(qf @ kf.transpose(-1, -2) / qf.shape[-1] ** 0.5, dim=-1)
    return (w @ vf).transpose(1, 2)


def _qkv(torch: Any, device: str) -> tuple[Any, Any, Any]:
    g = torch.Generator(device="cpu").manual_seed(5)
    return tuple(torch.randn(1, 16, 2, 64, generator=g).to(device, torch.float16)
                 for _ in range(3))


def _k_xformers(torch: Any, device: str) -> float:
    ops = importlib.import_module("xformers.ops")  # the image's, not the validator's
    q, k, v = _qkv(torch, device)
    out = ops.memory_efficient_attention(q, k, v)
    ref = _attention_reference(torch, q, k, v)
    return float((out.float() - ref).norm() / ref.norm())


def _k_flash(torch: Any, device: str) -> float:
    flash = importlib.import_module("flash_attn")
    q, k, v = _qkv(torch, device)
    out = flash.flash_attn_func(q, k, v)
    ref = _attention_reference(torch, q, k, v)
    return float((out.float() - ref).norm() / ref.norm())


def _k_bitsandbytes(torch: Any, device: str) -> float:
    F = importlib.import_module("bitsandbytes.functional")
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(6)).to(device,
                                                                            torch.float16)
    packed, state = F.quantize_4bit(x)
    back = F.dequantize_4bit(packed, state)
    return float((back.float() - x.float()).norm() / x.float().norm())


# name -> (the kernel, the relative error it must stay under)
KERNELS: dict[str, tuple[Callable[[Any, str], float], float]] = {
    "xformers": (_k_xformers, 1e-2), "flash-attn": (_k_flash, 1e-2),
    "bitsandbytes": (_k_bitsandbytes, 0.2),  # 4-bit NF4 round trip
}


def t_ext_kernel(ctx: TorchContext) -> Outcome:
    wanted = [e["name"] for e in list(ctx.spec.get("extensions") or []) + built_extensions()]
    if not wanted:
        return skipped(NO_EXTENSIONS)
    device, bad = ctx.compute_device()
    if bad is not None:
        return bad
    if not device.startswith("cuda"):
        return no_gpu_outcome(ctx.device_facts(), ctx.opts.require_gpu,
                              ctx.spec.get("target"))
    rows: dict[str, Any] = {}
    problems: list[str] = []
    for name in wanted:
        if name not in KERNELS:
            rows[name] = "no kernel call defined (ext.load imported it)"
            continue
        run, limit = KERNELS[name]
        try:
            err = run(ctx.torch, device)
            rows[name] = {"rel_err": err, "limit": limit}
            if not err <= limit:
                problems.append(f"{name}: rel error {err:.2e} > {limit}")
        except Exception as e:
            rows[name] = {"error": _err(e)[:600]}
            problems.append(f"{name}: {_err(e)[:200]}")
    ev = {"device": device, "kernels": rows}
    if problems:
        return failed("the extension's kernels do not run on this GPU: check ext.load and its "
                      "arch list (`envbuild resolve --with ... --gpu ...`)",
                      "; ".join(problems)[:300], ev)
    return passed(", ".join(f"{n}: {r['rel_err']:.1e}" if isinstance(r, dict) else f"{n}: {r}"
                            for n, r in rows.items()), ev)
