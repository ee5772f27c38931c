"""Copies of this checkout for tests that change files or git history: the tracked files
(working-tree content, symlinks kept as links), and the `skyrl` fixture at an older real lock."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO_ROOT, SKYRL_DATA, skyrl_lock, skyrl_pyproject

__all__ = ["SKYRL_PROFILE_HEADER", "repo_copy", "skyrl_at"]

# pyproject.toml keeps the skyrl profile last, from this line on: skyrl_at swaps it whole.
SKYRL_PROFILE_HEADER = "[tool.gpurl.profiles.skyrl]\n"


def repo_copy(dest: Path, *, untracked: bool = False) -> Path:
    """The tracked (and with `untracked`, the not ignored) files of this checkout in `dest`."""
    args = ["git", "ls-files", "-z", "--cached"] + (["--others", "--exclude-standard"]
                                                    if untracked else [])
    listed = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        src, target = REPO_ROOT / name, dest / name
        if src.is_symlink():  # the skyrl fixture's link to its sibling path dependency
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), target)
        elif src.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return dest


def skyrl_at(root: Path, commit: str) -> Path:
    """Put the skyrl fixture of the checkout at `root` on SkyRL's real lock and pyproject of
    `commit`, with the gpurl profile written for that lock (tests/data/skyrl/gpurl-COMMIT.toml,
    or the committed one for the fixture's own commit). Returns the workspace."""
    workspace = root / "examples" / "skyrl" / "skyrl-train"
    shutil.copy(skyrl_lock(commit), workspace / "uv.lock")
    shutil.copy(skyrl_pyproject(commit), workspace / "pyproject.toml")
    profile = SKYRL_DATA / f"gpurl-{commit}.toml"
    if profile.exists():
        pyproject = root / "pyproject.toml"
        text = pyproject.read_text()
        assert SKYRL_PROFILE_HEADER in text, "the skyrl profile must stay last in pyproject.toml"
        pyproject.write_text(text[:text.index(SKYRL_PROFILE_HEADER)] + profile.read_text())
    return workspace
