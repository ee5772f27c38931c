"""Shared fixtures: the repository root and the real SkyRL locks when present."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_LOCKS = REPO_ROOT.parent / "shared" / "data" / "locks"


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


def skyrl_lock(commit: str) -> Path:
    """Path of a real SkyRL lock; skips the test with the reason when it is absent."""
    path = SHARED_LOCKS / f"skyrl-train.{commit}.uv.lock"
    if not path.exists():
        pytest.skip(f"real SkyRL lock not present at {path}")
    return path
