"""docs/adopt.md, followed literally in a scratch copy of examples/skyrl/ (a repository laid
out like SkyRL: a workspace, a symlinked sibling path dependency, two variants), through
`invoke build --dry-run`.

Every `console` block of the page runs, in page order, in one bash session at the copy's root
(each `$` command must end with the exit code its `# exit N` names, default 0); every `toml`
block is appended to the root's pyproject.toml where the page puts it. gpurl is the checkout
under test, beside the copy as `../gpurl`. Stand-ins: the KUBECONFIG file and the registry token
(a dry run reaches neither the cluster nor the registry).
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


def _repository(dest: Path) -> Path:
    """examples/skyrl/'s tracked files (the symlink kept a link) as a repository of its own."""
    listed = git(REPO_ROOT, "ls-files", "-z", FIXTURE).split("\0")
    for name in filter(None, listed):
        src, target = REPO_ROOT / name, dest / Path(name).relative_to(FIXTURE)
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        else:
            target.write_bytes(src.read_bytes())
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
def test_adopt_page_followed_literally(tmp_path: Path) -> None:
    (tmp_path / "gpurl").symlink_to(REPO_ROOT)
    repo = _repository(tmp_path / "skyrl")
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    venv_bin = str(REPO_ROOT / ".venv" / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("GPURL_", "GHCR_", "VIRTUAL_ENV"))}
    env.update(PATH=os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                    if p != venv_bin),  # the page's export must bring it
               HOME=str(tmp_path), KUBECONFIG=str(kube),
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
    # the vendored tasks ran on this repository: its own files, its symlink kept out
    assert (repo / "docker" / "Dockerfile.skyrl").is_file()
    assert (repo / "docker" / "Dockerfile.skyrl-megatron").is_file()
    assert "skyrl-train/skyrl-gym" in (repo / ".dockerignore").read_text().splitlines()
    assert not (repo / "docs").exists()
    assert git(repo, "status", "--porcelain") == ""
