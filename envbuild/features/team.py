"""Team base images: plan, build, lock and check a family of images from a team file.

`plan` is pure apart from optional peeks (the lock file, the local engine): it resolves every image,
groups the images by the layers they share and compares with the lock. `build` runs make() for
every image (the first image of each shared torch layer first, so the layer is built once), pushes
only validated images, attaches their reports and writes the lock. `check` asks the registry
whether what the lock pins is still there and still true.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import suppress
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from envbuild import __version__
from envbuild.common.echo import shown
from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.common.lazyre import lazy
from envbuild.common.record import record
from envbuild.core import platforms, refs
from envbuild.features.lockfile import LOCK_FILE as LOCK_FILE  # the lock's home, re-exported
from envbuild.features.lockfile import read_lock as read_lock
from envbuild.features.teamfile import TeamFile, TeamImage

if TYPE_CHECKING:
    from envbuild.core.sbom import PyDist
    from envbuild.core.signing import Signer
    from envbuild.features.make import Hooks, MakeResult
    from envbuild.matrix import Matrix
    from envbuild.render.pipeline import Prepared

LOCK_FORMAT = 1
LAYERS = ("os", "torch", "team", "image")  # the image's layer groups, bottom up
# One line of the lock's packages: NAME==VERSION, the name as PEP 508 spells one, the version
# without spaces or operators (PEP 440's characters; a legacy version too)
PIN = lazy(r"([A-Za-z0-9](?:[A-Za-z0-9._-]{0,200}[A-Za-z0-9])?)"
           r"==([A-Za-z0-9][A-Za-z0-9.+!_-]{0,200})")


# -- plan -------------------------------------------------------------------------------------
@record
class Planned:
    image: TeamImage
    prepared: Prepared
    tag: str  # local reference, NAME:torchX-variant-pyY-<12 hex of every build input>
    remote: str | None  # REGISTRY/NAME:..., when the image has a registry
    base_image: str
    layers: dict[str, str]  # layer group -> key (equal key = the same layer, byte for byte)
    platform: str | None = None  # one platform image of a multi-platform image

    @property
    def name(self) -> str:
        return self.image.name

    @property
    def key(self) -> str:
        """How plan, build and the lock name it: the image, or its platform image."""
        return f"{self.name}@{self.platform}" if self.platform else self.name


def _h(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()) \
        .hexdigest()[:12]


def _wheels(wheelhouse: Path | None) -> list[tuple[str, int]]:
    if wheelhouse is None or not wheelhouse.is_dir():
        return []
    return sorted((p.name, p.stat().st_size) for p in wheelhouse.glob("*.whl"))


def layer_keys(p: Prepared) -> dict[str, str]:
    """Keys of the layer groups (pure over the rendered files): images with an equal key build
    that layer from the same instructions and inputs, so BuildKit builds it once and the registry
    stores it once."""
    o = p.options
    os_key = _h(p.spec.os, p.spec.python, o.base_image or p.spec.base_image, o.python_source,
                list(o.apt), o.user, o.ca_cert,
                *([p.spec.platform] if platforms.foreign(p.spec.platform) else []))
    torch_key = _h(os_key, _text(p.files["requirements.txt"].content),
                   _text(p.files["constraints.txt"].content), o.torch_index_url,
                   list(o.pip_extra_index_urls), _wheels(p.wheelhouse))
    team_key = _h(torch_key, list(o.team_pip), o.pip_index_url)
    image_key = _h(team_key, list(o.pip), list(o.conda))
    return {"os": os_key, "torch": torch_key, "team": team_key, "image": image_key}


def inputs_hash(p: Prepared) -> str:
    """Every build input: the rendered files and the wheelhouse's wheel names and sizes."""
    h = hashlib.sha256()
    for name, f in sorted(p.files.items()):
        data = f.content if isinstance(f.content, bytes) else f.content.encode()
        h.update(name.encode() + b"\0" + data + b"\0" + str(f.mode).encode())
    h.update(json.dumps(_wheels(p.wheelhouse)).encode())
    return h.hexdigest()[:12]


def image_tag(name: str, p: Prepared) -> str:
    s = p.spec
    variant = "" if s.variant == s.target else f"-{s.variant}"
    arch = platforms.tag_suffix(s.platform)
    return f"{name}:torch{s.torch}{variant}-py{s.python}{arch}-{inputs_hash(p)}"


def index_tag(planned: list[Planned]) -> str:
    """The one tag of a multi-platform image: its platform images' inputs together."""
    p = planned[0]
    s = p.prepared.spec
    variant = "" if s.variant == s.target else f"-{s.variant}"
    digest = _h(*sorted((q.platform, inputs_hash(q.prepared)) for q in planned))
    return f"{p.name}:torch{s.torch}{variant}-py{s.python}-{digest}"


def plan(team: TeamFile, m: Matrix, only: Iterable[str] = ()) -> list[Planned]:
    from envbuild.core import targets
    from envbuild.render.pipeline import prepare

    wanted = list(only)
    for n in wanted:
        team.image(n)  # an unknown name is refused, naming the known ones
    out = []
    for whole in team.images:
        if wanted and whole.name not in wanted:
            continue
        for image in [whole.on(pl) for pl in whole.platforms] or [whole]:
            where = f"{team.path}: [image.{image.name}]" + (
                f" ({image.request.platform})" if whole.platforms else "")
            try:
                p = prepare(image.request, image.inputs, m)
            except EnvbuildError as exc:
                raise EnvbuildError(f"{where}: {exc.message}", exc.hint, exc.alternatives,
                                    exc.exit_code) from None
            if not targets.get(p.spec.target).container:
                raise UsageError(f"{where}: target {p.spec.target} makes no image",
                                 "team images are container images")
            tag = image_tag(image.name, p)
            remote = f"{image.registry.rstrip('/')}/{tag}" if image.registry else None
            base = p.options.base_image or p.spec.base_image or ""
            out.append(Planned(image, p, tag, remote, base, layer_keys(p),
                               image.request.platform if whole.platforms else None))
    return out


def shared_layers(planned: list[Planned]) -> list[dict[str, Any]]:
    """Layer groups that more than one image shares: [{layer, key, images}]."""
    out = []
    for layer in LAYERS:
        groups: dict[str, list[str]] = {}
        for p in planned:
            groups.setdefault(p.layers[layer], []).append(p.key)
        for key, names in groups.items():
            if len(names) > 1:
                out.append({"layer": layer, "key": key, "images": names})
    return out


def lock_changes(planned: list[Planned], lock: Mapping[str, Any] | None,
                 only: Iterable[str] = ()) -> dict[str, list[str]]:
    """What building now would change in the lock: image name -> changes (pure)."""
    entries: dict[str, Any] = dict((lock or {}).get("image", {}))
    out: dict[str, list[str]] = {}
    for p in planned:
        old = entries.get(p.name)
        if old is not None and p.platform:
            old = (old.get("platforms") or {}).get(p.platform)
        if old is None:
            out[p.key] = ["new image"]
            continue
        s = p.prepared.spec
        now = {"spec_hash": s.hash, "tag": p.remote or p.tag, "base_image": p.base_image,
               "torch": s.torch, "python": s.python, "os": s.os, "variant": s.variant,
               "pip": list(p.prepared.options.team_pip) + list(p.prepared.options.pip)}
        diffs = [f"{k}: {old.get(k)!r} -> {v!r}" for k, v in now.items() if old.get(k) != v]
        out[p.key] = diffs
    names = {p.name for p in planned}
    for name in entries:
        if name not in names and not list(only):
            out[name] = ["removed from the team file"]
    return out


def cache_state(p: Planned) -> str:
    """built (an image with these exact inputs exists in its engine) | to build | unknown (no
    engine)."""
    from envbuild.engine import docker

    try:
        with docker.endpoint(p.image.engine):
            return "built" if docker.local_image(p.tag) is not None else "to build"
    except EnvbuildError:
        return "unknown (no engine)"


def plan_json(planned: list[Planned], changes: Mapping[str, list[str]],
              states: Mapping[str, str]) -> dict[str, Any]:
    images = []
    for p in planned:
        s = p.prepared.spec
        images.append({
            "name": p.key, "torch": s.torch, "variant": s.variant, "python": s.python,
            "os": s.os, "base_image": p.base_image, "tag": p.remote or p.tag,
            "spec_hash": s.hash, "layers": p.layers, "cache": states.get(p.key, "unknown"),
            "lock": changes.get(p.key, []), "platform": s.platform,
        })
    removed = {k: v for k, v in changes.items() if k not in {p.key for p in planned}}
    return {"images": images, "shared_layers": shared_layers(planned),
            "lock_changes": {**{k: v for k, v in changes.items() if v}, **removed}}


# -- the lock ---------------------------------------------------------------------------------
def dump_lock(lock: Mapping[str, Any]) -> str:
    """The lock as TOML: sorted keys, one value per line, lists one item per line (pure)."""
    from envbuild.common.tomlwrite import key, value

    lines = ["# envbuild.lock: written by `envbuild team build`; do not edit by hand.", ""]
    for k in sorted(lock):
        if k != "image":
            lines.append(f"{key(k)} = {value(lock[k], multiline=True)}")
    def table(header: str, entry: Mapping[str, Any]) -> None:
        lines.extend(["", header])
        for k in sorted(entry):
            if k != "platforms":
                lines.append(f"{key(k)} = {value(entry[k], multiline=True)}")

    for name in sorted(lock.get("image", {})):
        entry = lock["image"][name]
        table(f"[image.{key(name)}]", entry)
        for platform in sorted(entry.get("platforms", {})):  # a multi-platform image's members
            table(f"[image.{key(name)}.platforms.{key(platform)}]",
                  entry["platforms"][platform])
    return "\n".join(lines) + "\n"


def write_lock(path: Path, lock: Mapping[str, Any]) -> None:
    """Atomically: a temporary file next to it, then renamed over it."""
    from envbuild.common.files import write_atomic

    write_atomic(path, dump_lock(lock), 0o644)


# -- build ------------------------------------------------------------------------------------
@record(frozen=False)
class Built:
    planned: Planned
    result: MakeResult | None = None
    error: EnvbuildError | None = None
    base_digest: str = ""
    freeze: list[str] = field(default_factory=list)  # the lock's packages: NAME==VERSION
    direct: list[str] = field(default_factory=list)  # the lock's direct: names
    signed_by: str = ""  # the key id its provenance and cosign signature were signed with
    seconds: float = 0.0

    def validation(self) -> dict[str, Any]:
        r = self.result
        if r is None or r.checked is None:
            return {"status": "error" if self.error else "skipped"}
        from envbuild.engine.validate import gpu_verdict

        rep = r.checked.validation.report
        s = rep.get("summary", {})
        return {"status": "pass" if r.checked.passed else "fail",
                "pass": s.get("pass", 0), "fail": s.get("fail", 0), "warn": s.get("warn", 0),
                "skip": s.get("skip", 0), "not_run": s.get("not_run", 0),
                "gpu": gpu_verdict(rep), "cached": r.checked.cached,
                "validated_at": r.checked.created.isoformat(timespec="seconds"),
                "report": r.report_ref}

    def to_json(self) -> dict[str, Any]:
        r = self.result
        p = self.planned
        out: dict[str, Any] = {
            "name": p.name, "platform": p.platform,
            "tag": (r.pushed if r and r.pushed else p.tag),
            "digest": (r.digest or None) if r else None, "spec_hash": p.prepared.spec.hash,
            "base_image": p.base_image, "base_digest": self.base_digest or None,
            "validation": self.validation(), "pushed": bool(r and r.pushed),
            "attached": dict(r.attached) if r is not None and r.attached else None,
            "seconds": {k: round(v, 2) for k, v in (r.seconds if r else {}).items()},
        }
        if r is not None and r.build is not None:
            out["image_id"] = r.build.image_id
            out["cached"] = r.build.cached
            out["log"] = str(r.build.log_path) if r.build.log_path else None
        if r is not None and r.push_skipped:
            out["push_skipped"] = r.push_skipped
        if r is not None and r.attestation is not None:
            from envbuild.features.make import attestation_json

            out["attestation"] = attestation_json(r)
        if self.error is not None:
            out["error"] = {"message": self.error.message, "hint": self.error.hint}
        return out


def current_base_digest(ref: str) -> str:
    """The digest the base image reference resolves to now ('' when none knows): see
    envbuild.features.attest.current_base_digest."""
    from envbuild.features import attest

    return attest.current_base_digest(ref)


def out_dir(out: Path, p: Planned) -> Path:
    """Where an image's SBOM, provenance and validation report go: OUT/NAME (a platform image:
    OUT/NAME-linux-arm64)."""
    return out / (p.name + (f"-{p.platform.replace('/', '-')}" if p.platform else ""))


@record
class Frozen:
    """What the lock records of an image's venv: every distribution installed as NAME==VERSION
    (`packages`, sorted), and the names of those installed from a direct reference (`direct`:
    a compiled extension's wheel by path, a VCS or URL requirement)."""

    packages: tuple[str, ...] = ()
    direct: tuple[str, ...] = ()


def frozen(dists: Iterable[PyDist]) -> Frozen:
    """The lock's view of the image's distributions (pure): one NAME==VERSION line each, the
    names and versions as installed (the SBOM's), a line that would not be one left out."""
    lines: set[str] = set()
    direct: set[str] = set()
    for d in dists:
        line = f"{d.name}=={d.version}"
        if PIN.fullmatch(line):
            lines.add(line)
            if d.direct:
                direct.add(d.name)
    return Frozen(tuple(sorted(lines)), tuple(sorted(direct)))


def freeze(tag: str) -> Frozen:
    """Every distribution of the image's venv at its exact version, as the SBOM lists it (the
    image's Python reads its metadata; pip freeze printed a wheel installed by path as
    `NAME @ file:///...`, and nvidia/cuda's entrypoint its banner): --locked rebuilds from them.
    Empty when the image cannot say (the lock then pins nothing for it)."""
    from envbuild.core import sbom
    from envbuild.engine import image_facts

    try:
        raw = image_facts.installed(tag)
    except EnvbuildError:
        return Frozen()
    return frozen(sbom.facts(raw).dists)


INTERRUPT_SLICE_S = 0.2  # the longest a Ctrl-C waits while parallel builds run


def build_order(planned: list[Planned]) -> tuple[list[Planned], list[Planned]]:
    """(first images: one per torch layer, which share nothing the others build and so may build
    in parallel with each other; the rest, which reuse a first image's layer from the build
    cache once it is built, and may build in parallel after them)."""
    first: dict[str, Planned] = {}
    rest = []
    for p in planned:
        if p.layers["torch"] in first:
            rest.append(p)
        else:
            first[p.layers["torch"]] = p
    return list(first.values()), rest


def build(planned: list[Planned], m: Matrix, *, push: bool, jobs: int = 1, rebuild: bool = False,
          revalidate: bool = False, timeout: float = 600.0,
          hooks_for: Callable[[str], Hooks] | None = None,
          on_done: Callable[[Built], None] | None = None,
          cache_from: tuple[str, ...] = (), out: Path | None = None,
          signer: Signer | None = None) -> list[Built]:
    """Build, validate and (with push) push every planned image, each on its engine; a failure
    of one image does not stop the others (its entry carries the error). Pushed images carry
    their build cache, and `cache_from` (the family's images already in the registry) lets any
    engine reuse their layers instead of building them again. With `out`, each image's SBOM,
    provenance and validation report are made before its push and written to out_dir()."""
    from envbuild.common import proc
    from envbuild.engine import docker
    from envbuild.engine.docker import LABEL_ROLE
    from envbuild.features.make import MakeRequest, make

    for p in planned:
        if push and not p.image.registry:
            raise UsageError(f"--push: [image.{p.name}] has no registry",
                             "set registry in [defaults] or in the image's table")

    def one(p: Planned) -> Built:
        t0 = time.monotonic()
        mr = MakeRequest(p.image.request, p.image.inputs, tag=p.tag, rebuild=rebuild,
                         push=p.image.registry if push else None, revalidate=revalidate,
                         timeout=timeout, attach_report=True, recommend=False,
                         estimate_size=False, push_requires_gpu=p.image.push_requires_gpu,
                         engine=p.image.engine, cache_from=cache_from, inline_cache=push,
                         sbom=out_dir(out, p) if out is not None else None, signer=signer)
        b = Built(p)
        try:
            with docker.endpoint(p.image.engine):
                b.result = make(mr, m, hooks_for(p.key) if hooks_for else None)
                base = b.result.base  # known already when the image was attested
                b.base_digest = (base.digest if base.kind != "image_id" else "") \
                    if base is not None else current_base_digest(p.base_image)
                if b.result.build is not None:
                    fz = freeze(b.result.build.tag)
                    b.freeze, b.direct = list(fz.packages), list(fz.direct)
                if signer is not None and b.result.attached.get("signature"):
                    b.signed_by = signer.keyid
        except EnvbuildError as exc:
            b.error = exc
        b.seconds = time.monotonic() - t0
        if on_done is not None:
            on_done(b)
        return b

    def each(group: list[Planned]) -> list[Built]:
        if jobs <= 1 or len(group) <= 1:
            return [one(p) for p in group]
        pool = ThreadPoolExecutor(max_workers=jobs)
        try:
            futures = [pool.submit(one, p) for p in group]
            # Wait in short slices, not in one blocking call: the kernel may hand a Ctrl-C to a
            # worker thread, and Python runs its handler only when this thread runs bytecode
            # again; a slice bounds how long the interrupt waits (a blocked result() waited for
            # the whole build). A worker that crashed (not an image's failure: `one` keeps
            # those) is raised at once, and the others are cancelled below.
            while not all(f.done() for f in futures):
                done, _ = wait(futures, timeout=INTERRUPT_SLICE_S, return_when=FIRST_EXCEPTION)
                for f in done:
                    f.result()
            return [f.result() for f in futures]
        except BaseException:
            # Ctrl-C (or SIGTERM) reaches only this thread: the images not started never
            # start, the running ones' builds are stopped and no step starts after them; their
            # validation containers are removed; nothing is tagged in the lock
            proc.cancel_all()
            pool.shutdown(wait=False, cancel_futures=True)
            for p in group:
                with suppress(Exception):  # best effort: the engine may be what went away
                    docker.remove_containers({LABEL_ROLE: "validate",
                                              "io.envbuild.image": p.tag}, settle=5.0)
            raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    proc.reset_cancel()

    # the images of distinct torch layers at once (a two-platform image's amd64 and arm64 builds,
    # validations and pushes overlap), then those reusing a layer built by then
    first, rest = build_order(planned)
    done = each(first) + each(rest)
    order = {p.key: i for i, p in enumerate(planned)}
    return sorted(done, key=lambda b: order[b.planned.key])


@record
class Indexed:
    """A multi-platform image's one tag: an OCI image index over its platform images."""

    name: str
    tag: str  # REGISTRY/NAME:... ('' when not pushed)
    digest: str
    platforms: dict[str, str]  # platform -> its image's digest


def _members(built: list[Built]) -> dict[str, list[Built]]:
    """Multi-platform image name -> its platform images' builds."""
    out: dict[str, list[Built]] = {}
    for b in built:
        if b.planned.platform:
            out.setdefault(b.planned.name, []).append(b)
    return out


def _passed(b: Built) -> bool:
    return b.error is None and b.result is not None and b.validation()["status"] == "pass"


def push_indexes(built: list[Built]) -> list[Indexed]:
    """For every multi-platform image whose platform images all passed and were pushed: one tag,
    an OCI image index over them, pushed next to them. An image with a failed or unpushed
    platform gets no index (its platform images stay where they are)."""
    from envbuild.engine import registry

    out = []
    for name, members in _members(built).items():
        if not all(_passed(b) and b.result and b.result.pushed and b.result.digest
                   for b in members):
            continue
        registry_ = members[0].planned.image.registry or ""
        tag = f"{registry_.rstrip('/')}/{index_tag([b.planned for b in members])}"
        pairs = [(str(b.planned.platform), str(b.result.digest)) for b in members
                 if b.result is not None]
        digest = registry.push_index(tag, pairs)
        out.append(Indexed(name, tag, digest, dict(pairs)))
    return out


def _text(content: str | bytes) -> str:
    return content.decode() if isinstance(content, bytes) else content


def registry_images(lock: Mapping[str, Any] | None) -> tuple[str, ...]:
    """Every image the lock pins in a registry (REGISTRY/NAME@sha256:...), platform images too:
    what a build on any engine may take layers from."""
    out: list[str] = []
    for e in (lock or {}).get("image", {}).values():
        for entry in [e, *(e.get("platforms") or {}).values()]:
            tag, digest = str(entry.get("tag", "")), str(entry.get("digest", ""))
            if tag and digest and "/" in tag and "platforms" not in entry:
                out.append(f"{tag.rpartition(':')[0]}@{digest}")
    return tuple(dict.fromkeys(out))


def lock_entry(b: Built) -> dict[str, Any]:
    p = b.planned
    s = p.prepared.spec
    r = b.result
    v = b.validation()
    entry: dict[str, Any] = {
        "tag": (r.pushed if r and r.pushed else p.tag), "digest": (r.digest if r else "") or "",
        "image_id": r.build.image_id if r and r.build else "",
        "spec_hash": s.hash, "target": s.target, "torch": s.torch,
        "torchvision": s.torchvision or "", "torchaudio": s.torchaudio or "",
        "variant": s.variant, "python": s.python, "os": s.os,
        "base_image": p.base_image, "base_digest": b.base_digest,
        "pins": [ln for ln in _text(p.prepared.files["requirements.txt"].content).splitlines()
                 if ln and not ln.startswith("#")],
        "pip": list(p.prepared.options.team_pip) + list(p.prepared.options.pip),
        "packages": b.freeze,
        **({"direct": b.direct} if b.direct else {}),
        **({"signed_by": b.signed_by} if b.signed_by else {}),
        "validation": {k: x for k, x in v.items() if x is not None},
        "envbuild": __version__,
    }
    return entry


def index_entry(members: list[Built], ix: Indexed | None) -> dict[str, Any]:
    """A multi-platform image in the lock: its index (tag and digest, '' when not pushed), what
    its platform images share, and each platform image's own entry."""
    s = members[0].planned.prepared.spec
    return {"tag": ix.tag if ix else index_tag([b.planned for b in members]),
            "digest": ix.digest if ix else "", "target": s.target, "torch": s.torch,
            "variant": s.variant, "python": s.python, "os": s.os, "envbuild": __version__,
            "platforms": {str(b.planned.platform): lock_entry(b) for b in members}}


def updated_lock(old: Mapping[str, Any] | None, built: list[Built],
                 indexes: Iterable[Indexed] = ()) -> dict[str, Any]:
    """The old lock with the entries of the images built and validated now replaced: a failed
    rebuild never replaces what the lock pins (a multi-platform image: only when every platform
    passed)."""
    images = dict((old or {}).get("image", {}))
    for b in built:
        if b.planned.platform is None and _passed(b):
            images[b.planned.name] = lock_entry(b)
    by_name = {ix.name: ix for ix in indexes}
    for name, members in _members(built).items():
        if all(_passed(b) for b in members):
            images[name] = index_entry(members, by_name.get(name))
    return {"format": LOCK_FORMAT, "envbuild": __version__,
            "image": images}


# -- --locked ---------------------------------------------------------------------------------
def _name(requirement: str) -> str:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    return canonicalize_name(Requirement(requirement).name)


def locked_image(image: TeamImage, entry: Mapping[str, Any], path: Path) -> TeamImage:
    """The image as the lock pins it: FROM base@digest, the locked torch/Python/OS and every
    package the team file names at its locked version. A package the lock lists as `direct`
    (a compiled extension's wheel by path, a VCS or URL requirement) stays as the team file
    names it: no index has NAME==VERSION of it, the same build installs it again."""
    from packaging.utils import canonicalize_name

    from envbuild.engine import registry

    where = f"{path}: [image.{image.name}]"
    digest = str(entry.get("base_digest", ""))
    if not digest:
        raise UsageError(f"{where}: the lock has no base image digest",
                         "the base image was not in a registry when it was locked; push it to "
                         "one, then `envbuild team build` again")
    pinned_base = f"{registry.parse_ref(str(entry['base_image'])).familiar}@{digest}"

    def listed(key: str) -> list[Any]:  # a lock's junk (an old lock's banner lines) ignored
        value = entry.get(key)
        return value if isinstance(value, list) else []

    versions: dict[str, str] = {}
    for line in listed("packages"):
        m = PIN.fullmatch(str(line))
        if m:
            versions[canonicalize_name(m[1])] = m[2]
    direct = {canonicalize_name(str(n)) for n in listed("direct")}

    def pin(reqs: tuple[str, ...]) -> tuple[str, ...]:
        out = []
        for r in reqs:
            n = _name(r)
            if n in direct:
                out.append(r)
                continue
            if n not in versions:
                raise UsageError(f"{where}: {shown(r)} is not in the lock's packages",
                                 "the team file changed since the lock was written; run "
                                 "`envbuild team build` (without --locked) first")
            out.append(f"{n}=={versions[n]}")
        return tuple(out)

    ci = dataclasses.replace(image.inputs, base_image=pinned_base,
                             team_pip=pin(image.inputs.team_pip), pip=pin(image.inputs.pip))
    req = dataclasses.replace(image.request, torch=str(entry["torch"]),
                              python=str(entry["python"]), os=str(entry["os"]))
    return dataclasses.replace(image, request=req, inputs=ci)


def locked_team(team: TeamFile, lock: Mapping[str, Any] | None, lock_path: Path) -> TeamFile:
    if not lock:
        raise UsageError(f"--locked: no lock file {lock_path}",
                         "run `envbuild team build` once to write it")
    images = []
    for image in team.images:
        entry = lock.get("image", {}).get(image.name)
        if entry is None:
            raise UsageError(f"--locked: {lock_path} has no image {shown(image.name)}",
                             "run `envbuild team build` (without --locked) first")
        if image.platforms or "platforms" in entry:
            raise UsageError(f"--locked: [image.{image.name}] is a multi-platform image, which "
                             "--locked does not rebuild yet",
                             "rebuild it without --locked, or --only the other images")
        images.append(locked_image(image, entry, lock_path))
    return dataclasses.replace(team, images=tuple(images))


# -- check ------------------------------------------------------------------------------------
CHECK_TITLES = {
    "present": "the locked digest is in the registry",
    "report": "a passing validation report is attached to it",
    "base": "the base image tag is still on the locked digest",
    "tag": "the tag still names the locked index",
    "platform": "the index still lists the platform's locked manifest",
}


def _record(image: str, check: str, status: str, message: str = "") -> dict[str, Any]:
    """One check of one image: {image, check, title, status (pass | fail | error | skip |
    not_run), message}; a failed check's problem is "IMAGE: MESSAGE", and so is a check that
    could not be made (error: the registry did not answer)."""
    return {"image": image, "check": check, "title": CHECK_TITLES[check.partition(".")[0]],
            "status": status, "message": message}


def check(lock: Mapping[str, Any], lock_path: Path) -> dict[str, Any]:
    """Is what the lock pins still true in the registry? {images, checks, problems}. A
    multi-platform image: its tag still on the locked index, the index still listing each
    platform's locked manifest, and each platform image checked as an image of its own."""
    images = []
    checks: list[dict[str, Any]] = []
    for name, e in sorted(lock.get("image", {}).items()):
        members = e.get("platforms")
        if isinstance(members, dict) and members:
            row, found = _check_index(name, e, members)
            images.append(row)
            checks += found
            for platform, pe in sorted(members.items()):
                row, found = _check_entry(f"{name}@{platform}", pe)
                images.append(row)
                checks += found
        else:
            row, found = _check_entry(name, e)
            images.append(row)
            checks += found
    problems = [f"{c['image']}: {c['message']}" for c in checks
                if c["status"] in ("fail", "error")]
    return {"images": images, "checks": checks, "problems": problems, "lock": str(lock_path)}


def _check_index(name: str, e: Mapping[str, Any], members: Mapping[str, Any]
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from envbuild.engine import registry

    digest, tag = str(e.get("digest", "")), str(e.get("tag", ""))
    row: dict[str, Any] = {"name": name, "tag": tag, "digest": digest, "base_image": "",
                           "base_digest": "", "platforms": sorted(members)}

    def platforms(status: str, why: str = "") -> list[dict[str, Any]]:
        return [_record(name, f"platform.{p}", status, why) for p in sorted(members)]

    if not digest:
        row["present"] = False
        return row, [_record(name, "tag", "fail",
                             "the lock has no index digest (built without --push)"),
                     *platforms("not_run", "not run: the lock has no index to read")]
    ref = registry.parse_ref(tag)
    now = registry.client(ref.host).head_manifest(ref)
    row["present"] = now is not None
    if now is None:
        return row, [_record(name, "tag", "fail", f"the tag {tag} is gone from the registry"),
                     *platforms("not_run", "not run: the index is gone")]
    out = [_record(name, "tag", "pass") if now[0] == digest else _record(
        name, "tag", "fail", f"the tag {tag} moved: locked index {digest}, now {now[0]}")]
    listed = registry.index_platforms(tag) or {}
    for platform, pe in sorted(members.items()):
        locked = str(pe.get("digest", ""))
        if platform not in listed:
            out.append(_record(name, f"platform.{platform}", "fail",
                               f"the index at {tag} has no {platform} image (locked {locked})"))
        elif listed[platform] != locked:
            out.append(_record(name, f"platform.{platform}", "fail",
                               f"the {platform} manifest moved: locked {locked}, the index at "
                               f"{tag} now lists {listed[platform]}"))
        else:
            out.append(_record(name, f"platform.{platform}", "pass"))
    return row, out


def _check_entry(name: str, e: Mapping[str, Any]
                 ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One image's lock entry against its registry: present, its report attached and passing,
    its base tag on the locked digest."""
    from envbuild.engine import registry

    row: dict[str, Any] = {"name": name, "tag": e.get("tag", ""),
                           "digest": e.get("digest", ""),
                           "base_image": e.get("base_image", ""),
                           "base_digest": e.get("base_digest", "")}
    digest = str(e.get("digest", ""))
    if not digest:
        row["present"] = False
        out = [_record(name, "present", "fail",
                       "the lock has no registry digest (built without --push)"),
               _record(name, "report", "not_run", "not run: the image is not in a registry")]
    else:
        ref = registry.parse_ref(str(e["tag"]))
        present = registry.client(ref.host).head_manifest(ref.with_digest(digest))
        row["present"] = present is not None
        if present is None:
            out = [_record(name, "present", "fail",
                           f"{ref.host}/{ref.repo}@{digest} is gone from the registry"),
                   _record(name, "report", "not_run", "not run: the image is gone")]
        else:
            out = [_record(name, "present", "pass"),
                   _check_report(name, row, str(ref.with_digest(digest)))]
    return row, [*out, _check_base(name, e, row)]


def _check_report(name: str, row: dict[str, Any], ref: str) -> dict[str, Any]:
    from envbuild.engine import registry

    att = registry.fetch_report(ref)
    if att is None:
        row["report"] = None
        return _record(name, "report", "fail",
                       f"no validation report attached to {ref}")
    s = att.report.get("summary", {})
    ok = isinstance(s, dict) and not s.get("fail") and bool(s.get("pass"))
    row["report"] = {"status": "pass" if ok else "fail", "artifact": att.artifact,
                     "via": att.via, **(s if isinstance(s, dict) else {})}
    if not ok:
        return _record(name, "report", "fail", "the attached validation report does not pass")
    return _record(name, "report", "pass", f"{att.artifact} ({s.get('pass')} passed)")


def _check_base(name: str, e: Mapping[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    from envbuild.engine import registry

    base = str(e.get("base_image", ""))
    old = str(e.get("base_digest", ""))
    if not base:
        return _record(name, "base", "skip", "the lock names no base image")
    if refs.pinned_digest(base):
        return _record(name, "base", "skip", f"the base image {base} is pinned by digest")
    try:
        now = registry.resolve_digest(base)
    except EnvbuildError as exc:  # the registry did not answer (429, 5xx, down): not a verdict
        row["base_error"] = exc.message
        if old:
            return _record(name, "base", "error",
                           f"could not ask the registry for the base image tag {base}: "
                           f"{exc.message}")
        now = None
    else:
        row["base_digest_now"] = now
    if not old:
        return _record(name, "base", "fail", f"the lock has no digest for the base image {base}")
    if now is None:
        return _record(name, "base", "fail", f"the base image tag {base} vanished (locked {old})")
    if now != old:
        return _record(name, "base", "fail",
                       f"the base image tag {base} moved: locked {old}, now {now}")
    return _record(name, "base", "pass")
