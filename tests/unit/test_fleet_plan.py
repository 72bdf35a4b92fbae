"""`envbuild plan` on a fleet of Pascal, Volta, Ampere, Hopper and Blackwell groups, for several
`--to` targets read from the matrix (the newest torch, the one before it, the newest CUDA with
wheels, the newest Python). Each expected answer is derived here from the matrix rows (which
variants of the target release have a kernel for the group's arch, which Pythons it has, which
release last had the arch), never written down; every image the plan prints resolves."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import shlex

import pytest

from envbuild.common.errors import EnvbuildError
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
    return {"newest torch": ("torch", newest.version),
            "the torch before": ("torch", before.version),
            "newest CUDA": ("cuda", compat.wheel_cudas(m)[-1]),
            "newest Python": ("python", max(newest.python, key=version_key))}


def fits(wheel: str, cuda: str | None) -> bool:
    """A CUDA wheel in a `--cuda` image: the same major, not newer than the image's minor."""
    return not cuda or (wheel.split(".")[0] == cuda.split(".")[0]
                        and version_key(wheel) <= version_key(cuda))


def _expected(m: Matrix, release: str, cuda: str | None, cc: str, python: str) -> str:
    rel = m.torch_release(release)
    assert rel is not None
    if python and python not in rel.python:
        return fleet_plan.PYTHON
    wheels = [v for v in m.variants_of(release) if v.kind == "cuda" and fits(v.version, cuda)]
    if not any(compat.covers(v, cc) for v in wheels):
        return fleet_plan.GPU
    return "covered"


def _any_release_covers(m: Matrix, req: Request, cc: str) -> bool:
    """Some release that satisfies a change pinning no torch (its CUDA, its Python) has a
    wheel for cc."""
    arch = m.arch(cc)
    assert arch is not None
    return any(v.kind == "cuda" and compat.covers(v, cc)
               and version_key(v.version) >= version_key(arch.min_cuda or "0")
               and fits(v.version, req.cuda)
               and (not req.python or req.python in r.python)
               for r in m.torch for v in m.variants_of(r.version))


@pytest.mark.parametrize("target", ["newest torch", "the torch before", "newest CUDA",
                                    "newest Python"])
def test_each_group_as_the_matrix_says(m: Matrix, fl: Fleet, target: str) -> None:
    key, value = _targets(m)[target]
    req = fleet_plan.apply(Request(), [(key, value)])
    main = resolve(req, m)
    p = fleet_plan.plan(m, fl, [("default", req)], Request())
    assert not p.failed
    for j in p.judged:
        g = j.group
        # a change that pins no torch is judged on the release it resolves to for the group
        release = minor_of(main.torch if req.torch or j.spec is None else j.spec.torch)
        want = _expected(m, release, req.cuda, g.cc, g.python)
        if req.torch is None and j.status == fleet_plan.PYTHON:
            want = fleet_plan.PYTHON
        if req.torch is None and j.status != fleet_plan.GPU:
            assert _any_release_covers(m, req, g.cc)
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
        if j.status == fleet_plan.GPU and req.torch is None:  # no release fits the change
            assert not _any_release_covers(m, req, g.cc), (target, g.name, j.text)
            assert f"has {rules.arch_name(g.cc)}" in j.text
        elif j.status == fleet_plan.GPU:  # the arch and the releases named come from the rows
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


# -- review fixes (issue 24): platform, unpinned changes, one argv builder, targets, as built --
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from envbuild.core import platforms  # noqa: E402
from envbuild.core.fleet import Group  # noqa: E402
from envbuild.core.request import COMPONENTS, make_argv  # noqa: E402

ARM = "linux/arm64"
_SLOW = settings(max_examples=25, deadline=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture])


def _resolve_typed(argv: list[str]) -> tuple[int, str]:
    """`envbuild resolve` with the options of a printed make command, as typed: (rc, hash)."""
    from envbuild.cli import run

    assert argv[:2] == ["envbuild", "make"], argv
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = run(["resolve", *shlex.split(shlex.join(argv[2:])), "--json"])
    return rc, json.loads(out.getvalue())["spec_hash"] if rc == 0 else err.getvalue()


def _group(m: Matrix, gpu: str, driver: str, platform: str = platforms.AMD64,
           name: str = "g", python: str = "") -> Group:
    row = fleet_plan.gpus.lookup(m, gpu, "nvidia")
    assert row is not None
    return Group(name=name, gpu=gpu, cc=row.cc, driver=driver, platform=platform,
                 python=python)


def _newest_driver(m: Matrix) -> str:
    from envbuild.core.request import known_drivers

    return known_drivers(m)[-1]


def test_a_group_is_judged_on_its_own_platform_for_every_release(m: Matrix) -> None:
    """GH200 on linux/arm64 against each torch release: covered exactly when the release has an
    arm64 CUDA wheel with sm_90 (on_platform's rows, not the amd64 ones); its image is arm64,
    its make command says so and resolves as typed to the same spec."""
    arm = platforms.on_platform(m, ARM)
    g = _group(m, "GH200", _newest_driver(m), ARM, "gh")
    f = Fleet((g,))
    for rel in m.torch:
        p = fleet_plan.plan(m, f, [("default", Request(torch=rel.version))], Request())
        (j,) = p.judged
        has = any(v.kind == "cuda" and compat.covers(v, g.cc) for v in arm.variants_of(rel.version))
        assert (j.status in (fleet_plan.WORKS, fleet_plan.DRIVER)) == has, (rel.version, j.text)
        img = fleet_plan.image_of(p, "gh")
        assert img is not None and img.spec.platform == ARM, (rel.version, img)
        if has:
            assert compat.variant(arm, rel.version, img.spec.variant) is not None
        argv = img.argv()
        assert argv[argv.index("--platform") + 1] == ARM
        assert _resolve_typed(argv) == (0, img.spec.hash)


def test_only_groups_of_one_platform_share_an_image(m: Matrix) -> None:
    d = _newest_driver(m)
    f = Fleet((_group(m, "GH200", d, ARM, "arm"), _group(m, "H100", d, platforms.AMD64, "x86")))
    p = fleet_plan.plan(m, f, [("default", Request(torch=m.torch[-1].version))], Request())
    assert sorted((i.spec.platform, tuple(i.groups)) for i in p.images) == [
        (platforms.AMD64, ("x86",)), (ARM, ("arm",))]


def _all_pythons(m: Matrix) -> list[str]:
    return sorted({py for r in m.torch for py in r.python}, key=version_key)


@_SLOW
@given(data=st.data())
def test_a_change_that_pins_no_torch_is_resolved_per_group(m: Matrix, fl: Fleet,
                                                          data: st.DataObject) -> None:
    """`--to python X` / `--to cuda Y`: a group loses its GPU only when no release satisfying
    the change has its arch; it works as is exactly when resolve takes the change with its GPU
    and driver (what `envbuild resolve --python X --gpu G --driver D` says)."""
    key = data.draw(st.sampled_from(["python", "cuda"]))
    value = data.draw(st.sampled_from(_all_pythons(m) if key == "python"
                                      else compat.wheel_cudas(m)))
    req = fleet_plan.apply(Request(), [(key, value)])
    groups = tuple(dataclasses.replace(g, python="") for g in fl.groups)
    p = fleet_plan.plan(m, Fleet(groups), [("default", req)], Request())
    for j in p.judged:
        g = j.group
        ask = dataclasses.replace(req, gpus=(fleet_plan.gpu_arg(m, g),), driver=g.driver,
                                  platform=g.platform)
        try:
            resolve(ask, m)
            works = True
        except EnvbuildError:
            works = False
        assert (j.status == fleet_plan.WORKS) == works, (key, value, g.name, j.text)
        assert (j.status == fleet_plan.GPU) == (not _any_release_covers(m, req, g.cc)), \
            (key, value, g.name, j.text)
        img = fleet_plan.image_of(p, g.name)
        if j.status != fleet_plan.GPU and img is not None and key == "python":
            assert img.spec.python == value  # the image carries the change


_gpus = ["P100", "V100 32GB", "A100", "H100", "B200", "GH200", "L4"]


@_SLOW
@given(data=st.data())
def test_every_request_field_make_takes_is_printed(m: Matrix, data: st.DataObject) -> None:
    """The one request -> `envbuild make` builder: for generated requests, the command printed
    resolves as typed to the same spec (or both refuse)."""
    d = _newest_driver(m)
    gpus = tuple(data.draw(st.lists(st.sampled_from(_gpus), max_size=2, unique=True)))
    req = Request(
        target=data.draw(st.sampled_from([None, "cuda"])),
        torch=data.draw(st.sampled_from([None, *(r.version for r in m.torch[-4:])])),
        python=data.draw(st.sampled_from([None, *_all_pythons(m)[-3:]])),
        cuda=data.draw(st.sampled_from([None, *compat.wheel_cudas(m)[-2:]])),
        driver=data.draw(st.sampled_from([None, d])), gpus=gpus,
        flavor=data.draw(st.sampled_from([None, "base", "runtime", "devel"])),
        components=tuple(c for c in COMPONENTS if c == "torch" or data.draw(st.booleans())),
        forward_compat=bool(gpus) and data.draw(st.booleans()),
        platform=data.draw(st.sampled_from([platforms.AMD64, ARM])))
    if req.forward_compat:
        req = dataclasses.replace(req, driver=d)
    argv = make_argv(req)
    try:
        want: tuple[int, str] = (0, resolve(req, m).hash)
    except EnvbuildError:
        want = (-1, "")
    rc, got = _resolve_typed(argv)
    assert (rc == 0) == (want[0] == 0), (argv, got)
    if rc == 0:
        assert got == want[1], argv
    for c in COMPONENTS:
        assert (c not in req.components) == (["--without", c] == argv[argv.index(c) - 1:
                                                                     argv.index(c) + 1]
                                             if c in argv else False)


def test_fleet_images_keep_the_team_request(m: Matrix, fl: Fleet) -> None:
    """A team image without torchvision, runtime flavor: every image printed keeps both."""
    req = Request(torch=m.torch[-1].version, flavor="runtime",
                  components=("torch", "torchaudio"))
    p = fleet_plan.plan(m, fl, [("default", req)], req)
    for img in p.images:
        argv = img.argv()
        at = argv.index("torchvision")
        assert argv[at - 1:at + 1] == ["--without", "torchvision"]
        assert "--flavor" in argv and _resolve_typed(argv) == (0, img.spec.hash)


def test_two_team_images_keep_their_own_groups(m: Matrix, fl: Fleet) -> None:
    """A group joins only an image of the target it was judged against: with a newest-torch
    image and one a release before, both images are built, each for its own groups."""
    new, old = m.torch[-1].version, m.torch[-2].version
    p = fleet_plan.plan(m, fl, [("new", Request(torch=new)), ("old", Request(torch=old))],
                        Request())
    by = {j.group.name: j.target for j in p.judged}
    made = [i for i in p.images if not i.kept]
    assert {i.target for i in made} == {"new", "old"}, [(i.name, i.groups) for i in made]
    for img in made:
        assert all(by[g] == img.target for g in img.groups)
        want = new if img.target == "new" else old
        assert minor_of(img.spec.torch) == want


@pytest.mark.parametrize("python", _all_pythons(load()))
def test_a_verdict_names_the_wheel_of_its_image(m: Matrix, fl: Fleet, python: str) -> None:
    p = fleet_plan.plan(m, fl, [("default", Request(python=python))], Request())
    j_json = {g["group"]: g for g in p.to_json()["groups"]}
    for j in p.judged:
        img = fleet_plan.image_of(p, j.group.name)
        if j.spec is None or img is None or img.kept:
            continue
        assert (j.spec.torch, j.spec.variant) == (img.spec.torch, img.spec.variant), j.text
        assert j_json[j.group.name]["variant"] == img.spec.variant
        assert img.spec.variant in j.text


def test_a_cuda_pin_that_leaves_a_gpu_out_is_said_as_the_pin(m: Matrix, fl: Fleet) -> None:
    """A team image pinning an older CUDA (cuda = "12.6") moved to a release whose newer CUDA
    wheels have the group's arch: the pin loses the GPU, not the release; the CUDA named resolves
    for the group as typed. Every such (release, pin) the matrix has, for the Blackwell group."""
    g = next(x for x in fl.groups if x.name == "blackwell")
    cases = 0
    for rel in m.torch:
        cuda_wheels = [v for v in m.variants_of(rel.version) if v.kind == "cuda"]
        without = [v for v in cuda_wheels if not fleet_plan.runs_on(m, v, g.cc)]
        if not without or not any(fleet_plan.runs_on(m, v, g.cc) for v in cuda_wheels):
            continue
        pin = ".".join(without[0].version.split(".")[:2])
        if any(fleet_plan.runs_on(m, v, g.cc) and fits(v.version, pin) for v in cuda_wheels):
            continue  # the pin admits a wheel with the arch
        req = Request(target="cuda", torch=rel.version, cuda=pin)
        try:
            main = resolve(req, m)
        except EnvbuildError:
            continue
        j = fleet_plan.judge(m, g, req, main)
        assert j.status == fleet_plan.GPU and f"the CUDA {pin} pin has no" in j.text, j.text
        named = j.text.rpartition("--to cuda ")[2] if "--to cuda " in j.text else ""
        if named:
            resolve(dataclasses.replace(req, cuda=named, gpus=(fleet_plan.gpu_arg(m, g),)), m)
        cases += 1
    assert cases, "the matrix has no release with a CUDA wheel lacking sm_100 beside one with it"


def test_a_group_that_declares_its_python_gets_an_image_with_it(m: Matrix, fl: Fleet) -> None:
    """blackwell declares python 3.10 (its jobs run on it): wherever its verdict is an image of
    the target, that image is built for 3.10 and says so in its command."""
    for key, value in _targets(m).values():
        p = fleet_plan.plan(m, fl, [("t", fleet_plan.apply(Request(), [(key, value)]))],
                            Request())
        img = fleet_plan.image_of(p, "blackwell")
        if img is None:
            continue
        assert img.spec.python == "3.10", (key, value, img.name)
        assert img.argv()[img.argv().index("--python"):][:2] == ["--python", "3.10"]


@settings(max_examples=200, deadline=None)
@given(key=st.sampled_from(["torch", "cuda", "python", "TORCH", "rocm", ""]),
       value=st.text(max_size=80))
def test_any_to_value_is_a_change_or_a_usage_error_whose_examples_are_changes(
        key: str, value: str) -> None:
    """--to KEY VALUE with any text: a change, or a one-line UsageError; the --to examples its
    hint (and a refused target's hint, in plan's words) gives are themselves changes."""
    from envbuild.common.errors import UsageError

    try:
        fleet_plan.change(key, value)
    except UsageError as exc:
        assert "\n" not in exc.message
        for k, v in re.findall(r"--to (\w+)(?:==| )([\w.+]+)", exc.hint):
            fleet_plan.change(k, v)
    hint = fleet_plan._plan_words("examples: --torch 2.4, --torch 2.4.1, --torch '>=2.3,<2.6'")
    assert "'" not in hint
    for k, v in re.findall(r"--to (\w+)==([\w.+]+)", hint):
        fleet_plan.change(k, v)
