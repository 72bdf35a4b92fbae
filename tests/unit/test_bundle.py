"""Pure parts of air-gapped bundles: the Dockerfile cut, the offline pip installs, the
collection plan for --pip packages, the hashed requirements, the checks of a bundle directory
(the real collection and offline build are tests/integration/test_corp_bundle.py)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import shlex
import tarfile
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from envbuild.common.errors import EnvbuildError, UsageError
from envbuild.core.request import Request
from envbuild.features.bundle import (
    BUNDLE_SCHEMA,
    COLLECT_IN,
    COLLECT_OUT,
    OFFLINE_PIP_ARGS,
    base_digest,
    collect_failure,
    collect_hint,
    collect_plan,
    containerd_name,
    copy_wheels,
    hashed_requirements,
    merge_wheels,
    offline_dockerfile,
    offline_options,
    proxy_env_file,
    read_bundle,
    split_dockerfile,
    system_files,
    to_oci_archive,
    torch_plan,
    torch_source_text,
    wheel_pin,
    wheels_in,
    with_wheelhouse,
    write_meta,
)
from envbuild.matrix import Matrix
from envbuild.render.context import render
from envbuild.render.pipeline import ContextInputs, Prepared, prepare
from tests.support import GOLDEN
from tests.support.oci import _sha, docker_archive, layer_tar, read_oci_layout

# bundle takes one-stage Dockerfiles; another platform's (a torch stage on the build machine) it
# refuses (test_bundle_refuses_another_platform)
DOCKERFILES = sorted(p.parent.name for p in GOLDEN.glob("*/Dockerfile")
                     if "AS torch-stack" not in p.read_text()
                     and "AS ext-builder" not in p.read_text())  # refused too (test below)


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_rendered_dockerfile_splits_after_the_os_steps(name: str) -> None:
    text = (GOLDEN / name / "Dockerfile").read_text()
    system, rest = split_dockerfile(text)
    assert system + rest == text
    assert "FROM " in system and "FROM " not in rest
    assert ("apt-get" in system or "dnf" in system) and "apt-get" not in rest
    assert rest.startswith("COPY ") and "pip install" in rest
    assert offline_dockerfile(rest, "envbuild-bundle/system:x").count("\nFROM ") == 1


def test_no_cut_point_refused() -> None:
    with pytest.raises(UsageError):
        split_dockerfile("FROM x\nRUN true\n")


def test_hashed_requirements() -> None:
    text = hashed_requirements({"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": "a" * 64,
                                "typing_extensions-4.16.0-py3-none-any.whl": "b" * 64,
                                "Jinja2-3.1.6-py3-none-any.whl": "c" * 64})
    lines = text.splitlines()[1:]
    assert lines == [f"jinja2==3.1.6 --hash=sha256:{'c' * 64}",
                     f"torch==2.13.0+cpu --hash=sha256:{'a' * 64}",
                     f"typing-extensions==4.16.0 --hash=sha256:{'b' * 64}"]


@pytest.mark.parametrize("bad", ["torch.tar.gz", "x.whl", "torch-2.13.0.whl",
                                 "a b-1-py3-none-any.whl"])
def test_non_wheels_refused(bad: str) -> None:
    with pytest.raises(UsageError):
        hashed_requirements({bad: "0" * 64})


def _bundle(tmp_path: Path) -> Path:
    root = tmp_path / "b"
    (root / "context").mkdir(parents=True)
    (root / "context" / "requirements.txt").write_text("x==1\n")
    (root / "system.tar").write_bytes(b"tar")
    write_meta(root, {"system_ref": "r", "system_id": "sha256:1"})
    return root


def test_round_trip(tmp_path: Path) -> None:
    b = read_bundle(_bundle(tmp_path))
    assert b.system_ref == "r" and b.meta["schema"] == BUNDLE_SCHEMA


@pytest.mark.parametrize("damage", ["change", "remove", "traversal", "schema", "garbage"])
def test_damaged_bundles_refused(tmp_path: Path, damage: str) -> None:
    root = _bundle(tmp_path)
    meta = json.loads((root / "bundle.json").read_text())
    if damage == "change":
        (root / "system.tar").write_bytes(b"tar2")
    elif damage == "remove":
        (root / "context" / "requirements.txt").unlink()
    elif damage == "traversal":
        meta["files"]["../outside"] = "0" * 64
        (root / "bundle.json").write_text(json.dumps(meta))
    elif damage == "schema":
        meta["schema"] = 99
        (root / "bundle.json").write_text(json.dumps(meta))
    else:
        (root / "bundle.json").write_text("{not json")
    with pytest.raises(UsageError) as exc:
        read_bundle(root)
    assert exc.value.exit_code == 2


# --- offline pip installs and the collection plan --------------------------------------------

SYSTEM_CA = Path("/etc/ssl/certs/ca-certificates.crt")
_PIP_LINE = re.compile(r"/bin/pip install (.*)$", re.MULTILINE)
_INDEX_OPTS = ("--index-url", "--extra-index-url", "--trusted-host", "-i ")


@pytest.mark.parametrize("name", DOCKERFILES)
def test_every_pip_install_of_the_offline_dockerfile_is_offline_and_hash_checked(name: str
                                                                                  ) -> None:
    text = (GOLDEN / name / "Dockerfile").read_text()
    _, rest = split_dockerfile(text)
    offline = offline_dockerfile(rest, "envbuild-bundle/system:x")
    before, after = _PIP_LINE.findall(rest), _PIP_LINE.findall(offline)
    assert len(after) == len(before) >= 1
    for line in after:
        assert line.startswith(shlex.join(OFFLINE_PIP_ARGS) + " -r /opt/envbuild/"), line
        assert not any(opt in line for opt in _INDEX_OPTS), line
    # nothing but the pip options changed
    assert _PIP_LINE.sub("", offline.split("\nFROM envbuild-bundle/system:x\n", 1)[1]) == \
        _PIP_LINE.sub("", rest)


def test_no_pip_install_refused() -> None:
    with pytest.raises(UsageError):
        offline_dockerfile("COPY requirements.txt /x\nRUN true\n", "r")


def _prepared(matrix: Matrix, tmp_path: Path, **inputs: object) -> Prepared:
    wh = tmp_path / "wh"
    wh.mkdir(exist_ok=True)
    (wh / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"w")
    req = Request(target="cpu", torch="2.13.0", python="3.11", os="debian12",
                  components=("torch",))
    ci = ContextInputs(wheelhouse=wh, **inputs)  # type: ignore[arg-type]
    return prepare(req, ci, matrix)


def _dockerfile(p: Prepared) -> str:
    return str(p.files["Dockerfile"].content)


def test_collect_plan_takes_the_build_user_layer_options(matrix: Matrix, tmp_path: Path) -> None:
    p = _prepared(matrix, tmp_path, pip=("envbuild-probe-a", "numpy<2"),
                  pip_index_url="http://devpi.corp:3141/root/pypi/+simple/",
                  pip_extra_index_urls=("https://u:tok@extra.corp/simple",))
    plan = collect_plan(_dockerfile(p))
    assert plan is not None and plan.interpreter == "python3"
    assert list(plan.pip_args) == [
        "--find-links", "/run/envbuild/wheelhouse",
        "--index-url", "http://devpi.corp:3141/root/pypi/+simple/",
        "--trusted-host", "devpi.corp:3141",
        "--extra-index-url", "https://extra.corp/simple"]  # the login goes in a netrc file
    cmd = plan.command()
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[3] == "python3"
    assert cmd[4] == "wheel" and cmd[cmd.index("--wheel-dir") + 1] == COLLECT_OUT
    assert cmd[-4:] == ["-r", f"{COLLECT_IN}/user-requirements.txt",
                        "-c", f"{COLLECT_IN}/constraints.txt"]
    assert "netrc" in p.secrets.contents and "tok" not in " ".join(cmd)


def test_no_pip_packages_no_collection(matrix: Matrix, tmp_path: Path) -> None:
    assert collect_plan(_dockerfile(_prepared(matrix, tmp_path))) is None
    for name in DOCKERFILES:
        text = (GOLDEN / name / "Dockerfile").read_text()
        has_user = (GOLDEN / name / "user-requirements.txt").read_text().count("\n") > 1
        assert (collect_plan(text) is not None) == has_user, name


@pytest.mark.parametrize("index", ["https://pypi.example.com/simple",
                                   "http://10.0.0.1:8080/simple/",
                                   "https://nexus.example.com/repository/py%20pi/simple"])
def test_collect_plan_round_trips_the_rendered_quoting(matrix: Matrix, tmp_path: Path,
                                                       index: str) -> None:
    p = _prepared(matrix, tmp_path, pip=("x",), pip_index_url=index)
    plan = collect_plan(_dockerfile(p))
    assert plan is not None and plan.pip_args[plan.pip_args.index("--index-url") + 1] == index


def test_the_system_context_does_not_change_with_pip(matrix: Matrix, tmp_path: Path) -> None:
    def system(**inputs: object) -> dict[str, str]:
        p = _prepared(matrix, tmp_path, apt=("curl",), **inputs)
        part, _ = split_dockerfile(_dockerfile(p))
        return {n: str(f.content) for n, f in system_files(dict(p.files), part).items()}

    plain = system()
    assert set(plain) == {"spec.json", ".dockerignore", "apt-packages.txt"}
    assert "curl" in plain["apt-packages.txt"]
    assert system(pip=("envbuild-probe-a",), pip_index_url="http://10.0.0.1/simple") == plain


def test_the_offline_context_asks_for_no_secret(matrix: Matrix, tmp_path: Path) -> None:
    """A bundle made with --ca-cert and an index login builds offline without them (before, the
    offline Dockerfile still mounted the `ca` secret and `make --from-bundle` refused it)."""
    p = _prepared(matrix, tmp_path, pip=("x",), ca_cert=SYSTEM_CA,
                  pip_index_url="https://u:tok@pypi.corp/simple")
    assert "type=secret" in _dockerfile(p)
    offline = render(p.spec, offline_options(p.options), matrix)
    text = str(offline["Dockerfile"].content)
    _, rest = split_dockerfile(text)
    assert "type=secret" not in text and "PIP_CERT" not in text and "tok" not in text
    assert "pypi.corp" not in offline_dockerfile(rest, "s")


# --- the torch stack collected from the torch index (no --wheelhouse) ---------------------------

_TORCH_INDEX = {"cpu-debian12": "https://download.pytorch.org/whl/cpu",
                "cuda-base-ubuntu24.04": "https://download.pytorch.org/whl/cu128",
                "cuda-devel-ubuntu24.04": "https://download.pytorch.org/whl/cu130",
                "rocm-ubuntu22.04": "https://download.pytorch.org/whl/rocm6.2",
                "cuda-pypi-mirror": "https://nexus.example.com/repository/pypi/simple"}


def _torch_layer_args(dockerfile: str) -> list[str]:
    """The torch layer's pip options, read with a pattern of the test's own."""
    found = [ln for ln in dockerfile.splitlines()
             if ln.endswith(" -r /opt/envbuild/requirements.txt") and "/bin/pip install " in ln]
    assert len(found) == 1, found
    return shlex.split(found[0].split("/bin/pip install ", 1)[1]
                       .removesuffix(" -r /opt/envbuild/requirements.txt"))


@pytest.mark.parametrize("name", DOCKERFILES)
def test_the_torch_download_is_the_rendered_torch_layer(name: str) -> None:
    """For every golden context (cpu, cuda, rocm; PyTorch index or a PyPI mirror; OS or
    standalone Python): pip download, wheels only, of the rendered requirements.txt with the
    torch layer's own index options, by the venv's interpreter."""
    text = (GOLDEN / name / "Dockerfile").read_text()
    plan = torch_plan(text)
    assert plan.layer == "torch" and plan.inputs == ("requirements.txt",)
    assert list(plan.pip_args) == _torch_layer_args(text)
    assert f"{plan.interpreter} -m venv /opt/venv" in text
    if name in _TORCH_INDEX:
        assert plan.pip_args[:2] == ("--index-url", _TORCH_INDEX[name])
    cmd = plan.command()
    assert cmd[:2] == ["/bin/sh", "-c"] and cmd[3] == plan.interpreter
    assert cmd[4:7] == ["download", "--only-binary=:all:", "--no-cache-dir"]
    assert cmd[cmd.index("--dest") + 1] == COLLECT_OUT
    assert cmd[-2:] == ["-r", f"{COLLECT_IN}/requirements.txt"] and "-c" not in cmd[3:]
    assert cmd[cmd.index(COLLECT_OUT) + 1:-2] == list(plan.pip_args)


def test_the_torch_pins_of_a_pypi_like_index_carry_no_local_tag() -> None:
    pins = [x for x in (GOLDEN / "cuda-pypi-mirror" / "requirements.txt").read_text()
            .splitlines() if x and not x.startswith("#")]
    assert pins == ["torch==2.13.0", "torchvision==0.28.0", "torchaudio==2.11.0"]
    pinned = [x for x in (GOLDEN / "cuda-devel-ubuntu24.04" / "requirements.txt").read_text()
              .splitlines() if x and not x.startswith("#")]
    assert all("+cu130" in x for x in pinned)


@pytest.mark.parametrize(("url", "kind", "pin"), [
    ("http://172.17.0.1:8080/simple", None, "torch==2.13.0+cpu"),  # --target cpu: refused below
    ("http://172.17.0.1:8080/simple", "pytorch", "torch==2.13.0+cpu"),
    ("http://172.17.0.1:8080/whl/cpu", None, "torch==2.13.0+cpu"),
    ("https://u:tok@mirror.corp/whl/cpu/", None, "torch==2.13.0+cpu"),
])
def test_torch_plan_of_a_prepared_context(matrix: Matrix, url: str, kind: str | None,
                                          pin: str) -> None:
    """Rendered without a wheelhouse as `bundle` does: the plan takes the --torch-index-url the
    build would use (a login goes to the netrc, never into the command), the pins as rendered."""
    from envbuild.common.errors import ConflictError

    req = Request(target="cpu", torch="2.13.0", python="3.11", os="debian12",
                  components=("torch",))
    ci = ContextInputs(torch_index_url=url, torch_index_kind=kind)
    if url.endswith("/simple") and kind is None:  # PyPI has no +cpu build of 2.13.0
        with pytest.raises(ConflictError):
            prepare(req, ci, matrix)
        return
    p = prepare(req, ci, matrix)
    plan = torch_plan(_dockerfile(p))
    assert plan.pip_args[1] == url.replace("u:tok@", "") and "tok" not in " ".join(
        plan.command())
    assert pin in str(p.files["requirements.txt"].content).splitlines()


def test_pypi_like_pins_for_the_pypi_default_variant(matrix: Matrix) -> None:
    req = Request(target="cuda", cuda="13.0", torch="2.13.0", python="3.11", os="ubuntu24.04",
                  components=("torch",))
    p = prepare(req, ContextInputs(torch_index_url="http://172.17.0.1:8080/simple"), matrix)
    plan = torch_plan(_dockerfile(p))
    assert plan.pip_args == ("--index-url", "http://172.17.0.1:8080/simple",
                             "--trusted-host", "172.17.0.1:8080")
    pins = [x for x in str(p.files["requirements.txt"].content).splitlines()
            if x and not x.startswith("#")]
    assert pins == ["torch==2.13.0"]


def test_the_summary_says_where_the_torch_wheels_came_from() -> None:
    assert torch_source_text({"from": "wheelhouse", "wheelhouse": "/wh"}) == "from --wheelhouse /wh"
    assert torch_source_text({"from": "index", "index_url": "http://gw:1/simple",
                              "index_kind": "pytorch"}) == \
        "downloaded from http://gw:1/simple (pytorch index)"


def test_a_wheelhouse_render_has_no_torch_download(matrix: Matrix, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="wheelhouse"):
        torch_plan(_dockerfile(_prepared(matrix, tmp_path)))
    with pytest.raises(UsageError):
        torch_plan("FROM x\nRUN true\n")


def test_collected_torch_renders_as_a_wheelhouse_build(matrix: Matrix, tmp_path: Path) -> None:
    """What bundle renders after collecting torch is exactly the --wheelhouse render (so the
    offline context and the user layer's --find-links are as today), and the system part (so the
    system image and its tag) is the same whichever way the torch wheels came."""
    req = Request(target="cpu", torch="2.13.0", python="3.11", os="debian12",
                  components=("torch",))
    plain = prepare(req, ContextInputs(pip=("x",), apt=("curl",)), matrix)
    collected = render(plain.spec, with_wheelhouse(plain.options), matrix)
    given = _prepared(matrix, tmp_path, pip=("x",), apt=("curl",))
    assert {n: f.content for n, f in collected.items()} == \
        {n: f.content for n, f in given.files.items()}
    assert split_dockerfile(_dockerfile(plain))[0] == \
        split_dockerfile(str(collected["Dockerfile"].content))[0]
    assert torch_plan(_dockerfile(plain)).pip_args[1] == "https://download.pytorch.org/whl/cpu"


# --- the wheels and their hashes ---------------------------------------------------------------

_STRICT_LINE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*==[A-Za-z0-9.!+]+"
                          r"(?: --hash=sha256:[0-9a-f]{64})+")


def _lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if not x.startswith("#")]


def test_wheels_of_one_release_share_a_line() -> None:
    text = hashed_requirements({
        "markupsafe-3.0.4-cp311-cp311-manylinux_2_28_x86_64.whl": "1" * 64,
        "MarkupSafe-3.0.4-cp311-cp311-musllinux_1_2_x86_64.whl": "2" * 64,
        "envbuild_probe_b-1.0-1-py3-none-any.whl": "3" * 64})  # a build tag
    assert _lines(text) == [f"envbuild-probe-b==1.0 --hash=sha256:{'3' * 64}",
                            f"markupsafe==3.0.4 --hash=sha256:{'1' * 64} --hash=sha256:{'2' * 64}"]


def test_two_versions_of_a_project_refused() -> None:
    with pytest.raises(UsageError) as exc:
        hashed_requirements({"a-1.0-py3-none-any.whl": "1" * 64,
                             "a-2.0-py3-none-any.whl": "2" * 64})
    assert exc.value.exit_code == 2 and "a 1.0 and 2.0" in exc.value.message


@pytest.mark.parametrize("digest", ["", "0" * 63, "G" * 64, "0" * 64 + "\nx==1", "A" * 64])
def test_bad_digests_refused(digest: str) -> None:
    with pytest.raises(UsageError):
        hashed_requirements({"a-1.0-py3-none-any.whl": digest})


HOSTILE_WHEELS = [
    "a-1.0\nevil==6-py3-none-any.whl", "a-1.0 --index-url=http://x-py3-none-any.whl",
    "a-1.0;os_name=='nt'-py3-none-any.whl", "a-1.0@http-py3-none-any.whl",
    "../a-1.0-py3-none-any.whl", "a/b-1.0-py3-none-any.whl", "a-1.0-py3-none-any.whl\n",
    "\u0430-1.0-py3-none-any.whl", "a-\u0661.0-py3-none-any.whl", "-1.0-py3-none-any.whl",
    "a-1.0-py3-none-any.whl.tar.gz", "a-notaversion-py3-none-any.whl", "a-1.0-py3-none.whl",
    "a-1.0--py3-none-any.whl", "a" * 300 + "-1.0-py3-none-any.whl", "a-1.0-py3-none-any.WHL",
    "a-1.0-x-py3-none-any.whl", "a-1.0-py3-none-any\x00.whl",
]


@pytest.mark.parametrize("bad", HOSTILE_WHEELS)
def test_hostile_wheel_names_refused(bad: str) -> None:
    with pytest.raises(UsageError) as exc:
        hashed_requirements({bad: "0" * 64})
    assert exc.value.exit_code == 2
    with pytest.raises(UsageError):
        merge_wheels({}, {bad: "0" * 64})


# Any text, and text from the characters that matter in a file name or a requirements line.
_PARTS = st.one_of(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12),
                   st.text("aZ09._-+!@;=# \n\t\\/", min_size=1, max_size=10))


@settings(max_examples=300, deadline=None)
@example(name="Foo_Bar.baz", version="1.0.post1+cpu", tags="py3-none-any")  # the accepting path
@example(name="a", version="1!2.0rc1", tags="cp311-cp311-manylinux_2_28_x86_64")
@example(name="_", version="0", tags="py3-none-any")  # canonicalizes to "-": no project
@given(name=_PARTS, version=_PARTS, tags=st.sampled_from(["py3-none-any", "cp311-cp311-"
                                                            "manylinux_2_28_x86_64", "x-y-z"]))
def test_any_wheel_name_gives_one_strict_line_or_exit_2(name: str, version: str, tags: str
                                                         ) -> None:
    filename = f"{name}-{version}-{tags}.whl"
    try:
        text = hashed_requirements({filename: "0" * 64})
    except UsageError as exc:
        assert exc.exit_code == 2 and "\n" not in exc.message
        return
    (line,) = _lines(text)
    assert _STRICT_LINE.fullmatch(line), line

    assert wheel_pin(filename)[0] == line.split("==")[0]


def test_merge_dedupes_by_name_and_hash() -> None:
    torch = {"typing_extensions-4.16.0-py3-none-any.whl": "1" * 64,
             "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl": "2" * 64}
    user = {"typing_extensions-4.16.0-py3-none-any.whl": "1" * 64,
            "envbuild_probe_a-1.0-py3-none-any.whl": "3" * 64}
    assert merge_wheels(torch, user) == {"envbuild_probe_a-1.0-py3-none-any.whl": "3" * 64}
    assert merge_wheels(torch, {}) == {}


def test_same_name_other_hash_is_a_conflict() -> None:
    with pytest.raises(EnvbuildError) as exc:
        merge_wheels({"a-1.0-py3-none-any.whl": "1" * 64}, {"a-1.0-py3-none-any.whl": "2" * 64})
    assert exc.value.exit_code == 1 and "a-1.0-py3-none-any.whl" in exc.value.message
    assert exc.value.hint


def test_wheels_in(tmp_path: Path) -> None:
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"a")
    (tmp_path / "README").write_text("x")
    assert list(wheels_in(tmp_path, "--wheelhouse", strict=False)) == ["a-1.0-py3-none-any.whl"]
    with pytest.raises(EnvbuildError) as exc:
        wheels_in(tmp_path, "pip wheel", strict=True)
    assert exc.value.exit_code == 1 and "README" in exc.value.message


def test_wheels_in_strict_refuses_links(tmp_path: Path) -> None:
    (tmp_path / "x").write_bytes(b"a")
    (tmp_path / "a-1.0-py3-none-any.whl").symlink_to(tmp_path / "x")
    (tmp_path / "x").unlink()
    with pytest.raises(EnvbuildError):
        wheels_in(tmp_path, "pip wheel", strict=True)


def test_copy_wheels_checks_every_copy(tmp_path: Path) -> None:
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "a-1.0-py3-none-any.whl").write_bytes(b"a")
    digests = wheels_in(src, "x", strict=True)
    copy_wheels(src, dst, digests)
    assert wheels_in(dst, "x", strict=True) == digests
    with pytest.raises(EnvbuildError):
        copy_wheels(src, tmp_path / "dst2", {"a-1.0-py3-none-any.whl": "0" * 64})


def test_proxy_env_names_checked() -> None:
    with pytest.raises(UsageError):
        proxy_env_file({"x; rm -rf /": "http://p:1"})


@pytest.mark.parametrize(("output", "reason"), [
    ("Looking in indexes: http://x/simple\nERROR: Could not find a version that satisfies the "
     "requirement nope (from versions: none)\nERROR: No matching distribution found for nope\n",
     "No matching distribution found for nope"),
    ("  error: subprocess-exited-with-error\nERROR: Failed building wheel for b\nERROR: Could "
     "not build wheels for b, which is required to install pyproject.toml-based projects\n",
     "Could not build wheels for b, which is required to install pyproject.toml-based projects"),
    ("/bin/sh: 1: python3: not found\n", "/bin/sh: 1: python3: not found"),
    ("", "pip gave no output"),
])
def test_collect_failure_names_the_reason(output: str, reason: str) -> None:
    assert collect_failure(output) == reason


@pytest.mark.parametrize(("output", "word"), [
    ("WARNING: Retrying ... 'ProxyError('Cannot connect to proxy.', ...)", "--proxy"),
    ("SSLError(SSLCertVerificationError(1, '[SSL: CERTIFICATE_VERIFY_FAILED]", "--ca-cert"),
    ("NewConnectionError(...: [Errno -2] Name or service not known')", "docker's default network"),
    ("ERROR: Failed building wheel for b\nERROR: Could not build wheels for b", "sdist"),
    ("ERROR: No matching distribution found for nope", "--pip-index-url"),
])
def test_collect_hint_names_the_likely_fix(output: str, word: str) -> None:
    assert word in collect_hint(output)


# --- the collection container's inputs (the engine replaced by a recorder) ----------------------

def _run_collect(matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                 result: tuple[int, str, bool], wrote: list[str]) -> tuple[dict[str, object],
                                                                            dict[str, str]]:
    from envbuild.engine import docker
    from envbuild.features import offline

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    p = _prepared(matrix, tmp_path, pip=("envbuild-probe-a",), ca_cert=SYSTEM_CA,
                  pip_index_url="https://user:t0ken-s3cret@pypi.corp/simple")
    plan = collect_plan(_dockerfile(p))
    assert plan is not None
    seen: dict[str, object] = {}
    home: dict[str, str] = {}

    def fake(image: str, command: list[str], **kw: object) -> docker.RunResult:
        seen.update(kw, image=image, command=command)
        mounts = kw["mounts"]
        assert isinstance(mounts, dict)
        src, _ = mounts["/run/envbuild/home"]
        home.update({f.name: f"{f.stat().st_mode & 0o777:o} {f.read_text()}"
                     for f in Path(src).iterdir()})
        out, _ = mounts[COLLECT_OUT]
        for name in wrote:
            (Path(out) / name).write_bytes(b"w")
        return docker.RunResult(*result)

    monkeypatch.setattr(docker, "run_with_mounts", fake)
    proxies = {"https_proxy": "http://pu:pp@proxy:3128", "HTTPS_PROXY": "http://pu:pp@proxy:3128"}
    work = tmp_path / "work"
    work.mkdir()
    wheels = offline.run_collect(plan, "envbuild-bundle/system:x", p, proxies,
                                tmp_path / "wh", work)
    seen["wheels"] = wheels
    return seen, home


def test_collection_gets_ca_login_and_proxy_as_mounted_files_only(
        matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen, home = _run_collect(matrix, tmp_path, monkeypatch, (0, "ok", False),
                              ["envbuild_probe_a-1.0-py3-none-any.whl"])
    mounts = seen["mounts"]
    assert isinstance(mounts, dict)
    assert mounts["/run/secrets/ca.pem"] == (SYSTEM_CA.resolve(), False)
    assert all(writable is False for target, (_, writable) in mounts.items()
               if target != COLLECT_OUT)
    env = seen["environment"]
    assert isinstance(env, dict) and env["PIP_CERT"] == "/run/secrets/ca.pem"
    shown = json.dumps({k: v for k, v in seen.items() if k != "mounts"})
    assert "t0ken-s3cret" not in shown and "pp@" not in shown  # not in argv, env or labels
    assert home[".netrc"].startswith("600 ") and "t0ken-s3cret" in home[".netrc"]
    assert home["proxy.env"].startswith("600 ") and "http://pu:pp@proxy:3128" in home["proxy.env"]
    labels = seen["labels"]
    assert isinstance(labels, dict) and labels["io.envbuild.role"] == "bundle-collect"
    assert seen["wheels"] == {"envbuild_probe_a-1.0-py3-none-any.whl":
                              hashlib.sha256(b"w").hexdigest()}


@pytest.mark.parametrize(("result", "message"), [
    ((1, "Looking in indexes: https://pypi.corp/simple\nERROR: No matching distribution found "
         "for envbuild-probe-a\n", False),
     "collecting the --pip packages as wheels failed: No matching distribution found for "
     "envbuild-probe-a"),
    ((137, "Building wheel\n", True), "collecting the --pip packages as wheels took over"),
])
def test_collection_failures_are_one_line_exit_1(
        matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        result: tuple[int, str, bool], message: str) -> None:
    with pytest.raises(EnvbuildError) as exc:
        _run_collect(matrix, tmp_path, monkeypatch, result, [])
    err = exc.value
    assert err.exit_code == 1 and err.message.startswith(message) and "\n" not in err.message
    assert err.hint and err.alternatives[-1].startswith("full log: ")
    log = Path(err.alternatives[-1].removeprefix("full log: "))
    assert log.is_file() and result[1].splitlines()[-1] in log.read_text()


@pytest.mark.parametrize(("written", "code"), [(["a-1.0\nevil==1-py3-none-any.whl"], 2),
                                             (["a-1.0-py3-none-any.whl", "notes.txt"], 1)])
def test_collection_output_that_is_not_wheels_refused(
        matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written: list[str],
        code: int) -> None:
    with pytest.raises(EnvbuildError) as exc:
        _run_collect(matrix, tmp_path, monkeypatch, (0, "", False), written)
    assert exc.value.exit_code == code


def _run_torch_collect(matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                       result: tuple[int, str, bool], wrote: list[str],
                       **inputs: object) -> dict[str, object]:
    from envbuild.engine import docker
    from envbuild.features import offline

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    req = Request(target="cpu", torch="2.13.0", python="3.11", os="debian12")
    p = prepare(req, ContextInputs(**inputs), matrix)  # type: ignore[arg-type]
    plan = torch_plan(_dockerfile(p))
    seen: dict[str, object] = {}

    def fake(image: str, command: list[str], **kw: object) -> docker.RunResult:
        seen.update(kw, image=image, command=command)
        mounts = kw["mounts"]
        assert isinstance(mounts, dict)
        src, _ = mounts[COLLECT_IN]
        seen["inputs"] = {f.name: f.read_text() for f in Path(src).iterdir()}
        out, _ = mounts[COLLECT_OUT]
        for name in wrote:
            (Path(out) / name).write_bytes(name.encode())
        return docker.RunResult(*result)

    monkeypatch.setattr(docker, "run_with_mounts", fake)
    seen["wheels"] = offline.run_collect(plan, "envbuild-bundle/system:x", p, {}, None,
                                        tmp_path / "work" / "torch")
    seen["requirements"] = str(p.files["requirements.txt"].content)
    return seen


TORCH_WHEELS = ["torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                "torchvision-0.28.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
                "filelock-4.2.11-py3-none-any.whl"]


def test_the_torch_download_gets_the_rendered_pins_and_no_wheelhouse(
        matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _run_torch_collect(matrix, tmp_path, monkeypatch, (0, "Saved ...", False),
                              TORCH_WHEELS, ca_cert=SYSTEM_CA,
                              torch_index_url="https://u:t0ken@mirror.corp/whl/cpu")
    assert seen["inputs"] == {"requirements.txt": seen["requirements"]}
    assert "torch==2.13.0+cpu" in str(seen["requirements"]).splitlines()
    mounts = seen["mounts"]
    assert isinstance(mounts, dict) and "/run/envbuild/wheelhouse" not in mounts
    assert mounts["/run/secrets/ca.pem"] == (SYSTEM_CA.resolve(), False)
    command = seen["command"]
    assert isinstance(command, list) and "download" in command
    assert "https://mirror.corp/whl/cpu" in command and "t0ken" not in json.dumps(command)
    labels = seen["labels"]
    assert isinstance(labels, dict) and labels["io.envbuild.role"] == "bundle-collect"
    assert seen["wheels"] == {w: hashlib.sha256(w.encode()).hexdigest() for w in TORCH_WHEELS}
    reqs = hashed_requirements(seen["wheels"])  # type: ignore[arg-type]
    assert "torch==2.13.0+cpu --hash=sha256:" in reqs and "filelock==4.2.11 --hash" in reqs


@pytest.mark.parametrize(("output", "message", "hint"), [
    ("Looking in indexes: http://172.17.0.1:9/simple\nWARNING: Retrying (Retry(total=4...)) "
     "after connection broken by 'NewConnectionError(...: [Errno 111] Connection refused')'\n"
     "ERROR: Could not find a version that satisfies the requirement torch==2.13.0+cpu (from "
     "versions: none)\nERROR: No matching distribution found for torch==2.13.0+cpu\n",
     "collecting the torch stack as wheels failed: No matching distribution found for "
     "torch==2.13.0+cpu", "--torch-index-url, --proxy"),
    ("ERROR: Could not find a version that satisfies the requirement torchvision==0.28.0+cpu "
     "(from versions: 0.27.0+cpu)\nERROR: No matching distribution found for "
     "torchvision==0.28.0+cpu\n",
     "collecting the torch stack as wheels failed: No matching distribution found for "
     "torchvision==0.28.0+cpu", "--wheelhouse DIR"),
])
def test_torch_collection_failures_are_one_line_exit_1(
        matrix: Matrix, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str,
        message: str, hint: str) -> None:
    with pytest.raises(EnvbuildError) as exc:
        _run_torch_collect(matrix, tmp_path, monkeypatch, (1, output, False), [])
    err = exc.value
    assert err.exit_code == 1 and err.message == message and hint in err.hint
    assert "--pip-index-url" not in err.hint
    assert Path(err.alternatives[-1].removeprefix("full log: ")).name.startswith(
        "bundle-collect-torch-")


LAYERS = [layer_tar({"etc/a": b"a"}), layer_tar({"usr/b": b"b" * 5000}),
          layer_tar({"etc/a": b"a"})]  # the third is the first again: docker save links it


def test_a_docker_archive_becomes_an_oci_layout(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.tar", tmp_path / "system.tar"
    image_id = docker_archive(src, LAYERS)
    oci = to_oci_archive(src, dst, "envbuild-bundle/system:test")
    found = read_oci_layout(dst)
    assert found["config"] == oci.config == image_id
    assert found["manifest"] == oci.manifest and found["layers"] == list(oci.layers)
    assert oci.layers == tuple(_sha(la) for la in LAYERS)
    assert [found["blobs"][d] for d in oci.layers] == LAYERS
    assert found["name"] == oci.name == "docker.io/envbuild-bundle/system:test"
    assert found["ref_name"] == "test" and found["repo_tags"] == ["envbuild-bundle/system:test"]
    assert oci.to_json()["config_digest"] == image_id
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tar", "system.tar"]
    # the same input gives the same bytes (bundle.json records the archive's sha256)
    again = tmp_path / "again.tar"
    to_oci_archive(src, again, "envbuild-bundle/system:test")
    assert again.read_bytes() == dst.read_bytes()


def test_a_layer_is_copied_not_held(tmp_path: Path) -> None:
    """A 32 MiB layer goes through with far less than 32 MiB of memory (layers can be GBs)."""
    src, dst = tmp_path / "in.tar", tmp_path / "system.tar"
    big = layer_tar({"big": bytes(32 << 20)})
    docker_archive(src, [big])
    del big
    tracemalloc.start()
    try:
        to_oci_archive(src, dst, "x:y")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, peak
    assert read_oci_layout(dst)["config"]


@pytest.mark.parametrize("diff_ids", [
    [_sha(LAYERS[0]), _sha(b"another layer")],  # a layer that is not its diff_id
    [_sha(LAYERS[0]), _sha(LAYERS[0])],  # a second, other layer under the first one's diff_id
    [_sha(LAYERS[1]), _sha(LAYERS[1])],  # the first one under the second one's
])
def test_a_layer_that_is_not_its_diff_id_is_refused(tmp_path: Path, diff_ids: list[str]) -> None:
    src, dst = tmp_path / "in.tar", tmp_path / "system.tar"
    docker_archive(src, LAYERS[:2], diff_ids=diff_ids)
    with pytest.raises(EnvbuildError) as exc:
        to_oci_archive(src, dst, "x:y")
    assert exc.value.exit_code == 1 and "not its diff_id" in exc.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tar"]  # nothing half-written


_FILE = {"data": b"x"}
_HOSTILE: dict[str, tuple[tuple[str, dict[str, object]], ...]] = {
    "parent": (("../evil", _FILE),),
    "parent-deep": (("a/b/../../../evil", _FILE),),
    "absolute": (("/etc/evil", _FILE),),
    "dotdot-dir": (("..", {"type": tarfile.DIRTYPE}),),
    "link-absolute": (("z/layer.tar", {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}),),
    "link-out": (("z/layer.tar", {"type": tarfile.SYMTYPE, "linkname": "../../etc/passwd"}),),
    "link-not-a-layer": (("z/layer.tar", {"type": tarfile.SYMTYPE, "linkname": "../x.json"}),),
    "link-other-name": (("z/evil", {"type": tarfile.SYMTYPE, "linkname": "../y/layer.tar"}),),
    "link-dangling": (("z/layer.tar", {"type": tarfile.SYMTYPE, "linkname": "../y/layer.tar"}),),
    "link-to-link": (("z/layer.tar", {"type": tarfile.SYMTYPE, "linkname": "../z/layer.tar"}),),
    "hardlink": (("z/layer.tar", {"type": tarfile.LNKTYPE, "linkname": "manifest.json"}),),
    "device": (("z/dev", {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3}),),
    "fifo": (("z/fifo", {"type": tarfile.FIFOTYPE}),),
    "twice": (("w/VERSION", _FILE), ("w/VERSION", _FILE)),
}


@pytest.mark.parametrize("case", sorted(_HOSTILE))
def test_hostile_archive_members_refused(tmp_path: Path, case: str) -> None:
    src, dst = tmp_path / "in.tar", tmp_path / "system.tar"
    docker_archive(src, LAYERS, extra=tuple((n, dict(a)) for n, a in _HOSTILE[case]))
    with pytest.raises(UsageError) as exc:
        to_oci_archive(src, dst, "x:y")
    assert exc.value.exit_code == 2 and exc.value.message.startswith("docker archive in.tar: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.tar"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["..", "a", "layer.tar", "", "."]), min_size=1, max_size=5),
       st.booleans())
def test_any_member_name_reaching_outside_refused(tmp_path_factory: pytest.TempPathFactory,
                                                  parts: list[str], absolute: bool) -> None:
    name = ("/" if absolute else "") + "/".join(parts)
    if not absolute and (".." not in parts or not name.strip("/")):
        name = "../" + name
    tmp = tmp_path_factory.mktemp("hostile")
    docker_archive(tmp / "in.tar", LAYERS[:1], extra=((name, {"data": b"x"}),))
    with pytest.raises(UsageError):
        to_oci_archive(tmp / "in.tar", tmp / "system.tar", "x:y")
    assert not (tmp / "system.tar").exists()


@pytest.mark.parametrize("manifest", [
    [], [{}], {"Config": "a"}, [{"Config": "x.json", "Layers": []}] * 2,
    [{"Config": "../../etc/passwd", "Layers": []}], [{"Config": "/etc/passwd", "Layers": []}],
    [{"Config": None, "Layers": []}], [{"Config": "manifest.json", "Layers": []}],
    "CONFIG_WITH_LAYERS:../../etc/shadow", "CONFIG_WITH_LAYERS:", "CONFIG_WITH_LAYERS:nowhere",
])
def test_a_manifest_json_naming_what_is_not_there_refused(tmp_path: Path,
                                                          manifest: object) -> None:
    src, dst = tmp_path / "in.tar", tmp_path / "system.tar"
    if isinstance(manifest, str):  # the real config, one layer path replaced
        first = tmp_path / "first.tar"
        image_id = docker_archive(first, LAYERS[:1])
        manifest = [{"Config": f"{image_id[7:]}.json",
                     "Layers": [manifest.split(":", 1)[1]]}]
    docker_archive(src, LAYERS[:1], manifest=manifest)
    with pytest.raises(UsageError) as exc:
        to_oci_archive(src, dst, "x:y")
    assert exc.value.exit_code == 2
    assert not dst.exists() and not (tmp_path / "system.tar.partial").exists()


@pytest.mark.parametrize("data", [b"", b"not a tar at all" * 100, b"\0" * 1024])
def test_not_a_tar_refused(tmp_path: Path, data: bytes) -> None:
    (tmp_path / "in.tar").write_bytes(data)
    with pytest.raises(UsageError):
        to_oci_archive(tmp_path / "in.tar", tmp_path / "system.tar", "x:y")
    assert not (tmp_path / "system.tar").exists()


def test_a_config_whose_diff_ids_do_not_list_the_layers_refused(tmp_path: Path) -> None:
    src = tmp_path / "in.tar"
    docker_archive(src, LAYERS, diff_ids=[_sha(LAYERS[0])])
    with pytest.raises(UsageError, match="diff_ids"):
        to_oci_archive(src, tmp_path / "system.tar", "x:y")


@pytest.mark.parametrize(("ref", "name"), [
    ("foo", "docker.io/library/foo:latest"), ("a/b:1", "docker.io/a/b:1"),
    ("localhost:5000/a/b:t", "localhost:5000/a/b:t"),
    ("reg.example.com/x", "reg.example.com/x:latest"),
])
def test_containerd_name(ref: str, name: str) -> None:
    assert containerd_name(ref) == name


D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64


@pytest.mark.parametrize(("ref", "local", "digest", "kind"), [
    (f"reg.example.com/x@{D1}", None, D1, "pinned_in_ref"),
    ("reg.example.com/x:1", {"id": D2, "repo_digests": [f"other.example.com/y@{D2}",
                                                        f"reg.example.com/x@{D1}"]},
     D1, "repo_digest"),
    ("nvidia/cuda:12.8", {"id": D2, "repo_digests": [f"nvidia/cuda@{D1}"]}, D1, "repo_digest"),
    ("local/debian:bookworm", {"id": D2, "repo_digests": []}, D2, "image_id"),
    ("nvidia/cuda:12.8", None, None, "unknown"),
])
def test_the_base_images_digest(ref: str, local: dict[str, object] | None, digest: str | None,
                                kind: str) -> None:
    got = base_digest(ref, local)
    assert (got["ref"], got["digest"], got["kind"]) == (ref, digest, kind)


def test_system_tag_follows_what_goes_into_the_system_image() -> None:
    """Two bundles of one spec with another user or OS package list must not share the system
    image's tag (one would retag the other's image on the connected side)."""
    from envbuild.features.bundle import files_hash
    from envbuild.render.context import RenderedFile
    base = {"Dockerfile": RenderedFile("FROM x\nRUN useradd a\n"),
            "apt-packages.txt": RenderedFile("netbase\n")}
    variants = [
        {**base, "Dockerfile": RenderedFile("FROM x\nRUN useradd b\n")},
        {**base, "apt-packages.txt": RenderedFile("netbase\ncurl\n")},
        {**base, "apt-packages.txt": RenderedFile("netbase\n", 0o600)},
        {"Dockerfile": base["Dockerfile"]},
    ]
    hashes = {files_hash(base)} | {files_hash(v) for v in variants}
    assert len(hashes) == 1 + len(variants)
    assert files_hash(dict(reversed(list(base.items())))) == files_hash(base)


def test_bundle_refuses_another_platform(tmp_path: Path) -> None:
    """An arm64 image's torch stage runs on the build machine (issue 22): not bundled yet, said
    in one line, with a command that works instead."""
    from envbuild.core.request import Request
    from envbuild.features.offline import collect
    from envbuild.render.pipeline import ContextInputs

    with pytest.raises(UsageError) as exc:
        collect(tmp_path / "b", Request(target="cpu", torch="2.13.0", os="debian12",
                                         platform="linux/arm64"), ContextInputs())
    assert "linux/arm64" in exc.value.message and "--platform linux/amd64" in exc.value.hint
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("how", ["source", "sdist"])
def test_bundle_refuses_a_build_extension(tmp_path: Path, how: str) -> None:
    """--build-extension's and --build-extensions' builder stage downloads nvcc (issue 23): not
    bundled yet, said."""
    from envbuild.core.request import Request
    from envbuild.features.offline import collect
    from envbuild.render.pipeline import ContextInputs

    tiny = Path(__file__).resolve().parents[1] / "fixtures" / "extensions" / "envbuild-tiny-cuda"
    req = Request(target="cuda", torch="2.13.0", os="debian12", gpus=("A100",),
                  platform="linux/amd64")
    if how == "sdist":
        req = dataclasses.replace(req, extensions=("flash-attn",), build_extensions=True)
    with pytest.raises(UsageError) as exc:
        collect(tmp_path / "b", req,
                ContextInputs(extension_sources=(tiny,) if how == "source" else ()))
    assert "--build-extension" in exc.value.message and "--wheelhouse" in exc.value.hint
    assert not (tmp_path / "b").exists()
