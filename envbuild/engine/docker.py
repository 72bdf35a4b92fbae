"""The only module that knows Docker: the BuildKit client, images, containers, registries.

Builds go through a docker CLI (docker-py drives only the legacy builder, which cannot do
RUN --mount); everything else (inspect, run, remove, push) goes through docker-py.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import field
from pathlib import Path
from typing import Any

from envbuild.common import proc
from envbuild.common.echo import shown
from envbuild.common.errors import EXIT_CANNOT_RUN, EnvbuildError, EnvironmentProblem
from envbuild.common.record import record
from envbuild.common.sizes import docker_size
from envbuild.core import refs

LABEL_ROLE = "io.envbuild.role"
LABEL_SPEC_HASH = "io.envbuild.spec-hash"
LABEL_CONTEXT_HASH = "io.envbuild.context-hash"
LABEL_RUN = "io.envbuild.run"  # `envbuild run`: one id per run, so a cancelled one is found

# What a registry answers when the docker credential store has no login for it, or a wrong one.
_DENIED = re.compile(r"401 Unauthorized|unauthorized: authentication required|failed to "
                     r"authorize|no basic auth credentials|unauthorized: incorrect username or "
                     r"password|denied: requested access", re.IGNORECASE)
BASE_PULL_HINT = ("the base image cannot be pulled: use --base-image with a mirror or a local "
                  "image (docker images)")


def registry_denied(lines: list[str]) -> bool:
    """Whether a registry refused the (missing or wrong) login in these engine lines."""
    return any(_DENIED.search(line) for line in lines)


def login_hint(registry: str) -> str:
    return (f"log in to it once with `docker login {registry}` (or a credential helper in "
            "~/.docker/config.json): envbuild uses the docker credential store through the engine "
            "and never asks for or prints a password")


def login_refused(base: str, outcome: str) -> EnvironmentProblem:
    """The error of a base image whose registry refused the login (`outcome`: what came of it)."""
    reg = refs.registry_of(base)
    return EnvironmentProblem(f"the registry {reg} refused the login for the base image {base} "
                              f"({outcome})", login_hint(reg))


@record
class Builder:
    """A docker CLI that can run BuildKit builds, and why it was chosen."""

    docker: str
    buildx: bool
    version: str
    reason: str

    def build_prefix(self) -> list[str]:
        return [self.docker, "buildx", "build", "--load"] if self.buildx else [self.docker, "build"]

    def env(self) -> dict[str, str]:
        env = cli_env()
        if not self.buildx:
            env["DOCKER_BUILDKIT"] = "1"
        return env


# The engine this context's calls go to (a DOCKER_HOST address), set by `endpoint`; None: the
# environment's DOCKER_HOST, else the default socket. A context variable: each thread of a team
# build (one engine per platform image) has its own.
_ENDPOINT: ContextVar[str | None] = ContextVar("envbuild_docker_endpoint", default=None)


@contextmanager
def endpoint(url: str | None) -> Iterator[None]:
    """Send every engine call in the block (SDK and CLI: builds, runs, pushes) to `url`."""
    token = _ENDPOINT.set(url) if url else None
    try:
        yield
    finally:
        if token is not None:
            _ENDPOINT.reset(token)


def current_endpoint() -> str:
    """The engine's address as DOCKER_HOST writes it ('' for the default socket)."""
    return _ENDPOINT.get() or os.environ.get("DOCKER_HOST", "")


def remote_engine() -> bool:
    """The engine is another machine (tcp://, ssh://): this host's emulation is not its own."""
    host = current_endpoint()
    return bool(host) and not host.startswith("unix://")


def cli_env() -> dict[str, str]:
    """The docker CLI's environment: this process's, aimed at the current engine."""
    env = dict(os.environ)
    if _ENDPOINT.get():
        env["DOCKER_HOST"] = str(_ENDPOINT.get())
    return env


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text)[:2])


def _buildkit_rules() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(first classic CLI with DOCKER_BUILDKIT=1, first CLI that needs buildx): matrix data."""
    from envbuild.core.compat import host_rules

    rules = host_rules()
    return _version_tuple(rules.buildkit_classic_min), _version_tuple(rules.buildx_required_from)


def _candidates() -> list[str]:
    seen: list[str] = []
    for d in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/usr/local/bin"]:
        path = os.path.join(d, "docker")
        real = os.path.realpath(path)
        if os.access(path, os.X_OK) and real not in [os.path.realpath(s) for s in seen]:
            seen.append(path)
    return seen


def find_builder() -> Builder:
    """ENVBUILD_DOCKER, else the first docker CLI with buildx, else a classic one with BuildKit."""
    classic_min, buildx_from = _buildkit_rules()
    override = os.environ.get("ENVBUILD_DOCKER")
    candidates = [override] if override else _candidates()
    rejected = []
    for docker in candidates:
        try:
            v = proc.run([docker, "version", "--format", "{{.Client.Version}}"], timeout=20,
                         check=False)
        except proc.ProcessError as exc:
            rejected.append(f"{docker}: {exc.message}")
            continue
        version = v.stdout.strip().splitlines()[0] if v.stdout.strip() else "?"
        bx = proc.run([docker, "buildx", "version"], timeout=20, check=False)
        if bx.ok:
            return Builder(docker, True, version,
                           f"{docker} {version} with the buildx plugin "
                           f"({bx.stdout.strip().split()[1] if bx.stdout.split() else 'buildx'})")
        vt = _version_tuple(version)
        if vt and classic_min <= vt < buildx_from:
            return Builder(docker, False, version,
                           f"{docker} {version}: no buildx plugin, but this client still has "
                           "BuildKit built in (DOCKER_BUILDKIT=1)")
        rejected.append(f"{docker} {version}: no buildx plugin, and clients >= "
                        f"{'.'.join(map(str, buildx_from))} need it for BuildKit")
    raise EnvironmentProblem(
        "no docker client that can run BuildKit builds: " + ("; ".join(rejected) or "none found"),
        "install the buildx plugin (docker-buildx-plugin / docker-buildx), or point "
        "ENVBUILD_DOCKER at a docker CLI that has BuildKit built in")


@contextmanager
def _docker_errors() -> Iterator[None]:
    import docker.errors
    import requests.exceptions

    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.ConnectionError) as exc:
        if isinstance(exc, docker.errors.APIError):
            raise EnvbuildError(f"Docker engine error: {exc.explanation or exc}",
                                "the engine refused the request; `docker info` and the "
                                "engine's log say more") from None
        raise EnvironmentProblem(
            f"cannot reach the Docker engine ({_short(exc)})",
            "start it (sudo systemctl start docker, or `make engine`), or set DOCKER_HOST") \
            from None


def _short(exc: BaseException) -> str:
    text = str(exc)
    m = re.search(r"(Connection refused|No such file or directory|Permission denied)", text)
    return m.group(1) if m else text[:120]


def client() -> Any:
    import docker

    with _docker_errors():
        url = _ENDPOINT.get()
        c = docker.DockerClient(base_url=url, timeout=60) if url else docker.from_env(timeout=60)
        c.ping()
    return c


def find_images(labels: Mapping[str, str]) -> list[Any]:
    c = client()
    with _docker_errors():
        return list(c.images.list(filters={"label": [f"{k}={v}" for k, v in labels.items()]}))


def image_tags(image: Any) -> list[str]:
    return list(image.tags)


def image_size(ref: str) -> int:
    c = client()
    with _docker_errors():
        return int(c.images.get(ref).attrs["Size"])


def image_labels(ref: str) -> dict[str, str]:
    import docker.errors

    c = client()
    with _docker_errors():
        try:
            return dict(c.images.get(ref).labels or {})
        except docker.errors.ImageNotFound:
            raise EnvbuildError(f"image {shown(ref)} not found in the local Docker engine",
                                "build it first (envbuild build / envbuild make)") from None


def image_platform(ref: str) -> str | None:
    """The platform a local image is for (linux/arm64), as its config records it."""
    import docker.errors

    c = client()
    with _docker_errors():
        try:
            attrs = c.images.get(ref).attrs
        except docker.errors.ImageNotFound:
            return None
    arch = attrs.get("Architecture")
    return f"{attrs.get('Os') or 'linux'}/{arch}" if arch else None


def local_image(ref: str) -> dict[str, Any] | None:
    """{id, repo_digests} of a local image; None when the engine does not have it."""
    import docker.errors

    c = client()
    with _docker_errors():
        try:
            image = c.images.get(ref)
        except docker.errors.ImageNotFound:
            return None
        return {"id": image.id, "repo_digests": list(image.attrs.get("RepoDigests") or [])}


def probe_base(ref: str, script: str, timeout: float = 120) -> tuple[str, dict[str, str], str]:
    """(image id, environment, the script's output) of a base image: `sh -c script` in a
    labelled container that is always removed. A base the engine lacks is pulled for this and
    removed again afterwards, so the build resolves it from its registry as before."""
    import docker.errors

    c = client()
    pulled = False
    try:
        c.images.get(ref)
    except docker.errors.ImageNotFound:
        try:
            with _docker_errors():
                c.images.pull(ref)
                pulled = True
        except EnvbuildError as exc:
            if isinstance(exc, EnvironmentProblem):
                raise
            if registry_denied([exc.message]):
                raise login_refused(ref, "nothing was built") from None
            raise EnvbuildError(f"cannot read the base image {ref}: {exc.message}",
                                BASE_PULL_HINT) from None
    except docker.errors.APIError as exc:
        raise EnvbuildError(f"cannot read the base image {ref}: {exc.explanation or exc}",
                            BASE_PULL_HINT) from None
    try:
        with _docker_errors():
            result = _run_to_end(c, ref, ["-c", script],
                                 {"entrypoint": ["/bin/sh"], "labels": {LABEL_ROLE: "probe-base"},
                                  "network_disabled": True, "user": "0"}, timeout, stderr=False)
            image = c.images.get(ref)
    finally:
        if pulled:  # leave the engine as it was: the build resolves the base itself (a local
            with suppress(Exception):  # copy would pin it and hide a moved tag)
                c.images.remove(ref)
    env = {}
    for item in (image.attrs.get("Config") or {}).get("Env") or []:
        key, _, value = str(item).partition("=")
        env[key] = value
    if result.timed_out or result.exit_code not in (0, 1):
        raise EnvbuildError(f"could not read the base image {ref} (exit {result.exit_code})",
                            "the base needs /bin/sh; check `docker run --rm --entrypoint sh "
                            f"{ref} -c 'cat /etc/os-release'`")
    return str(image.id), env, result.output


def tag(image_id: str, ref: str) -> None:
    c = client()
    repo, t = refs.split_tag(ref)
    with _docker_errors():
        c.images.get(image_id).tag(repo, t)


def untag(ref: str) -> None:
    """Remove the tag ref (the image stays while another tag or a container holds it)."""
    c = client()
    with suppress(Exception):  # best effort: it may be gone already
        c.images.remove(ref, noprune=True)


def build_argv(builder: Builder, context: Path, iidfile: Path | None, labels: Mapping[str, str],
               secrets: Mapping[str, Path], progress: str, no_cache: bool = False,
               env_build_args: Sequence[str] = (), network: str | None = None,
               platform: str | None = None, cache_from: Sequence[str] = (),
               inline_cache: bool = False, target: str | None = None,
               output: str | None = None) -> list[str]:
    """The build command; pure so tests can assert on it. No -t: tags are set after success.
    `env_build_args`: names passed as `--build-arg NAME`, the value read by the client from its
    environment (run_build's extra_env): a proxy password never shows on a command line."""
    prefix = builder.build_prefix()
    if output is not None:  # files, not an image: buildx's --load would be a second output
        prefix = [a for a in prefix if a != "--load"]
    argv = [*prefix, "--progress", progress]
    if iidfile is not None:  # an image's id (a --output build makes files, no image)
        argv += ["--iidfile", str(iidfile)]
    for name in sorted(env_build_args):
        argv += ["--build-arg", name]
    if network is not None:  # "none": no RUN step has a network (air-gapped builds)
        argv += ["--network", network]
    if platform is not None:  # another platform than the engine's (emulated, or a remote one)
        argv += ["--platform", platform]
    if inline_cache:  # the image carries its build cache: another engine can --cache-from it
        argv += ["--build-arg", "BUILDKIT_INLINE_CACHE=1"]
    for ref in cache_from:  # images in a registry whose layers this build may reuse
        argv += ["--cache-from", ref]
    for k, v in sorted(labels.items()):
        argv += ["--label", f"{k}={v}"]
    for sid, path in sorted(secrets.items()):
        argv += ["--secret", f"id={sid},src={path}"]
    if no_cache:
        argv.append("--no-cache")
    if target is not None:  # one stage of the Dockerfile (ext-wheels: the compiled wheels)
        argv += ["--target", target]
    if output is not None:  # type=local,dest=DIR: the stage's files, not an image
        argv += ["--output", output]
    argv.append(str(context))
    return argv


def save_image(ref: str, path: Path, timeout: float = 1800) -> None:
    """`docker save` ref (its tag kept) into a docker archive at path."""
    builder = find_builder()
    r = proc.run([builder.docker, "save", "-o", str(path), ref], timeout=timeout, check=False,
                 env=cli_env())
    if r.returncode != 0:
        raise EnvironmentProblem(f"docker save {ref} failed: {r.stderr.strip()[:200]}",
                                 "check the free space where the archive goes and that the "
                                 "image exists (`docker image ls`)")


def load_image(path: Path, timeout: float = 1800) -> None:
    """`docker load` a docker archive (made by save_image)."""
    builder = find_builder()
    r = proc.run([builder.docker, "load", "-i", str(path)], timeout=timeout, check=False,
                 env=cli_env())
    if r.returncode != 0:
        raise EnvironmentProblem(f"docker load {path.name} failed: {r.stderr.strip()[:200]}",
                                 "is the bundle complete? (bundle.json lists its files)")


def image_id(ref: str) -> str | None:
    """The image id (sha256:...) of a local image, None if there is none."""
    with _docker_errors():
        import docker.errors

        try:
            return str(client().images.get(ref).id)
        except docker.errors.ImageNotFound:
            return None


def run_build(builder: Builder, argv: list[str], on_line: Callable[[str], None],
              timeout: float, extra_env: Mapping[str, str] | None = None) -> int:
    return proc.stream(argv, on_line, timeout=timeout, env={**builder.env(), **(extra_env or {})})


@record
class RunResult:
    exit_code: int
    output: str
    timed_out: bool
    truncated: bool = False  # the output went past the run's output_limit: only that much read


def gpu_runtime() -> bool:
    """Whether `--gpus all` can work: an nvidia runtime or CDI devices registered."""
    c = client()
    with _docker_errors():
        info = c.info()
    runtimes = info.get("Runtimes") or {}
    cdi = info.get("CDISpecDirs") or []
    return "nvidia" in runtimes or any(Path(d, "nvidia.yaml").exists() for d in cdi)


def runtime_facts() -> dict[str, str]:
    """The container runtime as validation sees it: engine version, runtimes, CDI devices."""
    c = client()
    with _docker_errors():
        info = c.info()
    cdi = sorted(str(p) for d in (info.get("CDISpecDirs") or []) for p in Path(d).glob("*")
                 if p.is_file()) if info.get("CDISpecDirs") else []
    return {"engine": f"docker {info.get('ServerVersion', '?')}",
            "runtimes": ",".join(sorted(info.get("Runtimes") or {})),
            "default_runtime": str(info.get("DefaultRuntime", "")),
            "cdi": ",".join(cdi)}


def builder_versions(reason: str) -> dict[str, str]:
    """Who built an image, for its provenance: the engine's version, the docker client and the
    BuildKit it used (a buildx builder's own version; else the engine's built-in BuildKit).
    `reason`: the build's BuildResult.builder ("cache": nothing was built now)."""
    engine = runtime_facts()["engine"]
    if reason == "cache":
        return {"engine": engine, "client": "none: the image with these exact inputs was built "
                "before (found by its labels)"}
    builder = find_builder()
    if builder.buildx:
        r = proc.run([builder.docker, "buildx", "inspect"], env=builder.env(), timeout=20,
                     check=False)
        found = re.search(r"^\s*BuildKit(?: version)?:\s*(\S+)", r.stdout, re.M)
        buildkit = found.group(1) if found else "the buildx builder's (version not reported)"
    else:
        buildkit = f"built into the engine ({engine})"
    return {"engine": engine, "client": f"{builder.docker} {builder.version}",
            "buildkit": buildkit}


def run_container(image: str, command: list[str], *, target: str, gpus: bool, timeout: float,
                  labels: Mapping[str, str], shm_size: str = "2g",
                  environment: Mapping[str, str] | None = None,
                  network_host: bool = False, platform: str | None = None,
                  read_only_mounts: Mapping[str, Path] | None = None,
                  network: bool = True, output_limit: int | None = None,
                  entrypoint: Sequence[str] | None = None) -> RunResult:
    """Run a labelled container to completion; it is always removed (timeout, Ctrl-C too).
    The target's registry entry says which devices it gets. `platform`: the image's, when it
    is not this host's (emulated); `read_only_mounts`: container path -> host path; `network`
    False: none at all; `output_limit`: read at most this many bytes of its output;
    `entrypoint`: replaces the image's ENTRYPOINT (`command` follows it), e.g. the program
    itself, so a base image's entrypoint script (nvidia/cuda's prints a banner) never runs."""
    import docker.types

    from envbuild.core import targets

    entry = targets.get(target)
    c = client()
    kwargs: dict[str, Any] = {"shm_size": shm_size, "labels": dict(labels)}
    if entrypoint is not None:
        kwargs["entrypoint"] = list(entrypoint)
    if environment:
        kwargs["environment"] = dict(environment)
    if network_host:  # multi-node rendezvous: the ranks reach each other on the hosts' addresses
        kwargs["network_mode"] = "host"
    elif not network:
        kwargs["network_disabled"] = True
    if platform is not None:
        kwargs["platform"] = platform
    if read_only_mounts:
        kwargs["mounts"] = [docker.types.Mount(t, str(src), type="bind", read_only=True)
                            for t, src in sorted(read_only_mounts.items())]
    if entry.gpu_request and gpus:
        kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1,
                                                                capabilities=[["gpu"]])]
    devices = [d for d in entry.devices if os.path.exists(d)]
    if devices:
        kwargs["devices"] = [f"{d}:{d}:rwm" for d in devices]
        if entry.group_add:
            kwargs["group_add"] = list(entry.group_add)
        if entry.security_opt:
            kwargs["security_opt"] = list(entry.security_opt)
    return _run_to_end(c, image, command, kwargs, timeout, stderr=False, limit=output_limit)


@record
class ContainerPlan:
    """What `envbuild run` starts: the image, the command and every setting of the container.
    `env` values never reach a printed command line (argv shows `-e NAME`)."""

    image: str
    command: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    shm_size: int | None = None  # --shm-size, in bytes (the SDK takes only bytes or "2g")
    ipc_host: bool = False  # --ipc=host
    ulimits: tuple[tuple[str, int, int], ...] = ()  # (name, soft, hard); -1: unlimited
    gpus: str = ""  # "all": --gpus all (the nvidia runtime); "cdi": --device nvidia.com/gpu=all
    devices: tuple[str, ...] = ()  # host device nodes (ROCm: /dev/kfd, /dev/dri)
    group_add: tuple[str, ...] = ()
    security_opt: tuple[str, ...] = ()
    mounts: tuple[tuple[str, str, bool], ...] = ()  # (host path, container path, read-only)
    env: Mapping[str, str] = field(default_factory=dict)

    def argv(self, docker: str = "docker") -> list[str]:
        """The `docker run` command line that starts the same container (pure)."""
        out = [docker, "run", "--rm"]
        for k, v in sorted(self.labels.items()):
            out += ["--label", f"{k}={v}"]
        for flag in run_flags(self):
            out += flag.split(" ", 1)
        for src, dst, ro in self.mounts:
            out += ["-v", f"{src}:{dst}" + (":ro" if ro else "")]
        for name in self.env:
            out += ["-e", name]
        return [*out, self.image, *self.command]


CDI_ALL_GPUS = "nvidia.com/gpu=all"


def run_flags(p: ContainerPlan) -> list[str]:
    """The container settings of a plan as `docker run` flags, one string each (--gpus all)."""
    out = []
    if p.ipc_host:
        out.append("--ipc=host")
    if p.shm_size is not None:
        out.append(f"--shm-size={docker_size(p.shm_size)}")
    for name, soft, hard in p.ulimits:
        out.append(f"--ulimit {name}={soft}" + (f":{hard}" if hard != soft else ""))
    if p.gpus == "all":
        out.append("--gpus all")
    elif p.gpus == "cdi":
        out.append(f"--device {CDI_ALL_GPUS}")
    out += [f"--device {d}" for d in p.devices]
    out += [f"--group-add {g}" for g in p.group_add]
    out += [f"--security-opt {s}" for s in p.security_opt]
    return out


def run_attached(plan: ContainerPlan, on_stdout: Callable[[bytes], None],
                 on_stderr: Callable[[bytes], None]) -> int:
    """Start the plan's container, stream its stdout and stderr as they come, and return its
    exit code. The container is always removed: the engine removes it when it exits (--rm, so
    even a SIGKILLed envbuild leaves none once the command ends), and this removes it on failure
    or Ctrl-C (any KeyboardInterrupt: SIGTERM too, see common/signals.py): by its id, and by its
    LABEL_RUN label when the interrupt came before the id was known. A command the container
    cannot start is exit 127 (not found) or 126, as `docker run` says, its reason on on_stderr.
    An engine that does not say the exit code is an EnvironmentProblem (exit 3)."""
    import threading

    import docker.errors
    import docker.types

    c = client()
    kwargs: dict[str, Any] = {"labels": dict(plan.labels), "environment": dict(plan.env),
                              "stdin_open": False, "tty": False, "auto_remove": True}
    if plan.shm_size is not None:
        kwargs["shm_size"] = int(plan.shm_size)  # bytes: docker-py refuses "2Gi" and "2GiB"
    if plan.ipc_host:
        kwargs["ipc_mode"] = "host"
    if plan.ulimits:
        kwargs["ulimits"] = [docker.types.Ulimit(name=n, soft=s, hard=h)
                             for n, s, h in plan.ulimits]
    if plan.gpus == "all":
        kwargs["device_requests"] = [docker.types.DeviceRequest(count=-1,
                                                                capabilities=[["gpu"]])]
    elif plan.gpus == "cdi":
        kwargs["device_requests"] = [docker.types.DeviceRequest(driver="cdi",
                                                                device_ids=[CDI_ALL_GPUS])]
    if plan.devices:
        kwargs["devices"] = [f"{d}:{d}:rwm" for d in plan.devices]
    if plan.group_add:
        kwargs["group_add"] = list(plan.group_add)
    if plan.security_opt:
        kwargs["security_opt"] = list(plan.security_opt)
    if plan.mounts:
        kwargs["mounts"] = [docker.types.Mount(dst, src, type="bind", read_only=ro)
                            for src, dst, ro in plan.mounts]
    container = None
    ended: dict[str, Any] = {}

    def wait_removed(cid: str) -> None:  # asked before the start, as `docker run --rm` does
        try:
            ended.update(c.api.wait(cid, condition="removed"))
        except Exception as exc:
            ended["error"] = str(exc)[:200]

    try:
        with _docker_errors():
            container = c.containers.create(plan.image, list(plan.command) or None, **kwargs)
            waiter = threading.Thread(target=wait_removed, args=(container.id,), daemon=True)
            waiter.start()
            stream = c.api.attach(container.id, stdout=True, stderr=True, stream=True, logs=True,
                                  demux=True)
            try:
                container.start()
            except docker.errors.APIError as exc:
                text = str(exc.explanation or exc)
                on_stderr((text + "\n").encode())
                return 127 if re.search(r"not found|no such file", text, re.I) else 126
            for out, err in stream:
                if out:
                    on_stdout(out)
                if err:
                    on_stderr(err)
            waiter.join(WAIT_AFTER_EXIT_S)
        return exit_status(dict(ended), plan.image)
    finally:
        if container is not None:
            with suppress(Exception):  # best effort: it is gone already when it exited
                container.remove(force=True)
        elif plan.labels.get(LABEL_RUN):  # interrupted between the create and its answer
            with suppress(Exception):
                remove_containers({LABEL_RUN: plan.labels[LABEL_RUN]}, settle=2.0)


WAIT_AFTER_EXIT_S = 60.0  # the engine's removal of an exited --rm container


def exit_status(answer: Mapping[str, Any], image: str) -> int:
    """The exit code in the engine's answer to a container wait; an EnvironmentProblem when it
    has none (an engine error, a wait cut short): never a made-up code."""
    code = answer.get("StatusCode")
    if isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255:
        return code
    err = answer.get("Error")
    error = answer.get("error") or (err.get("Message") if isinstance(err, dict) else err)
    why = f" ({shown(str(error))})" if error else ""
    raise EnvironmentProblem(f"the engine did not say how the container of {shown(image)} "
                             f"ended{why}",
                             "the command's exit code is unknown: `docker events` or the "
                             "engine's log says what happened to the container")


def _run_to_end(c: Any, image: str, command: list[str], kwargs: dict[str, Any], timeout: float,
                *, stderr: bool, limit: int | None = None) -> RunResult:
    """Start a detached container, wait for it (killed at the deadline), read its output; it is
    always removed (failure, timeout, Ctrl-C too)."""
    container = None
    try:
        with _docker_errors():
            container = c.containers.run(image, command, detach=True, **kwargs)
            deadline = time.monotonic() + timeout
            timed_out = False
            while True:
                container.reload()
                if container.status in ("exited", "dead"):
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    container.kill()
                    break
                time.sleep(0.2)
            code = int(container.attrs["State"].get("ExitCode", -1))
            if limit is None:
                return RunResult(code, container.logs(stdout=True, stderr=stderr)
                                 .decode(errors="replace"), timed_out)
            data, cut = _bounded_logs(container, stderr, limit)
        return RunResult(code, data.decode(errors="replace"), timed_out, cut)
    finally:
        if container is not None:
            with suppress(Exception):  # best effort: the container may already be gone
                container.remove(force=True)


def _bounded_logs(container: Any, stderr: bool, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of an exited container's output, streamed (never the whole of an
    output without end in memory); True when there was more."""
    got = bytearray()
    stream = container.logs(stdout=True, stderr=stderr, stream=True, follow=False)
    try:
        for chunk in stream:
            got += chunk
            if len(got) > limit:
                return bytes(got[:limit]), True
    finally:
        with suppress(Exception):
            stream.close()
    return bytes(got), False


def run_with_mounts(image: str, command: list[str], *, mounts: Mapping[str, tuple[Path, bool]],
                    labels: Mapping[str, str], user: str, timeout: float,
                    environment: Mapping[str, str] | None = None) -> RunResult:
    """Run a labelled container to completion with host paths bind-mounted (container path ->
    (host path, writable)), on the default network; output is stdout and stderr together. The
    container is always removed (failure, timeout, Ctrl-C too). Mounted files (a CA bundle, a
    netrc) are never part of an image; `environment` is visible to `docker inspect` while the
    container runs, so nothing secret goes there."""
    import docker.types

    c = client()
    binds = [docker.types.Mount(target, str(src), type="bind", read_only=not writable)
             for target, (src, writable) in sorted(mounts.items())]
    return _run_to_end(c, image, command, {"labels": dict(labels), "mounts": binds, "user": user,
                                           "environment": dict(environment or {})},
                       timeout, stderr=True)


def remove_containers(labels: Mapping[str, str], settle: float = 20.0) -> list[str]:
    """Force-remove every container carrying all these labels (a backstop after a cancelled job)
    and wait, up to `settle` seconds, until none is listed any more: an agent's own removal may
    still be in progress, or its `docker run` may land just after the cancel. Returns the ids
    removed here."""
    c = client()
    removed: list[str] = []
    deadline = time.monotonic() + settle
    while True:
        with _docker_errors():
            found = c.containers.list(all=True, filters={"label": [f"{k}={v}"
                                                                  for k, v in labels.items()]})
        if not found or time.monotonic() > deadline:
            return removed
        for container in found:
            with suppress(Exception):  # best effort: it may be going away on its own
                container.remove(force=True)
                removed.append(str(container.id)[:12])
        time.sleep(0.2)


def push(ref: str, attempts: int = 3, delay: float = 2.0) -> str:
    """Push ref; retry connection failures with backoff. Returns the pushed digest."""
    c = client()
    repo, t = refs.split_tag(ref)
    last = ""
    for attempt in range(1, attempts + 1):
        with _docker_errors():
            stream = c.images.push(repo, tag=t, stream=True, decode=True)
            digest = ""
            error = ""
            for chunk in stream:
                if "error" in chunk:
                    error = str(chunk["error"])
                aux = chunk.get("aux") or {}
                digest = aux.get("Digest", digest)
        if not error:
            return digest
        last = error
        if attempt < attempts and re.search(r"connection refused|timeout|no such host|EOF|"
                                            r"503|502", error, re.IGNORECASE):
            time.sleep(delay * attempt)
            continue
        break
    registry = ref.split("/")[0]
    if re.search(r"unauthorized|authentication required|denied|no basic auth", last,
                 re.IGNORECASE):
        raise EnvironmentProblem(
            f"the registry {registry} refused the login for the push of {ref}",
            f"log in with `docker login {registry}` (or a credential helper in "
            "~/.docker/config.json): envbuild uses the docker credential store and never asks "
            "for or prints a password; the local image is kept")
    raise EnvbuildError(f"push of {ref} failed after {attempt} attempt(s): {last[:200]}",
                        f"check that the registry {registry} is up and reachable; the local "
                        "image is kept", [], EXIT_CANNOT_RUN if "refused" in last else 1)


def pull(ref: str) -> bool:
    """Pull ref; False when the registry has no such image (or cannot be reached: the caller
    goes on without it)."""
    import docker.errors

    repo, t = refs.split_tag(ref)
    with _docker_errors():
        c = client()
        try:
            c.images.pull(repo, tag=t)
        except docker.errors.APIError:  # not there (404), or the registry said no
            return False
    return True


MAX_WHEELS_OUT = 200  # members of an ext-wheels image looked at


def copy_wheels_out(ref: str, dest: Path, limit: int = 4 << 30) -> int:
    """The *.whl files at the root of image ref (a FROM scratch stage of wheels) into dest,
    bounded in total size and member count, streamed; the number copied. The container is
    created, never started, and removed; the archive spools to disk past 64 MiB. A damaged or
    foreign archive is an EnvironmentProblem (exit 3), never a traceback."""
    import shutil
    import tarfile
    import tempfile

    with tempfile.SpooledTemporaryFile(max_size=64 << 20) as raw:
        with _docker_errors():
            c = client().containers.create(ref, command=["/none"])
            try:
                stream, _ = c.get_archive("/")
                for chunk in stream:
                    raw.write(chunk)
                    if raw.tell() > limit:
                        raise EnvironmentProblem(f"{ref} holds over {limit >> 30} GiB of files",
                                                 "it is not an ext-wheels image of envbuild's")
            finally:
                c.remove(force=True)
        raw.seek(0)
        n = 0
        try:
            with tarfile.open(fileobj=raw) as tar:
                for i, member in enumerate(tar):
                    if i >= MAX_WHEELS_OUT:
                        raise EnvironmentProblem(f"{ref} holds over {MAX_WHEELS_OUT} files",
                                                 "it is not an ext-wheels image of envbuild's")
                    parts = [p for p in member.name.split("/") if p not in ("", ".")]
                    # the wheels sit at the image's root ("x.whl", "./x.whl" or "/x.whl" in the
                    # archive): nothing deeper, no link, no other file
                    if member.isfile() and len(parts) == 1 and parts[0].endswith(".whl"):
                        f = tar.extractfile(member)
                        if f is not None:
                            with f, (dest / parts[0]).open("wb") as out:
                                shutil.copyfileobj(f, out)
                            n += 1
        except (tarfile.TarError, EOFError) as exc:
            raise EnvironmentProblem(f"{ref} is not a readable image of wheels ({exc})",
                                     "push it again from the machine that compiled it") from None
    return n
