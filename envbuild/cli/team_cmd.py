"""`envbuild team plan|build|check`: a family of team base images from envbuild.toml."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from envbuild.cli._app import app, emit_json, say, warn
from envbuild.cli._options import Json, Junit
from envbuild.common.buildkit import step_title
from envbuild.common.echo import escaped, one_line
from envbuild.common.errors import EXIT_FAILED

if TYPE_CHECKING:
    from envbuild.features.make import Hooks
    from envbuild.features.team import Built

team_app = typer.Typer(help="Team base images: plan, build, lock and check a family of images "
                       "from a team file, and write its CI pipeline. The team file "
                       "(envbuild.toml): TOML with an optional [defaults] "
                       "table and one [image.NAME] table per image, whose keys are the options "
                       "of `envbuild make` (target, cuda, gpu, python, torch, os, pip, apt, "
                       "registry, ...), e.g. [image.cpu] with target = \"cpu\".",
                       no_args_is_help=True)
app.add_typer(team_app, name="team")

File = Annotated[Path | None, typer.Option(
    "--file", "-f", help="The team file (default ./envbuild.toml); the lock goes next to it.")]
Only = Annotated[list[str] | None, typer.Option(
    "--only", help="Only this image (a table name). Repeatable.")]


@team_app.command("plan")
def plan_cmd(file: File = None, only: Only = None, json: Json = False) -> None:
    """Resolve every image of the team file: torch, variant, Python, OS, base and tag; which
    layers the images share; what is already built; what the lock would change. No engine
    needed."""
    from envbuild.features.team_lock import plan

    planned = plan(file, only or ())
    data = planned.data
    if json:
        emit_json(data)
        return
    rows: list[tuple[str, ...]] = [
        ("image", "torch", "variant", "python", "os", "cache", "base", "tag")]
    for i in data["images"]:
        rows.append((i["name"], i["torch"], i["variant"], i["python"], i["os"], i["cache"],
                     i["base_image"], i["tag"]))
    _table(rows)
    if data["shared_layers"]:
        say("")
        say("shared layers (built once, stored once):")
        for s in data["shared_layers"]:
            say(f"  {s['layer']:<6} {s['key']}  {', '.join(s['images'])}")
    say("")
    if not data["lock_changes"]:
        say(f"lock      {planned.lock}: no change")
    else:
        say(f"lock      {planned.lock} would change:")
        for name, diffs in data["lock_changes"].items():
            for d in diffs:
                say(f"  {name}: {d}")


def _table(rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        say("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())


_lock = threading.Lock()


def _hooks(name: str, show: bool) -> Hooks:
    """Per-image progress: the build's step lines and the waits, prefixed with the image name."""
    from envbuild.features.make import Hooks

    @contextmanager
    def status(text: str) -> Iterator[None]:
        if show:
            with _lock:
                sys.stderr.write(f"[{name}] {text}\n")
        yield

    @contextmanager
    def progress() -> Iterator[Callable[[str], None]]:
        def sink(line: str) -> None:
            title = step_title(line)
            if show and title:
                with _lock:
                    sys.stderr.write(f"[{name}] {escaped(title[:110])}\n")
        yield sink

    return Hooks(status=status, progress=progress)


def _done_line(b: Built) -> str:
    if b.error is not None:
        return f"[{b.planned.key}] error: {one_line(b.error.message)}"
    v = b.validation()
    r = b.result
    assert r is not None
    where = r.pushed or b.planned.tag
    return (f"[{b.planned.key}] {v['status']}  {where}" + (f"@{r.digest}" if r.digest else "")
            + f"  ({b.seconds:.0f} s)")


@team_app.command("build")
def build_cmd(
    file: File = None, only: Only = None,
    push: Annotated[bool, typer.Option(
        "--push", help="Push every validated image to its registry and attach its validation "
        "report, SBOM and provenance (an unvalidated or failing image is never pushed).")] = False,
    jobs: Annotated[int, typer.Option(
        "--jobs", "-j", min=1, max=16, help="Images built, validated and pushed at once (images "
        "that share a torch layer wait for the one that builds it).")] = 1,
    locked: Annotated[bool, typer.Option(
        "--locked", help="Rebuild exactly what envbuild.lock pins: FROM base@sha256:..., the "
        "locked torch/Python/OS and exact package versions.")] = False,
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Build even if cached.")] = False,
    revalidate: Annotated[bool, typer.Option(
        "--revalidate", help="Validate even when a cached passing report exists.")] = False,
    out: Annotated[Path | None, typer.Option(
        "--out", metavar="DIR", help="Where each image's SBOM (sbom.cdx.json), provenance "
        "(provenance.intoto.json) and validation report (validation.json) go: DIR/NAME/ "
        "(default: envbuild-out/ next to the team file).")] = None,
    sign_key: Annotated[Path | None, typer.Option(
        "--sign-key", metavar="KEY.pem", help="With --push: sign each image's provenance (a "
        "DSSE envelope) and the image (cosign's signature tag) with this PEM EC P-256 private "
        "key; an encrypted key's password from $ENVBUILD_SIGNING_PASSWORD. `envbuild verify "
        "--key PUBLIC.pem` checks them.")] = None,
    json: Json = False,
) -> None:
    """Build every image (shared layers once), validate each, push the validated ones with
    their reports attached, and write envbuild.lock. Exit 1 when any image failed."""
    from envbuild.features.team_lock import build

    show = not json

    def done(b: Built) -> None:  # one line per image on stderr, with --json too
        with _lock:
            sys.stderr.write(_done_line(b) + "\n")

    outcome = build(file, only or (), push=push, jobs=jobs, locked=locked, rebuild=rebuild,
                    revalidate=revalidate, hooks_for=lambda name: _hooks(name, show),
                    on_done=done, out=out, sign_key=sign_key)
    built, wrote = outcome.built, outcome.lock
    if json:
        emit_json(outcome.to_json())
    else:
        rows: list[tuple[str, ...]] = [("image", "validation", "pushed", "seconds", "reference")]
        for b in built:
            j = b.to_json()
            ref = j["tag"] + (f"@{j['digest']}" if j["digest"] else "")
            rows.append((b.planned.key, j["validation"]["status"],
                         "yes" if j["pushed"] else ("no: " + j.get("push_skipped", "not asked")
                                                    if not b.error else "no"),
                         f"{b.seconds:.0f}", ref))
        say("")
        _table(rows)
        for ix in outcome.indexes:
            say(f"index     {ix.name}: {ix.tag}@{ix.digest} "
                f"({', '.join(sorted(ix.platforms))})")
        if outcome.out is not None and any(b.result and b.result.attested for b in built):
            say(f"sbom      {outcome.out}/NAME/: sbom.cdx.json, provenance.intoto.json, "
                "validation.json")
        if wrote:
            say(f"lock      {wrote}")
        for b in built:
            if b.error is not None:
                warn(f"error: {b.planned.key}: {one_line(b.error.message)}")
                if b.error.hint:
                    warn(f"hint: {one_line(b.error.hint)}")
    if outcome.failed:
        raise typer.Exit(EXIT_FAILED)


@team_app.command("check")
def check_cmd(file: File = None, json: Json = False, junit: Junit = None) -> None:
    """For every image in envbuild.lock: its digest still in the registry, its attached report
    there and passing, its base image tag still on the locked digest (a multi-platform image:
    its tag still on the locked index, listing each platform's locked manifest). Exit 1 naming
    each problem (a moved or vanished tag with the old and new digests)."""
    from envbuild.features import junit as ju
    from envbuild.features.team_lock import check, inputs

    junit = ju.check_path(junit, inputs(file)) if junit is not None else None
    with ju.report(junit, "envbuild team check", warn) as record:
        data = check(file)
        record(ju.team_suites(data))
    if json:
        emit_json({"images": data["images"], "checks": data["checks"],
                   "problems": data["problems"]})
    else:
        for row in data["images"]:
            rep = row.get("report") or {}
            base = ("ERROR" if row.get("base_error") else
                    "pinned" if "base_digest_now" not in row else
                    "ok" if row["base_digest_now"] == row["base_digest"] else "CHANGED")
            say(f"{row['name']:<12} {'present' if row.get('present') else 'MISSING':<8} "
                f"report {rep.get('status', 'none'):<5} base {base}  {row['tag']}")
        for p in data["problems"]:
            warn(f"problem: {one_line(p)}")
        if not data["problems"]:
            say("ok: every image, report and base digest in the lock is still true")
    if data["problems"]:
        raise typer.Exit(EXIT_FAILED)


@team_app.command("ci")
def ci_cmd(
    github: Annotated[bool, typer.Option(
        "--github", help="A GitHub Actions workflow (default --out .github/workflows/envbuild.yml "
        "in the repository).")] = False,
    gitlab: Annotated[bool, typer.Option(
        "--gitlab", help="A GitLab CI pipeline (default --out .gitlab-ci.yml in the "
        "repository).")] = False,
    install: Annotated[str | None, typer.Option(
        "--install", metavar="SPEC", help="What the jobs `pip install` envbuild from (required): "
        "a requirement ('envbuild @ git+https://github.com/ORG/envbuild@v0.1.0', "
        "'envbuild==0.1.0' from an index that has it), an https:// or git+https:// URL, or a "
        "wheel's path in the repository.")] = None,
    file: File = None,
    out: Annotated[Path | None, typer.Option(
        "--out", "-o", help="Where to write the pipeline (its directories are made).")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing, different file at --out.")] = False,
    json: Json = False,
) -> None:
    """Write the team file's CI pipeline: on a pull (merge) request, `team build` without push
    and, where a fleet.toml lies next to the team file, `envbuild plan` of the base branch's
    team file against the request's; nightly, `team check --junit` of the committed lock as a
    test report, then `team build` without push; on the default branch's pushes, `team build
    --push` and the new lock committed back. One registry login per host, from the CI secrets
    it prints. The repository is the nearest directory above the team file holding .git. Exit 2
    when --install is missing or not something pip can install envbuild from, or the file
    exists and differs (--force replaces it)."""
    from envbuild.common.boundedio import path_text
    from envbuild.common.errors import UsageError
    from envbuild.features.team_ci import no_install, write

    if github == gitlab:
        raise UsageError("choose one of --github and --gitlab",
                         "e.g. envbuild team ci --github --install 'envbuild @ "
                         "git+https://github.com/ORG/envbuild@v0.1.0'")
    if install is None:
        raise no_install()
    p = write("github" if github else "gitlab", file, out, force, install)
    if json:
        emit_json({"provider": p.provider, "path": str(p.path), "team": p.team,
                   "registries": list(p.registries), "logins": [x.to_json() for x in p.logins],
                   "install": p.install, "warnings": list(p.warnings), "changed": p.changed})
    else:
        say(f"{'wrote' if p.changed else 'unchanged'}  {path_text(p.path)} ({p.provider}) for "
            f"{p.team}")
        for x in p.logins:
            say(f"login     {x.host}: " + (
                "the workflow's GITHUB_TOKEN (packages: write), nothing to set" if x.own else
                f"set the {'secrets' if p.provider == 'github' else 'CI/CD variables'} "
                f"{x.user} and {x.password}"))
        if p.provider == "gitlab":
            say("          (the project's own registry, $CI_REGISTRY, needs none; "
                "ENVBUILD_GIT_TOKEN lets the pipeline commit the lock)")
            say("schedule  add a pipeline schedule (Build > Pipeline schedules) for the nightly "
                "jobs")
    for w in p.warnings:
        warn(f"warning: {one_line(w)}")
