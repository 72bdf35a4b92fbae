"""The user's files (issue 9): what `render --force`, `--out`, `doctor --save/--facts` and the
matrix cache may touch, and that every file-system problem is a one-line error, never a
traceback. Everything runs through the real CLI."""

from __future__ import annotations

import json
import os
import pickle
import random
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envbuild.doctor import model
from envbuild.matrix.cache import _checksum
from tests.support import FIXTURES, ROOT, Cli, run_cli

FIXTURE = FIXTURES / "doctor" / "h100-healthy"
MANIFEST = ".envbuild-manifest.json"
RENDER = ("render", "--target", "cpu")


def cli_in(cwd: Path, *args: str, prefix: tuple[str, ...] = (),
           env: dict[str, str] | None = None) -> Cli:
    """run_cli, from another working directory and optionally under a command prefix."""
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    p = subprocess.run([*prefix, sys.executable, "-m", "envbuild", *args], capture_output=True,
                       text=True, timeout=600, cwd=cwd,
                       env={**os.environ, "PYTHONPATH": pythonpath, **(env or {})})
    return Cli(p.returncode, p.stdout, p.stderr)


def _unprivileged() -> tuple[str, ...]:
    """Root ignores file modes: run as root without CAP_DAC_OVERRIDE (setpriv), so that a
    0555 directory really is unwritable; as another user, nothing is needed."""
    if os.geteuid() != 0:
        return ()
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: modes cannot be enforced")
    caps = "-dac_override,-dac_read_search,-fowner"
    return ("setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}")


def snapshot(root: Path) -> dict[str, tuple[Any, ...]]:
    """Everything under root (and root itself): kind, content or link target, mode, owner."""
    out: dict[str, tuple[Any, ...]] = {}
    paths = [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]
    for p in paths:
        st = os.lstat(p)
        rel = str(p.relative_to(root)) if p != root else "."
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", os.readlink(p))
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = ("dir", st.st_mode, st.st_uid, st.st_ino)
        else:
            out[rel] = ("file", p.read_bytes(), st.st_mode, st.st_uid, st.st_ino, st.st_mtime_ns)
    return out


def assert_clean_error(r: Cli, code: int = 2) -> None:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert r.stderr.startswith("error: "), r.stderr
    assert "\nhint: " in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout


def render(out: Path, *extra: str) -> Cli:
    r = run_cli(*RENDER, "--out", str(out), *extra)
    assert r.returncode == 0, r.stderr
    return r


# --- render --force replaces only a previous render ----------------------------------------

NOT_RENDERS: list[dict[str, str]] = [
    {"src/main.py": "print('mine')\n"},
    {"keep.txt": "mine"},
    {".git/HEAD": "ref: refs/heads/main\n", "README.md": "# mine\n"},
    {"Dockerfile": "FROM mine\n"},  # a user's own Dockerfile: no manifest
    {MANIFEST: "not json", "main.py": "x"},
    {MANIFEST: "\x00\xff\xfe binary", "main.py": "x"},
    {MANIFEST: json.dumps({"generator": "envbuild", "format": 1, "files": ["Dockerfile"]}),
     "Dockerfile": "FROM mine\n"},
    {MANIFEST: json.dumps({"generator": "other", "format": 1, "files": {}}), "a": "b"},
    {MANIFEST: json.dumps([1, 2, 3]), "a": "b"},
]


@pytest.mark.parametrize("layout", NOT_RENDERS, ids=lambda d: ",".join(sorted(d)))
def test_force_refuses_a_directory_envbuild_did_not_render(tmp_path: Path,
                                                            layout: dict[str, str]) -> None:
    out = tmp_path / "out"
    for rel, text in layout.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text, errors="surrogateescape")
    before = snapshot(tmp_path)
    for extra in ((), ("--force",)):
        r = run_cli(*RENDER, "--out", str(out), *extra)
        assert_clean_error(r)
        assert snapshot(tmp_path) == before, "nothing may be touched"


@pytest.mark.parametrize("listed", ["../victim.txt", "/tmp/victim.txt", "a/../../victim.txt",
                                    "./Dockerfile", "a//b", ""])
def test_a_hand_made_manifest_cannot_aim_force_outside(tmp_path: Path, listed: str) -> None:
    out = tmp_path / "out"
    render(out)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    doc = json.loads((out / MANIFEST).read_text())
    doc["files"][listed] = {"sha256": "0" * 64}
    (out / MANIFEST).write_text(json.dumps(doc))
    before = snapshot(tmp_path)
    r = run_cli(*RENDER, "--torch", "2.12", "--out", str(out), "--force")
    assert_clean_error(r)
    assert snapshot(tmp_path) == before


def test_force_replaces_a_previous_render_in_place(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render(out, "--torch", "2.12")
    (out / "src").mkdir()
    (out / "src" / "main.py").write_text("print('mine')\n")
    (out / "notes.txt").write_text("mine")
    out.chmod(0o750)
    if os.geteuid() == 0:
        os.chown(out, 4242, 4343)
    st = os.stat(out)
    r = run_cli(*RENDER, "--torch", "2.13", "--out", str(out), "--force")
    assert r.returncode == 0, r.stderr
    assert json.loads((out / "spec.json").read_text())["torch"].startswith("2.13")
    assert (out / "src" / "main.py").read_text() == "print('mine')\n"
    assert (out / "notes.txt").read_text() == "mine"
    after = os.stat(out)
    assert (after.st_ino, after.st_mode, after.st_uid, after.st_gid) == \
        (st.st_ino, st.st_mode, st.st_uid, st.st_gid)
    listed = set(json.loads((out / MANIFEST).read_text())["files"])
    assert "src/main.py" not in listed and "Dockerfile" in listed
    assert not [p for p in tmp_path.rglob("*") if "tmp" in p.name or ".old-" in p.name]


def test_a_shell_inside_the_output_keeps_working(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render(out)
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    script = (f'cd "{out}" && "{sys.executable}" -m envbuild render --target cpu --torch 2.12 '
              f'--out "{out}" --force >/dev/null && cat spec.json >/dev/null && '
              f'"{sys.executable}" -m envbuild render --target cpu --out . --force >/dev/null '
              '&& ls Dockerfile')
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": pythonpath}, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "Traceback" not in p.stderr


def test_force_removes_what_the_old_render_had_and_the_new_does_not(tmp_path: Path) -> None:
    out = tmp_path / "out"
    render(out, "--format", "apptainer")
    (out / "mine.txt").write_text("mine")
    assert (out / "apptainer.def").exists()
    render(out, "--force")
    assert not (out / "apptainer.def").exists() and (out / "mine.txt").exists()
    r = run_cli("render", "--all", "--target", "cpu", "--torch", ">=2.14", "--os", "debian12",
                "--out", str(out), "--force", "--json")
    assert r.returncode == 0, r.stderr
    dirs = json.loads(r.stdout)["directories"]
    assert dirs and not (out / "Dockerfile").exists() and (out / "mine.txt").exists()
    render(out, "--force")
    assert not any((out / d).exists() for d in dirs), "emptied render directories go too"
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == []


@pytest.mark.parametrize("change", ["edit", "chmod", "symlink", "replace-by-dir", "in-the-way"])
def test_force_refuses_a_render_someone_changed(tmp_path: Path, change: str) -> None:
    out = tmp_path / "out"
    render(out)
    extra: tuple[str, ...] = ()
    if change == "edit":
        with (out / "Dockerfile").open("a") as fh:
            fh.write("RUN my-own-step\n")
    elif change == "chmod":  # a mode change alone keeps the content: still envbuild's
        (out / "requirements.txt").chmod(0o600)
    elif change == "symlink":
        target = tmp_path / "elsewhere.txt"
        target.write_bytes((out / "Dockerfile").read_bytes())
        (out / "Dockerfile").unlink()
        (out / "Dockerfile").symlink_to(target)
    elif change == "replace-by-dir":
        (out / "spec.json").unlink()
        (out / "spec.json").mkdir()
        (out / "spec.json" / "mine").write_text("x")
    else:  # a user's file where the new render writes one the old did not
        (out / "apptainer.def").write_text("Bootstrap: mine\n")
        extra = ("--format", "apptainer")
    before = snapshot(tmp_path)
    r = run_cli(*RENDER, "--torch", "2.12", "--out", str(out), "--force", *extra)
    if change == "chmod":
        assert r.returncode == 0, r.stderr
        return
    assert_clean_error(r)
    assert "nothing was changed" in r.stderr
    assert snapshot(tmp_path) == before


def test_render_into_an_empty_existing_directory_keeps_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    ino = os.stat(out).st_ino
    render(out)
    assert os.stat(out).st_ino == ino and stat.S_IMODE(os.stat(out).st_mode) == 0o700
    assert (out / MANIFEST).exists() and (out / "Dockerfile").exists()


# --- --out paths: one-line errors, nothing stray ------------------------------------------

def _bad_outs(tmp_path: Path) -> dict[str, str]:
    f = tmp_path / "file.txt"
    f.write_text("mine")
    return {"file/sub": f"{f}/sub", "file/sub/deeper": f"{f}/a/b", "existing file": str(f),
            "/proc/x": "/proc/envbuild-x", "/proc/self/x": "/proc/self/envbuild",
            "/sys/x": "/sys/envbuild-x", "/dev/null/x": "/dev/null/x"}


@pytest.mark.parametrize("case", ["file/sub", "file/sub/deeper", "existing file", "/proc/x",
                                  "/proc/self/x", "/sys/x", "/dev/null/x"])
@pytest.mark.parametrize("force", [False, True])
def test_out_that_cannot_be_written_is_a_clean_error(tmp_path: Path, case: str,
                                                     force: bool) -> None:
    out = _bad_outs(tmp_path)[case]
    before = snapshot(tmp_path)
    r = run_cli(*RENDER, "--out", out, *(("--force",) if force else ()))
    assert_clean_error(r)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("force", [False, True])
def test_out_dot_in_a_users_directory(tmp_path: Path, force: bool) -> None:
    (tmp_path / "main.py").write_text("print('mine')\n")
    before = snapshot(tmp_path)
    r = cli_in(tmp_path, *RENDER, "--out", ".", *(("--force",) if force else ()))
    assert_clean_error(r)
    assert snapshot(tmp_path) == before
    empty = tmp_path / "empty"
    empty.mkdir()
    r = cli_in(empty, *RENDER, "--out", ".")
    assert r.returncode == 0, r.stderr
    assert (empty / "Dockerfile").exists()


@pytest.mark.parametrize("case", ["read-only dir", "read-only parent", "read-only render"])
def test_unwritable_out_is_a_clean_error(tmp_path: Path, case: str) -> None:
    prefix = _unprivileged()
    parent = tmp_path / "ro"
    parent.mkdir()
    out = parent / "out"
    if case == "read-only dir":
        out.mkdir()
        out.chmod(0o555)
    elif case == "read-only render":
        render(out)
        out.chmod(0o555)
    parent.chmod(0o555)
    try:
        before = snapshot(parent)
        r = cli_in(tmp_path, *RENDER, "--torch", "2.12", "--out", str(out), "--force",
                   prefix=prefix, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert_clean_error(r)
        assert "Permission denied" in r.stderr
        assert snapshot(parent) == before
    finally:
        parent.chmod(0o755)
        if out.exists():
            out.chmod(0o755)


@pytest.mark.parametrize(("arg", "lands", "stray"), [
    ("a/../../b", "../b", "a"),
    ("a/b/../../c", "c", "a"),
    ("a/../b", "b", "a"),
    ("x/y/z/../../../../b2", "../b2", "x"),
    ("./n/../m", "m", "n"),
])
def test_dotdot_out_creates_nothing_stray(tmp_path: Path, arg: str, lands: str,
                                          stray: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    r = cli_in(work, *RENDER, "--out", arg)
    assert r.returncode == 0, r.stderr
    assert not (work / stray).exists(), f"{stray} was created"
    dest = (work / lands).resolve()
    assert (dest / "Dockerfile").exists()
    made = {p for p in tmp_path.rglob("*") if p.is_dir()}
    assert made == {work, dest}


def test_out_through_a_symlink_goes_where_the_kernel_says(tmp_path: Path) -> None:
    (tmp_path / "real" / "deep").mkdir(parents=True)
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(tmp_path / "real" / "deep")
    r = cli_in(work, *RENDER, "--out", "link/../out")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "real" / "out" / "Dockerfile").exists()
    assert not (work / "out").exists()


# --- doctor --save / --facts -----------------------------------------------------------------

def test_doctor_save_round_trip_and_resave(tmp_path: Path) -> None:
    out = tmp_path / "rec"
    for _ in range(2):  # a second --save replaces the first recording
        r = run_cli("doctor", "--facts", str(FIXTURE), "--save", str(out), "--json")
        assert r.returncode in (0, 1), r.stderr
    (out / "mine.txt").write_text("mine")
    r = run_cli("doctor", "--facts", str(FIXTURE), "--save", str(out), "--json")
    assert r.returncode in (0, 1), r.stderr
    assert (out / "mine.txt").read_text() == "mine"
    again = run_cli("doctor", "--facts", str(out), "--json")
    assert json.loads(again.stdout)["findings"] == json.loads(r.stdout)["findings"]


@pytest.mark.parametrize("case", ["existing file", "file/sub", "users dir", "/proc/x",
                                  "/dev/null/x"])
def test_doctor_save_refuses_cleanly(tmp_path: Path, case: str) -> None:
    f = tmp_path / "file.txt"
    f.write_text("mine")
    users = tmp_path / "users"
    users.mkdir()
    (users / "main.py").write_text("mine")
    target = {"existing file": str(f), "file/sub": f"{f}/sub", "users dir": str(users),
              "/proc/x": "/proc/envbuild-x", "/dev/null/x": "/dev/null/x"}[case]
    before = snapshot(tmp_path)
    r = run_cli("doctor", "--facts", str(FIXTURE), "--save", target)
    assert_clean_error(r)
    assert snapshot(tmp_path) == before


def test_doctor_save_unwritable(tmp_path: Path) -> None:
    prefix = _unprivileged()
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    try:
        r = cli_in(tmp_path, "doctor", "--facts", str(FIXTURE), "--save", str(ro / "rec"),
                   prefix=prefix, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
        assert_clean_error(r)
        assert list(ro.iterdir()) == []
    finally:
        ro.chmod(0o755)


BAD_HOST: list[Any] = [
    {"groups": "x"}, {"groups": ["a"]}, {"groups": [True]}, {"env": []}, {"env": {"A": 1}},
    {"devices": []}, {"devices": {"/dev/nvidia0": {"gid": "0", "mode": "0o20666", "rw": True}}},
    {"devices": {"/dev/nvidia0": {"gid": 0, "mode": "zz", "rw": True}}},
    {"devices": {"/dev/nvidia0": {"gid": 0, "rw": True}}},
    {"devices": {"/dev/nvidia0": {"gid": 0, "mode": "0o666", "rw": "yes"}}},
    {"devices": {"/dev/nvidia0": "rw"}}, {"group_names": {"abc": "x"}},
    {"group_names": {"44": 44}}, {"group_names": []}, {"pci": [["10de"]]}, {"pci": "10de"},
    {"docker_clients": [{"path": 1}]}, {"docker_clients": {}}, {"docker_clients": ["docker"]},
    {"docker_clients": [{"path": "/usr/bin/docker", "buildx": {"rc": "0"}}]},
    {"shm_bytes": "big"}, {"shm_bytes": 1.5}, {"kfd_gfx": [1.5]}, {"kfd_gfx": 9},
    {"python": {"version": 3}}, {"python": "3.11"}, {"dirs": {"/dev": "x"}}, {"dirs": []},
    {"system": 5}, {"machine": None}, {"container": []}, {"modules": [1]}, {"resolved": 1},
]


@pytest.mark.parametrize("patch", BAD_HOST, ids=lambda d: json.dumps(d)[:60])
def test_doctor_facts_with_wrong_types(tmp_path: Path, patch: dict[str, Any]) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(FIXTURE, rec)
    host = json.loads((rec / "host.json").read_text())
    host.update(patch)
    (rec / "host.json").write_text(json.dumps(host))
    assert_clean_error(run_cli("doctor", "--facts", str(rec)))


@pytest.mark.parametrize("content", [b"\x00\xff\xfe\x00garbage", b"{\"system\": \"Lin", b"",
                                     b"[]", b"null", b"\"Linux\"", b"42",
                                     b"\xef\xbb\xbf{}\xff",
                                     # seeded random bytes: every xdist worker collects the same ids
                                     *(random.Random(seed).randbytes(64) + b"\xff"
                                       for seed in range(3))])
def test_doctor_facts_host_json_garbage(tmp_path: Path, content: bytes) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(FIXTURE, rec)
    (rec / "host.json").write_bytes(content)
    assert_clean_error(run_cli("doctor", "--facts", str(rec)))


@pytest.mark.parametrize("name", [model.NVSMI_XML, model.NVSMI_CSV, model.DOCKER_INFO,
                                  model.PROC_NVIDIA, f"{model.NVSMI_CSV}.rc",
                                  f"{model.DOCKER_INFO}.stderr"])
@pytest.mark.parametrize("content", [b"\xff\xfe\x00\x01binary", b"\x80abc"])
def test_doctor_facts_binary_recorded_output(tmp_path: Path, name: str, content: bytes) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(FIXTURE, rec)
    if name.endswith(".stderr"):  # only read beside its stdout
        (rec / name.removesuffix(".stderr")).write_text("")
    (rec / name).write_bytes(content)
    assert_clean_error(run_cli("doctor", "--facts", str(rec)))


def test_doctor_facts_rc_not_a_number(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(FIXTURE, rec)
    (rec / f"{model.NVSMI_CSV}.rc").write_text("nine\n")
    assert_clean_error(run_cli("doctor", "--facts", str(rec)))


@pytest.mark.parametrize("case", ["a file", "missing", "host.json is a dir", "empty dir"])
def test_doctor_facts_not_a_recording(tmp_path: Path, case: str) -> None:
    path = tmp_path / "rec"
    if case == "a file":
        path.write_text("x")
    elif case == "host.json is a dir":
        (path / "host.json").mkdir(parents=True)
    elif case == "empty dir":
        path.mkdir()
    assert_clean_error(run_cli("doctor", "--facts", str(path)))


# --- the matrix cache ------------------------------------------------------------------------

def _resolve(cache: Path) -> Cli:
    return run_cli("resolve", "--cuda", "12.2", "--json", env={"XDG_CACHE_HOME": str(cache)})


def _cache_file(cache: Path, aside: bool = False) -> Path:
    """The matrix cache, or (aside) its set-aside documents (the extension facts)."""
    files = sorted(p for p in (cache / "envbuild").glob("matrix-*")
                   if p.name.endswith("-aside.json") == aside)
    assert len(files) == 1, files
    return files[0]


def _cache_doc(path: Path) -> dict[str, Any]:
    """The cache file as one object: its header line's fields and "docs", the JSON after it."""
    head, _, body = path.read_bytes().partition(b"\n")
    return {**json.loads(head), "docs": json.loads(body)}


def _cache_bytes(doc: dict[str, Any], *, reseal: bool = False) -> bytes:
    """The file form of _cache_doc's object; `reseal` gives the edited documents a matching
    digest, so only what the test is about can reject them."""
    body = json.dumps(doc["docs"], separators=(",", ":")).encode()
    checksum = _checksum(body) if reseal else doc["checksum"]
    head = json.dumps({"format": doc["format"], "key": doc["key"],
                       "checksum": checksum}).encode()
    return head + b"\n" + body


def _garbage(good: bytes) -> list[bytes]:
    return [b"garbage", b"", good[: len(good) // 2], b"\x80\x05\x95garbage",
            pickle.dumps({"not": "a matrix"}), b"\x80\x04K\x01.", os.urandom(256),
            b"[]", b"null", b'{"format": 1}', good.replace(b'"', b"'", 5),
            json.dumps({"format": 1, "key": "x", "docs": {}}).encode()]


@pytest.mark.parametrize("index", range(12))
def test_a_corrupt_matrix_cache_is_ignored_and_rebuilt(tmp_path: Path, index: int) -> None:
    cache = tmp_path / "cache"
    clean = _resolve(cache)
    assert clean.returncode == 0, clean.stderr
    path = _cache_file(cache)
    path.write_bytes(_garbage(path.read_bytes())[index])
    for _ in range(2):  # the bad cache is replaced, and later commands keep working
        r = _resolve(cache)
        assert r.returncode == 0, r.stderr
        assert "Traceback" not in r.stderr
        assert json.loads(r.stdout) == json.loads(clean.stdout)
    assert _cache_doc(_cache_file(cache))["docs"]  # rebuilt: valid again


@pytest.mark.parametrize("index", range(12))
def test_a_corrupt_aside_cache_falls_back_to_the_files(tmp_path: Path, index: int) -> None:
    """The extension facts are cached apart (start-up reads only the main cache): a damaged or
    missing aside file costs one TOML parse of extensions.toml, never a wrong answer."""
    cache = tmp_path / "cache"

    def resolve_with() -> Cli:
        return run_cli("resolve", "--with", "bitsandbytes", "--target", "cuda", "--platform",
                       "linux/amd64", "--json", env={"XDG_CACHE_HOME": str(cache)})

    clean = resolve_with()
    assert clean.returncode == 0, clean.stderr
    path = _cache_file(cache, aside=True)
    path.write_bytes(_garbage(path.read_bytes())[index])
    r = resolve_with()
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads(r.stdout) == json.loads(clean.stdout)
    assert _cache_doc(path)["docs"]  # replaced: valid again
    path.unlink()
    r = resolve_with()
    assert r.returncode == 0 and json.loads(r.stdout) == json.loads(clean.stdout)


def _wrong_typed_docs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for table, key, value in [("torch", "release", "2.14"), ("cuda", "release", None),
                              ("torch", "patch", [{"torch": 5}]), ("os", "os", [1, 2]),
                              ("cuda", "image", [{"cuda": "12.2.2", "os": "x", "flavors": 1}])]:
        d = json.loads(json.dumps(doc))
        d["docs"][table][key] = value
        out.append(d)
    d = json.loads(json.dumps(doc))
    d["docs"]["torch"]["variant"][0]["version"] = "99.9"  # a cross-reference problem
    out.append(d)
    return out


@pytest.mark.parametrize("index", range(6))
def test_a_wrong_typed_matrix_cache_is_ignored(tmp_path: Path, index: int) -> None:
    """Edited without a new checksum: the checksum refuses it (a resealed cache is trusted as
    its owner's: see test_a_cache_someone_else_could_write_is_not_read)."""
    cache = tmp_path / "cache"
    clean = _resolve(cache)
    path = _cache_file(cache)
    assert path.suffix == ".json", "the cache is JSON, never a pickle"
    path.write_bytes(_cache_bytes(_wrong_typed_docs(_cache_doc(path))[index]))
    r = _resolve(cache)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json.loads(clean.stdout)


@pytest.mark.parametrize("how", ["world-writable file", "group-writable file", "other owner",
                                 "world-writable dir", "symlink"])
def test_a_cache_someone_else_could_write_is_not_read(tmp_path: Path, how: str) -> None:
    cache = tmp_path / "cache"
    clean = _resolve(cache)
    path = _cache_file(cache)
    assert path.suffix == ".json", "the cache is JSON, never a pickle"
    doc = _cache_doc(path)
    for row in doc["docs"]["torch"]["patch"]:
        if row["torch"] == "2.5.1":
            row["torchvision"] = "6.6.6"
    forged = _cache_bytes(doc, reseal=True)  # a well-formed cache: only its owner can refuse it
    if how == "symlink":
        elsewhere = tmp_path / "forged.json"
        elsewhere.write_bytes(forged)
        path.unlink()
        path.symlink_to(elsewhere)
    else:
        path.write_bytes(forged)
    if how == "world-writable file":
        path.chmod(0o666)
    elif how == "group-writable file":
        path.chmod(0o664)
    elif how == "other owner":
        if os.geteuid() != 0:
            pytest.skip("only root can give a file to another user")
        os.chown(path, 4242, 4242)
    elif how == "world-writable dir":
        path.parent.chmod(0o777)
    r = _resolve(cache)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["torchvision"] != "6.6.6"
    assert json.loads(r.stdout) == json.loads(clean.stdout)


def test_an_old_pickle_cache_is_never_unpickled(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    assert _resolve(cache).returncode == 0
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {marker}",))

    path = _cache_file(cache)
    old_style = path.with_suffix(".pickle")  # where envbuild looked before the JSON cache
    if path != old_style:
        path.unlink()
    old_style.write_bytes(pickle.dumps(Payload()))
    r = _resolve(cache)
    assert r.returncode == 0, r.stderr
    assert not marker.exists()


# --- make --out (--target mps writes through the same function) -----------------------------

def test_make_mps_out_refuses_a_users_directory(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "main.py").write_text("print('mine')\n")
    before = snapshot(tmp_path)
    r = run_cli("make", "--target", "mps", "--out", str(out))
    assert_clean_error(r)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("arg", ["a/../../b", "f/sub"])
def test_make_mps_out_paths(tmp_path: Path, arg: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "f").write_text("a file")
    r = cli_in(work, "make", "--target", "mps", "--out", arg)
    if arg == "f/sub":
        assert_clean_error(r)
        return
    assert r.returncode == 0, r.stderr
    assert not (work / "a").exists() and (tmp_path / "b" / "setup-macos.sh").exists()
