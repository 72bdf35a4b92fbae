"""`envbuild fleet collect` and `envbuild plan` as use cases: the files read (bounded), Slurm
asked (through common.proc), the team file and its lock read; the fleet and the plan themselves
are envbuild.core.fleet and envbuild.core.fleet_plan. Nothing here prints."""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envbuild.common import boundedio, proc
from envbuild.common.errors import EnvbuildError, EnvironmentProblem, UsageError
from envbuild.common.record import record
from envbuild.core import fleet as core
from envbuild.core import fleet_plan
from envbuild.core.request import Request
from envbuild.matrix import Matrix


def _json(path: Path, what: str, hint: str) -> Any:
    try:
        return boundedio.load_json(path, what, hint=hint)
    except FileNotFoundError:
        raise EnvironmentProblem(f"{boundedio.path_text(path)}: no such {what}", hint) from None
    except ValueError as exc:  # a JSON syntax error (TooDeep is the bounded reader's)
        raise UsageError(f"{boundedio.path_text(path)}: not valid JSON ({str(exc)[:120]})",
                         hint) from None


def scontrol_nodes() -> str:
    """`scontrol show node -o` of the cluster this host submits to."""
    if proc.which("scontrol") is None:
        raise EnvironmentProblem("scontrol not found: this is not a Slurm submit host",
                                 "run on a login node of the cluster, or give --doctor / "
                                 "--kubectl files instead")
    r = proc.run(["scontrol", "show", "node", "-o"], timeout=60, check=False)
    if not r.ok:
        raise EnvironmentProblem(
            f"scontrol show node failed: {(r.stderr.strip() or r.stdout.strip() or '?')[-200:]}",
            "check that slurmctld answers (sinfo) and SLURM_CONF")
    return r.stdout


def collect(m: Matrix, doctor: Sequence[Path] = (), slurm: bool = False,
            kubectl: Sequence[Path] = ()) -> core.Fleet:
    """A fleet from real sources: `doctor --json` reports (one host each, named after the
    file), this host's Slurm cluster, recorded `kubectl get nodes -o json` lists."""
    if not (doctor or slurm or kubectl):
        raise UsageError("no source to collect from",
                         "give --doctor HOST.json (repeatable), --slurm, or --kubectl nodes.json")
    nodes: list[core.Node] = []
    notes: list[str] = []
    for path in doctor:
        data = _json(path, "doctor report", "record each host with `envbuild doctor --json > "
                     "HOST.json`")
        found, said = core.from_doctor(data, path.stem, m, boundedio.path_text(path))
        nodes += found
        notes += said
    if slurm:
        found, said = core.from_scontrol(scontrol_nodes(), m)
        nodes += found
        notes += said
    for path in kubectl:
        data = _json(path, "node list", "record it with `kubectl get nodes -o json > "
                     "nodes.json`")
        found, said = core.from_kubectl(data, m, boundedio.path_text(path))
        nodes += found
        notes += said
    nodes, said = core.unique_hosts(nodes)
    notes += said
    if not nodes:
        raise EnvironmentProblem("no GPU node found in the sources given",
                                 "; ".join(notes[:3]) or "check the sources")
    groups = core.group_nodes(nodes)
    if len(groups) > core.MAX_GROUPS:
        raise UsageError(f"the sources give {len(groups)} node groups (a fleet file holds up to "
                         f"{core.MAX_GROUPS})", "collect one cluster or partition at a time "
                         "(fewer --doctor / --kubectl files), or align drivers")
    return core.Fleet(groups, None, tuple(notes))


def load_fleet(path: Path, m: Matrix) -> core.Fleet:
    hint = "write one with `envbuild fleet collect` (docs/guides/fleet.md)"
    try:
        text = boundedio.read_text(path, "fleet file", hint=hint)
    except FileNotFoundError:
        raise EnvironmentProblem(f"{boundedio.path_text(path)}: no such fleet file", hint) \
            from None
    return core.parse(text, path, m)


@record
class Planned:
    plan: fleet_plan.FleetPlan
    changes: tuple[str, ...]  # what moves, as said: "torch 2.15", "the team file new.toml"
    lock: Path | None  # the current lock the diff is against (None: no team file)
    lock_changes: dict[str, list[str]]

    def to_json(self) -> dict[str, Any]:
        return {"to": list(self.changes), **self.plan.to_json(),
                "lock": {"file": str(self.lock) if self.lock else None,
                         "changes": self.lock_changes}}


def _is_team_file(word: str) -> bool:
    return word.endswith(".toml") or "/" in word


def parse_to(to: Sequence[str], words: Sequence[str]) -> tuple[list[tuple[str, str]], Path | None]:
    """`--to` values (with the bare words that follow a `--to cuda`, in order) -> the version
    changes and a changed team file, if one is named."""
    changes: list[tuple[str, str]] = []
    team: Path | None = None
    rest = list(words)
    for t in to:
        if _is_team_file(t):
            if team is not None:
                raise UsageError("--to names two team files", "give one changed envbuild.toml")
            team = Path(t)
            continue
        key, sep, value = t.partition("==") if "==" in t else t.partition("=")
        if not sep:
            key, _, value = t.strip().partition(" ")
            if not value:
                if not rest:
                    raise UsageError(f"--to {t[:40]!r}: no version",
                                     "e.g. --to torch==2.15, --to cuda 13.2, --to python 3.14")
                value = rest.pop(0)
        changes.append(fleet_plan.change(key, value))
    if rest:
        raise UsageError(f"unexpected word {rest[0][:40]!r}", "see `envbuild plan --help`")
    if not changes and team is None:
        raise UsageError("--to is required", "e.g. --to torch==2.15")
    return changes, team


def _cuda_images(m: Matrix, named: Sequence[tuple[str, Request]]) -> list[tuple[str, Request]]:
    from envbuild.core.resolve import resolve

    out = []
    for name, req in named:
        try:
            if resolve(req, m).target == "cuda":
                out.append((name, req))
        except EnvbuildError:
            out.append((name, req))  # plan() says why it does not resolve
    return out


def plan(m: Matrix, fleet_path: Path, to: Sequence[str], words: Sequence[str] = (),
         team_file: Path | None = None) -> Planned:
    from envbuild.features import team as t
    from envbuild.features import teamfile
    from envbuild.features.team_lock import DEFAULT_TEAM_FILE, lock_path

    fleet = load_fleet(fleet_path, m)
    changes, new_team = parse_to(to, words)
    said = [f"{k} {v}" for k, v in changes]
    current = None
    if team_file is not None or DEFAULT_TEAM_FILE.is_file():
        current = teamfile.load(team_file or DEFAULT_TEAM_FILE)
    target_team: teamfile.TeamFile | None = current
    if new_team is not None:
        target_team = teamfile.load(new_team)
        said.append(f"the team file {boundedio.path_text(new_team)}")
    if target_team is not None:
        target_team = dataclasses.replace(target_team, images=tuple(
            dataclasses.replace(i, request=fleet_plan.apply(i.request, changes))
            for i in target_team.images))
        targets = _cuda_images(m, [(i.name, i.request) for i in target_team.images])
        if not targets:
            raise UsageError(f"{target_team.path}: no CUDA image to plan a GPU fleet for",
                             "a fleet plan judges CUDA images: add one, e.g. target = \"cuda\"")
    else:
        targets = [("default", fleet_plan.apply(Request(), changes))]
    keeps = _cuda_images(m, [(i.name, i.request) for i in current.images]) if current else []
    keep = keeps[0][1] if keeps else Request()
    p = fleet_plan.plan(m, fleet, targets, keep)
    based = [i for i in (target_team.images if target_team is not None else ())
             if i.inputs.base_image]
    if based:  # the plan judges the request; a custom base is inspected only by a build
        p = dataclasses.replace(p, notes=(*p.notes, *(
            f"[image.{i.name}] builds FROM {i.inputs.base_image}: judged as resolved, without "
            "the base (a base's NVIDIA_REQUIRE_CUDA can raise the driver floor; `envbuild make` "
            "inspects it), and the commands above leave out its base_image, pip and apt"
            for i in based)))
    lock, diff = None, {}
    if current is not None and target_team is not None:
        lock = lock_path(current.path)
        diff = t.lock_changes(t.plan(target_team, m), t.read_lock(lock))
        diff = {k: v for k, v in diff.items() if v}
    for img in p.images:
        if img.kept or current is None:
            s = img.spec
            why = " (kept)" if img.kept else ""
            diff[img.name] = [f"new image{why} for {', '.join(img.groups)}: torch {s.torch} "
                              f"{s.variant}, Python {s.python}"]
    return Planned(p, tuple(said), lock, diff)


def dump_json(fleet: core.Fleet) -> dict[str, Any]:
    return {"groups": [g.to_json() for g in fleet.groups], "notes": list(fleet.notes)}


def check_written(text: str, m: Matrix) -> None:
    """What collect writes reads back as the same fleet (a guard, not a parse for its own sake)."""
    try:
        core.parse(text, Path("fleet.toml"), m)
    except (UsageError, tomllib.TOMLDecodeError) as exc:  # pragma: no cover - a bug if it fails
        raise EnvbuildError(f"the fleet written does not read back: {exc}", "a bug: report it") \
            from None


