"""The `envbuild make` command this host should run (pure)."""

from __future__ import annotations

from collections.abc import Callable

from envbuild.common.versions import minor_of, version_key
from envbuild.core import compat, platforms
from envbuild.core.spec import Spec
from envbuild.doctor import model
from envbuild.doctor.model import Recommendation, Request
from envbuild.doctor.view import View, stdout_of
from envbuild.matrix import Matrix
from envbuild.validator import rules

HOW = {"native": "natively", "mvc": "through minor-version compatibility"}


def recommend(v: View, m: Matrix, req: Request) -> Recommendation:
    """The image for this host; on a Linux host that is not linux/amd64, for its platform (the
    command says --platform, so it resolves the same anywhere)."""
    from dataclasses import replace

    rec = _recommend(v, m, req)
    if not platforms.foreign(v.platform) or rec.target == "mps":
        return rec
    return checked(replace(rec, platform=v.platform), m)


def _recommend(v: View, m: Matrix, req: Request) -> Recommendation:
    newest = compat.newest_torch(m)
    newest_v = newest.version if newest else ""

    def pin(torch: str) -> str:
        return "" if torch == newest_v else torch

    if v.darwin:
        if not v.apple_silicon:
            return Recommendation("cpu", reason="Intel Mac: no GPU backend")
        rel = compat.mps_torch(m, v.macos) if v.macos else newest
        if rel is None:
            return Recommendation("cpu", reason=f"macOS {v.macos} is too old for MPS")
        why = "Apple silicon: Metal (MPS) backend"
        if v.facts.out(model.SYSCTL_TRANSLATED) and stdout_of(
                v.facts, model.SYSCTL_TRANSLATED).strip() == "1":
            why += ", with an arm64 Python (not under Rosetta)"
        return Recommendation("mps", torch=pin(rel.version), reason=why)
    if v.gpu_blocked:
        return Recommendation("cpu", reason="WSL2 blocks this GPU (see the finding above): the "
                              "CPU until that is fixed, then run `envbuild doctor` again, as the "
                              "Windows driver decides the CUDA version")
    if v.nvidia or (v.wsl and v.gpus):
        return checked(recommend_cuda(v, m, req, pin), m)
    if v.amd:
        if not v.amd_gfx:
            return Recommendation("cpu", reason="AMD GPU with unknown gfx target: fix ROCm "
                                  "(rocminfo) first")
        choice = compat.choose_rocm(m, set(v.amd_gfx))
        if choice is None:
            return Recommendation("cpu", reason="no ROCm torch wheel supports "
                                  + ", ".join(sorted(set(v.amd_gfx))))
        return Recommendation("rocm", rocm=choice.rocm, torch=pin(choice.torch),
                              reason=f"{', '.join(sorted(set(v.amd_gfx)))}: newest ROCm wheel "
                              f"built for it is rocm{choice.rocm} (torch {choice.torch})")
    return Recommendation("cpu", reason="no GPU on this host")


def recommend_cuda(v: View, m: Matrix, req: Request, pin: Callable[[str], str]) -> Recommendation:
    driver, ccs = v.driver, v.ccs
    if not driver:
        return Recommendation("cpu", reason="NVIDIA GPU without a working driver: fix the "
                              "driver, then run `envbuild doctor` again")
    if v.windows_driver:
        return recommend_wsl(v, m, req, pin)
    # One voice: the image for this host is what `envbuild resolve --driver D --gpu sm_XY`
    # gives (the newest torch whose wheel this driver runs, natively or through minor-version
    # compatibility), so the command carries the host's facts and leaves the choice to it.
    gpus = tuple(rules.arch_name(cc) for cc in ccs)
    arch = f"compute capability {', '.join(ccs)}" if ccs else "unknown compute capability"
    asked = ""
    if req.cuda:
        spec, problem = _resolve(m, cuda=req.cuda, driver=driver, gpus=gpus,
                                 platform=_plat(v))
        if spec is not None:
            return Recommendation("cuda", cuda=req.cuda, reason=f"as asked: {_what(spec)}",
                                  alternatives=_fwd(v, m, driver, spec.torch), gpus=gpus,
                                  driver=driver)
        asked = f"--cuda {req.cuda} does not fit this host ({problem}); "
    spec, problem = _resolve(m, driver=driver, gpus=gpus, platform=_plat(v))
    if spec is None:
        return Recommendation("cpu", reason=f"no CUDA torch wheel runs on driver {driver} "
                              f"with {arch}: {problem}",
                              alternatives=_after_upgrade(m, gpus, _plat(v)))
    native = v.driver_cuda(m)
    runs = f"driver {driver} runs CUDA <= {native}" if native else f"driver {driver}"
    return Recommendation("cuda", reason=f"{asked}{runs}; for {arch}: {_what(spec)}",
                          alternatives=_fwd(v, m, driver, spec.torch), gpus=gpus,
                          driver=driver)


def _plat(v: View) -> str | None:
    """The platform to resolve for: the host's when it is not linux/amd64 (None: the default)."""
    return v.platform if platforms.foreign(v.platform) else None


def _after_upgrade(m: Matrix, gpus: tuple[str, ...],
                   platform: str | None = None) -> tuple[str, ...]:
    """The CUDA image for these GPUs once the driver is upgraded (resolved here, so it
    resolves), with the driver it needs; () when no wheel covers the GPUs at all."""
    spec, _ = _resolve(m, gpus=gpus, platform=platform)
    if spec is None or not spec.min_driver:
        return ()
    rec = Recommendation('cuda', gpus=gpus, platform=platform or "")
    return (f"{rec.command}  (after a driver upgrade to >= "
            f"{spec.min_driver}: {_what(spec)})",)


def _resolve(m: Matrix, **ask: object) -> tuple[Spec | None, str]:
    from envbuild.common.errors import EnvbuildError
    from envbuild.core.request import Request as Resolve
    from envbuild.core.resolve import resolve

    try:
        return resolve(Resolve(target="cuda", **ask), m), ""  # type: ignore[arg-type]
    except EnvbuildError as err:
        return None, err.message


def _what(spec: Spec) -> str:
    """What the resolver picked, in the words `envbuild resolve` uses."""
    image = minor_of(spec.cuda_image or "")
    mvc = spec.torch_cuda and image and version_key(spec.torch_cuda) > version_key(image)
    how = " (through minor-version compatibility)" if mvc else ""
    return (f"torch {spec.torch} ({spec.variant}) on the CUDA {image} image{how}, "
            f"driver >= {spec.min_driver}")


def _fwd(v: View, m: Matrix, driver: str, torch: str) -> tuple[str, ...]:
    fwd = forward_compat_alternative(v, m, driver, torch)
    return (fwd,) if fwd else ()


def recommend_wsl(v: View, m: Matrix, req: Request, pin: Callable[[str], str]) -> Recommendation:
    """Under WSL2 nvidia-smi prints the Windows driver's number, which the resolver's Linux
    driver facts do not cover: the CUDA that driver runs (wsl2.toml) bounds the image instead."""
    driver, ccs = v.driver, v.ccs
    arch = f"compute capability {', '.join(ccs)}" if ccs else "unknown compute capability"
    gpus = tuple(rules.arch_name(cc) for cc in ccs)
    if req.cuda:
        rel = compat.newest_release_with(m, rules.cuda_tag(req.cuda), ccs)
        how = compat.how_runs(m, driver, req.cuda, True)
        if rel is not None and how:
            return Recommendation("cuda", cuda=req.cuda, torch=pin(rel.version),
                                  reason=f"as asked: driver {driver} runs CUDA {req.cuda} "
                                  f"{HOW[how]}; torch {rel.version} has "
                                  f"{rules.cuda_tag(req.cuda)} wheels for {arch}", gpus=gpus)
    choice = compat.choose_cuda(m, driver, ccs, True)
    if choice is None:
        return Recommendation("cpu", reason=f"no CUDA torch wheel runs on driver {driver} "
                              f"with {arch}")
    native = v.driver_cuda(m)
    runs = f"runs CUDA <= {native}" if native else "runs CUDA wheels only through minor-version " \
        "compatibility"
    why = (f"Windows driver {driver} {runs}; newest CUDA with torch wheels for "
           f"{arch}: {choice.tag} (torch {choice.torch})")
    alts = []
    newest = compat.newest_torch_choice(m, driver, ccs, True)
    if newest is not None and newest.torch != choice.torch:
        alt = checked(Recommendation("cuda", cuda=newest.cuda, torch=pin(newest.torch),
                                     gpus=gpus), m)
        if alt.target == "cuda":
            alts.append(f"{alt.command}  (newest torch {newest.torch} on this driver)")
    return Recommendation("cuda", cuda=choice.cuda, torch=pin(choice.torch), reason=why,
                          gpus=gpus, alternatives=tuple(alts))


def checked(rec: Recommendation, m: Matrix) -> Recommendation:
    """The recommendation as the resolver sees it: a command that `envbuild make` accepts."""
    from dataclasses import replace

    from envbuild.common.errors import EnvbuildError
    from envbuild.core.request import Request as Resolve
    from envbuild.core.resolve import resolve

    def fits(r: Recommendation) -> str:
        try:
            resolve(Resolve(target=r.target, cuda=r.cuda or None, torch=r.torch or None,
                            driver=r.driver or None, gpus=r.gpus,
                            platform=r.platform or None), m)
        except EnvbuildError as err:
            return err.message
        return ""

    if not fits(rec):
        return rec
    loose = replace(rec, cuda="", torch="")
    problem = fits(loose)
    if not problem:
        return loose
    return Recommendation("cpu", reason=f"no CUDA image fits this host: {problem}")


def forward_compat_alternative(v: View, m: Matrix, driver: str, torch: str) -> str:
    """The make command that runs a newer torch on this driver through NVIDIA's forward
    compatibility, when NVIDIA supports it for these GPUs and this branch and it gives a newer
    torch than `torch` ('' otherwise). The command is resolved here, so it resolves."""
    import shlex

    from envbuild.common.errors import EnvbuildError
    from envbuild.common.versions import version_key
    from envbuild.core.request import Request as Ask
    from envbuild.core.request import parse_gpu
    from envbuild.core.resolve import resolve

    if not driver or not v.gpus:
        return ""
    try:
        names = sorted({parse_gpu(g.name, m).label for g in v.gpus})
        spec = resolve(Ask(target="cuda", forward_compat=True, driver=driver,
                           gpus=tuple(names)), m)
    except EnvbuildError:
        return ""
    if not spec.forward_compat or version_key(spec.torch) <= version_key(torch or "0"):
        return ""
    argv = ["envbuild", "make", "--target", "cuda", "--forward-compat", "--driver", driver]
    for n in names:
        argv += ["--gpu", n]
    return (" ".join(shlex.quote(a) for a in argv) + f"  (torch {spec.torch} {spec.variant} on "
            f"this driver through NVIDIA's forward-compatibility libraries {spec.forward_compat}"
            "; data-center GPUs only)")
