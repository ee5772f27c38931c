"""Shared fixtures: the repository root, the real SkyRL locks (the project's test data) and a
real plain-HTTP registry on loopback for each module that asks for `registry`."""

from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from tests.support.registry_server import RegistryServer, running_registry

REPO_ROOT = Path(__file__).resolve().parent.parent
# Hypothesis's per-example deadline measures this machine's load (two cores shared with image
# builds), not the code: a slow first example is not a failure. Invariants stay checked.
settings.register_profile("gpurl", deadline=None)
settings.load_profile("gpurl")
# SkyRL's real skyrl-train locks (commits 021b9d65b, older, and 0b8acf049), xz-compressed in the
# project's own test data: a user's clone has no ../shared beside it.
SKYRL_DATA = Path(__file__).resolve().parent / "data" / "skyrl"
SKYRL_COMMITS = ("021b9d65b", "0b8acf049")  # oldest first
SKYRL_WORKSPACE = REPO_ROOT / "examples" / "skyrl" / "skyrl-train"  # the `skyrl` profile's fixture


def committed_tool() -> dict[str, Any]:
    """[tool.gpurl] of the repository's pyproject.toml, read from the file itself."""
    tool: dict[str, Any] = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["gpurl"]
    return tool


def committed_profiles_and_variants() -> list[tuple[str, str]]:
    """(profile, variant) for every profile and variant the repository's pyproject.toml
    declares, in file order ("" for a profile without variants)."""
    return [(name, variant) for name, table in committed_tool()["profiles"].items()
            for variant in (list(table.get("variants", {})) or [""])]


@pytest.fixture
def repo_tmp() -> Iterator[Path]:
    """A scratch directory inside the repository (under the ignored .cache/), for a file a
    path-valued config key names: such a path must stay inside the repository (issue 30)."""
    parent = REPO_ROOT / ".cache" / "tests"
    parent.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="t", dir=parent))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def gpurl_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """gpurl's wheel as `uv build --wheel` makes it from this checkout, once a test run (the
    installed-tool tests and the adoption page install it as a user does)."""
    from benchmarks.installed import build_wheel

    return build_wheel(tmp_path_factory.mktemp("wheel") / "dist")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """Debian's `docker-registry` on 127.0.0.1 in plain HTTP, one per test module."""
    with running_registry(tmp_path_factory.mktemp("registry")) as server:
        yield server


def skyrl_pyproject(commit: str) -> Path:
    """The real skyrl-train pyproject.toml at `commit`."""
    return SKYRL_DATA / f"skyrl-train.{commit}.pyproject.toml"


def skyrl_lock(commit: str) -> Path:
    """The real skyrl-train uv.lock at `commit`, decompressed once into a temp directory."""
    packed = SKYRL_DATA / f"skyrl-train.{commit}.uv.lock.xz"
    text = lzma.decompress(packed.read_bytes())
    digest = hashlib.sha256(text).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / "gpurl-test-data" / digest / f"skyrl-train.{commit}.uv.lock"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(text)
        tmp.replace(path)
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
