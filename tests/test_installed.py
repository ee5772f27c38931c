"""gpurl as a user installs it: the wheel `uv build` makes, installed by uv into a fresh
virtualenv outside this checkout (no gpurl source on sys.path), run in a scratch project that
is not gpurl's: examples/multiarch's pyproject, lock and sources in a git repository of their
own, with gpurl's own `multiarch` profile as its [tool.gpurl] (workspace "."). Real uv, real
git, dependencies from PyPI; the wheel is built and installed once for the module (the same
steps as benchmarks/installed.py, whose helpers these are)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from collections.abc import Mapping
from pathlib import Path

import pytest

from benchmarks.installed import install, render, scratch_project, user_env
from gpurl_tasks.adopt.shims import SHIMS
from tests.conftest import REPO_ROOT


def test_gpurl_s_own_tasks_py_is_the_shim_a_project_commits() -> None:
    assert (REPO_ROOT / "tasks.py").read_text() == SHIMS["tasks.py"]
    assert SHIMS["noxfile.py"].splitlines()[-1] in (REPO_ROOT / "noxfile.py").read_text()


def test_one_version_for_the_package_its_metadata_and_its_generated_files() -> None:
    import gpurl_tasks

    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert gpurl_tasks.__version__ == declared


def test_the_benchmark_table_is_against_the_floor_of_the_same_run() -> None:
    floor, version = "python -c 'import invoke' (floor)", "gpurl --version"
    table = render({"wheel": "gpurl-0.1.0-py3-none-any.whl", "wheel_bytes": 383_000, "runs": 3,
                    "python": "3.11.7", "cpus": 2,
                    "seconds": {floor: {"median": 0.5, "best": 0.4},
                                version: {"median": 1.25, "best": 1.0}}})
    assert "383 kB" in table and "| 0.500 | 0.400 | 1.0x |" in table
    assert f"| `{version}` | 1.250 | 1.000 | 2.5x |" in table


def _run(argv: list[str | Path], *, cwd: Path, env: Mapping[str, str],
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory, gpurl_wheel: Path) -> Path:
    """`uv build --wheel` of this checkout, installed with uv into a fresh virtualenv."""
    return install(gpurl_wheel, tmp_path_factory.mktemp("installed") / "venv")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/multiarch in a git repository of its own, with gpurl's `multiarch` profile."""
    return scratch_project(tmp_path_factory.mktemp("project") / "project")


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts}


@pytest.mark.integration
def test_the_installed_gpurl_is_the_wheel_s_with_every_file_it_reads(venv: Path, project: Path) -> None:
    """`gpurl --version` answers; gpurl_tasks is imported from the venv, never this checkout;
    every file of the package (templates, pins) is installed, not only its modules."""
    env = user_env(venv)
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
    Dockerfiles and scripts, never docs/config.md (gpurl's own page; the project's page of that
    name is left as it is), then `--check` passes."""
    env = user_env(venv)
    planned = _run(["gpurl", "plan", "--json"], cwd=project, env=env)
    assert planned.returncode == 0, planned.stderr
    variants = json.loads(planned.stdout)["variants"]
    assert set(variants) == {"h100", "gb200"}
    assert all(v["total_compressed_bytes"] > 0 for v in variants.values())
    own_page = project / "docs" / "config.md"  # the project's own page of that name
    own_page.parent.mkdir(exist_ok=True)
    own_page.write_text("# How we configure our trainer\n")
    before = _files(project)
    generated = _run(["gpurl", "generate"], cwd=project, env=env)
    assert generated.returncode == 0, generated.stderr
    written = _files(project) - before
    assert own_page.read_text() == "# How we configure our trainer\n"
    assert "docker/Dockerfile.multiarch" in written and "docker/Dockerfile.multiarch-gb200" in written
    assert all(w.startswith("docker/") or w == ".dockerignore" for w in written), sorted(written)
    checked = _run(["gpurl", "generate", "--check"], cwd=project, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.integration
def test_the_installed_gpurl_submits_its_own_modules_by_the_same_sha256(
        venv: Path, project: Path, tmp_path: Path) -> None:
    """`gpurl build --dry-run` from the wheel, outside any checkout: the job's zipapp is built
    from the installed package's module files, and its sha256 (which the script checks) is the
    one this checkout's files give: the same package, the same bytes, wherever it is installed."""
    from gpurl_tasks.cluster.kaniko import JOB_APP, job_app

    env = {**user_env(venv), "KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    assert _run(["gpurl", "generate"], cwd=project, env=env).returncode == 0
    shown = _run(["gpurl", "build", "--dry-run", "--json"], cwd=project, env=env)
    assert shown.returncode == 0, shown.stderr
    app = job_app()
    assert f"{JOB_APP}: {app.size} bytes, sha256 {app.sha256})" in shown.stderr, shown.stderr
    (command,) = json.loads(shown.stdout)["commands"]
    assert command[:3] == ["iris", "--cluster=cw-us-east-02a", "job"]


@pytest.mark.integration
def test_the_project_is_found_from_below_and_named_from_elsewhere(venv: Path, project: Path,
                                                                   tmp_path: Path) -> None:
    """From a subdirectory the nearest [tool.gpurl] above is the project; `--project DIR`
    names it from outside; outside any project: one error line, a hint, exit 2."""
    env = user_env(venv)
    at_root = json.loads(_run(["gpurl", "plan", "--json"], cwd=project, env=env).stdout)
    below = _run(["gpurl", "plan", "--json"], cwd=project / "src" / "gpurl_multiarch", env=env)
    assert below.returncode == 0 and json.loads(below.stdout) == at_root, below.stderr
    named = _run(["gpurl", "--project", project, "plan", "--json"], cwd=tmp_path, env=env)
    assert named.returncode == 0 and json.loads(named.stdout) == at_root, named.stderr
    for anywhere in (["--version"], ["--list"], ["plan", "--help"]):  # no project needed
        assert _run(["gpurl", *anywhere], cwd=tmp_path, env=env).returncode == 0, anywhere
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
    env = user_env(venv)
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


# --- project discovery, in-process --------------------------------------------------------


def test_the_project_is_the_nearest_pyproject_with_a_gpurl_table(tmp_path: Path) -> None:
    """A pyproject.toml without [tool.gpurl] on the way up is passed over (a workspace member
    of the project); the nearest one with the table wins; none at all is None."""
    from gpurl_tasks.cli import find_project

    outer, member = tmp_path / "repo", tmp_path / "repo" / "pkg" / "member"
    member.mkdir(parents=True)
    (outer / "pyproject.toml").write_text('[project]\nname = "x"\n\n[tool.gpurl]\n')
    (member / "pyproject.toml").write_text('[project]\nname = "member"\n')
    assert find_project(member) == find_project(outer) == outer
    (member / "pyproject.toml").write_text('[tool.gpurl.profiles.a]\nworkspace = "."\n')
    (member / "deeper").mkdir()
    assert find_project(member / "deeper") == member
    assert find_project(tmp_path) is None


def test_a_broken_pyproject_on_the_way_up_is_named(tmp_path: Path) -> None:
    from gpurl_tasks.cli import find_project
    from gpurl_tasks.errors import ConfigError

    (tmp_path / "pyproject.toml").write_text("[tool.gpurl\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml is not valid TOML"):
        find_project(tmp_path)


def test_gpurl_help_lists_the_project_flag() -> None:
    done = subprocess.run([sys.executable, "-m", "gpurl_tasks", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--project" in done.stdout, done.stderr
