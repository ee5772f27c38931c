"""A small git adapter: read a file as it was at a commit, resolve refs.

rebuild-needed compares baked inputs at two points in history; this is the only place that
runs git, so the rest of that comparison stays pure and is fed plain text.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gpurl_tasks.errors import GpurlError

__all__ = ["GitError", "resolve_commit", "show_file", "toplevel"]


class GitError(GpurlError):
    """git is missing, the directory is not a repository, or a ref does not resolve."""


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("git")
    if exe is None:
        raise GitError("couldn't find git in PATH", hint="install git (apt-get install git)")
    return subprocess.run([exe, "-C", str(repo), *args], capture_output=True, text=True,
                          check=False)


def toplevel(path: Path) -> Path:
    """The root of the git work tree containing `path`."""
    done = _git(path, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise GitError(f"{path} is not inside a git repository",
                       hint="run from a git checkout, or pass --since only inside one")
    return Path(done.stdout.strip())


def resolve_commit(repo: Path, ref: str) -> str:
    """The full commit id `ref` names; an unknown ref is a clear error, not an empty diff."""
    if ref.startswith("-"):
        raise GitError(f"{ref!r} is not a git ref")
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0:
        raise GitError(f"git ref {ref!r} does not name a commit in {repo}",
                       hint="pass --since with a commit, tag or branch that exists "
                            "(a shallow clone may lack the history: git fetch --unshallow)")
    return done.stdout.strip()


def show_file(repo: Path, commit: str, path: str) -> str | None:
    """The text of `path` (relative to the repository root) at `commit`, None if absent there."""
    spec = f"{commit}:{path}"
    if _git(repo, "cat-file", "-e", spec).returncode != 0:
        return None
    done = _git(repo, "show", spec)
    if done.returncode != 0:
        raise GitError(f"git show {spec} failed: {done.stderr.strip()}")
    return done.stdout
