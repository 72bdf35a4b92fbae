"""Pure decisions: a native macOS (Apple MPS) environment, judged on recorded facts.

Platform facts (stdlib, `macos_facts`): system, machine, platform.platform(), platform.mac_ver(),
`sysctl -n sysctl.proc_translated` (1 = Rosetta), `sw_vers -productVersion`. MPS facts (torch,
`probe_mps`): is_built(), is_available(), device_count(), is_macos_or_newer() of the spec's floor,
the error a tensor on 'mps' raises, float64 on 'mps', PYTORCH_ENABLE_MPS_FALLBACK. The floor
(`min_macos`) is the spec's: the resolver takes it from matrix/torch.toml `mps_min_macos`; no
version is written here. Sources of the recorded outputs: tests/fixtures/validator/macos/README.md.
"""

from __future__ import annotations

import math
from typing import Any

from ..rules import version_parts
from .results import Outcome, failed, passed, skipped, warned

# platform.mac_ver() of an x86_64 program built with a macOS SDK older than 11 (python.org's
# old x86_64 builds): macOS answers 10.16 instead of its version (SYSTEM_VERSION_COMPAT).
COMPAT_MACOS = "10.16"
ROSETTA_FIX = ("use a native arm64 Python: open an arm64 shell (`arch -arm64 /bin/zsh`), install "
               "an arm64 Python (python.org universal2 installer, Homebrew in /opt/homebrew, or "
               "conda's osx-arm64), and recreate the environment with it")
# Relative Frobenius error allowed between the same float32 work on MPS and on the CPU.
MPS_PARITY_TOLERANCES = {"matmul": 1e-4, "train": 1e-3}


def _relevant(spec: dict[str, Any], facts: dict[str, Any]) -> bool:
    """The macOS/MPS checks judge an MPS target, and any run on macOS."""
    return spec.get("target") == "mps" or facts.get("system") == "Darwin"


def _for_target(spec: dict[str, Any], outcome: Outcome) -> Outcome:
    """A failure is the MPS target's; on a Mac validated for another target (`validate --host`
    with an x86_64 Python says cpu) the same finding warns."""
    if outcome.status != "fail" or spec.get("target") == "mps":
        return outcome
    target = spec.get("target") or "no"
    return warned(outcome.remediation, f"{outcome.detail} (the spec's target is {target}, "
                  "not mps: a warning)", outcome.evidence)


def rosetta_signs(facts: dict[str, Any]) -> list[str]:
    """Why this Python looks like x86_64 code translated by Rosetta ([] if it does not)."""
    signs = []
    if str(facts.get("proc_translated") or "").strip() == "1":
        signs.append("sysctl.proc_translated = 1")
    machine = str(facts.get("machine") or "")
    plat = str(facts.get("platform") or "")
    if machine == "x86_64":
        signs.append(f"platform.machine() = {machine!r}")
    if plat.startswith(f"macOS-{COMPAT_MACOS}-x86_64"):
        signs.append(f"platform.platform() = {plat!r} (macOS {COMPAT_MACOS} is what x86_64 "
                     "programs built with an old SDK are told)")
    return signs


def macos_version(facts: dict[str, Any]) -> tuple[str | None, str]:
    """The real macOS version and where it came from: sw_vers first (a system binary, told the
    truth under Rosetta), then platform.mac_ver() unless it is the 10.16 compatibility answer."""
    sw = str(facts.get("sw_vers") or "").strip()
    if sw:
        return sw, "sw_vers -productVersion"
    mac = str(facts.get("mac_ver") or "").strip()
    if mac and mac != COMPAT_MACOS:
        return mac, "platform.mac_ver()"
    return None, ""


def older_than(version: str, floor: str) -> bool:
    have, need = version_parts(version), version_parts(floor)
    n = max(len(have), len(need), 1)
    return have + [0] * (n - len(have)) < need + [0] * (n - len(need))


def judge_macos_native(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    """macos.native: an arm64 Python on macOS, not x86_64 under Rosetta, not a Linux container."""
    ev = dict(facts)
    if not _relevant(spec, facts):
        return skipped(f"not macOS ({facts.get('system') or 'unknown'}) and the spec's target is "
                       f"{spec.get('target') or 'none'}, not mps", ev)
    if facts.get("system") != "Darwin":
        return failed(
            "MPS is reachable only from a native macOS process: run the environment on the Mac "
            "itself (setup-macos.sh), not in a Linux container or VM",
            f"this Python runs on {facts.get('system') or 'an unknown system'} "
            f"({facts.get('platform') or '?'}), not macOS", ev)
    signs = rosetta_signs(facts)
    ev["rosetta_signs"] = signs
    if signs:
        return _for_target(spec, failed(
            ROSETTA_FIX + f"; under Rosetta torch sees an x86_64 Mac (macOS {COMPAT_MACOS} to "
            "old builds) and MPS is unavailable",
            "x86_64 Python under Rosetta: " + "; ".join(signs), ev))
    if facts.get("machine") != "arm64":
        return _for_target(spec, failed(
            "MPS needs Apple silicon and a native arm64 Python",
            f"platform.machine() is {facts.get('machine')!r}, not 'arm64'", ev))
    return passed(f"native arm64 Python ({facts.get('platform') or 'macOS arm64'})", ev)


def judge_macos_version(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    """macos.version: the running macOS against the spec's MPS floor (min_macos)."""
    floor = spec.get("min_macos")
    if not _relevant(spec, facts) or facts.get("system") != "Darwin":
        return skipped("not macOS", dict(facts))
    version, source = macos_version(facts)
    ev = {**facts, "version": version, "version_source": source, "min_macos": floor}
    if not floor:
        return skipped("the spec carries no MPS floor (min_macos): render the environment "
                       "with `envbuild make --target mps` to get one", ev)
    if version is None:
        return warned("run `sw_vers -productVersion` and compare it with the floor by hand",
                      "the macOS version could not be read"
                      + (f" (platform.mac_ver() says {COMPAT_MACOS}: the compatibility answer "
                         "to an x86_64 program, see macos.native)"
                         if facts.get("mac_ver") == COMPAT_MACOS else ""), ev)
    torch_version = spec.get("torch") or "this torch"
    if older_than(version, str(floor)):
        return _for_target(spec, failed(
            f"update macOS to {floor} or newer, or render the environment with an older --torch "
            f"whose MPS floor this macOS meets (`envbuild doctor` names one)",
            f"macOS {version} is older than {floor}, the oldest macOS on which torch "
            f"{torch_version} supports MPS", ev))
    return passed(f"macOS {version} >= {floor} (MPS floor of torch {torch_version})", ev)


def _mps_unavailable_cause(spec: dict[str, Any], facts: dict[str, Any]) -> tuple[str, str]:
    """(cause, remedy) for MPS built but unavailable, from the platform facts."""
    plat = facts.get("platform") or {}
    floor = spec.get("min_macos")
    if plat.get("system") and plat.get("system") != "Darwin":
        return (f"torch runs on {plat.get('system')} ({plat.get('platform') or '?'}): MPS "
                "exists only in a native macOS process, not on Linux (a Linux container or VM "
                "on a Mac included)",
                "run the environment natively on macOS (setup-macos.sh)")
    signs = rosetta_signs(plat)
    if signs:
        return ("x86_64 Python under Rosetta (" + "; ".join(signs) + ")", ROSETTA_FIX)
    version, _ = macos_version(plat)
    if version and floor and older_than(version, str(floor)):
        return (f"macOS {version} is older than {floor}, this torch's MPS floor",
                f"update macOS to {floor} or newer, or use an older torch")
    if facts.get("macos_or_newer") is False and floor:
        return (f"torch.backends.mps.is_macos_or_newer() is False for {floor}: torch reads an "
                "older macOS than the floor", f"update macOS to {floor} or newer")
    where = f"macOS {version}" if version else "this macOS"
    return (f"{where} meets the floor{f' ({floor})' if floor else ''}, yet torch finds no usable "
            "Metal device: a VM or sandbox without GPU access, or a torch release that "
            "misreads a macOS newer than itself (its error then names a floor this macOS "
            "meets)",
            "run from a plain Terminal session on the Mac (not a VM, sandbox or remote shell "
            "without GPU access); if that fails too, try the newest torch release and check "
            "pytorch/pytorch issues for this macOS")


def judge_mps_backend(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    """mps.backend: torch.backends.mps.is_built() and is_available(), reported separately;
    built but unavailable fails with its cause. facts: {'mps': probe_mps(), 'platform':
    macos_facts()}."""
    mps = facts.get("mps") or {}
    plat = facts.get("platform") or {}
    built, available = mps.get("built"), mps.get("available")
    ev: dict[str, Any] = {"built": built, "available": available,
                          "device_count": mps.get("device_count"),
                          "macos_or_newer": mps.get("macos_or_newer"),
                          "error": mps.get("error"), "min_macos": spec.get("min_macos"),
                          "platform": plat}
    if not _relevant(spec, plat):
        return skipped(f"the spec's target is {spec.get('target') or 'none'}, not mps", ev)
    if plat.get("system") and plat.get("system") != "Darwin" and not available:
        cause, remedy = _mps_unavailable_cause(spec, facts)
        ev["cause"] = cause
        return _for_target(spec, failed(remedy, f"no MPS: {cause}", ev))
    if not built:
        return _for_target(spec, failed(
            "install the macOS arm64 torch wheel from PyPI (it is built with MPS)",
            f"torch is not built with MPS (torch.backends.mps.is_built() is {built})", ev))
    if not available:
        cause, remedy = _mps_unavailable_cause(spec, facts)
        ev["cause"] = cause
        said = f"; torch says: {mps['error']}" if mps.get("error") else ""
        return _for_target(spec, failed(remedy, f"MPS built but unavailable: {cause}{said}", ev))
    return passed(f"MPS built and available ({mps.get('device_count') or 1} device)", ev)


def judge_mps_limits(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    """mps.limits: what MPS cannot do, reported (never a failure): float64 (Metal has none) and
    whether PYTORCH_ENABLE_MPS_FALLBACK sends ops MPS lacks to the CPU."""
    mps = facts.get("mps") or {}
    plat = facts.get("platform") or {}
    fallback = mps.get("fallback_env")
    ev: dict[str, Any] = {"float64_error": mps.get("float64_error"),
                          "float64_supported": mps.get("float64_supported"),
                          "PYTORCH_ENABLE_MPS_FALLBACK": fallback}
    if not _relevant(spec, plat):
        return skipped(f"the spec's target is {spec.get('target') or 'none'}, not mps", ev)
    if not mps.get("available"):
        return skipped("MPS is unavailable (see mps.backend)", ev)
    notes = []
    if mps.get("float64_supported") is False:
        notes.append("float64 is unsupported on MPS (Metal has no float64): keep tensors "
                     "float32 or move float64 work to the CPU; float64 on 'mps' raises "
                     + repr(mps.get("float64_error") or "an error"))
    elif mps.get("float64_supported"):
        notes.append("float64 on 'mps' did not raise (unexpected: MPS documents no float64)")
    if fallback == "1":
        notes.append("PYTORCH_ENABLE_MPS_FALLBACK=1: ops MPS lacks run on the CPU with a "
                     "UserWarning (slower) instead of raising NotImplementedError")
    elif fallback is None:
        notes.append("PYTORCH_ENABLE_MPS_FALLBACK is not set: an op MPS lacks raises "
                     "NotImplementedError ('... is not currently implemented for the MPS "
                     "device'); set it to 1 in the shell before Python starts to run such ops "
                     "on the CPU")
    else:
        notes.append(f"PYTORCH_ENABLE_MPS_FALLBACK={fallback!r}: only '1' enables the CPU "
                     "fallback")
    ev["notes"] = notes
    return passed("; ".join(notes), ev)


def judge_mps_parity(spec: dict[str, Any], facts: dict[str, Any]) -> Outcome:
    """mps.parity: a float32 matmul and a tiny training step on MPS against the same on the CPU.
    facts['parity'] is mps_parity()'s: {'device', 'matmul_rel_err', 'train_rel_err',
    'losses_device', 'losses_cpu', 'error'}."""
    mps = facts.get("mps") or {}
    plat = facts.get("platform") or {}
    par = facts.get("parity") or {}
    ev: dict[str, Any] = {**par, "tolerances": dict(MPS_PARITY_TOLERANCES)}
    if not _relevant(spec, plat):
        return skipped(f"the spec's target is {spec.get('target') or 'none'}, not mps", ev)
    if not mps.get("available"):
        return skipped("MPS is unavailable (see mps.backend)", ev)
    if par.get("error"):
        return _for_target(spec, failed(
            "an op failed on MPS: see evidence.error (a missing op says 'not currently "
            "implemented for the MPS device': upgrade torch, or set "
            "PYTORCH_ENABLE_MPS_FALLBACK=1)", f"MPS run failed: {par['error']}", ev))
    errors = {"matmul": par.get("matmul_rel_err"), "train": par.get("train_rel_err")}
    bad = {k: v for k, v in errors.items()
           if not isinstance(v, (int, float)) or not math.isfinite(v)
           or v > MPS_PARITY_TOLERANCES[k]}
    text = ", ".join(f"{k} {v:.2e}" if isinstance(v, (int, float)) else f"{k} {v}"
                     for k, v in errors.items())
    if bad:
        return _for_target(spec, failed(
            "float32 results on MPS differ from the CPU's beyond tolerance: update macOS and "
            "torch; report it with this evidence if it persists", f"MPS vs CPU differ: {text}",
            ev))
    return passed(f"MPS matches the CPU (float32 rel error: {text})", ev)
