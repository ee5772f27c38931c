"""The multi-platform fixture (examples/multiarch): its lock carries a wheel for linux x86_64
and for linux aarch64 of every package, served by its loopback index on port 5008; and
setup-local's index step fetches both machines' wheels for such a lock."""

from __future__ import annotations

import dataclasses
import re
import zipfile
from pathlib import Path

import pytest

from gpurl_tasks.config import PythonSelection, TargetSpec, load_config
from gpurl_tasks.errors import GpurlError
from gpurl_tasks.files import sha256_of
from gpurl_tasks.local import download, setup
from gpurl_tasks.plan.lock import Lock, install_closure, load_lock
from gpurl_tasks.plan.sizes import select_wheel
from gpurl_tasks.plan.target import target_tags
from tests.conftest import REPO_ROOT
from tests.support.local_parts import need

WORKSPACE = REPO_ROOT / "examples" / "multiarch"
MACHINES = ("x86_64", "aarch64")
ELF_MACHINE = {"x86_64": 62, "aarch64": 183}  # e_machine: EM_X86_64, EM_AARCH64


def _target(arch: str) -> TargetSpec:
    return TargetSpec(python="3.11", os="linux", arch=arch, glibc="2.36")


@pytest.fixture(scope="module")
def lock() -> Lock:
    return load_lock(WORKSPACE / "uv.lock")


@pytest.mark.parametrize("arch", MACHINES)
def test_every_package_has_a_wheel_for_the_machine(lock: Lock, arch: str) -> None:
    target = _target(arch)
    closure = install_closure(lock, target, PythonSelection())
    assert [p.name for p in closure.local] == ["gpurl-multiarch"]
    assert {p.name for p in closure.packages} >= {"charset-normalizer", "numpy", "pyyaml"}
    total = 0
    for pkg in closure.packages:
        wheel = select_wheel(pkg, target_tags(target))
        assert wheel is not None, f"{pkg.name} {pkg.version} has no wheel for {arch}"
        assert download.wheel_machines(wheel.filename) == {arch}, wheel.filename  # compiled
        assert wheel.size and wheel.hash, wheel.filename  # the planner needs the size
        assert wheel.url == f"http://127.0.0.1:5008/files/{wheel.filename}"
        total += wheel.size
    assert 5 * 10**6 < total < 40 * 10**6  # several slices under a small cap, a quick fetch


def test_the_lock_resolves_for_both_machines_only(lock: Lock) -> None:
    text = (WORKSPACE / "uv.lock").read_text()
    assert "required-markers" in text
    machines = {m for p in lock.packages for w in p.wheels
                for m in download.wheel_machines(w.filename)}
    assert machines == set(MACHINES)
    pyproject = (WORKSPACE / "pyproject.toml").read_text()
    assert 'url = "http://127.0.0.1:5008/simple"' in pyproject


def _elf_machines(wheel: Path) -> set[int]:
    with zipfile.ZipFile(wheel) as archive:
        heads = [archive.open(n).read(20) for n in archive.namelist()
                 if re.search(r"\.so(\.|$)", n)]
    return {int.from_bytes(h[18:20], "little") for h in heads if h[:4] == b"\x7fELF"}


def _trimmed_lock(names: set[str], dest: Path) -> Path:
    """The fixture's lock with only the `[[package]]` tables of `names` (a small download)."""
    head, *blocks = (WORKSPACE / "uv.lock").read_text().split("\n[[package]]\n")
    kept = [b for b in blocks if re.match(r'name = "([^"]+)"', b)[1] in names]  # type: ignore[index]
    dest.write_text("\n[[package]]\n".join([head, *kept]))
    return dest


@pytest.mark.integration
def test_setup_fills_the_index_with_every_machines_wheels(tmp_path: Path) -> None:
    """The real `pip download` for each machine the profile's variants build (h100 and gb200),
    with the hashes the lock records; the x86_64 wheel alone does not count as the aarch64
    one. A profile of x86_64 variants only fetches no aarch64 wheel from the same lock."""
    x86_only = load_config(REPO_ROOT, profile="demo", env={},
                           overrides={"workspace": "examples/multiarch"})
    config = load_config(REPO_ROOT, profile="multiarch", env={})
    config = dataclasses.replace(
        config, lock=_trimmed_lock({"charset-normalizer", "markupsafe"}, tmp_path / "uv.lock"))
    cache = tmp_path / "cache"
    directory = setup.index_dir(cache)
    directory.mkdir(parents=True)
    # the image's tools and build requirements stand present: only the lock's wheels are fetched
    tools = [pin.replace("==", "-") for pin in setup.image_tool_pins()]
    for name in (*tools, "rich-13.9.4", "uv_build-0.13.9", "wheel-0.45.1"):
        (directory / f"{name}-py3-none-any.whl").write_bytes(b"")
    lock = load_lock(config.lock)
    assert download.missing_platform_pins(lock, directory) == {
        m: download.pins_from_lock(lock) for m in MACHINES}
    try:
        status, _ = setup.package_index(config, cache)
    except GpurlError as exc:
        need(False, f"cannot download the fixture's wheels from the package index: {exc}")
    assert status == "downloaded"
    assert download.missing_platform_pins(lock, directory) == {}
    recorded = {w.filename: w for p in lock.packages for w in p.wheels}
    fetched = {p.name for p in directory.iterdir() if p.stat().st_size} & set(recorded)
    assert fetched == set(recorded)  # both machines' wheels, named as the lock names them
    for name in fetched:
        assert f"sha256:{sha256_of(directory / name)}" == recorded[name].hash, name
        (arch,) = download.wheel_machines(name)
        assert _elf_machines(directory / name) == {ELF_MACHINE[arch]}, name
        if name.startswith("charset_normalizer"):
            with zipfile.ZipFile(directory / name) as archive:
                points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
                assert "normalizer = " in archive.read(points).decode()
    assert setup.package_index(config, cache)[0] == "found"
    for name in [n for n in fetched if "aarch64" in n]:
        (directory / name).unlink()
    x86_only = dataclasses.replace(x86_only, lock=config.lock)
    assert setup.package_index(x86_only, cache)[0] == "found"  # its own machine's are there
