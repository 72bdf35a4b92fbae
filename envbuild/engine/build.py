"""Build a rendered context into an image: cache check, BuildKit build, tag only on success.

A failed or interrupted build leaves no tag (the image is tagged from --iidfile after success)
and no temporary files; secrets live in a 0600 temp dir outside the context for the build only.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TextIO
from urllib.parse import urlsplit

from envbuild.common.boundedio import load_json, read_text
from envbuild.common.buildkit import ERROR, STEP
from envbuild.common.errors import EnvbuildError, EnvironmentProblem, UsageError
from envbuild.common.proxy import describe
from envbuild.common.record import record
from envbuild.common.redact import redact, shown
from envbuild.core import platforms, refs
from envbuild.core.spec import Spec, from_json
from envbuild.core.tags import context_hash, default_tag
from envbuild.engine import docker, emulation
from envbuild.render.context import image_reference
from envbuild.render.pipeline import Secrets


@record
class BuildResult:
    tag: str
    image_id: str
    cached: bool
    seconds: float
    log_path: Path | None
    builder: str
    emulated: str = ""  # how a build for another platform ran here ("" = natively)


class BuildFailed(EnvbuildError):
    pass


def load_spec(context: Path) -> Spec:
    path = context / "spec.json"
    if not (context / "Dockerfile").is_file() or not path.is_file():
        raise UsageError(f"{context} is not a rendered build context (no Dockerfile/spec.json)",
                         "render one first: envbuild render ... --out DIR")
    try:
        return from_json(load_json(path, "spec file"))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path} is not an envbuild spec: {exc}",
                         "render the context again: envbuild render ... --out DIR --force") \
            from None


# Build ARGs a Dockerfile may declare whose values come from envbuild's environment, passed as
# `--build-arg NAME` (the docker client reads the value: never on a command line). The standalone
# Python stage declares these two: where uv downloads python-build-standalone from. A mirror keeps
# the upstream layout and must be byte-identical (uv checks each archive's sha256 against the list
# built into the pinned uv); a downloads JSON replaces that list (an internal build of the
# archives). Their values land only in that stage's history, never in the final image.
ENV_BUILD_ARGS = ("UV_PYTHON_INSTALL_MIRROR", "UV_PYTHON_DOWNLOADS_JSON_URL")
_ARG_LINE = re.compile(r"^ARG[ \t]+([A-Za-z_][A-Za-z0-9_]*)[ \t]*$", re.M)
_BAD_URL = re.compile(r"[\s\x00-\x1f\x7f\"'`\\]")


def env_build_args(dockerfile: str, env: Mapping[str, str]) -> dict[str, str]:
    """The ENV_BUILD_ARGS that `dockerfile` declares and `env` sets, each checked to be an
    http(s) URL (UsageError otherwise: exit 2, the value shown redacted)."""
    declared = set(_ARG_LINE.findall(dockerfile))
    out: dict[str, str] = {}
    for name in ENV_BUILD_ARGS:
        value = env.get(name, "")
        if name not in declared or not value:
            continue
        echo = shown(value, 80, url=True)
        parts = urlsplit(value)
        if len(value) > 2000 or _BAD_URL.search(value):
            raise UsageError(f"{name} {echo!r} holds whitespace, quotes or control characters",
                             f"{name} is a URL, e.g. https://mirror.example.com/python")
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"{name} {echo!r} is not an http(s) URL with a host",
                             f"{name} is read inside the build container: e.g. "
                             "https://mirror.example.com/python (a file path there is not "
                             "the host's)")
        out[name] = value
    return out


_SECRET_FLAGS = {"ca": "--ca-cert FILE", "netrc": "--netrc FILE (or the index URL with make)"}


def required_secrets(dockerfile: str) -> set[str]:
    return set(re.findall(r"--mount=type=secret,id=([\w-]+)", dockerfile))


def failing_step(lines: list[str]) -> tuple[str, list[str]]:
    """(the step that failed, its last output lines) from a --progress plain log."""
    titles: dict[str, str] = {}
    for line in lines:
        m = STEP.match(line)
        if m:
            titles.setdefault(m.group(1), m.group(2))
    for line in reversed(lines):
        e = ERROR.match(line)
        if e:
            step = e.group(1)
            out = [ln.split(" ", 2)[-1] for ln in lines
                   if ln.startswith(f"#{step} ") and not STEP.match(ln)
                   and not ln.startswith(f"#{step} sha256:")]
            return titles.get(step, f"step #{step}"), out[-15:]
    tail = [ln for ln in lines if ln.strip()][-15:]
    return "the build", tail


_FROM = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(\S+)", re.MULTILINE)


def base_image_of(dockerfile: str) -> str:
    m = _FROM.search(dockerfile)
    return m.group(1) if m else "(unknown)"


def _hint(step: str, tail: list[str]) -> str:
    text = "\n".join(tail)
    if "load metadata for" in step or re.search(r"pull access denied|manifest unknown|"
                                                r"failed to resolve source", text):
        return docker.BASE_PULL_HINT
    if re.search(r"certificate verify failed|SSLError|CERTIFICATE_VERIFY", text):
        return "HTTPS is intercepted here: pass --ca-cert with your proxy's CA bundle"
    if re.search(r"No matching distribution|Could not find a version", text):
        return ("the index does not have that build: check --torch-index-url / --wheelhouse, or "
                "the --pip requirement")
    if re.search(r"no space left on device|ENOSPC", text, re.IGNORECASE):
        return ("the disk where the engine keeps images and build cache is full: free space there "
                "(`docker system df`; `docker builder prune` drops the build cache)")
    if re.search(r"Unable to locate package|No match for argument", text):
        return "an OS package name does not exist for this OS (--apt)"
    return "see the full log; fix the input and run again (nothing was tagged)"


def default_log_dir() -> Path:
    """Per user: $XDG_STATE_HOME/envbuild/logs, by default ~/.local/state/envbuild/logs."""
    state = os.environ.get("XDG_STATE_HOME", "")
    base = Path(state) if state and Path(state).is_absolute() else Path.home() / ".local/state"
    return base / "envbuild" / "logs"


def open_log(directory: Path, stem: str) -> tuple[Path, TextIO]:
    """A new log file in a 0700 directory of this user's: created exclusively (O_EXCL), never
    through a symlink (O_NOFOLLOW), 0600. A name already taken (by anything) gets a suffix."""
    try:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = directory.stat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise EnvironmentProblem(f"build log directory {directory} is not a directory of "
                                     "this user's", "set XDG_STATE_HOME to a directory you own")
        if stat.S_IMODE(info.st_mode) != 0o700:
            directory.chmod(0o700)
    except OSError as exc:
        raise EnvironmentProblem(f"cannot create the build log directory {directory}: "
                                 f"{exc.strerror}",
                                 "set XDG_STATE_HOME to a writable directory") from None
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for n in range(1000):
        path = directory / (f"{stem}.log" if n == 0 else f"{stem}-{n}.log")
        try:
            fd = os.open(path, flags, 0o600)
        except FileExistsError:
            continue
        except OSError as exc:
            raise EnvironmentProblem(f"cannot create the build log {path}: {exc.strerror}",
                                     "set XDG_STATE_HOME to a writable directory") from None
        return path, os.fdopen(fd, "w")
    raise EnvironmentProblem(f"no free build log name in {directory}", "remove old logs there")


def build(context: Path, *, tag: str | None = None, rebuild: bool = False,
          progress: str = "plain", secrets: Secrets | None = None,
          log_dir: Path | None = None, on_line: Callable[[str], None] | None = None,
          timeout: float = 3600.0, proxies: Mapping[str, str] | None = None,
          network: str | None = None, env: Mapping[str, str] | None = None,
          cache_from: Sequence[str] = (), inline_cache: bool = False) -> BuildResult:
    """Build `context`. `proxies` (envbuild.common.proxy.build_proxy_env) reach the RUN steps as
    Docker's predefined proxy build args: never in the image config, history or argv. The
    ENV_BUILD_ARGS the Dockerfile declares come from `env` (default: this process's)."""
    spec = load_spec(context)
    extra = env_build_args(read_text(context / "Dockerfile", "Dockerfile"),
                           os.environ if env is None else env)
    secrets = secrets or Secrets()
    missing = sorted(required_secrets(read_text(context / "Dockerfile", "Dockerfile"))
                     - set(secrets.files) - set(secrets.contents))
    if missing:
        flags = ", ".join(_SECRET_FLAGS.get(m, f"secret {m}") for m in missing)
        raise UsageError(f"this context was rendered to use the build secret(s) "
                         f"{', '.join(missing)}, which were not given", f"pass {flags}")
    chash = context_hash(context)
    ref = image_reference(tag, "--tag") if tag else default_tag(spec, chash)
    if not refs.has_tag(ref) and not refs.pinned_digest(ref):
        ref += ":latest"
    labels = {docker.LABEL_SPEC_HASH: spec.hash, docker.LABEL_CONTEXT_HASH: chash}
    start = time.monotonic()
    if not rebuild:
        for image in docker.find_images(labels):
            if ref not in docker.image_tags(image):
                docker.tag(image.id, ref)
            return BuildResult(ref, image.id, True, time.monotonic() - start, None, "cache")
    builder = docker.find_builder()
    platform = spec.platform if emulation.emulated(spec.platform) else None
    how = emulation.ready(platform, docker.remote_engine()) if platform else ""
    log_path, log = open_log(log_dir or default_log_dir(),
                             f"build-{spec.hash}-{time.strftime('%Y%m%d-%H%M%S')}")
    work = Path(tempfile.mkdtemp(prefix="envbuild-build-"))
    lines: list[str] = []
    try:
        secret_files = _secret_files(secrets, work)
        iidfile = work / "iid"
        argv = docker.build_argv(builder, context, iidfile, labels, secret_files, "plain",
                                 env_build_args=[*(proxies or {}), *extra], network=network,
                                 platform=platform, cache_from=cache_from,
                                 inline_cache=inline_cache)
        with log:
            log.write(redact(f"# {builder.reason}\n# {' '.join(argv)}\n"))
            if proxies:
                log.write(f"# proxy: {describe(proxies)}\n")
            for name, value in sorted(extra.items()):
                log.write(f"# {name}={redact(value)}\n")

            def sink(line: str) -> None:
                clean = redact(secrets.redact(line) if secrets else line)
                lines.append(clean)
                log.write(clean + "\n")
                if on_line is not None:
                    on_line(clean)

            rc = docker.run_build(builder, argv, sink, timeout,
                                  extra_env={**(proxies or {}), **extra})
        if rc != 0 or not iidfile.is_file():
            if docker.registry_denied(lines):
                base = base_image_of(read_text(context / "Dockerfile", "Dockerfile"))
                raise docker.login_refused(base, "build stopped, nothing tagged")
            step, tail = failing_step(lines)
            short = step if len(step) <= 90 else step[:87] + "..."
            raise BuildFailed(f"build failed at {short}", _hint(step, tail),
                              [*tail, f"full log: {log_path}"])
        image_id = read_text(iidfile, "image id file").strip()
        docker.tag(image_id, ref)
        return BuildResult(ref, image_id, False, time.monotonic() - start, log_path,
                           builder.reason, f"{how or 'a remote engine'} on {platforms.host()}"
                           if platform else "")
    finally:
        log.close()
        shutil.rmtree(work, ignore_errors=True)


def build_stage(context: Path, target: str, *, dest: Path | None = None,
                secrets: Secrets | None = None, proxies: Mapping[str, str] | None = None,
                timeout: float = 3600.0) -> str | None:
    """One stage of a context just built (its steps come from BuildKit's cache): its files into
    `dest` (which must not exist: written beside it, then renamed whole), or, without dest, as
    an untagged image whose id is returned. BuildFailed when the engine says no."""
    builder = docker.find_builder()
    work = Path(tempfile.mkdtemp(prefix="envbuild-stage-"))
    partial = None
    try:
        if dest is not None:  # beside dest, named for this run: a second writer has its own
            partial = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
        secrets = secrets or Secrets()
        secret_files = _secret_files(secrets, work)
        iidfile = work / "iid"
        extra = env_build_args(read_text(context / "Dockerfile", "Dockerfile"), os.environ)
        argv = docker.build_argv(builder, context, None if partial else iidfile, {},
                                 secret_files, "plain",
                                 env_build_args=[*(proxies or {}), *extra], target=target,
                                 output=f"type=local,dest={partial}" if partial else None)
        lines: list[str] = []
        rc = docker.run_build(builder, argv, lines.append, timeout,
                              extra_env={**(proxies or {}), **extra})
        if rc != 0:
            step, tail = failing_step([redact(secrets.redact(x)) for x in lines])
            raise BuildFailed(f"the {target} stage failed at {step[:90]}", _hint(step, tail),
                              tail)
        if partial is not None and dest is not None:
            try:
                partial.rename(dest)
            except OSError:
                if not dest.is_dir():  # else another build of the key kept it first: the same
                    raise
            return None
        return read_text(iidfile, "image id file").strip()
    finally:
        if partial is not None:
            shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def _secret_files(secrets: Secrets, work: Path) -> dict[str, Path]:
    """The build's secrets as files: those given as files, and those given as contents written
    into `work` (made private first, 0600 each)."""
    work.chmod(0o700)
    files = dict(secrets.files)
    for sid, content in secrets.contents.items():
        p = work / f"secret-{sid}"
        p.touch(mode=0o600)
        p.write_text(content)
        files[sid] = p
    return files
