"""When the lock carries the native wheels, the lock is the whole truth (issue 49, item 4).

A workspace shaped like the team's (DESIGN.md section 11), locked by real uv: an exact
requires-python, three environments (macOS, Linux x86_64, Linux aarch64), extras `cpu` and
`gpu` declared as conflicting, a "native" wheel per Linux machine as `[tool.uv.sources]` URLs
(served by a loopback file server that honours ranges, as release-asset hosts do), a wheel
from an index that serves no hash and no size (as PyTorch's cu132 mirror serves torch), and a
git source from a local repository. Nothing is written by hand: the lock is uv's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpurl_tasks.config import PythonSelection, TargetSpec, load_config
from gpurl_tasks.dockerfile.generate import generate
from gpurl_tasks.dockerfile.recipe import slice_run
from gpurl_tasks.errors import LockError
from gpurl_tasks.plan.lock import install_closure, load_lock, lock_staleness
from gpurl_tasks.plan.lockcheck import ask_uv, stale_findings
from gpurl_tasks.plan.model import sync_selection_flags
from gpurl_tasks.plan.probe import probe_urls
from gpurl_tasks.plan.profile import local_install_flags
from gpurl_tasks.plan.report import render_steps
from gpurl_tasks.plan.sizes import SizeSources, package_sizes, urls_to_probe
from gpurl_tasks.plan.slices import SliceLine, render_slice, slice_line
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.writer.staging import install_command
from tests.support.git import git
from tests.support.local_parts import uv as find_uv
from tests.support.planning import plan_one
from tests.support.pyindex import make_wheel, serve_index
from tests.support.rangeserver import serve_files

pytestmark = pytest.mark.integration

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
HOST = TargetSpec(python=PY, arch="x86_64", glibc="2.36")
ABI3 = f"cp{sys.version_info.major}{sys.version_info.minor}-abi3"
NATIVE = "0.0.0.dev20260914+marin.abc1234.cu1"
MB = 1_000_000


def _native(assets: str, machine: str) -> str:
    """One machine's `[tool.uv.sources]` entry of the native wheel."""
    return (f'    {{ url = "{assets}/nativepkg-{NATIVE}-{ABI3}-manylinux_2_17_{machine}.whl", '
            f"marker = \"sys_platform == 'linux' and platform_machine == '{machine}'\" }},")


def _pyproject(index: str, assets: str, repo: Path) -> str:
    return f"""\
[project]
name = "team"
version = "0.1"
requires-python = "=={PY}.*"
dependencies = ["torchish==2.0+cu1", "plain-dep"]

[project.optional-dependencies]
cpu = ["pinned==1.0", "gitpkg"]
gpu = ["pinned==2.0", "nativepkg=={NATIVE} ; sys_platform == 'linux'"]

[tool.uv]
package = false
conflicts = [[{{ extra = "cpu" }}, {{ extra = "gpu" }}]]
environments = [
    "sys_platform == 'darwin'",
    "sys_platform == 'linux' and platform_machine == 'x86_64'",
    "sys_platform == 'linux' and platform_machine == 'aarch64'",
]

[tool.uv.sources]
nativepkg = [
{_native(assets, "x86_64")}
{_native(assets, "aarch64")}
]
gitpkg = {{ git = "{repo.as_uri()}" }}

[[tool.uv.index]]
url = "{index}"
default = true
"""


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[str, str]]]:
    """The locked workspace, its servers running; (workspace, uv's environment)."""
    uv = find_uv()
    base = tmp_path_factory.mktemp("team")
    wheels, assets = base / "wheels", base / "assets"
    make_wheel(wheels, "plain-dep", "1.0", payload_bytes=40_000)
    make_wheel(wheels, "pinned", "1.0", payload_bytes=10_000)
    make_wheel(wheels, "pinned", "2.0", payload_bytes=10_000)
    make_wheel(wheels, "torchish", "2.0+cu1", requires=["plain-dep"], payload_bytes=2 * MB)
    for machine in ("x86_64", "aarch64"):
        wheel = make_wheel(assets, "nativepkg", NATIVE, requires=["torchish"], payload_bytes=MB,
                           tag=f"{ABI3}-manylinux_2_17_{machine}", seed=len(machine))
        (assets / "mirror").mkdir(exist_ok=True)
        shutil.copy(wheel, assets / "mirror" / wheel.name)  # the same wheel, moved elsewhere
    repo = base / "gitpkg"
    (repo / "gitpkg").mkdir(parents=True)
    (repo / "gitpkg" / "__init__.py").write_text("")
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "gitpkg"\nversion = "0.3"\ndependencies = ["plain-dep"]\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n')
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "gitpkg 0.3")
    proj = base / "team"
    proj.mkdir()
    with serve_index(wheels, base / "index", unhashed=["torchish"]) as index, \
            serve_files(assets) as files:
        (proj / "pyproject.toml").write_text(_pyproject(index, files, repo))
        env = {**os.environ, "UV_CACHE_DIR": str(base / "cache"), "UV_PYTHON": sys.executable,
               "UV_PYTHON_DOWNLOADS": "never"}
        for key in ("PIP_FIND_LINKS", "UV_INDEX_URL", "UV_FROZEN", "UV_LOCKED", "UV_OFFLINE"):
            env.pop(key, None)
        done = subprocess.run([uv, "lock"], cwd=proj, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        yield proj, env


def test_uv_locks_the_team_shape(team: tuple[Path, dict[str, str]]) -> None:
    """The lock holds what the team's does: a hashless, sizeless index wheel, one URL wheel
    per Linux machine (a hash, no size), a git source and the conflict."""
    proj, _ = team
    lock = load_lock(proj / "uv.lock")
    (torch,) = lock.by_name("torchish")
    assert torch.source_kind == "registry" and torch.wheels
    assert all(w.hash is None and w.size is None for w in torch.wheels)
    native = lock.by_name("nativepkg")
    assert len(native) == 2 and {p.source_kind for p in native} == {"url"}
    assert all(w.hash and w.size is None for p in native for w in p.wheels)
    assert {p.source_kind for p in lock.by_name("gitpkg")} == {"git"}
    assert len(lock.conflicts) == 1 and len(lock.supported_markers) == 3


def _uv_check(proj: Path, env: dict[str, str]) -> bool:
    """`uv lock --check`, online (the loopback servers are up): True when current (a lock
    uv must change, or cannot re-resolve at all, is not)."""
    done = subprocess.run([find_uv(), "lock", "--check"], cwd=proj, env=env,
                          capture_output=True, text=True)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode == 0


def _gpurl_findings(proj: Path, env: dict[str, str]) -> tuple[list[str], list[str]]:
    """gpurl's verdict as `generate` takes it (uv asked offline first), and gpurl's own
    check alone (what it falls back on when uv cannot answer)."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        found = stale_findings(proj, proj / "uv.lock", where="pyproject.toml", uv=find_uv())
    own = lock_staleness((proj / "pyproject.toml").read_text(), load_lock(proj / "uv.lock"))
    return found, own


def test_the_fresh_lock_is_current_for_uv_and_for_gpurl(team: tuple[Path, dict[str, str]]) -> None:
    """The issue's false alarm: a URL-sourced requirement (`url = ...`, no specifier, beside
    the specifier of the machines the sources leave uncovered) is no difference."""
    proj, env = team
    assert _uv_check(proj, env)
    assert _gpurl_findings(proj, env) == ([], [])


EDITS = {
    "a specifier": ('"pinned==2.0"', '"pinned>=2.0"', "pinned"),
    "a URL source": ("/nativepkg-", "/mirror/nativepkg-", "nativepkg"),
    "a git revision": ('gitpkg = { git = "', 'gitpkg = { rev = "main", git = "', "gitpkg"),
    "the conflicts": ('conflicts = [[{ extra = "cpu" }, { extra = "gpu" }]]', "", "conflicts"),
    "a dependency": ('"plain-dep"]', '"plain-dep", "pinned"]', "pinned"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edit_that_makes_the_lock_stale_is_stale_for_both(
        team: tuple[Path, dict[str, str]], tmp_path: Path, edit: str) -> None:
    """Each edit uv calls stale, gpurl calls stale too (offline, from its own check: uv with
    no network and no cache cannot resolve again), naming what changed."""
    proj, env = team
    copy = tmp_path / "team"
    copy.mkdir()
    shutil.copy(proj / "uv.lock", copy / "uv.lock")
    old, new, named = EDITS[edit]
    text = (proj / "pyproject.toml").read_text()
    assert old in text
    (copy / "pyproject.toml").write_text(text.replace(old, new, 1))
    assert not _uv_check(copy, env)
    found, own = _gpurl_findings(copy, env)
    assert found == own and any(line.startswith(f"{named}:") for line in own), own


def test_uv_answers_current_offline_and_leaves_stale_to_gpurl(
        team: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """What uv 0.13.9 can answer offline with no cache: a current lock (from the lock and the
    workspace alone: the git repository and the servers are not read); not a stale one that
    needs an index. No uv at all is no answer either."""
    proj, env = team
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        assert ask_uv(proj, uv=find_uv()).current is True
        copy = tmp_path / "team"
        copy.mkdir()
        shutil.copy(proj / "uv.lock", copy / "uv.lock")
        (copy / "pyproject.toml").write_text(
            (proj / "pyproject.toml").read_text().replace('"pinned==2.0"', '"pinned>=2.0"'))
        stale = ask_uv(copy, uv=find_uv())
        assert stale.current is None and "Network connectivity is disabled" in stale.said
        assert ask_uv(proj, uv=str(tmp_path / "no-uv")).current is None


def test_uv_answers_stale_for_a_local_workspace(tmp_path: Path) -> None:
    """Where resolving needs nothing but local files (a path source), uv answers "stale"
    offline itself, and gpurl reports uv's words when its own check names nothing."""
    lib = tmp_path / "lib"
    (lib / "src" / "lib").mkdir(parents=True)
    (lib / "src" / "lib" / "__init__.py").write_text("")
    (lib / "pyproject.toml").write_text('[project]\nname = "lib"\nversion = "1.0"\n'
                                        "dependencies = []\n")
    proj = tmp_path / "proj"
    proj.mkdir()
    head = f'[project]\nname = "p"\nversion = "0.1"\nrequires-python = ">={PY}"\n'
    (proj / "pyproject.toml").write_text(head + 'dependencies = ["lib"]\n'
                                         '[tool.uv.sources]\nlib = { path = "../lib" }\n')
    env = {"UV_NO_CACHE": "1", "UV_PYTHON": sys.executable, "UV_PYTHON_DOWNLOADS": "never"}
    subprocess.run([find_uv(), "lock"], cwd=proj, env={**os.environ, **env}, check=True,
                   capture_output=True)
    (lib / "pyproject.toml").write_text('[project]\nname = "lib"\nversion = "1.1"\n'
                                        "dependencies = []\n")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        verdict = ask_uv(proj, uv=find_uv())
        assert verdict.current is False, verdict
        found = stale_findings(proj, proj / "uv.lock", where="pyproject.toml", uv=find_uv())
    assert lock_staleness((proj / "pyproject.toml").read_text(), load_lock(proj / "uv.lock")) == []
    assert len(found) == 1 and found[0].startswith("`uv lock --check` says: The lockfile at")


def test_a_workspace_member_s_lock_is_never_left_to_uv(tmp_path: Path) -> None:
    """Below a directory that declares a uv workspace, uv would check that workspace's lock,
    not the member's: gpurl's own check decides. The `uv` here is a stand-in that answers
    "current" for anything (so asking it would hide the member's stale lock)."""
    member = tmp_path / "root" / "member"
    member.mkdir(parents=True)
    (tmp_path / "root" / "pyproject.toml").write_text(
        '[project]\nname = "root"\nversion = "0.1"\n[tool.uv.workspace]\nmembers = ["member"]\n')
    lock = ('version = 1\nrevision = 3\nrequires-python = ">=3.11"\n\n[[package]]\n'
            'name = "m"\nversion = "0.1"\nsource = { virtual = "." }\n')
    (member / "uv.lock").write_text(lock)
    (member / "pyproject.toml").write_text('[project]\nname = "m"\nversion = "0.1"\n'
                                           'requires-python = ">=3.11"\ndependencies = ["six"]\n')
    says_current = tmp_path / "uv"
    says_current.write_text("#!/bin/sh\nexit 0\n")
    says_current.chmod(0o755)
    assert ask_uv(member, uv=str(says_current)).current is True
    found = stale_findings(member, member / "uv.lock", where="pyproject.toml", uv=str(says_current))
    assert found and any("six" in line for line in found), found


def _installed(venv: Path, env: dict[str, str]) -> dict[str, str]:
    out = subprocess.run([find_uv(), "pip", "list", "--python", str(venv / "bin" / "python"),
                          "--format", "json"], env=env, check=True, capture_output=True, text=True)
    return {entry["name"]: entry["version"] for entry in json.loads(out.stdout)}


def test_the_slices_install_the_lock_exactly_and_the_final_sync_keeps_them(
        team: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """The gpu variant on Linux x86_64: the URL wheel is an ordinary hashed slice line, the
    hashless index wheel `name==version` from its index in an unhashed slice, and the plan
    says so (text and JSON). The probe reaches both wheels for their sizes (the lock has
    none). Each slice is installed with the Dockerfile's own command (`slice_run`); the
    final `uv sync --frozen` then finds nothing to install or reinstall."""
    proj, env = team
    lock = load_lock(proj / "uv.lock")
    selection = PythonSelection(extras=("gpu",))
    closure = install_closure(lock, HOST, selection)
    lines = {p.name: slice_line(p) for p in closure.packages}
    (native,) = [p for p in closure.packages if p.name == "nativepkg"]
    (torch,) = [p for p in closure.packages if p.name == "torchish"]
    assert lines["nativepkg"] == SliceLine(
        requirement=f"nativepkg @ {native.source['url']} --hash={native.wheels[0].hash}",
        index=None, hashed=True)
    assert lines["torchish"] == SliceLine(requirement="torchish==2.0+cu1",
                                          index=torch.source["registry"], hashed=False)
    tags = target_tags(HOST)
    unknown = urls_to_probe(closure.packages, tags, SizeSources())
    assert set(unknown) >= {native.wheels[0].url, torch.wheels[0].url}
    probed, failed = probe_urls(unknown)
    assert failed == ()
    assert "installed" in probed[native.wheels[0].url]  # the asset host honours ranges
    sizes = package_sizes(closure.packages, tags, SizeSources(probed=probed))
    assert {s.name: s.source for s in sizes}["nativepkg"] == "probe"
    flags = sync_selection_flags(selection, local_flags=local_install_flags(lock, closure))
    plan = plan_one(sizes, cap=int(2.5 * MB), sync_flags=flags, lines=lines)
    assert [p.name for p in plan.unhashed] == ["torchish"]
    assert plan.to_json()["unhashed"] == [{"name": "torchish", "version": "2.0+cu1",
                                           "requirement": "torchish==2.0+cu1",
                                           "index": torch.source["registry"]}]
    assert f"installed without a hash, the lock records none (its index serves none): " \
           f"torchish==2.0+cu1 from {torch.source['registry']}" in render_steps(plan)
    (home,) = [layer for layer in plan.layers if "torchish" in layer.names]
    assert home.names == ("torchish",) and not home.hashed
    assert all(layer.hashed for layer in plan.layers if layer is not home)

    venv = tmp_path / "venv"
    subprocess.run([find_uv(), "venv", str(venv)], env=env, check=True, capture_output=True)
    step_env = {**env, "UV_PROJECT_ENVIRONMENT": str(venv), "VIRTUAL_ENV": str(venv),
                "UV_NO_CACHE": "1"}
    for layer in plan.layers:
        path = tmp_path / f"{layer.name}.txt"
        path.write_text(render_slice(SliceLine(requirement=p.requirement, index=p.index,
                                               hashed=p.hashed) for p in layer.packages))
        (command,) = slice_run(layer).commands
        words = [w for group in command.groups for w in group]
        words[words.index(layer.slice.image_path)] = str(path)
        subprocess.run([find_uv(), *command.head[1:], "--python", str(venv / "bin" / "python"),
                        *words], env=step_env, check=True, capture_output=True)
    installed = _installed(venv, env)
    assert installed == {p.name: p.version for p in closure.packages}
    done = subprocess.run([find_uv(), "sync", *(f for f in flags if not f.startswith("--no-install-")),
                           "--inexact"], cwd=proj, env=step_env, check=True, capture_output=True,
                          text=True)
    changes = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()[:2] in ("+ ", "- ")]
    assert changes == [], done.stderr


@pytest.mark.parametrize("hashed", [True, False])
def test_the_staging_install_takes_a_slice_as_it_is_hashed(
        team: tuple[Path, dict[str, str]], tmp_path: Path, hashed: bool) -> None:
    """The writer's staging install (local path and cluster job) runs --require-hashes on a
    hashed slice only: uv refuses any line without a hash in that mode, so the hashless
    index wheel's slice is staged without it (the hashes a line lists are checked anyway)."""
    proj, env = team
    lock = load_lock(proj / "uv.lock")
    name = "plain-dep" if hashed else "torchish"
    (pkg,) = lock.by_name(name)
    line = slice_line(pkg)
    assert line.hashed is hashed
    path = tmp_path / "slice.txt"
    path.write_text(render_slice([line]))
    venv = tmp_path / "venv"
    subprocess.run([find_uv(), "venv", str(venv)], env=env, check=True, capture_output=True)
    argv = install_command(prefix=str(tmp_path / "stage"), venv=str(venv), slice_file=str(path),
                           hashed=hashed)
    assert ("--require-hashes" in argv) is hashed
    subprocess.run([find_uv(), *argv[1:]], env={**env, "UV_NO_CACHE": "1"}, check=True,
                   capture_output=True)
    assert list((tmp_path / "stage").glob(f"lib/python*/site-packages/{name.replace('-', '_')}"))


def _adopted(root: Path, proj: Path, cache: dict[str, dict[str, int]]) -> Path:
    """A repository whose [tool.gpurl] plans the team workspace's gpu extra for this
    machine's Python, sizes from a probe cache (as `sizes --probe` writes it)."""
    shutil.copytree(proj, root / "team", ignore=shutil.ignore_patterns(".venv"))
    (root / "sizes.json").write_text(json.dumps(cache))
    (root / "pyproject.toml").write_text(f"""\
[project]
name = "repo"
version = "0"

[tool.gpurl]
default-profile = "team"

[tool.gpurl.python]
extras = ["gpu"]

[tool.gpurl.profiles.team]
workspace = "team"
target.python = "{PY}"
layers.size-cache = "sizes.json"
layers.cap = "2.5MB"
build.dockerfile = "docker/Dockerfile.team"
build.base-image = "debian:bookworm-slim"
""")
    return root


def test_generate_plans_the_team_lock_and_refuses_it_once_stale(
        team: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    """Through the config, as `invoke generate` runs: the lock is current (no false alarm),
    the hashless wheel's slice is written as `name==version` under its index and installed
    without --require-hashes, every other slice with it; after an edit uv calls stale,
    generate refuses with one error naming the difference and writes nothing."""
    proj, env = team
    lock = load_lock(proj / "uv.lock")
    closure = install_closure(lock, HOST, PythonSelection(extras=("gpu",)))
    probed, failed = probe_urls(urls_to_probe(closure.packages, target_tags(HOST), SizeSources()))
    assert failed == ()
    root = _adopted(tmp_path / "repo", proj, probed)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        generate(load_config(root, env={}))
        dockerfile = (root / "docker" / "Dockerfile.team").read_text()
        (torch_slice,) = [p for p in (root / "docker" / "layers").rglob("*.txt")
                          if "torchish" in p.read_text()]
        assert "torchish==2.0+cu1\n" in torch_slice.read_text()
        assert "--hash" not in torch_slice.read_text()
        runs = {ln.rsplit("/", 1)[1]: ln for ln in dockerfile.splitlines()
                if ln.startswith("RUN uv pip install --no-deps")}
        label = torch_slice.stem.split("-", 1)[1]
        assert runs.pop(f"{label}.txt") == f"RUN uv pip install --no-deps -r /tmp/gpurl-layers/{label}.txt"
        assert runs and all("--require-hashes" in ln for ln in runs.values()), runs
        pyproject = root / "team" / "pyproject.toml"
        pyproject.write_text(pyproject.read_text().replace('"pinned==2.0"', '"pinned>=2.0"'))
        before = {p: p.read_bytes() for p in (root / "docker").rglob("*") if p.is_file()}
        with pytest.raises(LockError) as caught:
            generate(load_config(root, env={}))
    assert caught.value.message.startswith("team/uv.lock is stale against team/pyproject.toml "
                                           "(1 difference(s)): pinned: ")
    assert {p: p.read_bytes() for p in (root / "docker").rglob("*") if p.is_file()} == before


def test_uv_is_asked_once_for_the_same_files_in_any_copy(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """uv's verdict is kept by the bytes it depends on: the same files checked again, in
    another copy of the project, do not run uv again; a changed path source's pyproject.toml,
    a changed lock or another uv do. An answer other than current or stale keeps none of
    uv's words (they may name an index with its credentials). The `uv` here is a stand-in
    that counts its calls: what is under test is when gpurl asks, not what uv answers."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    calls = tmp_path / "calls"

    def stand_in(name: str, *, says: str = "exit 0") -> str:
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\necho asked >> {calls}\n{says}\n")
        script.chmod(0o755)
        return str(script)

    def asked() -> int:
        return len(calls.read_text().splitlines()) if calls.exists() else 0

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "pyproject.toml").write_text('[project]\nname = "lib"\nversion = "1.0"\n')
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pyproject.toml").write_text(
        '[project]\nname = "p"\nversion = "0.1"\nrequires-python = ">=3.11"\n'
        'dependencies = ["lib"]\n[tool.uv.sources]\nlib = { path = "../lib" }\n')
    lock = ('version = 1\nrevision = 3\nrequires-python = ">=3.11"\n\n'
            '[[package]]\nname = "lib"\nversion = "1.0"\nsource = { directory = "../lib" }\n\n'
            '[[package]]\nname = "p"\nversion = "0.1"\nsource = { virtual = "." }\n'
            'dependencies = [{ name = "lib" }]\n\n[package.metadata]\n'
            'requires-dist = [{ name = "lib", directory = "../lib" }]\n')
    (proj / "uv.lock").write_text(lock)
    uv = stand_in("uv")

    def check(workspace: Path, with_uv: str = uv) -> list[str]:
        return stale_findings(workspace, workspace / "uv.lock", where="pyproject.toml", uv=with_uv)

    assert check(proj) == [] and asked() == 1
    copy = tmp_path / "copy"
    shutil.copytree(proj, copy)
    assert check(copy) == [] and check(proj) == [] and asked() == 1
    (tmp_path / "lib" / "pyproject.toml").write_text('[project]\nname = "lib"\nversion = "1.1"\n')
    check(proj)
    assert asked() == 2
    (proj / "uv.lock").write_text(lock + "\n")
    check(proj)
    assert asked() == 3
    check(proj, stand_in("other-uv"))
    assert asked() == 4
    canary = "ghp_CANARYlockVerdict7d1e"
    silent = stand_in("no-answer-uv", says=f"echo 'error: https://u:{canary}@index.test/simple' >&2"
                                            "\nexit 2")
    check(proj, silent)
    check(proj, silent)
    assert asked() == 5
    kept = "".join(p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
    assert kept and canary not in kept
