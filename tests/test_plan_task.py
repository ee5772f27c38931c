"""`invoke plan` end to end as a user runs it: JSON contract, table, and clean failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT, skyrl_lock
from tests.support.tasks_runner import one_variant


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    """`invoke ARGS` with the default (gpu-rl) profile, whose post-installs are cleared: these
    plans read SkyRL's lock, which pins fastapi at another version than gpu-rl's post-install
    (refused, as it should be: test_envcheck.py covers that)."""
    env = {**os.environ, "GPURL_BUILD_POST_INSTALL": ""}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_plan_json_contract_on_the_real_lock() -> None:
    lock = skyrl_lock("0b8acf049")
    result = invoke("plan", "--lock", str(lock), "--extra", "vllm", "--size-overrides",
                    "sizes/skyrl-train.json", "--json")
    assert result.returncode == 0, result.stderr
    plan = one_variant(result.stdout)
    assert plan["cap_bytes"] == 4 * 10**9
    assert len(plan["layers"]) >= plan["lower_bound_layers"] >= 1
    # independent layers by default: many small slices, well under Docker's 127 layers
    assert plan["mode"] == "independent" and len(plan["layers"]) <= 80
    closure = {(p["name"], p["version"]) for p in plan["closure"]}
    in_layers = [(p["name"], p["version"]) for layer in plan["layers"] for p in layer["packages"]]
    assert sorted(in_layers) == sorted(closure)
    for i, layer in enumerate(plan["layers"]):
        assert layer["index"] == i
        assert layer["compressed_bytes"] == sum(p["compressed_bytes"] for p in layer["packages"])
        assert layer["compressed_bytes"] <= plan["cap_bytes"]
        assert layer["slice"].startswith(f"{i:02d}-") and layer["why"]
    # the compiled wheels provide these: in no slice, excluded from the final sync
    assert plan["final_sync"]["no_install_package"] == ["flash-attn", "vllm"]
    assert {p["name"] for p in plan["provided"]} == {"flash-attn", "vllm"}
    assert not {"flash-attn", "vllm"} & {name for name, _ in closure}
    assert plan["local"] == ["skyrl-gym", "skyrl-train"]


def test_plan_table_names_layers_and_bound() -> None:
    result = invoke("plan", "--lock", str(skyrl_lock("0b8acf049")), "--extra", "vllm",
                    "--size-overrides", "sizes/skyrl-train.json", "--cap", "2GB")
    assert result.returncode == 0, result.stderr
    assert "lower bound" in result.stdout and "torch" in result.stdout


@pytest.mark.parametrize(
    ("content", "expected"),
    [("version = 1\n[[package]\n", "is not valid TOML"),
     ("version = 7\n", "lock version 7 is not supported")],
)
def test_bad_lock_is_one_line_without_traceback(tmp_path: Path, content: str, expected: str) -> None:
    bad = tmp_path / "uv.lock"
    bad.write_text(content)
    result = invoke("plan", "--lock", str(bad))
    assert result.returncode != 0
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_unknown_sizes_stop_the_plan_listing_each_package(tmp_path: Path) -> None:
    empty = tmp_path / "sizes.json"
    empty.write_text("{}")
    result = invoke("plan", "--lock", str(skyrl_lock("0b8acf049")), "--extra", "vllm",
                    "--size-overrides", str(empty))
    assert result.returncode != 0 and "Traceback" not in result.stderr
    for name in ("torch==2.9.1+cu128", "flashinfer-jit-cache==0.6.3+cu128"):
        assert name in result.stderr
    # the compiled wheels provide flash-attn: the lock's sdist is never built nor sized
    assert "flash-attn" not in result.stderr


def test_package_over_the_cap_is_named() -> None:
    result = invoke("plan", "--lock", str(skyrl_lock("0b8acf049")), "--extra", "vllm",
                    "--size-overrides", "sizes/skyrl-train.json", "--cap", "1GB")
    assert result.returncode != 0
    assert "flashinfer-jit-cache==0.6.3+cu128 (1.72 GB)" in result.stderr
