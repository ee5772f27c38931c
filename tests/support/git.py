"""Test support: run git in a throwaway repository with a fixed identity."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

__all__ = ["git"]

_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
             "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(root: Path, *args: str) -> str:
    """`git -C root ARGS`; raises on failure; returns stdout."""
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                          text=True, env={**os.environ, **_IDENTITY}).stdout
