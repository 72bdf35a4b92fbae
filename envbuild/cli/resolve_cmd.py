"""`envbuild resolve`: print the spec for a request, with the reasons for every decision."""

from __future__ import annotations

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say


@app.command()
def resolve(
    target: o.Target = None, cuda: o.Cuda = None, rocm: o.Rocm = None, torch: o.Torch = None,
    python: o.Python = None, driver: o.Driver = None, gpu: o.Gpu = None, os: o.Os = None,
    flavor: o.Flavor = None, without: o.Without = None,
    forward_compat: o.ForwardCompat = False, python_source: o.PythonSource = None,
    json: o.Json = False, size: o.Size = False,
) -> None:
    """Resolve driver / CUDA / cuDNN / torch / Python / OS into one explained spec."""
    from envbuild.core.request import check_python_source
    from envbuild.core.resolve import resolve as do_resolve
    from envbuild.core.resolve import with_python_source
    from envbuild.matrix import load

    req = o.make_request(target, cuda, rocm, torch, python, driver, gpu, os, flavor, without,
                         forward_compat)
    check_python_source(python_source)
    m = load()
    spec = with_python_source(do_resolve(req, m), python_source, m)
    est = None
    if size and spec.target != "mps":
        from envbuild.engine.sizefetch import gather
        est = gather(spec, m.extra.get("sizes", {}))
    if json:
        emit_json({**spec.to_json(), **({"size": est.to_json()} if est else {})})
        return
    say(format_spec(spec.to_json()))
    if est is not None:
        from envbuild.core.size import describe
        say("estimated size:")
        say("\n".join(describe(est)))


def format_spec(d: dict[str, object]) -> str:
    rows = [("target", d["target"]), ("torch", d["torch"]), ("torchvision", d["torchvision"]),
            ("torchaudio", d["torchaudio"]), ("python", f"{d['python']} ({d['python_source']})"),
            ("variant", d["variant"]), ("torch CUDA", d["torch_cuda"]), ("ROCm", d["rocm"]),
            ("CUDA image", d["cuda_image"]),
            ("CUDA image", f"none: plain base, NVIDIA_REQUIRE_CUDA=cuda>={d['require_cuda']}"
             if d.get("require_cuda") else None), ("cuDNN", d["cudnn"]), ("NCCL", d["nccl"]),
            ("OS", d["os"]), ("base image", d["base_image"]), ("index", d["index_url"]),
            ("min driver", d["min_driver"]),
            ("fwd compat", f"NVIDIA's forward-compatibility libraries {d['forward_compat']}"
             if d.get("forward_compat") else None),
            ("max driver", f"R{d['max_driver']} or older" if d.get("max_driver") else None),
            ("min macOS", d["min_macos"]),
            ("archs", " ".join(d["archs"]) if d["archs"] else None),  # type: ignore[arg-type]
            ("spec hash", d["spec_hash"])]
    lines = [f"{k:<12} {v}" for k, v in rows if v not in (None, "")]
    lines.append("why:")
    lines += [f"  - {t}" for t in d["trace"]]  # type: ignore[attr-defined]
    lines += [f"warning: {w}" for w in d["warnings"]]  # type: ignore[attr-defined]
    return "\n".join(lines)
