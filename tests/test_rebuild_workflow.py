"""The README's workflow 2, run literally on a scratch copy of this checkout: a fork pin edited
in pyproject.toml needs the compiled wheels rebuilt, before and after `invoke generate`.

The pin the comparison starts from is written by gpurl's own launcher writer (release/pin.py, as
`invoke pin` writes it) with a stand-in digest: the image itself would live on GHCR, which
cannot run here; rebuild-needed reads only the pin's provenance comment, never the registry.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpurl_tasks.release.pin import Provenance, provenance_comment, rewrite_assignment
from tests.support.checkout import repo_copy
from tests.support.git import git
from tests.support.tasks_runner import one_variant

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PIN = 'vllm-fork-commit = "76259c63a"'
BUMPED = 'vllm-fork-commit = "1111111aa"'
LAUNCHER = Path("rl/cloud/iris/launch_rl_iris.py")


def _invoke(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPURL_", "GHCR_"))}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300, check=False)


def _commit(root: Path, message: str) -> str:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)
    return git(root, "rev-parse", "HEAD").strip()


def _pin_every_variant(root: Path, built: str) -> None:
    """Both gpu-rl variants pinned to images built at `built`, as `invoke pin` writes them."""
    short = built[:12]
    path = root / LAUNCHER
    text = path.read_text()
    for variable, prefix in (("DEFAULT_RL_DOCKER_IMAGE", "gpu-rl"),
                             ("DEFAULT_RL_MEGATRON_DOCKER_IMAGE", "gpu-rl-megatron")):
        info = Provenance(tag=f"{prefix}-{short}", layer_count=48, largest_bytes=3_460_000_000,
                          total_bytes=22_660_000_000, date=dt.date(2026, 12, 1))
        digest = "ghcr.io/open-thoughts/openthoughts-agent@sha256:" + "e" * 64
        text = rewrite_assignment(text, variable, digest, provenance_comment(info),
                                  line_length=110)
    path.write_text(text)


def test_readme_workflow_two_fork_bump_needs_wheels_before_and_after_generate(
        tmp_path: Path) -> None:
    root = repo_copy(tmp_path / "checkout")
    git(root, "init", "-q")
    built = _commit(root, "the checkout the pinned images were built from")
    _pin_every_variant(root, built)
    _commit(root, "pin")

    # 1. edit a pin in [tool.gpurl.profiles.gpu-rl.build], commit it alone
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    assert text.index(PIN) < text.index("[tool.gpurl.profiles.skyrl]"), "gpu-rl's pin comes first"
    pyproject.write_text(text.replace(PIN, BUMPED, 1))
    _commit(root, "fork bump")

    # 2. invoke rebuild-needed: the compiled wheels, and the stale Dockerfile said
    before = _invoke(root, "rebuild-needed")
    assert before.returncode == 11, before.stdout + before.stderr
    assert "build.vllm-fork-commit 76259c63a -> 1111111aa (compiled wheels)" in before.stdout
    assert "from provenance comment in launch_rl_iris.py" in before.stdout
    assert "docker/Dockerfile.gpu-rl in the working tree is stale" in before.stdout
    assert "docker/Dockerfile.gpu-rl-megatron in the working tree is stale" in before.stdout
    payload = one_variant(_invoke(root, "rebuild-needed", "--variant", "standard", "--json").stdout)
    assert payload["decision"] == "wheels+image" and payload["since"]["commit"] == built
    assert any("stale" in note for note in payload["stale"])

    # 3. invoke generate, commit with the lock: still wheels+image against the pinned commit
    assert _invoke(root, "generate").returncode == 0
    _commit(root, "generate")
    assert _invoke(root, "generate", "--check").returncode == 0
    after = _invoke(root, "rebuild-needed", "--variant", "standard", "--json")
    assert after.returncode == 11, after.stdout + after.stderr
    payload = one_variant(after.stdout)
    assert payload["since"]["commit"] == built
    assert payload["stale"] == []
    kinds = {r["kind"] for r in payload["reasons"]}
    assert {"config", "vllm-fork-commit", "prebuilt-wheels"} <= kinds, payload["reasons"]
