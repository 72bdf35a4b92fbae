"""`envbuild fleet collect` and `envbuild plan` through the real CLI: the outputs (table, --json,
--markdown), the exit codes (0; 1 when a group loses its GPU and no image covers it; 2 for
malformed input; 3 for a source that is not there), and hostile files of each kind as one-line
errors."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envbuild.common import boundedio
from envbuild.common.errors import EXIT_CANNOT_RUN, EXIT_FAILED, EXIT_USAGE
from tests.support import FIXTURES, run_cli
from tests.support.bounded_input import _bounded_lines

FLEET = FIXTURES / "fleet"
DOCTOR = FIXTURES / "hosts" / "h200-driver580-torch2.11-cu130-2026-11-28" / "doctor.json"
MEMORY = 2 << 30


def test_plan_prints_a_table_json_and_markdown(tmp_path: Path) -> None:
    args = ["plan", "--fleet", str(FLEET / "fleet.toml"), "--to", "torch==2.15"]
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("plan: torch 2.15\n")
    assert "loses the GPU: no sm_60 in torch 2.15" in r.stdout
    j = json.loads(run_cli(*args, "--json", cwd=tmp_path).stdout)
    assert [g["group"] for g in j["groups"]] == ["pascal", "volta", "ampere", "hopper",
                                                 "blackwell"]
    assert j["uncovered"] == [] and all(i["groups"] for i in j["images"])
    md = run_cli(*args, "--markdown", cwd=tmp_path).stdout
    assert "| group | gpu | nodes | driver | verdict | image |" in md
    r = run_cli(*args, "--json", "--markdown", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE


def test_the_version_may_follow_as_its_own_word(tmp_path: Path) -> None:
    one = run_cli("plan", "--fleet", str(FLEET / "fleet.toml"), "--to", "cuda", "13.2",
                  "--json", cwd=tmp_path)
    two = run_cli("plan", "--fleet", str(FLEET / "fleet.toml"), "--to", "cuda=13.2",
                  "--json", cwd=tmp_path)
    assert one.returncode == 0, one.stderr
    assert json.loads(one.stdout) == json.loads(two.stdout)


def test_an_uncovered_group_exits_1(tmp_path: Path) -> None:
    f = tmp_path / "fleet.toml"
    f.write_text('[group.kepler]\ngpu = "K80"\ndriver = "418.67"\n')
    r = run_cli("plan", "--fleet", str(f), "--to", "torch==2.15", cwd=tmp_path)
    assert r.returncode == EXIT_FAILED
    assert "NOT COVERED: kepler loses its GPU" in r.stdout


def test_a_group_that_loses_its_python_and_has_no_image_exits_1(tmp_path: Path) -> None:
    """No torch release has Python 3.6 (the matrix says which do): no image, and the line says
    it is the Python that is lost, not the GPU."""
    from envbuild.matrix import load

    assert not any("3.6" in r.python for r in load().torch)
    f = tmp_path / "fleet.toml"
    f.write_text('[group.a]\ngpu = "H100"\ndriver = "580.126.20"\npython = "3.6"\n')
    r = run_cli("plan", "--fleet", str(f), "--to", "torch==2.15", cwd=tmp_path)
    assert r.returncode == EXIT_FAILED, r.stderr
    assert "NOT COVERED: a loses its Python 3.6 and no image resolves for it" in r.stdout
    assert "loses its GPU" not in r.stdout


def test_a_team_file_change_diffs_the_lock(tmp_path: Path) -> None:
    (tmp_path / "envbuild.toml").write_text('[image.gpu]\ntarget = "cuda"\ntorch = "2.14"\n')
    new = tmp_path / "new"
    new.mkdir()
    (new / "envbuild.toml").write_text('[image.gpu]\ntarget = "cuda"\ntorch = "2.15"\n')
    r = run_cli("plan", "--fleet", str(FLEET / "fleet.toml"), "--to", "new/envbuild.toml",
                "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["lock"]["file"] == "envbuild.lock" and j["lock"]["changes"]["gpu"] == ["new image"]
    assert any(img["kept"] for img in j["images"])


def test_collect_from_a_real_doctor_recording_and_gfd_labels(tmp_path: Path) -> None:
    out = tmp_path / "fleet.toml"
    r = run_cli("fleet", "collect", "--doctor", str(DOCTOR), "--kubectl",
                str(FLEET / "kubectl-nodes.json"), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert "note: kubernetes node cpu-0" in r.stderr
    text = out.read_text()
    assert 'gpu = "NVIDIA H200"' in text and 'gpu = "NVIDIA-A100-SXM4-80GB"' in text
    r = run_cli("plan", "--fleet", str(out), "--to", "torch==2.15", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["groups"]) == 4


def _refused(r: object, code: int, words: str) -> None:
    rc, err = r.returncode, r.stderr  # type: ignore[attr-defined]
    assert rc == code, (rc, err)
    assert err.startswith("error: ") and words in err and "Traceback" not in err, err
    _bounded_lines(err, words)


def _file(tmp: Path, kind: str) -> Path:
    f = tmp / "in.file"
    if kind == "/dev/zero":
        f.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(f)
    elif kind == "huge":
        with f.open("wb") as fh:
            fh.truncate(boundedio.CONFIG_BYTES + 1)
    elif kind == "deep-json":
        f.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "deep-toml":
        f.write_text("x = " + "[" * 100_000 + "]" * 100_000)
    elif kind == "binary":
        f.write_bytes(b"\xff\xfe\x00\x01" * 100)
    elif kind == "broken":
        f.write_text('{"items": [')
    return f


KINDS = {"/dev/zero": (EXIT_USAGE, "is a character device"), "fifo": (EXIT_USAGE, "is a FIFO"),
         "huge": (EXIT_USAGE, "is read up to 4 MiB"), "binary": (EXIT_USAGE, "UTF-8"),
         "missing": (EXIT_CANNOT_RUN, "no such")}
ENTRIES = {
    "plan --fleet": (lambda f: ["plan", "--fleet", str(f), "--to", "torch==2.15"],
                     {**KINDS, "deep-toml": (EXIT_USAGE, "nested more than 64 levels"),
                      "broken": (EXIT_USAGE, "not valid TOML")}),
    "fleet collect --doctor": (lambda f: ["fleet", "collect", "--doctor", str(f)],
                               {**KINDS, "deep-json": (EXIT_USAGE, "nested more than 64 levels"),
                                "broken": (EXIT_USAGE, "not valid JSON")}),
    "fleet collect --kubectl": (lambda f: ["fleet", "collect", "--kubectl", str(f)],
                                {**KINDS, "deep-json": (EXIT_USAGE, "nested more than 64 levels"),
                                 "broken": (EXIT_USAGE, "not valid JSON")}),
}
CASES = [(e, k) for e, (_, kinds) in ENTRIES.items() for k in kinds]


@pytest.mark.parametrize(("entry", "kind"), CASES)
def test_hostile_files_are_one_line_errors(tmp_path: Path, entry: str, kind: str) -> None:
    argv_of, kinds = ENTRIES[entry]
    code, words = kinds[kind]
    f = _file(tmp_path, kind)
    _refused(run_cli(*argv_of(f), cwd=tmp_path, memory=MEMORY, timeout=120), code, words)


@pytest.mark.parametrize(("args", "code", "words"), [
    (["fleet", "collect"], EXIT_USAGE, "no source to collect from"),
    (["plan", "--fleet", "F", "--to", "rocm==6.2"], EXIT_USAGE, "not torch, cuda or python"),
    (["plan", "--fleet", "F", "--to", "cuda"], EXIT_USAGE, "no version"),
    (["plan", "--fleet", "F", "--to", "torch==2.15", "extra"], EXIT_USAGE, "unexpected word"),
    (["plan", "--fleet", "F", "--to", "torch==1.0"], EXIT_FAILED, "no torch release"),
])
def test_bad_arguments(tmp_path: Path, args: list[str], code: int, words: str) -> None:
    args = [str(FLEET / "fleet.toml") if a == "F" else a for a in args]
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == code, (r.returncode, r.stderr)
    assert words in r.stderr, r.stderr


def test_a_target_that_does_not_resolve_is_said_in_plans_words(tmp_path: Path) -> None:
    r = run_cli("plan", "--fleet", str(FLEET / "fleet.toml"), "--to", "torch==1.0", cwd=tmp_path)
    assert r.returncode == EXIT_FAILED and "--to torch==" in r.stderr, r.stderr
    assert "--torch " not in r.stderr, r.stderr


def test_slurm_without_scontrol_cannot_run(tmp_path: Path) -> None:
    r = run_cli("fleet", "collect", "--slurm", cwd=tmp_path, env={"PATH": str(tmp_path)})
    _refused(r, EXIT_CANNOT_RUN, "scontrol not found")


def test_doctor_json_carries_its_gpus_and_fleet_collect_reads_them(tmp_path: Path) -> None:
    """doctor --json of the recorded H100 host (its probe facts) says its driver and GPUs as
    data; fleet collect reads exactly those, not the findings' wording."""
    facts = FIXTURES / "doctor" / "h100-sxm-recorded"
    r = run_cli("doctor", "--json", "--facts", str(facts))
    host = json.loads(r.stdout)["host"]
    assert host["driver"].startswith("580.") and host["gpus"], host
    assert {g["cc"] for g in host["gpus"]} == {"9.0"}
    report = json.loads(r.stdout)
    for f in report["findings"]:  # the text is not what collect reads any more
        f["message"] = "reworded"
    (tmp_path / "h100-a.json").write_text(json.dumps(report))
    out = run_cli("fleet", "collect", "--doctor", str(tmp_path / "h100-a.json"), "--json",
                  cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (g,) = json.loads(out.stdout)["groups"]
    assert (g["driver"], g["gpus_per_node"], g["cc"]) == (host["driver"], len(host["gpus"]),
                                                        "9.0")


def test_collect_leaves_out_what_fleet_toml_cannot_hold(tmp_path: Path) -> None:
    """Ordinary but odd data (a node name with a space, a product with a comma, a count past
    the limit, a name that is not a string, a GPU the matrix does not know, a doctor file named
    with a space, one host given twice): each node is left out or counted once with a note, and
    what is written reads back (never the read-back guard's "a bug" error)."""
    def node(name: object, **labels: str) -> dict[str, object]:
        return {"metadata": {"name": name, "labels": labels}}

    h100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    items = [node("node with space", **h100),
             node("n2", **{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3,evil"}),
             node("n3", **h100, **{"nvidia.com/gpu.count": "9" * 30}), node({"x": 1}, **h100),
             node("n5", **{"nvidia.com/gpu.product": "Voodoo-5",
                           "nvidia.com/gpu.compute.major": "9",
                           "nvidia.com/gpu.compute.minor": "0"}),
             node("ok", **h100)]
    (tmp_path / "nodes.json").write_text(json.dumps({"items": items}))
    (tmp_path / "my host.json").write_text(DOCTOR.read_text())
    out = tmp_path / "fleet.toml"
    r = run_cli("fleet", "collect", "--kubectl", "nodes.json", "--doctor", "my host.json",
                "--doctor", str(DOCTOR), "--doctor", str(DOCTOR), "--out", str(out),
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "a bug" not in r.stderr and "Traceback" not in r.stderr
    for words in ("'node with space'", "n2", "n3", "n5", "'my host'", "given twice"):
        assert any(line.startswith("note: ") and words in line
                   for line in r.stderr.splitlines()), (words, r.stderr)
    text = out.read_text()
    assert 'hosts = ["ok"]' in text and 'hosts = ["doctor"]' in text


def test_a_team_image_on_its_own_base_is_noted(tmp_path: Path) -> None:
    """plan judges a team image's request; one built FROM its own base (whose NVIDIA_REQUIRE_CUDA
    only a build inspects) is said in a note, in the table and in the Markdown."""
    team = tmp_path / "envbuild.toml"
    team.write_text('[defaults]\nregistry = "r.example/t"\n[image.gpu]\ntarget = "cuda"\n'
                    'base_image = "nvidia/cuda:12.9.1-devel-ubuntu24.04"\n')
    for extra in ([], ["--markdown"]):
        r = run_cli("plan", "--fleet", str(FLEET / "fleet.toml"), "--to", "torch==2.15",
                    "--file", str(team), *extra, cwd=tmp_path)
        assert "[image.gpu] builds FROM nvidia/cuda:12.9.1-devel-ubuntu24.04" in r.stdout, r
