"""The real SkyRL locks: closure agrees with `uv export`, and the 4 GB plan is valid."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from gpurl_tasks.config import PythonSelection, TargetSpec, load_config
from gpurl_tasks.plan.lock import install_closure, load_lock
from gpurl_tasks.plan.planner import plan_for_config
from gpurl_tasks.plan.target import marker_environment
from tests.conftest import REPO_ROOT, SHARED_LOCKS, skyrl_lock

pytestmark = pytest.mark.integration
COMMITS = ["0b8acf049", "021b9d65b"]
TARGET = TargetSpec(python="3.12", arch="x86_64", glibc="2.35")


def _export(project: Path, extra: str) -> dict[str, str | None]:
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH"
    out = subprocess.run(
        [uv, "export", "--frozen", "--no-dev", "--extra", extra, "--no-hashes", "--no-header",
         "--no-annotate", "--no-emit-project"],
        cwd=project, check=True, capture_output=True, text=True).stdout
    env = marker_environment(TARGET)
    result: dict[str, str | None] = {}
    for line in out.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "-e")):
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(env):
            pins = [s.version for s in req.specifier]
            result[req.name] = pins[0] if pins else None  # git/url requirements have no pin
    return result


@pytest.mark.parametrize("commit", COMMITS)
@pytest.mark.parametrize("extra", ["vllm", "mcore", "sglang", "miniswe"])
def test_closure_matches_uv_export(commit: str, extra: str, tmp_path: Path) -> None:
    lock_path = skyrl_lock(commit)
    (tmp_path / "uv.lock").write_bytes(lock_path.read_bytes())
    (tmp_path / "pyproject.toml").write_bytes(
        (SHARED_LOCKS / f"skyrl-train.{commit}.pyproject.toml").read_bytes())
    expected = _export(tmp_path, extra)
    closure = install_closure(load_lock(lock_path), TARGET, PythonSelection(extras=(extra,)))
    got = {p.name: p.version for p in closure.packages}
    assert set(got) == set(expected)
    assert {n: v for n, v in got.items() if expected[n] is not None} == \
           {n: v for n, v in expected.items() if v is not None}


@pytest.mark.parametrize("commit", COMMITS)
def test_vllm_plan_fits_4gb(commit: str) -> None:
    config = load_config(REPO_ROOT, profile="gpu-rl", env={}, overrides={
        "python.extras": ["vllm"], "layers.cap": "4GB", "lock": str(skyrl_lock(commit)),
        "layers.size-overrides": str(REPO_ROOT / "sizes" / "skyrl-train.json")})
    plan = plan_for_config(config)
    assert all(layer.compressed_bytes <= 4 * 10**9 for layer in plan.layers)
    assert plan.lower_bound_layers <= len(plan.layers) <= plan.lower_bound_layers + 1
    assert {p.name for p in plan.provided} == {"vllm", "flash-attn"}  # from the compiled wheels
    assert not {"vllm", "flash-attn"} & {p.name for p in plan.closure}
    assert set(plan.local) == {"skyrl-gym", "skyrl-train"}
    assert "--no-install-local" in plan.sync_flags and "--extra" in plan.sync_flags
