"""`envbuild plan` on a fleet of Pascal, Volta, Ampere, Hopper and Blackwell groups, for several
`--to` targets read from the matrix (the newest torch, the one before it, the newest CUDA with
wheels, the newest Python). Each expected answer is derived here from the matrix rows (which
variants of the target release have a kernel for the group's arch, which Pythons it has, which
release last had the arch), never written down; every image the plan prints resolves."""

from __future__ import annotations

import contextlib
import io
import json
import shlex

import pytest

from envbuild.common.versions import branch_of, minor_of, version_key
from envbuild.core import compat, fleet_plan
from envbuild.core.fleet import Fleet, parse
from envbuild.core.request import Request
from envbuild.core.resolve import resolve
from envbuild.matrix import Matrix, load
from envbuild.validator import rules
from tests.support import FIXTURES

FLEET = FIXTURES / "fleet" / "fleet.toml"


@pytest.fixture(scope="module")
def m() -> Matrix:
    return load()


@pytest.fixture(scope="module")
def fl(m: Matrix) -> Fleet:
    return parse(FLEET.read_text(), FLEET, m)


def _targets(m: Matrix) -> dict[str, tuple[str, str]]:
    newest, before = m.torch[-1], m.torch[-2]
    return {"newest torch": ("torch", newest.version), "the torch before": ("torch", before.version),
            "newest CUDA": ("cuda", compat.wheel_cudas(m)[-1]),
            "newest Python": ("python", max(newest.python, key=version_key))}


def _expected(m: Matrix, release: str, cuda: str | None, cc: str, python: str) -> str:
    rel = m.torch_release(release)
    assert rel is not None
    if python and python not in rel.python:
        return fleet_plan.PYTHON
    wheels = [v for v in m.variants_of(release) if v.kind == "cuda"
              and (not cuda or v.version == cuda)]
    if not any(compat.covers(v, cc) for v in wheels):
        return fleet_plan.GPU
    return "covered"


@pytest.mark.parametrize("target", ["newest torch", "the torch before", "newest CUDA",
                                    "newest Python"])
def test_each_group_as_the_matrix_says(m: Matrix, fl: Fleet, target: str) -> None:
    key, value = _targets(m)[target]
    req = fleet_plan.apply(Request(), [(key, value)])
    main = resolve(req, m)
    release = minor_of(main.torch)
    p = fleet_plan.plan(m, fl, [("default", req)], Request())
    assert not p.failed
    for j in p.judged:
        g = j.group
        want = _expected(m, release, req.cuda, g.cc, g.python)
        if want == "covered":
            assert j.status in (fleet_plan.WORKS, fleet_plan.DRIVER), (target, g.name, j.text)
            assert j.spec is not None and minor_of(j.spec.torch) == release
            v = compat.variant(m, release, j.spec.variant)
            assert v is not None and compat.covers(v, g.cc)
            if j.status == fleet_plan.WORKS:  # it runs on the driver the group has
                assert compat.how_runs(m, g.driver, v.version)
            else:  # the floor named is newer than the group's driver, with its branch
                assert version_key(j.need_driver) > version_key(g.driver)
                assert f"driver >= {j.need_driver} (branch R{branch_of(j.need_driver)})" \
                    in j.text
        else:
            assert j.status == want, (target, g.name, j.text)
        if j.status == fleet_plan.GPU:  # the arch and the releases named come from the rows
            having = compat.covering(m, g.cc)
            last = having[-1]
            releases = [r.version for r in m.torch]
            dropped = releases[releases.index(last.release) + 1]
            assert j.arch == rules.arch_name(g.cc)
            assert f"no {j.arch} in torch {release}" in j.text
            assert f"last in torch {last.release} {last.tag}, dropped in {dropped}" in j.text
        if j.status == fleet_plan.PYTHON:
            last_py = next(r.version for r in reversed(m.torch) if g.python in r.python)
            assert f"{g.python} last in torch {last_py}" in j.text


@pytest.mark.parametrize("target", ["newest torch", "the torch before", "newest CUDA",
                                    "newest Python"])
def test_the_images_cover_every_group_and_each_resolves(m: Matrix, fl: Fleet,
                                                        target: str) -> None:
    from envbuild.cli import run

    key, value = _targets(m)[target]
    p = fleet_plan.plan(m, fl, [("default", fleet_plan.apply(Request(), [(key, value)]))],
                        Request())
    covered = [g for i in p.images for g in i.groups]
    assert sorted(covered) == sorted(g.name for g in fl.groups)  # each group once
    by = {g.name: g for g in fl.groups}
    for img in p.images:
        v = compat.variant(m, minor_of(img.spec.torch), img.spec.variant)
        assert v is not None
        for name in img.groups:
            g = by[name]
            assert compat.covers(v, g.cc), (img.name, name)
            if img.kept:  # a kept image runs on the group's driver as it is
                assert compat.how_runs(m, g.driver, v.version), (img.name, name)
        argv = shlex.split(img.to_json()["command"])
        assert argv[:2] == ["envbuild", "make"]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            assert run(["resolve", *argv[2:], "--json"]) == 0, (argv, err.getvalue())
        assert json.loads(out.getvalue())["spec_hash"] == img.spec.hash


def test_the_newest_torch_keeps_an_image_for_what_it_drops(m: Matrix, fl: Fleet) -> None:
    """The issue's example: the groups the newest release loses keep the newest wheel that
    still has their arch (a cu126 image for the Pascal partition, as the matrix is now)."""
    newest = m.torch[-1].version
    p = fleet_plan.plan(m, fl, [("default", Request(torch=newest))], Request())
    lost = [j.group for j in p.judged if j.status == fleet_plan.GPU]
    assert lost, "the newest torch drops no arch of the fixture: pick a newer fleet"
    for g in lost:
        img = fleet_plan.image_of(p, g.name)
        assert img is not None and img.kept
        last = compat.covering(m, g.cc)[-1]
        assert (minor_of(img.spec.torch), img.spec.variant) == (last.release, last.tag)


def test_a_group_no_image_covers_fails_the_plan(m: Matrix) -> None:
    """A Kepler group on a driver older than CUDA 11's minor-version floor: no wheel with its
    arch runs on it (checked against the matrix here), so nothing covers it."""
    old = "418.67"
    assert not any(compat.how_runs(m, old, v.version) for v in compat.covering(m, "3.7"))
    f = parse(f'[group.kepler]\ngpu = "K80"\ndriver = "{old}"\n', FLEET, m)
    p = fleet_plan.plan(m, f, [("default", Request(torch=m.torch[-1].version))], Request())
    assert p.failed and p.uncovered == ("kepler",)
    assert p.judged[0].status == fleet_plan.GPU


@pytest.mark.parametrize(("key", "value"), [("torch", "==2.15"), ("TORCH", "2.15"),
                                            ("cuda", "13.2"), ("python", " 3.14 ")])
def test_changes_are_read(key: str, value: str) -> None:
    k, v = fleet_plan.change(key, value)
    assert k == key.lower() and v == value.strip().removeprefix("==")


@pytest.mark.parametrize(("key", "value"), [("rocm", "6.2"), ("torch", ""), ("cuda", "==")])
def test_a_bad_change_is_a_usage_error(key: str, value: str) -> None:
    from envbuild.common.errors import UsageError

    with pytest.raises(UsageError):
        fleet_plan.change(key, value)
