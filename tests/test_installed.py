"""gpurl as a user installs it: the wheel `uv build` makes, installed by uv into a fresh
virtualenv outside this checkout (no gpurl source on sys.path), run in a scratch project that
is not gpurl's: examples/multiarch's pyproject, lock and sources in a git repository of their
own, with gpurl's own `multiarch` profile as its [tool.gpurl] (workspace "."). Real uv, real
git, dependencies from PyPI; the wheel is built and installed once for the module."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from gpurl_tasks.shims import SHIMS
from tests.conftest import REPO_ROOT

MULTIARCH = REPO_ROOT / "examples" / "multiarch"
PROFILE_HEADER = "[tool.gpurl.profiles.multiarch]\n"


def test_gpurl_s_own_tasks_py_is_the_shim_a_project_commits() -> None:
    assert (REPO_ROOT / "tasks.py").read_text() == SHIMS["tasks.py"]
    assert SHIMS["noxfile.py"].splitlines()[-1] in (REPO_ROOT / "noxfile.py").read_text()


def _env(venv: Path) -> dict[str, str]:
    """The user's shell with the venv first on PATH: no PYTHONPATH, no GPURL_* setting."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPURL_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", "UV_SYSTEM_CERTS": "1"}


def _run(argv: list[str | Path], *, cwd: Path, env: Mapping[str, str],
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`uv build --wheel` of this checkout, installed with uv into a fresh virtualenv."""
    root = tmp_path_factory.mktemp("installed")
    env = _env(root / "venv")
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    built = _run([uv, "build", "--wheel", "--quiet", "--out-dir", root / "dist", REPO_ROOT],
                 cwd=root, env=env)
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "dist").glob("gpurl-*.whl")
    steps: list[list[str | Path]] = [
        [uv, "venv", "--quiet", "--python", sys.executable, root / "venv"],
        [uv, "pip", "install", "--quiet", "--python", root / "venv" / "bin" / "python", wheel]]
    for argv in steps:
        done = _run(argv, cwd=root, env=env)
        assert done.returncode == 0, done.stderr
    return root / "venv"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A git repository holding examples/multiarch and gpurl's `multiarch` profile (its own
    tables only, as a user's pyproject would hold them), committed."""
    root = tmp_path_factory.mktemp("project")
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy(MULTIARCH / name, root / name)
    for name in ("src", "cloud"):
        shutil.copytree(MULTIARCH / name, root / name)
    ours = (REPO_ROOT / "pyproject.toml").read_text()
    start = ours.index(PROFILE_HEADER)
    after = re.search(r"^\[tool\.gpurl\.profiles\.(?!multiarch[.\]])", ours[start:], re.MULTILINE)
    section = ours[start:start + after.start()] if after else ours[start:]
    section = section.replace('workspace = "examples/multiarch"', 'workspace = "."')
    with (root / "pyproject.toml").open("a") as pyproject:
        pyproject.write(f'\n[tool.gpurl]\ndefault-profile = "multiarch"\n\n{section}\n')
    tomllib.loads((root / "pyproject.toml").read_text())  # still one valid file
    for argv in (["git", "init", "-q"], ["git", "add", "-A"],
                 ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "init"]):
        subprocess.run(argv, cwd=root, check=True, capture_output=True)
    return root


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


@pytest.mark.integration
def test_the_installed_gpurl_is_the_wheel_s_with_every_file_it_reads(venv: Path, project: Path) -> None:
    """`gpurl --version` answers; gpurl_tasks is imported from the venv, never this checkout;
    every file of the package (templates, pins) is installed, not only its modules."""
    env = _env(venv)
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    shown = _run(["gpurl", "--version"], cwd=project, env=env)
    assert (shown.returncode, shown.stdout) == (0, f"gpurl {version}\n"), shown.stderr
    found = _run(["python", "-c", "import gpurl_tasks; print(gpurl_tasks.__file__)"],
                 cwd=project, env=env)
    package = Path(found.stdout.strip()).parent
    assert package.is_relative_to(venv) and not package.is_relative_to(REPO_ROOT), found
    tracked = subprocess.run(["git", "ls-files", "gpurl_tasks"], cwd=REPO_ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    wanted = {Path(t).relative_to("gpurl_tasks") for t in tracked
              if not t.endswith(".shellcheckrc")}  # the templates' lint config, not read at run time
    missing = {str(p) for p in wanted if not (package / p).is_file()}
    assert not missing, f"the wheel lacks {sorted(missing)}"


@pytest.mark.integration
def test_plan_and_generate_work_on_the_project_and_write_only_its_files(venv: Path, project: Path) -> None:
    """`gpurl plan --json` is a real plan of both variants; `generate` writes the project's
    Dockerfiles and scripts (no docs/config.md: gpurl's own page), then `--check` passes."""
    env = _env(venv)
    planned = _run(["gpurl", "plan", "--json"], cwd=project, env=env)
    assert planned.returncode == 0, planned.stderr
    variants = json.loads(planned.stdout)["variants"]
    assert set(variants) == {"h100", "gb200"}
    assert all(v["total_compressed_bytes"] > 0 for v in variants.values())
    before = _files(project)
    generated = _run(["gpurl", "generate"], cwd=project, env=env)
    assert generated.returncode == 0, generated.stderr
    written = _files(project) - before
    assert "docker/Dockerfile.multiarch" in written and "docker/Dockerfile.multiarch-gb200" in written
    assert all(w.startswith("docker/") or w == ".dockerignore" for w in written), sorted(written)
    checked = _run(["gpurl", "generate", "--check"], cwd=project, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.integration
def test_the_project_is_found_from_below_and_named_from_elsewhere(venv: Path, project: Path,
                                                                   tmp_path: Path) -> None:
    """From a subdirectory the nearest [tool.gpurl] above is the project; `--project DIR`
    names it from outside; outside any project: one error line, a hint, exit 2."""
    env = _env(venv)
    at_root = json.loads(_run(["gpurl", "plan", "--json"], cwd=project, env=env).stdout)
    below = _run(["gpurl", "plan", "--json"], cwd=project / "src" / "gpurl_multiarch", env=env)
    assert below.returncode == 0 and json.loads(below.stdout) == at_root, below.stderr
    named = _run(["gpurl", "--project", project, "plan", "--json"], cwd=tmp_path, env=env)
    assert named.returncode == 0 and json.loads(named.stdout) == at_root, named.stderr
    lost = _run(["gpurl", "plan"], cwd=tmp_path, env=env)
    assert lost.returncode == 2 and "Traceback" not in lost.stderr
    error, hint = lost.stderr.splitlines()
    assert error.startswith("error: no gpurl project") and str(tmp_path) in error
    assert hint.strip().startswith("hint:") and "--project" in hint
    as_json = _run(["gpurl", "plan", "--json"], cwd=tmp_path, env=env)
    failure = json.loads(as_json.stdout)
    assert as_json.returncode == 2 and failure["exit_code"] == 2 and failure["hint"]
    missing = _run(["gpurl", "--project", tmp_path / "nowhere", "plan"], cwd=tmp_path, env=env)
    assert missing.returncode == 2 and missing.stderr.startswith("error: --project ")


@pytest.mark.integration
def test_the_committed_shims_give_invoke_and_nox_gpurl_s_tasks_and_sessions(venv: Path,
                                                                           project: Path) -> None:
    """With the two files a project commits, `invoke` and `nox` of the venv run gpurl there:
    the sessions run in nox's own environment (no virtualenv synced from gpurl's lock)."""
    env = _env(venv)
    for name, text in SHIMS.items():
        (project / name).write_text(text)
    listed = _run(["invoke", "--list"], cwd=project, env=env)
    assert listed.returncode == 0, listed.stderr
    assert {"build", "verify-layers", "rebuild-needed", "pin"} <= set(listed.stdout.split())
    sessions = _run(["nox", "-l"], cwd=project, env=env)
    assert sessions.returncode == 0, sessions.stderr
    assert all(f"- {s} ->" in sessions.stdout for s in ("verify-layers", "pin", "build"))
    helped = _run(["nox", "-s", "verify-layers", "--", "--help"], cwd=project, env=env)
    assert helped.returncode == 0 and "Usage: gpurl" in helped.stdout, helped.stderr
    refused = _run(["nox", "-s", "verify-layers", "--", "not a ref", "--json"], cwd=project, env=env)
    assert refused.returncode == 2 and "not a ref" in json.loads(refused.stdout)["error"]
    assert not (project / ".nox").exists()  # no session virtualenv
    planned = _run(["invoke", "plan", "--json"], cwd=project / "src", env=env)
    assert planned.returncode == 0 and set(json.loads(planned.stdout)["variants"]) == {"h100", "gb200"}
