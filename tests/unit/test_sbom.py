"""The pure SBOM builder (envbuild/core/sbom.py): a recorded probe output of a real CPU image
(tests/fixtures/sbom) and CUDA-shaped facts turned into CycloneDX 1.6 JSON, checked against
CycloneDX's own schema (JsonStrictValidator) and for what it must say; any name, version or
licence an image could hold gives a valid BOM, never a crash."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envbuild.core import sbom
from tests.support import ROOT

RECORDED = ROOT / "tests" / "fixtures" / "sbom" / "probe-debian12-cpu.json"
WHEN = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SERIAL = "389bfbbe-00a4-5069-b6b7-aa890ab01db6"
BASE_DIGEST = "sha256:" + "b" * 64
IMAGE_ID = "sha256:" + "a" * 64


def recorded() -> dict[str, Any]:
    return dict(json.loads(RECORDED.read_text()))


def described(**kw: str) -> sbom.Described:
    args = {"name": "127.0.0.1:5000/team-test/team-a:torch2.13.0-py3.11-abc", "image_id": IMAGE_ID,
            "spec_hash": "291b2f2b9261",
            "base_ref": "127.0.0.1:5000/team-test-base/debian:bookworm",
            "base_digest": BASE_DIGEST, "base_digest_kind": "registry", "tool_version": "0.1.0",
            **kw}
    return sbom.Described(**args)


@cache
def _validator() -> Any:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    return JsonStrictValidator(SchemaVersion.V1_6)


def valid(text: str) -> dict[str, Any]:
    error = _validator().validate_str(text)
    assert error is None, error
    return dict(json.loads(text))


def bom(raw: Any, d: sbom.Described | None = None) -> dict[str, Any]:
    return valid(sbom.bom_json(sbom.facts(raw), d or described(), timestamp=WHEN, serial=SERIAL))


def by_name(b: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in b["components"]}


def props(c: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in c.get("properties", [])}


def cuda_facts() -> dict[str, Any]:
    """The recorded facts as a CUDA 13.0 image would hold them (names and versions of PyPI's
    torch 2.13.0 CUDA build, measured: shared/reference/environment.md)."""
    raw = recorded()
    for d in raw["dists"]:
        if d["name"] == "torch":
            d["version"] = "2.13.0"
    raw["torch"] = {"cuda": "13.0", "git_version": "cf30153c"}
    raw["dists"] += [{"name": n, "version": v, "license_expression": "", "license": "",
                      "classifiers": ["Other/Proprietary License"]}
                     for n, v in (("nvidia-cudnn-cu13", "9.20.0.48"),
                                  ("nvidia-nccl-cu13", "2.29.7"), ("nvidia-cublas", "13.1.1.3"),
                                  ("cuda-toolkit", "13.0.3.0"), ("nvidia_cuda_runtime", "13.0.96"))]
    return raw


# -- the recorded CPU image --------------------------------------------------------------------
def test_the_recorded_image_gives_a_valid_bom_that_says_what_it_holds() -> None:
    raw = recorded()
    b = bom(raw)
    assert b["bomFormat"] == "CycloneDX" and b["specVersion"] == sbom.SPEC_VERSION
    assert b["serialNumber"] == f"urn:uuid:{SERIAL}"
    names = by_name(b)
    # every dpkg package and every distribution of the venv, once
    assert len(b["components"]) == len(raw["dpkg"]) + len(raw["dists"]) + 3  # base, os, python
    torch = names["torch"]
    freeze = {d["name"]: d["version"] for d in raw["dists"]}
    assert torch["version"] == freeze["torch"] == "2.13.0+cpu"
    assert torch["purl"] == "pkg:pypi/torch@2.13.0%2Bcpu"
    assert torch["licenses"] == [{"expression": "Apache-2.0 AND Apache-2.0 WITH LLVM-exception"
                                                " AND BSD-2-Clause AND BSD-3-Clause AND BSL-1.0"
                                                " AND MIT"}]
    assert sbom.TORCH_CUDA not in props(torch)  # a CPU build: torch.version.cuda is None
    # its wheel's sha256, from the pip report of the torch step
    wheel = next(w for r in raw["pip_reports"] for w in r["install"] if w["name"] == "torch")
    assert torch["hashes"] == [{"alg": "SHA-256", "content": wheel["sha256"]}]
    assert props(torch)["envbuild:wheel"].startswith("torch-2.13.0+cpu-cp311")
    # no CUDA wheels in a CPU image
    assert not [c for c in b["components"] if sbom.CUDA_COMPONENT in props(c)]


def test_the_os_python_is_there_as_its_dpkg_package_and_the_interpreter_names_it() -> None:
    raw = recorded()
    b = bom(raw)
    names = by_name(b)
    dpkg = {p["name"]: p for p in raw["dpkg"]}
    for pkg in ("python3.11", "python3.11-minimal"):
        c = names[pkg]
        assert c["version"] == dpkg[pkg]["version"]
        assert c["purl"].startswith(f"pkg:deb/debian/{pkg}@") and "distro=debian-12" in c["purl"]
        assert "arch=amd64" in c["purl"]
    python = names["cpython"]
    assert python["type"] == "application" and python["version"] == raw["python"]["version"]
    assert props(python)["envbuild:os-package"] == "python3.11-minimal"
    deps = {d["ref"]: d.get("dependsOn", []) for d in b["dependencies"]}
    assert deps["interpreter"] == [names["python3.11-minimal"]["bom-ref"]]
    # the image depends on everything it lists
    assert len(deps["image"]) == len(b["components"])


_ARCHES = st.sampled_from(["amd64", "i386", "arm64", "armhf", "all", ""])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["libc6", "libgcc-s1", "zlib1g", "python3.11-minimal",
                                           "libstdc++6"]), _ARCHES), min_size=1, max_size=12,
                unique=True),
       st.sampled_from(["deb", "rpm"]))
def test_a_multi_arch_system_lists_each_package_of_each_architecture(
        rows: list[tuple[str, str]], manager: str) -> None:
    """libc6:amd64 and libc6:i386 are two packages (dpkg --add-architecture; rpm's multilib):
    one component each, with bom-refs of their own."""
    raw = recorded()
    raw["dpkg"] = [{"name": n, "version": "1.0", "arch": a, "source": ""} for n, a in rows] \
        if manager == "deb" else None
    raw["rpm"] = [{"name": n, "version": "1.0", "release": "1", "epoch": "", "arch": a,
                   "license": ""} for n, a in rows] if manager == "rpm" else None
    b = bom(raw)
    listed = [c for c in b["components"] if c.get("purl", "").startswith(f"pkg:{manager}/")]
    assert len(listed) == len(rows)
    assert sorted((c["name"], _arch(c["purl"])) for c in listed) == sorted(rows)
    refs = [c["bom-ref"] for c in b["components"]]
    assert len(refs) == len(set(refs))


def _arch(purl: str) -> str:
    from packageurl import PackageURL

    return str((PackageURL.from_string(purl).qualifiers or {}).get("arch", ""))  # type: ignore[union-attr]


def _multiarch(owner: dict[str, str]) -> dict[str, Any]:
    raw = recorded()
    pkg = next(p for p in raw["dpkg"] if p["name"] == "python3.11-minimal")
    raw["dpkg"].append({**pkg, "arch": "i386", "version": pkg["version"] + "~i386"})
    raw["python"]["owner"] = owner
    return raw


@pytest.mark.parametrize(("owner", "want"), [
    ({"manager": "dpkg", "name": "python3.11-minimal", "arch": "amd64"}, "amd64"),
    ({"manager": "dpkg", "name": "python3.11-minimal", "arch": "i386"}, "i386"),
    ({"manager": "dpkg", "name": "python3.11-minimal"}, None),  # which one: no guess
    ({"manager": "dpkg", "name": "python3.11-minimal", "arch": "arm64"}, None),
])
def test_the_interpreter_names_its_package_of_its_architecture(owner: dict[str, str],
                                                               want: str | None) -> None:
    b = bom(_multiarch(owner))
    deps = {d["ref"]: d.get("dependsOn", []) for d in b["dependencies"]}
    by_ref = {c["bom-ref"]: c for c in b["components"]}
    if want is None:
        assert deps.get("interpreter", []) == []
    else:
        (ref,) = deps["interpreter"]
        assert by_ref[ref]["name"] == "python3.11-minimal" and _arch(by_ref[ref]["purl"]) == want


def test_base_image_by_digest_and_the_image_itself() -> None:
    b = bom(recorded())
    base = next(c for c in b["components"] if c["bom-ref"] == "base-image")
    assert base["type"] == "container" and base["version"] == BASE_DIGEST
    assert base["hashes"] == [{"alg": "SHA-256", "content": "b" * 64}]
    assert base["purl"] == ("pkg:oci/debian@sha256:" + "b" * 64 + "?repository_url=127.0.0.1:5000"
                            "/team-test-base/debian&tag=bookworm")
    image = b["metadata"]["component"]
    assert image["type"] == "container" and image["name"] == "127.0.0.1:5000/team-test/team-a"
    assert image["version"] == "torch2.13.0-py3.11-abc"
    assert props(image)["envbuild:image-id"] == IMAGE_ID
    assert props(image)["envbuild:spec-hash"] == "291b2f2b9261"
    assert b["metadata"]["timestamp"].startswith("2026-11-29T12:00:00")
    assert b["metadata"]["tools"]["components"][0]["name"] == "envbuild"
    osc = next(c for c in b["components"] if c["type"] == "operating-system")
    assert (osc["name"], osc["version"]) == ("debian", "12")


def test_a_local_base_has_its_image_id_and_no_registry_purl() -> None:
    b = bom(recorded(), described(base_ref="local/debian:bookworm", base_digest=IMAGE_ID,
                                  base_digest_kind="image_id"))
    base = next(c for c in b["components"] if c["bom-ref"] == "base-image")
    assert "purl" not in base and props(base)["envbuild:digest-kind"] == "image_id"
    assert base["version"] == IMAGE_ID
    unknown = bom(recorded(), described(base_digest="", base_digest_kind="unknown"))
    base = next(c for c in unknown["components"] if c["bom-ref"] == "base-image")
    assert "version" not in base and "hashes" not in base


def test_cuda_wheels_are_named_as_they_are_and_torch_carries_its_cuda() -> None:
    b = bom(cuda_facts())
    names = by_name(b)
    assert props(names["torch"])[sbom.TORCH_CUDA] == "13.0"
    flagged = sorted(c["name"] for c in b["components"]
                     if props(c).get(sbom.CUDA_COMPONENT) == "true")
    assert flagged == ["cuda-toolkit", "nvidia-cublas", "nvidia-cudnn-cu13", "nvidia-nccl-cu13",
                       "nvidia_cuda_runtime"]
    assert names["nvidia_cuda_runtime"]["purl"] == "pkg:pypi/nvidia-cuda-runtime@13.0.96"
    assert names["nvidia-cudnn-cu13"]["licenses"] == [{"license": {"name": "Other/Proprietary "
                                                                           "License"}}]


def test_licences_only_where_recorded() -> None:
    lic = sbom.dist_licenses
    assert lic(sbom.PyDist("a", "1", license_expression="MIT OR Apache-2.0"))[0].value == \
        "MIT OR Apache-2.0"
    assert lic(sbom.PyDist("a", "1", license="MIT"))[0].id == "MIT"
    assert lic(sbom.PyDist("a", "1", license="UNKNOWN")) == []
    assert lic(sbom.PyDist("a", "1")) == []
    # a whole licence text in License: the classifiers instead
    text = "Copyright (c) someone\n\nPermission is hereby granted..."
    got = lic(sbom.PyDist("a", "1", license=text, classifiers=("OSI Approved :: BSD License",)))
    assert [x.name for x in got] == ["BSD License"]
    b = bom(recorded())
    assert all("licenses" not in c for c in b["components"]
               if props(c).get("envbuild:package-manager") == "dpkg")  # dpkg records none


def test_rpm_packages_with_epoch_release_and_licence() -> None:
    raw = recorded()
    raw["dpkg"] = None
    raw["os_release"] = {"ID": "rocky", "VERSION_ID": "9.4", "PRETTY_NAME": "Rocky Linux 9.4"}
    raw["rpm"] = [
        {"name": "python3.11", "epoch": "", "version": "3.11.7", "release": "1.el9_4",
         "arch": "x86_64", "license": "Python"},
        {"name": "openssl-libs", "epoch": "1", "version": "3.0.7", "release": "27.el9",
         "arch": "x86_64", "license": "ASL 2.0"},
        {"name": "glibc", "epoch": "", "version": "2.34", "release": "100.el9", "arch": "x86_64",
         "license": "LGPLv2+ and LGPLv2+ with exceptions and GPLv2+"},
    ]
    raw["python"]["owner"] = {"manager": "rpm", "name": "python3.11"}
    b = bom(raw)
    names = by_name(b)
    assert names["openssl-libs"]["purl"] == \
        "pkg:rpm/rocky/openssl-libs@3.0.7-27.el9?arch=x86_64&distro=rocky-9.4&epoch=1"
    assert names["openssl-libs"]["version"] == "3.0.7-27.el9"
    assert names["python3.11"]["licenses"] == [{"license": {"name": "Python"}}] or \
        names["python3.11"]["licenses"][0]["license"].get("id")
    assert names["glibc"]["licenses"]
    deps = {d["ref"]: d.get("dependsOn", []) for d in b["dependencies"]}
    assert deps["interpreter"] == [names["python3.11"]["bom-ref"]]


def test_nothing_readable_still_makes_a_valid_bom_that_says_so() -> None:
    b = bom({})
    assert [c["bom-ref"] for c in b["components"]] == ["base-image"]
    notes = props(b["metadata"])
    assert any("no OS package database" in v for v in notes.values())
    b = bom({"pip_reports": [{"step": "torch", "error": "unreadable"}], "dpkg": []})
    assert any("pip report of step torch" in v for v in props(b["metadata"]).values())


def test_installed_wheels_take_the_last_step_and_only_what_is_installed() -> None:
    raw = recorded()
    raw["pip_reports"].append({"step": "user", "install": [
        {"name": "Jinja2", "version": "3.1.6", "url": "https://x/jinja2-3.1.6-py3-none-any.whl",
         "sha256": "c" * 64},
        {"name": "gone", "version": "1", "url": "https://x/gone-1.whl", "sha256": "d" * 64}]})
    f = sbom.facts(raw)
    wheels = {w.name: w for w in f.installed_wheels()}
    assert wheels["Jinja2"].sha256 == "c" * 64 and wheels["Jinja2"].step == "user"
    assert "gone" not in wheels
    assert len(wheels) <= len(f.dists)


def test_hostile_facts_are_dropped_or_capped() -> None:
    raw = recorded()
    raw["dpkg"].append({"name": "", "version": "1"})  # no name: dropped
    raw["dpkg"].append(raw["dpkg"][0])  # twice: once
    raw["dpkg"].append("not a row")
    raw["dists"].append({"name": "x" * 100_000, "version": "1\n2\x00", "license": 7})
    raw["pip_reports"][0]["install"].append({"name": "torch", "version": "2.13.0+cpu",
                                             "sha256": "not-a-hash", "url": None})
    raw["python"] = {"version": 3}
    f = sbom.facts(raw)
    assert len(f.packages) == len(recorded()["dpkg"])
    long = next(d for d in f.dists if d.name.startswith("xxx"))
    assert len(long.name) == sbom.MAX_TEXT and long.version == "1 2 "
    assert f.interpreter is None
    b = bom(raw)
    assert "hashes" not in by_name(b)["torch"]  # the last report of it wins; no bad hash shows
    for junk in (None, [], "text", 7, {"dpkg": {"a": 1}, "dists": "x", "pip_reports": [None]}):
        bom(junk)


def test_the_same_facts_give_the_same_bytes() -> None:
    f = sbom.facts(recorded())
    one = sbom.bom_json(f, described(), timestamp=WHEN, serial=SERIAL)
    shuffled = recorded()
    shuffled["dpkg"].reverse()
    shuffled["dists"].reverse()
    two = sbom.bom_json(sbom.facts(shuffled), described(), timestamp=WHEN, serial=SERIAL)
    assert one == two


# -- any package an image could hold -----------------------------------------------------------
_texts = st.one_of(st.text(max_size=40), st.text(alphabet=" \t\n\r\x00\x7f/@?#%+:;,'\"\\",
                                                  max_size=20),
                   st.sampled_from(["", " ", "MIT", "MIT OR", "GPL-2.0+", "(MIT", "UNKNOWN",
                                    "Apache-2.0 WITH LLVM-exception", "a" * 5000, "ünï çødé",
                                    "1.0+cpu", "1:2.3-4ubuntu1", "../../etc", "pkg:pypi/x"]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(_texts, _texts, _texts, _texts), min_size=1, max_size=6),
       _texts, _texts)
def test_any_names_versions_and_licences_give_a_valid_bom(
        rows: list[tuple[str, str, str, str]], os_id: str, base_ref: str) -> None:
    raw: dict[str, Any] = {
        "os_release": {"ID": os_id, "VERSION_ID": os_id, "PRETTY_NAME": os_id},
        "dpkg": [{"name": n, "version": v, "arch": a, "source": ""} for n, v, a, _ in rows],
        "rpm": [{"name": n, "version": v, "release": a, "epoch": a, "arch": a, "license": lic}
                for n, v, a, lic in rows],
        "dists": [{"name": n, "version": v, "license_expression": lic, "license": a,
                   "classifiers": [lic, a]} for n, v, a, lic in rows],
        "python": {"version": rows[0][1] or "3", "implementation": rows[0][0],
                   "executable": rows[0][2], "owner": {"manager": "dpkg", "name": rows[0][0]}},
        "torch": {"cuda": rows[0][3]},
        "pip_reports": [{"step": os_id, "install": [
            {"name": n, "version": v, "url": a, "sha256": lic} for n, v, a, lic in rows]}],
    }
    d = described(name=base_ref or "x", base_ref=base_ref, base_digest=base_ref,
                  base_digest_kind=os_id)
    bom(copy.deepcopy(raw), d)


@pytest.mark.parametrize("name", ["torch", "Torch", "nvidia_cudnn_cu13", "cuda.bindings"])
def test_cuda_wheel_rule(name: str) -> None:
    assert sbom.is_cuda_wheel(name) == (name.lower() != "torch")
