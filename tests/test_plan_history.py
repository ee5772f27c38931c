"""The lock's git history as the planner learns it: real git, the demo's real uv.lock."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gpurl_tasks.plan.history import version_changes
from gpurl_tasks.plan.lock import parse_lock
from tests.conftest import REPO_ROOT

DEMO_LOCK = REPO_ROOT / "examples" / "demo" / "uv.lock"


def _commit(repo: Path, message: str) -> None:
    for argv in (["git", "add", "-A"], ["git", "-c", "user.name=gpurl", "-c",
                                         "user.email=gpurl@localhost", "commit", "-qm", message]):
        subprocess.run(argv, cwd=repo, check=True)


def _bumped(text: str, name: str, suffix: str) -> str:
    """`text` with `name`'s pinned version changed (its artifacts left as they are)."""
    return re.sub(rf'(\nname = "{name}"\nversion = ")([^"]+)"', rf'\g<1>\g<2>{suffix}"', text,
                  count=1)


def test_history_counts_each_package_version_change(tmp_path: Path) -> None:
    """Three lock versions, one package bumped twice and one once: the counts come from the
    one lock reader (the lock's own names, read by parse_lock), and a version that the reader
    refuses counts as pinning nothing."""
    text = DEMO_LOCK.read_text()
    names = sorted(parse_lock(text).versions)
    busy, once = names[0], names[-1]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    lock = tmp_path / "uv.lock"
    lock.write_text(text)
    _commit(tmp_path, "first")
    lock.write_text(_bumped(text, busy, ".post1"))
    _commit(tmp_path, "bump one")
    lock.write_text(_bumped(_bumped(text, busy, ".post2"), once, ".post1"))
    _commit(tmp_path, "bump both")
    changes, versions = version_changes(lock)
    assert versions == 3
    assert changes == {busy: 2, once: 1}
    lock.write_text("not a lock")
    _commit(tmp_path, "broken")
    changes, versions = version_changes(lock)
    assert versions == 4 and changes[busy] == 3 and changes[once] == 2  # every package "went"
    assert set(changes) == set(names)
