"""Small git queries the build needs: the short commit id, dirty tracked files, ls-files."""

from __future__ import annotations

from pathlib import Path

from gpurl_tasks.proc import CommandFailed, run

__all__ = ["dirty_tracked_files", "ls_bundle_files", "short_sha"]


def short_sha(root: Path) -> str | None:
    """`git rev-parse --short HEAD`, or None when there is no commit (or no repository)."""
    try:
        out = run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], echo=None).stdout
    except CommandFailed:
        return None
    return out.strip() or None


def dirty_tracked_files(root: Path) -> list[str]:
    """Tracked files with uncommitted edits (iris bundles the working tree, edits included)."""
    out = run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
              echo=None).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def ls_bundle_files(root: Path) -> list[str]:
    """What iris bundles: `git ls-files --cached --others --exclude-standard`."""
    out = run(["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard",
               "-z"], echo=None).stdout
    return [name for name in out.split("\0") if name]
