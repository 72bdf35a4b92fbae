"""`envbuild resolve`: print the spec for a request, with the reasons for every decision."""

from __future__ import annotations

from envbuild.cli import _options as o
from envbuild.cli._app import app, emit_json, say


@app.command()
@o.request_options()
def resolve(
    request: o.RequestMaker, python_source: o.PythonSource = None,
    json: o.Json = False, size: o.Size = False,
) -> None:
    """Resolve driver / CUDA / cuDNN / torch / Python / OS into one explained spec."""
    from envbuild.features.resolve_render import resolve as do_resolve

    req = request()
    r = do_resolve(req, python_source, size=size)
    if json:
        emit_json(r.to_json())
        return
    say(format_spec(r.spec.to_json()))
    if r.size is not None:
        from envbuild.core.size import describe
        say("estimated size:")
        say("\n".join(describe(r.size)))


def format_spec(d: dict[str, object]) -> str:
    rows = [("target", d["target"]), ("torch", d["torch"]), ("torchvision", d["torchvision"]),
            ("torchaudio", d["torchaudio"]), ("python", f"{d['python']} ({d['python_source']})"),
            ("variant", d["variant"]), ("torch CUDA", d["torch_cuda"]), ("ROCm", d["rocm"]),
            ("CUDA image", d["cuda_image"]),
            ("CUDA image", f"none: plain base, NVIDIA_REQUIRE_CUDA=cuda>={d['require_cuda']}"
             if d.get("require_cuda") else None), ("cuDNN", d["cudnn"]), ("NCCL", d["nccl"]),
            ("platform", d.get("platform") if d.get("platform") != "linux/amd64" else None),
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
