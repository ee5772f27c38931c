"""Shared fixtures: the repository root and the real SkyRL locks when present."""

from __future__ import annotations

import os
import sys
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
        if os.environ.get("CI"):  # CI runs with shared/ beside the clone
            pytest.fail(f"real SkyRL lock not present at {path}")
        pytest.skip(f"real SkyRL lock not present at {path}")
    return path


@pytest.fixture(scope="session", autouse=True)
def local_parts(request: pytest.FixtureRequest) -> None:
    """Before any Docker test: `invoke setup-local` for the demo profile (engine, BuildKit client,
    loopback registry, base image, package index), as a user would run it. Idempotent."""
    if not any(item.get_closest_marker("docker") for item in request.session.items):
        return
    from gpurl_tasks.config import load_config
    from gpurl_tasks.errors import GpurlError
    from gpurl_tasks.local.setup import setup_local

    try:
        setup_local(load_config(REPO_ROOT, profile="demo", env={}))
    except GpurlError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"setup-local failed in CI: {exc}")
        print(f"\nsetup-local failed, Docker tests will skip: {exc}", file=sys.stderr)
