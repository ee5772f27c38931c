"""docs/adopt.md, followed literally in a scratch copy of examples/team/ (a repository laid out
like the team's: one root lock with conflicting extras for two machines, URL-sourced native
wheels, a hashless torch, a pin table), with its release assets and package index served on
127.0.0.1 (tests/support/team_fixture.py).

Every `console` block of the page runs, in page order, in one bash session at the copy's root
(each `$` command must end with the exit code its `# exit N` names, default 0). The page's
`toml` block is what `gpurl init` writes: the test checks the repository's pyproject.toml holds
it, byte for byte. Stand-ins: the KUBECONFIG file and the registry token (a dry run reaches
neither the cluster nor the registry).

`test_adopt_page_followed_literally` installs gpurl's wheel with `uv tool install` as the page
says; `test_adopt_page_through_init` runs the install and init sections with `gpurl` standing
for this checkout's program (the install line skipped), so a failure of init shows apart from
one of the wheel.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from gpurl_tasks.adopt.shims import SHIMS
from gpurl_tasks.config import load_config
from gpurl_tasks.errors import GpurlError
from tests.conftest import REPO_ROOT
from tests.support.doc_samples import command_and_exit, fenced
from tests.support.git import git
from tests.support.local_parts import need
from tests.support.team_fixture import fetch_pypi_wheels, serve_team, team_repository

PAGE = REPO_ROOT / "docs" / "adopt.md"
INSTALL = 'uv tool install "$WHEEL"'
TOKEN = "ghp_" + "x" * 36


def script(page: str, *, skip: tuple[str, ...] = ()) -> str:
    """The page's console blocks as one bash script, each command checked for its exit code
    (the commands in `skip` left out)."""
    lines = []
    for _, body in fenced(page, ("console",)):
        for line in body:
            assert line.startswith("$ "), f"a console line that is not a command: {line!r}"
            command, code = command_and_exit(line)
            if command in skip:
                continue
            lines += [f"echo {shlex.quote('+ ' + command)}", command,
                      f"rc=$?; [ $rc -eq {code} ] || {{ echo {shlex.quote(command)}"
                      f' "exited $rc, the page says {code}" >&2; exit 1; }}']
    return "\n".join(lines) + "\n"


def _written_config() -> str:
    (block,) = [body for _, body in fenced(PAGE.read_text(), ("toml",))]
    return "\n".join(block) + "\n"


def _environment(tmp_path: Path, path: Mapping[str, str]) -> dict[str, str]:
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPURL_", "GHCR_", "VIRTUAL_ENV", "UV_TOOL"))}
    env.update(HOME=str(tmp_path), KUBECONFIG=str(kube), GPURL_REGISTRY_TOKEN=TOKEN,
               GPURL_REGISTRY_USER="team-bot",
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", UV_CACHE_DIR=str(tmp_path / "uv-cache"), **path)
    return env


def _run(page: str, repo: Path, env: Mapping[str, str], *,
         skip: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-c", script(page, skip=skip)], cwd=repo, env=dict(env),
                          capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.integration
def test_adopt_page_through_init(tmp_path: Path) -> None:
    """Sections 1 and 2: the dry run writes nothing, the refusal exits 2, init writes the
    page's config and the shims, and the adoption commits cleanly."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_in = bin_dir / "gpurl"  # the installed entry point, from this checkout
    stand_in.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO_ROOT))} exec "
                        f"{shlex.quote(sys.executable)} -m gpurl_tasks \"$@\"\n")
    stand_in.chmod(0o755)
    repo = team_repository(tmp_path / "work" / "team")
    before = (repo / "pyproject.toml").read_text()
    env = _environment(tmp_path, {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"})
    page = PAGE.read_text().split("\n## 3.")[0]
    done = _run(page, repo, env, skip=(INSTALL,))
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "would write [tool.gpurl]" in done.stdout  # the dry run printed its config first
    assert "error: " in done.stderr and "conflicting" in done.stderr  # the refusal, exit 2
    written = (repo / "pyproject.toml").read_text()
    assert written == before + "\n" + _written_config()  # the page's block, the rest untouched
    for path, text in SHIMS.items():
        assert (repo / path).read_text() == text
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "log", "-1", "--format=%s").strip() == "Adopt gpurl"
    assert [v.name for v in load_config(repo, profile=None, env={}).variants] == [
        "standard", "megatron", "standard-arm64", "megatron-arm64"]


@pytest.mark.integration
@pytest.mark.slow
def test_adopt_page_followed_literally(tmp_path: Path, gpurl_wheel: Path) -> None:
    """The whole page, from `uv tool install` of the wheel built here to the four dry runs."""
    try:
        fetch_pypi_wheels(tmp_path / "pypi")
    except GpurlError as exc:
        need(False, f"cannot download the fixture's PyPI wheels: {exc}")
    tools = tmp_path / "tools"
    repo = team_repository(tmp_path / "work" / "team")
    env = _environment(tmp_path, {
        "PATH": f"{tools / 'bin'}{os.pathsep}{os.environ['PATH']}", "WHEEL": str(gpurl_wheel),
        "UV_TOOL_DIR": str(tools / "envs"), "UV_TOOL_BIN_DIR": str(tools / "bin")})
    with serve_team(tmp_path / "pypi", tmp_path / "serve"):
        done = _run(PAGE.read_text(), repo, env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert "run `gpurl sizes --probe`" in done.stderr  # hints name the command the user has
    head = git(repo, "rev-parse", "--short=7", "HEAD").strip()
    dry_runs = [line for line in done.stdout.splitlines() if line.startswith("iris ")]
    assert len(dry_runs) == 4, done.stdout[-2000:]
    assert all(f"-e GITSHA {head} " in line and "x" * 36 not in line for line in dry_runs)
    assert _written_config() in (repo / "pyproject.toml").read_text()
    for name in ("Dockerfile.gpu-rl", "Dockerfile.gpu-rl-megatron",
                 "Dockerfile.gpu-rl-standard-arm64", "Dockerfile.gpu-rl-megatron-arm64"):
        assert (repo / "docker" / name).is_file(), name
    assert git(repo, "status", "--porcelain") == ""
