"""Pure evaluation: raw HostFacts + the version Matrix (+ the request) -> findings and the
`envbuild make` command this host should run. No I/O: tested on recorded fixtures."""

from __future__ import annotations

from envbuild.common.echo import shown
from envbuild.common.errors import UsageError
from envbuild.core import compat
from envbuild.core.compat import HostRules
from envbuild.doctor import checks_env, checks_host, model
from envbuild.doctor.model import Finding, HostFacts, Recommendation, Request
from envbuild.doctor.recommend import recommend
from envbuild.doctor.view import INFO, Out, build_view, stdout_of
from envbuild.matrix import Matrix

__all__ = ["HostRules", "diagnose", "evaluate"]


def evaluate(facts: HostFacts, matrix: Matrix, request: Request | None = None,
             rules: HostRules | None = None) -> list[Finding]:
    """Every finding for these host facts, grouped by area in a fixed order."""
    return diagnose(facts, matrix, request, rules)[0]


def diagnose(facts: HostFacts, matrix: Matrix, request: Request | None = None,
             rules: HostRules | None = None) -> tuple[list[Finding], Recommendation]:
    req = request or Request()
    _validate(req, matrix)
    if rules is None:
        rules = compat.host_rules()
    v = build_view(facts, matrix)
    o = Out()
    checks_host.check_macos(v, matrix, o)
    checks_host.check_platform(v, matrix, o, stdout_of(facts, model.LSCPU),
                               (facts.file(model.OSRELEASE) or "").strip())
    checks_host.check_wsl(v, matrix, o)
    checks_host.check_nvidia(v, matrix, rules, o)
    checks_host.check_request(v, matrix, req, o)
    checks_host.check_libs(v, matrix, o)
    checks_host.check_rocm(v, matrix, o)
    if not (v.nvidia or v.amd or v.apple_silicon or (v.wsl and v.gpus) or v.gpu_blocked):
        o.add("gpu.none", INFO, "no NVIDIA, AMD or Apple GPU found: PyTorch here runs on the CPU",
              "")
    checks_env.check_docker(v, matrix, rules, o)
    checks_env.check_torch(v, matrix, o)
    rec = recommend(v, matrix, req)
    return o.items, rec


def gpu_facts(facts: HostFacts, matrix: Matrix) -> dict[str, object]:
    """The host's NVIDIA driver and GPUs as data (doctor --json's `host`), what `fleet collect`
    reads: the same parse the checks judge, so the two never disagree."""
    v = build_view(facts, matrix)
    return {"driver": v.driver or "",
            "gpus": [{"index": g.index, "name": g.name, "cc": g.cc, "memory_mib": g.memory_mib}
                     for g in v.gpus]}


def _validate(req: Request, m: Matrix) -> None:
    if req.cuda and m.cuda_release(req.cuda) is None:
        known = [r.version for r in m.cuda]
        raise UsageError(f"--cuda {shown(req.cuda)} is not a CUDA release envbuild knows",
                         "give a CUDA minor version such as " + (known[-1] if known else "12.8"),
                         known)
