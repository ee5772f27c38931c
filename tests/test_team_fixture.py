"""The team fixture (examples/team, issue 49): a repository laid out like the team's current one,
locked by real uv. Its fake native wheels are rebuilt byte for byte (so the lock's hashes hold),
its lock has the team's shapes (conflicting extras, two machines, URL-sourced wheels, a hashless
index wheel, editable path packages), and real `uv lock --check` against its loopback servers
says the committed lock is current."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from gpurl_tasks.errors import GpurlError
from gpurl_tasks.files import sha256_of
from tests.support.local_parts import need, uv
from tests.support.team_fixture import (
    FILES_PORT,
    INDEX_PORT,
    MACHINES,
    TEAM,
    build_fake_wheels,
    fetch_pypi_wheels,
    serve_team,
)


@pytest.fixture(scope="module")
def lock() -> dict[str, Any]:
    return tomllib.loads((TEAM / "uv.lock").read_text())


def _packages(lock: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [p for p in lock["package"] if p["name"] == name]


def test_the_fake_wheels_rebuild_byte_for_byte(tmp_path: Path) -> None:
    first, again = build_fake_wheels(tmp_path / "a"), build_fake_wheels(tmp_path / "b")
    assert [p.relative_to(tmp_path / "a") for p in first] == \
        [p.relative_to(tmp_path / "b") for p in again]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(first, again, strict=True))


def test_the_lock_hashes_the_rebuilt_release_wheels(lock: dict[str, Any], tmp_path: Path) -> None:
    """A rebuilt release wheel is the one the lock was resolved with (same sha256)."""
    build_fake_wheels(tmp_path)
    urls = {w["url"].rsplit("/", 1)[-1].replace("%2B", "+"): w.get("hash")
            for p in lock["package"] if "url" in p["source"] for w in p["wheels"]}
    assert sorted(urls) == sorted(p.name for p in (tmp_path / "releases").glob("*.whl"))
    for name, recorded in urls.items():
        assert recorded == f"sha256:{sha256_of(tmp_path / 'releases' / name)}", name


def test_the_lock_has_the_team_shapes(lock: dict[str, Any]) -> None:
    machines = {m for m in MACHINES if any(m in marker for marker in lock["supported-markers"])}
    assert machines == set(MACHINES)
    assert "sys_platform == 'darwin'" in lock["supported-markers"]  # the developers' macOS too
    conflicting = {frozenset(e["extra"] for e in group) for group in lock["conflicts"]}
    assert conflicting == {frozenset({"cpu", gpu}) for gpu in ("cuda", "vllm", "fsdp", "megatron")}
    for native in ("vllm", "flash-attn"):  # one URL-sourced build per machine
        entries = _packages(lock, native)
        assert sorted(m for e in entries for m in MACHINES if m in e["source"]["url"]) == sorted(MACHINES)
        assert all(f"127.0.0.1:{FILES_PORT}/" in e["source"]["url"] for e in entries)
    (torch,) = _packages(lock, "torch")
    assert f"127.0.0.1:{INDEX_PORT}/" in torch["source"]["registry"]
    assert len(torch["wheels"]) == len(MACHINES)
    assert all("hash" not in w and "size" not in w for w in torch["wheels"])  # the index gave none
    others = [p for p in lock["package"] if "registry" in p["source"] and p["name"] != "torch"]
    assert others and all(w.get("hash") and w.get("size") for p in others for w in p["wheels"])
    assert {p["name"]: p["source"] for p in lock["package"] if "editable" in p["source"]} == {
        "teamrl": {"editable": "."}, "skyrl-train": {"editable": "skyrl-train"},
        "skyrl-gym": {"editable": "skyrl-gym"}}
    assert (TEAM / "cloud" / "iris" / "gpu_rl_images.py").is_file()


@pytest.mark.integration
def test_uv_lock_check_passes_against_the_loopback_servers(tmp_path: Path) -> None:
    """Real uv against the fixture's index and release-asset server (a cold cache): the
    committed lock passes `uv lock --check`, and a fresh `uv lock` of a copy without it writes
    the same bytes."""
    try:
        pypi = fetch_pypi_wheels(tmp_path / "pypi")
    except GpurlError as exc:
        need(False, f"cannot download the fixture's PyPI wheels: {exc}")
    assert len(pypi) == 5
    scratch = tmp_path / "team"
    shutil.copytree(TEAM, scratch, ignore=shutil.ignore_patterns("uv.lock", "__pycache__"))
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")}
    try:
        servers = serve_team(tmp_path / "pypi", tmp_path / "serve")
        with servers:
            done = subprocess.run([uv(), "lock", "--check"], cwd=TEAM, env=env, text=True,
                                  capture_output=True, timeout=300, check=False)
            fresh = subprocess.run([uv(), "lock"], cwd=scratch, env=env, text=True,
                                   capture_output=True, timeout=300, check=False)
    except OSError as exc:
        need(False, f"ports {FILES_PORT}/{INDEX_PORT} are busy on this machine: {exc}")
    assert done.returncode == 0, done.stderr
    assert "Resolved 13 packages" in done.stderr
    assert fresh.returncode == 0, fresh.stderr
    assert (scratch / "uv.lock").read_text() == (TEAM / "uv.lock").read_text()
