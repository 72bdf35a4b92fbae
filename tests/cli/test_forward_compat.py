"""NVIDIA's forward compatibility (--forward-compat): resolved only for the GPUs and driver
branches NVIDIA supports, refused for the others with the reason, rendered from the recorded
redistributable (sha256, size), installed by the image's script from a served stand-in archive."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from envbuild.common.resources import templates_dir
from tests.support import FIXTURES, run_cli
from tests.support.forward_compat import MANIFEST, TOP, _standin_archive
from tests.support.served import serve


def test_forward_compat_needs_driver_and_gpu() -> None:
    for args in (["--forward-compat"], ["--forward-compat", "--gpu", "H100"],
                 ["--forward-compat", "--driver", "535.104.05"],
                 ["--forward-compat", "--target", "cpu", "--gpu", "H100"]):
        r = run_cli("resolve", *args)
        assert r.returncode == 2, (args, r.stdout)
        assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def _run_script(url: str, sha: str, size: int, dest: Path, link: Path
                ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(templates_dir() / "install-cuda-compat.py"), url,
                           sha, str(size), str(dest), str(link)], capture_output=True, text=True,
                          timeout=60)


def test_install_script_keeps_only_compat_and_checks_the_archive(tmp_path: Path) -> None:
    data = _standin_archive(
        {f"{TOP}/compat/libcuda.so.595.71.05": b"\x7fELF stand-in", f"{TOP}/LICENSE": b"x",
         f"{TOP}/compat/../../../escape": b"no", "/etc/evil": b"no"},
        {f"{TOP}/compat/libcuda.so.1": "libcuda.so.595.71.05",
         f"{TOP}/compat/libnvidia-ptxjitcompiler.so.1": "/etc/passwd"})
    root = tmp_path / "served"
    root.mkdir()
    (root / "a.tar.xz").write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()
    with serve(root, "127.0.0.1") as s:
        dest, link = tmp_path / "cuda-13.2", tmp_path / "cuda"
        bad = _run_script(f"{s.url}/a.tar.xz", "0" * 64, len(data), dest, link)
        assert bad.returncode == 1 and "not the archive envbuild resolved" in bad.stderr
        assert not dest.exists() and not link.exists()
        ok = _run_script(f"{s.url}/a.tar.xz", sha, len(data), dest, link)
    assert ok.returncode == 0, ok.stderr
    assert sorted(p.name for p in (dest / "compat").iterdir()) == \
        ["libcuda.so.1", "libcuda.so.595.71.05"]
    assert (dest / "compat" / "libcuda.so.1").resolve().name == "libcuda.so.595.71.05"
    assert link.is_symlink() and (link / "compat" / "libcuda.so.1").exists()
    assert not (tmp_path / "escape").exists()


def test_cli_mirror_must_hold_nvidias_archive(tmp_path: Path) -> None:
    """--cuda-redist-url: the mirror's redistrib_<ver>.json says where the archive is; its
    version, sha256 and size must be NVIDIA's (the matrix's), else exit 1 before anything is
    written; an unreachable mirror is exit 3, a hostile URL exit 2."""
    doc = json.loads(MANIFEST.read_text())
    moved = "cuda_compat/linux-x86_64/mirrored-595.71.05_cuda13.2-archive.tar.xz"
    doc["cuda_compat"]["linux-x86_64"]["cuda13.x"]["relative_path"] = moved
    (tmp_path / "redistrib_13.2.2.json").write_text(json.dumps(doc))
    base = ["render", "--forward-compat", "--driver", "535.104.05", "--gpu", "H100", "--torch",
            "2.13.0", "--os", "debian12"]
    with serve(tmp_path, "127.0.0.1") as s:
        r = run_cli(*base, "--cuda-redist-url", s.url + "/", "--out", str(tmp_path / "out"))
        assert r.returncode == 0, r.stderr
        docker = (tmp_path / "out" / "Dockerfile").read_text()
        assert f"{s.url}/{moved}" in docker
        assert "7825774c062ef3b5ce82726a90a013b7090ff955627b16b1e5a6a6ea4457c1bf" in docker
        for field, value in (("sha256", "a" * 64), ("size", "1234")):
            bad = json.loads(json.dumps(doc))
            bad["cuda_compat"]["linux-x86_64"]["cuda13.x"][field] = value
            (tmp_path / "redistrib_13.2.2.json").write_text(json.dumps(bad))
            r = run_cli(*base, "--cuda-redist-url", s.url, "--out", str(tmp_path / field))
            assert r.returncode == 1 and "byte for byte" in r.stderr, r.stderr
            assert not (tmp_path / field).exists()
    r = run_cli(*base, "--cuda-redist-url", "http://127.0.0.1:9/", "--out", str(tmp_path / "o3"))
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    r = run_cli(*base, "--cuda-redist-url", "http://h/$(id)", "--out", str(tmp_path / "o4"))
    assert r.returncode == 2 and not (tmp_path / "o4").exists()


def test_install_script_refuses_an_existing_other_cuda_and_huge_sizes(tmp_path: Path) -> None:
    other = tmp_path / "cuda-12.2"
    other.mkdir()
    link = tmp_path / "cuda"
    link.symlink_to(other)
    r = _run_script("http://127.0.0.1:9/x", "0" * 64, 10, tmp_path / "cuda-13.2", link)
    assert r.returncode == 1 and "already exists" in r.stderr
    r = _run_script("http://127.0.0.1:9/x", "0" * 64, 1 << 40, tmp_path / "c", tmp_path / "l")
    assert r.returncode == 1 and "refused" in r.stderr


def test_doctor_offers_forward_compat_on_a_datacenter_host_with_an_old_driver(
        tmp_path: Path) -> None:
    """The recorded healthy H100 host, its driver set back to R535: the doctor's alternatives
    name the forward-compatibility command, and that command resolves."""
    import shutil

    host = tmp_path / "h100-r535"
    shutil.copytree(FIXTURES / "doctor" / "h100-healthy", host)
    for f in host.iterdir():
        if f.is_file():
            f.write_text(f.read_text().replace("580.95.05", "535.104.05")
                         .replace("<cuda_version>13.0<", "<cuda_version>12.2<"))
    r = run_cli("doctor", "--facts", str(host), "--json")
    assert r.returncode in (0, 1), r.stderr
    alts = json.loads(r.stdout)["recommendation"]["alternatives"]
    fwd = [a for a in alts if "--forward-compat" in a]
    assert fwd, alts
    argv = fwd[0].split("  (")[0].split()[2:]  # after `envbuild make`
    resolved = run_cli("resolve", *argv, "--json")
    assert resolved.returncode == 0, resolved.stderr
    assert json.loads(resolved.stdout)["forward_compat"]
    healthy = run_cli("doctor", "--facts", str(FIXTURES / "doctor" /
                                                "h100-healthy"), "--json")
    assert not any("--forward-compat" in a
                   for a in json.loads(healthy.stdout)["recommendation"]["alternatives"])
