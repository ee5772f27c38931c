"""The planned slices run by real uv against a package index on 127.0.0.1.

Real wheels are built in the test, served by a loopback HTTP index, locked by `uv lock`
(registry packages and a direct-URL wheel), planned by gpurl, written as slice files, installed
slice by slice with `uv pip install --no-deps --require-hashes` into a fresh venv; then the
final `uv sync --frozen` must find nothing to install or uninstall but the project itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement

from gpurl_tasks.config import PythonSelection, TargetSpec
from gpurl_tasks.plan.lock import install_closure, load_lock
from gpurl_tasks.plan.model import sync_selection_flags
from gpurl_tasks.plan.profile import local_install_flags
from gpurl_tasks.plan.sizes import SizeSources, package_sizes
from gpurl_tasks.plan.slices import SliceLine, render_slice, slice_line
from gpurl_tasks.plan.target import marker_environment, target_tags
from tests.support.local_parts import uv as find_uv
from tests.support.planning import plan_one
from tests.support.pyindex import make_wheel, serve_index

pytestmark = pytest.mark.integration

HOST_TARGET = TargetSpec(python=f"{sys.version_info.major}.{sys.version_info.minor}",
                         arch="x86_64", glibc="2.36")
MB = 1_000_000



@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """A locked project whose dependencies come from a loopback index."""
    uv = find_uv()
    base = tmp_path_factory.mktemp("chain")
    wheels = base / "wheels"
    make_wheel(wheels, "heavy-a", "1.0", requires=["light-one"], payload_bytes=3 * MB)
    make_wheel(wheels, "heavy-b", "2.0", requires=["light-two", "light-three"],
               payload_bytes=int(2.5 * MB))
    make_wheel(wheels, "heavy-c", "0.5", requires=["light-four"], payload_bytes=2 * MB)
    for i, name in enumerate(["light-one", "light-two", "light-three", "light-four", "light-five"]):
        make_wheel(wheels, name, "1.0", payload_bytes=20_000 * (i + 1))
    make_wheel(wheels, "windows-only", "1.0", payload_bytes=10_000)
    make_wheel(wheels, "dev-tool", "1.0", payload_bytes=10_000)
    make_wheel(wheels, "url-pkg", "1.0", payload_bytes=30_000)
    proj = base / "proj"
    proj.mkdir()
    with serve_index(wheels, base / "index") as url:
        files = url.removesuffix("/simple") + "/files"
        (proj / "pyproject.toml").write_text(
            "[project]\n"
            'name = "chain-root"\nversion = "0.1.0"\n'
            f'requires-python = ">={HOST_TARGET.python}"\n'
            'dependencies = ["heavy-a", "heavy-b", "light-five", '
            '"windows-only; sys_platform == \'win32\'", '
            f'"url-pkg @ {files}/url_pkg-1.0-py3-none-any.whl"]\n'
            "[project.optional-dependencies]\n"
            'gpu = ["heavy-c"]\n'
            "[dependency-groups]\n"
            'dev = ["dev-tool"]\n'
        )
        env = {**os.environ, "UV_INDEX_URL": url, "UV_CACHE_DIR": str(base / "cache"),
               "UV_PYTHON": sys.executable, "UV_PYTHON_DOWNLOADS": "never"}
        env.pop("PIP_FIND_LINKS", None)
        subprocess.run([uv, "lock"], cwd=proj, env=env, check=True, capture_output=True)
        yield proj, env


def _installed(venv: Path, env: dict[str, str]) -> set[str]:
    out = subprocess.run([find_uv(), "pip", "list", "--python", str(venv / "bin" / "python"),
                          "--format", "json"], env=env, check=True, capture_output=True, text=True)
    return {entry["name"] for entry in json.loads(out.stdout)}


def test_slices_install_the_plan_and_the_final_sync_finds_nothing_to_do(
        project: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    proj, env = project
    lock = load_lock(proj / "uv.lock")
    selection = PythonSelection(extras=("gpu",))
    closure = install_closure(lock, HOST_TARGET, selection)
    assert {p.source_kind for p in closure.packages} == {"registry", "url"}
    sizes = package_sizes(closure.packages, target_tags(HOST_TARGET),
                          SizeSources(overrides={"url-pkg": 30_000}))  # a URL source has no size
    flags = sync_selection_flags(selection, local_flags=local_install_flags(lock, closure))
    plan = plan_one(sizes, cap=int(3.2 * MB), basis="compressed", sync_flags=flags,
                    lines={p.name: slice_line(p) for p in closure.packages})
    assert len(plan.layers) >= 3
    venv = tmp_path / "venv"
    subprocess.run([find_uv(), "venv", str(venv)], env=env, check=True, capture_output=True)
    step_env = {**env, "UV_PROJECT_ENVIRONMENT": str(venv), "VIRTUAL_ENV": str(venv)}
    before = _installed(venv, env)
    for layer in plan.layers:
        path = tmp_path / f"{layer.name}.txt"
        path.write_text(render_slice(SliceLine(requirement=p.requirement, index=p.index,
                                               hashed=p.hashed) for p in layer.packages))
        argv = [find_uv(), "pip", "install", "--python", str(venv / "bin" / "python"), "--no-deps",
                *(["--require-hashes"] if layer.hashed else []), "-r", str(path)]
        subprocess.run(argv, env=step_env, check=True, capture_output=True)
        after = _installed(venv, env)
        assert before <= after and after - before == set(layer.names), layer.name
        before = after
    assert before == {p.name for p in closure.packages}
    final = [f for f in flags if not f.startswith("--no-install-")]
    done = subprocess.run([find_uv(), "sync", *final, "--inexact"], cwd=proj, env=step_env,
                          check=True, capture_output=True, text=True)
    changes = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()[:2] in ("+ ", "- ")]
    assert changes == [], done.stderr  # the project is virtual: nothing at all to do
    assert f"Checked {len(closure.packages)} packages" in done.stderr
    assert "windows-only" not in before and "dev-tool" not in before


def test_closure_matches_uv_export(project: tuple[Path, dict[str, str]]) -> None:
    proj, env = project
    for extras, no_dev in [((), True), (("gpu",), True), (("gpu",), False)]:
        argv = [find_uv(), "export", "--frozen", "--no-hashes", "--no-header", "--no-annotate",
                "--no-emit-project", *(["--no-dev"] if no_dev else [])]
        for extra in extras:
            argv += ["--extra", extra]
        out = subprocess.run(argv, cwd=proj, env=env, check=True, capture_output=True, text=True)
        closure = install_closure(load_lock(proj / "uv.lock"), HOST_TARGET,
                                  PythonSelection(extras=extras, no_dev=no_dev))
        assert {(p.name, p.version) for p in closure.packages} == _exported(out.stdout)


def _exported(text: str) -> set[tuple[str, str]]:
    """`uv export` requirements, markers evaluated for the host target."""
    env = marker_environment(HOST_TARGET)
    result = set()
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e")):
            continue
        req = Requirement(line)
        if req.marker is None or Marker(str(req.marker)).evaluate(env):
            if req.url:  # a direct-URL wheel: the version is in its file name
                result.add((req.name, req.url.rsplit("/", 1)[1].split("-")[1]))
                continue
            (spec,) = req.specifier
            result.add((req.name, spec.version))
    return result


def test_an_sdist_only_package_in_a_slice_is_built_and_the_sync_keeps_it(tmp_path: Path) -> None:
    """The sdist form (SkyRL's locks pin func-timeout and antlr4 as sdists): real uv locks a
    project against PyPI, builds the slice line `name==version --hash=<sdist hash>` under
    --require-hashes, and the final `uv sync --frozen` then has nothing to do."""
    uv = find_uv()
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "0.1"\nrequires-python = ">=3.11"\n'
        'dependencies = ["func-timeout==4.3.5"]\n')
    env = {**os.environ, "UV_NO_CACHE": "1", "UV_PYTHON": sys.executable,
           "UV_PYTHON_DOWNLOADS": "never"}
    env.setdefault("UV_SYSTEM_CERTS", "1")  # this machine reaches PyPI through the system store
    subprocess.run([uv, "lock"], cwd=proj, env=env, check=True, capture_output=True)
    (pkg,) = [p for p in load_lock(proj / "uv.lock").packages if p.name == "func-timeout"]
    assert not pkg.wheels and pkg.sdist is not None
    line = slice_line(pkg)
    assert line.requirement == f"func-timeout==4.3.5 --hash={pkg.sdist.hash}" and line.hashed
    sliced = tmp_path / "00-tail.txt"
    sliced.write_text(render_slice([line]))
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", str(venv)], env=env, check=True, capture_output=True)
    step_env = {**env, "UV_PROJECT_ENVIRONMENT": str(venv), "VIRTUAL_ENV": str(venv)}
    subprocess.run([uv, "pip", "install", "--python", str(venv / "bin" / "python"), "--no-deps",
                    "--require-hashes", "-r", str(sliced)], env=step_env, check=True,
                   capture_output=True)
    done = subprocess.run([uv, "sync", "--frozen", "--no-cache", "--no-install-project",
                           "--inexact"], cwd=proj, env=step_env, check=True, capture_output=True,
                          text=True)
    assert [ln for ln in done.stderr.splitlines() if ln.strip()[:2] in ("+ ", "- ")] == []
