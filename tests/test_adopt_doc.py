"""docs/adopt.md, followed literally in a scratch copy of examples/skyrl/ (a repository laid
out like SkyRL: a workspace, a symlinked sibling path dependency, two variants), through
`invoke build --dry-run`.

Every `console` block of the page runs, in page order, in one bash session at the copy's root
(each `$` command must end with the exit code its `# exit N` names, default 0); every `toml`
block is appended to the root's pyproject.toml where the page puts it. gpurl is the checkout
under test, reached only through `$GPURL` (it sits nowhere near the copy). The copy's
`.gitignore` lacks a trailing newline, as the one that broke did; it runs with the fixture's
launcher and without one (the page creates it). Stand-ins: the KUBECONFIG file and the
registry token (a dry run reaches neither the cluster nor the registry).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.support.doc_samples import command_and_exit, fenced
from tests.support.git import git

PAGE = REPO_ROOT / "docs" / "adopt.md"
FIXTURE = "examples/skyrl"


LAUNCHER = "skyrl-train/cloud/iris/launch_rl_iris.py"


def _repository(dest: Path, *, launcher: bool = True) -> Path:
    """examples/skyrl/'s tracked files (the symlink kept a link) as a repository of its own,
    with a `.gitignore` that does not end in a newline."""
    listed = git(REPO_ROOT, "ls-files", "-z", FIXTURE).split("\0")
    for name in filter(None, listed):
        src, target = REPO_ROOT / name, dest / Path(name).relative_to(FIXTURE)
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            target.write_bytes(src.read_bytes())
    if not launcher:
        (dest / LAUNCHER).unlink()
    (dest / ".gitignore").write_text("/.venv\n*.log")
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "an existing repository")
    return dest


def script(page: str) -> str:
    """The page as one bash script: each command checked for its exit code, each toml block
    appended to pyproject.toml."""
    lines = []
    for language, body in fenced(page, ("console", "toml")):
        if language == "toml":
            lines += ["cat >> pyproject.toml <<'GPURL_TOML'", *body, "", "GPURL_TOML"]
            continue
        for line in body:
            assert line.startswith("$ "), f"a console line that is not a command: {line!r}"
            command, code = command_and_exit(line)
            lines += [f"echo {shlex.quote('+ ' + command)}", command,
                      f"rc=$?; [ $rc -eq {code} ] || {{ echo {shlex.quote(command)}"
                      f' "exited $rc, the page says {code}" >&2; exit 1; }}']
    return "\n".join(lines) + "\n"


@pytest.mark.integration
@pytest.mark.parametrize("launcher", [True, False], ids=["with-launcher", "without-launcher"])
def test_adopt_page_followed_literally(tmp_path: Path, launcher: bool) -> None:
    checkout = tmp_path / "elsewhere" / "gpurl-checkout"
    checkout.parent.mkdir()
    checkout.symlink_to(REPO_ROOT)
    repo = _repository(tmp_path / "work" / "skyrl", launcher=launcher)
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    venv_bin = str(REPO_ROOT / ".venv" / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPURL_", "GHCR_", "VIRTUAL_ENV"))}
    env.update(PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                    if p != venv_bin),  # the page's export must bring it
               HOME=str(tmp_path), KUBECONFIG=str(kube), GPURL=str(checkout),
               GPURL_REGISTRY_TOKEN="ghp_" + "x" * 36, GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    done = subprocess.run(["bash", "-c", script(PAGE.read_text())], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    head = git(repo, "rev-parse", "--short=7", "HEAD").strip()
    dry_runs = [line for line in done.stdout.splitlines() if line.startswith("iris ")]
    assert len(dry_runs) == 2, done.stdout[-2000:]
    for line, job in zip(dry_runs, ("gpurl-kaniko-", "gpurl-kaniko-megatron-"), strict=True):
        assert f"--job-name {job}{head} " in line and f"-e GITSHA {head} " in line
        assert "-e DOCKER_USER_ID novasky-bot" in line and "x" * 36 not in line
    # the pins the page sets are the ones its commands read from the lock
    for wanted in ("torch==2.9.1+cu128 ; sys_platform == 'linux'", "vllm==0.16.0 ",
                   "flash-attn==2.8.3 ", "flash-attn==2.8.1 "):
        assert wanted in done.stdout, wanted
    # the vendored tasks ran on this repository: its own files, its symlink kept out
    assert (repo / "docker" / "Dockerfile.skyrl").is_file()
    assert (repo / "docker" / "Dockerfile.skyrl-megatron").is_file()
    assert "skyrl-train/skyrl-gym" in (repo / ".dockerignore").read_text().splitlines()
    assert (repo / ".gitignore").read_text() == "/.venv\n*.log\n__pycache__/\n"
    assert "DEFAULT_RL_MEGATRON_DOCKER_IMAGE" in (repo / LAUNCHER).read_text()
    assert not (repo / "docs").exists()
    assert git(repo, "status", "--porcelain") == ""


def _gitignore_line() -> str:
    lines = [line for _, body in fenced(PAGE.read_text(), ("console",)) for line in body
             if ".gitignore" in line]
    assert len(lines) == 1, lines
    return command_and_exit(lines[0])[0]


@pytest.mark.parametrize(("before", "after"), [
    (None, "__pycache__/\n"),
    ("", "__pycache__/\n"),
    ("/.venv", "/.venv\n__pycache__/\n"),
    ("/.venv\n", "/.venv\n__pycache__/\n"),
    ("__pycache__/\n*.log", "__pycache__/\n*.log"),
], ids=["missing", "empty", "no-trailing-newline", "trailing-newline", "already-there"])
def test_the_pages_gitignore_edit_keeps_every_line(tmp_path: Path, before: str | None,
                                                   after: str) -> None:
    if before is not None:
        (tmp_path / ".gitignore").write_text(before)
    command = _gitignore_line()
    for _ in range(2):  # and running it again changes nothing
        subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, timeout=30)
        assert (tmp_path / ".gitignore").read_text() == after
