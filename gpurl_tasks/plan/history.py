"""How often each package's version changed in the lock's git history: the planner puts what
changes least lowest, because a changed layer invalidates every layer above it.

Only a fresh packing (no committed slices, or `--repack`) reads it; re-planning keeps the
committed assignment, so generated files depend on the config, the lock and the committed slices
alone, never on who runs the generator or how much history a clone has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from gpurl_tasks import git
from gpurl_tasks.errors import LockError
from gpurl_tasks.plan.lock import parse_lock

__all__ = ["HISTORY_LIMIT", "count_changes", "version_changes"]

HISTORY_LIMIT = 60  # lock versions read; older churn says little about the next bump


def count_changes(history: Iterable[Mapping[str, frozenset[str]]]) -> dict[str, int]:
    """In a sequence of lock versions (any order of time, consistently), how many times each
    package's pinned versions differ from the previous lock (appearing or going counts too)."""
    counts: dict[str, int] = {}
    previous: Mapping[str, frozenset[str]] | None = None
    for current in history:
        if previous is not None:
            for name in set(previous) | set(current):
                if previous.get(name) != current.get(name):
                    counts[name] = counts.get(name, 0) + 1
        previous = current
    return counts


def version_changes(lock: Path, *, limit: int = HISTORY_LIMIT) -> tuple[dict[str, int], int]:
    """(changes per package, lock versions read) from the git history of `lock`."""
    repo, commits = git.file_history(lock, limit=limit)
    if len(commits) < 2:
        return {}, len(commits)
    rel = lock.resolve().relative_to(repo.resolve()).as_posix()
    texts = [git.show_file(repo, commit, rel) for commit in reversed(commits)]
    return count_changes(_versions(t, commit) for t, commit in zip(texts, reversed(commits), strict=True)
                         if t is not None), len(commits)


def _versions(text: str, commit: str) -> dict[str, frozenset[str]]:
    """What one old lock pins, read by the one lock reader (a lock it refuses pins nothing)."""
    try:
        return parse_lock(text, source=f"uv.lock at {commit}").versions
    except LockError:
        return {}
