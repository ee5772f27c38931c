"""The setup-local task as a user runs it: real invoke, real process, exit codes and JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.support.local_parts import free_port


def _invoke(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=300)


def test_setup_local_refuses_a_remote_registry_in_one_line() -> None:
    done = _invoke("setup-local", "--profile", "gpu-rl")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    errors = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")]
    assert errors == ["error: registry.host 'ghcr.io' is not a loopback registry with a port"]


def test_setup_local_dry_run_json_plans_and_writes_nothing(tmp_path: Path) -> None:
    port = free_port()
    done = _invoke("setup-local", "--dry-run", "--json", env={
        "GPURL_PROFILE": "demo",  # setup-local resolves its profile as every task does
        "GPURL_CACHE_DIR": str(tmp_path / "cache"),
        "GPURL_REGISTRY_HOST": f"127.0.0.1:{port}",
    })
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    steps = {s["name"]: s for s in report["steps"]}
    assert list(steps) == ["engine", "buildkit client", "registry", "base image", "package index"]
    assert steps["registry"]["status"] == "would"
    assert f"127.0.0.1:{port}" in steps["registry"]["detail"]
    assert not (tmp_path / "cache").exists()


def test_an_empty_wheelhouse_says_there_are_no_prebuilt_wheels_yet(tmp_path: Path) -> None:
    """Not "does not match the pins" when nothing was ever built (issue 13)."""
    import dataclasses

    from gpurl_tasks.config import load_config
    from gpurl_tasks.local.actions import wheelhouse_problem
    from gpurl_tasks.rebuild.wheelhouse import check_source

    config = load_config(REPO_ROOT, profile="demo", env={})
    empty = tmp_path / "wheelhouse"
    empty.mkdir()
    config = config.with_variant_settings(build=dataclasses.replace(config.build, wheelhouse=empty))
    report = check_source(config, str(empty))
    assert wheelhouse_problem(config, report) == f"no prebuilt wheels in {empty} yet"
    import zipfile

    with zipfile.ZipFile(empty / "gpurl_demo_ext-0.0.1-cp39-abi3-win32.whl", "w") as wheel:
        wheel.writestr("gpurl_demo_ext-0.0.1.dist-info/WHEEL", "Wheel-Version: 1.0\n")
    report = check_source(config, str(empty))
    assert report.mismatches
    assert wheelhouse_problem(config, report) == f"the wheels in {empty} do not match the pins"
