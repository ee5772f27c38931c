"""How often each package's version changed in the lock's git history: the planner puts what
changes least lowest, because a changed layer invalidates every layer above it.

Only a fresh packing (no committed slices, or `--repack`) reads it; re-planning keeps the
committed assignment, so generated files depend on the config, the lock and the committed slices
alone, never on who runs the generator or how much history a clone has.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from gpurl_tasks import git

__all__ = ["HISTORY_LIMIT", "count_changes", "lock_versions", "version_changes"]

HISTORY_LIMIT = 60  # lock versions read; older churn says little about the next bump
_PACKAGE = re.compile(r'^\[\[package\]\]\nname = "([^"]+)"\nversion = "([^"]+)"', re.M)


def lock_versions(text: str) -> dict[str, frozenset[str]]:
    """name -> the versions a uv.lock text pins (a forked package has several). A fast scan of
    uv's fixed layout, with a full TOML parse when the layout is not uv's."""
    found: dict[str, set[str]] = {}
    matches = _PACKAGE.findall(text)
    if not matches:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return {}
        matches = [(p.get("name", ""), p.get("version", "")) for p in data.get("package", [])
                   if isinstance(p, dict)]
    for name, version in matches:
        found.setdefault(str(canonicalize_name(name)), set()).add(str(version))
    return {name: frozenset(versions) for name, versions in found.items()}


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
    return count_changes(lock_versions(t) for t in texts if t is not None), len(commits)
