"""The one git adapter: the short commit id, dirty tracked files, the bundle file list, and
files as they were at a commit (rebuild-needed compares baked inputs at two points)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from pathlib import Path

from gpurl_tasks import values
from gpurl_tasks.errors import GpurlError
from gpurl_tasks.files import decode_text
from gpurl_tasks.proc import CommandFailed, Completed, ProgramNotFound, run

__all__ = ["GitError", "Source", "diff_hash", "dirty_tracked_files", "file_history",
           "head_sha", "ls_bundle_files", "resolve_commit", "short_sha", "show_file", "source", "source_id",
           "toplevel", "tree_blobs", "worktree_blobs"]


class GitError(GpurlError):
    """git is missing, the directory is not a repository, or a ref does not resolve."""


def short_sha(root: Path) -> str | None:
    """`git rev-parse --short HEAD`, or None when there is no commit (or no repository)."""
    try:
        out = run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], echo=None).stdout
    except CommandFailed:
        return None
    return out.strip() or None


def head_sha(root: Path) -> str:
    """`git rev-parse --short HEAD` in `root`, or an error naming the directory."""
    sha = short_sha(root)
    if not sha:
        raise GitError(f"{root} is not a git checkout with a commit",
                       hint="pass the image reference explicitly")
    return sha


def _pathspec(exclude: Sequence[str]) -> list[str]:
    return ["--", ".", *(f":(exclude){path}" for path in exclude)] if exclude else []


def dirty_tracked_files(root: Path, exclude: Sequence[str] = ()) -> list[str]:
    """Tracked files with uncommitted edits (iris bundles the working tree, edits included),
    leaving out the `exclude` paths (relative to `root`)."""
    out = run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no",
               *_pathspec(exclude)], echo=None).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def diff_hash(root: Path, exclude: Sequence[str] = ()) -> str:
    """12 hex digits of the sha256 of `git diff HEAD` (tracked edits, staged or not)."""
    out = run(["git", "-C", str(root), "diff", "HEAD", "--binary", "--no-ext-diff",
               *_pathspec(exclude)], echo=None).stdout
    return hashlib.sha256(out.encode()).hexdigest()[:12]


@dataclasses.dataclass(frozen=True, slots=True)
class Source:
    """The tree a build runs from: its commit, and the tracked files with uncommitted edits
    (with the hash of their diff) that make it differ from that commit."""

    commit: str
    dirty: tuple[str, ...] = ()
    diff: str | None = None  # set exactly when `dirty` is not empty

    @property
    def id(self) -> str:
        """What an image built from this tree is tagged with (values.source_id)."""
        return values.source_id(self.commit, self.diff)


def source(root: Path, exclude: Sequence[str] = ()) -> Source | None:
    """The tree at `root` (tracked edits to `exclude` paths left out, as they cannot enter
    the image), or None when there is no commit to name it by. Both backends tag with it."""
    sha = short_sha(root)
    return _tree(root, sha, exclude) if sha else None


def _tree(root: Path, sha: str, exclude: Sequence[str]) -> Source:
    dirty = tuple(dirty_tracked_files(root, exclude))
    return Source(sha, dirty, diff_hash(root, exclude) if dirty else None)


def source_id(root: Path, exclude: Sequence[str] = ()) -> str:
    """The source id of the tree at `root`: the short commit id, or `SHA-dirty-<diff hash>`
    when tracked files (other than `exclude`) have uncommitted edits, because such a tree is
    not the commit its sha names."""
    return _tree(root, head_sha(root), exclude).id


def ls_bundle_files(root: Path) -> list[str]:
    """What iris bundles: `git ls-files --cached --others --exclude-standard`."""
    out = run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard",
               "-z"], echo=None).stdout
    return [name for name in out.split("\0") if name]


def _git(repo: Path, *args: str, errors: str = "replace") -> Completed:
    try:
        return run(["git", "-C", str(repo), *args], check=False, echo=None, errors=errors)
    except ProgramNotFound:
        raise GitError("couldn't find git in PATH", hint="install git (apt-get install git)") from None


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
        raise GitError(f"{ref!r} is not a git ref",
                       hint="pass a commit, tag or branch name, not something starting with -")
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if done.returncode != 0:
        raise GitError(f"git ref {ref!r} does not name a commit in {repo}",
                       hint="pass --since with a commit, tag or branch that exists "
                            "(a shallow clone may lack the history: git fetch --unshallow)")
    return done.stdout.strip()


def file_history(path: Path, *, limit: int) -> tuple[Path, list[str]]:
    """(repository root, the newest `limit` commits that changed `path`, newest first); no
    repository or no history gives an empty list, never an error."""
    try:
        repo = toplevel(path.parent)
    except GitError:
        return path.parent, []
    done = _git(repo, "log", f"-n{limit}", "--format=%H", "--", str(path.resolve()))
    return repo, done.stdout.split() if done.returncode == 0 else []


def show_file(repo: Path, commit: str, path: str) -> str | None:
    """The text of `path` (relative to the repository root) at `commit`, None if absent there."""
    spec = f"{commit}:{path}"
    if _git(repo, "cat-file", "-e", spec).returncode != 0:
        return None
    done = _git(repo, "show", spec, errors="surrogateescape")
    if done.returncode != 0:
        raise GitError(f"git show {spec} failed: {done.stderr.strip()}",
                       hint="check the commit exists here: `git fetch` may be needed")
    return decode_text(done.stdout.encode("utf-8", "surrogateescape"), what=f"file {spec}",
                       error=GitError)


def tree_blobs(repo: Path, commit: str, paths: Sequence[str]) -> dict[str, str]:
    """{path: git blob id} of the files under `paths` (relative to the repository root) at
    `commit`; nothing for no paths."""
    if not paths:
        return {}
    done = _git(repo, "ls-tree", "-r", "-z", commit, "--", *paths)
    if done.returncode != 0:
        raise GitError(f"git ls-tree {commit} failed: {done.stderr.strip()}",
                       hint="check the commit exists here: `git fetch` may be needed")
    out = {}
    for entry in filter(None, done.stdout.split("\0")):
        meta, _, name = entry.partition("\t")
        out[name] = meta.split()[2]
    return out


def worktree_blobs(repo: Path, paths: Sequence[str]) -> dict[str, str]:
    """{path: git blob id} of the files under `paths` as they are in the working tree (the
    ones a build context holds: tracked or untracked, not ignored), comparable with
    tree_blobs at a commit."""
    if not paths:
        return {}
    done = _git(repo, "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--",
                *paths)
    out = {}
    for name in sorted(set(filter(None, done.stdout.split("\0")))):
        file = repo / name
        if file.is_symlink():
            data = os.fsencode(os.readlink(file))
        elif file.is_file():
            data = file.read_bytes()
        else:  # tracked but deleted in the working tree
            continue
        out[name] = hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
    return out
