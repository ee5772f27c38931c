"""The compiled wheels survive on SkyRL's real lock: real uv, the real `vllm` closure.

Stand-in wheels carry the names and fork versions of the compiled pair (a vLLM fork build
`vllm-0.16.0+g76259c63a.cu128`, `flash_attn-2.8.3`); they are installed the way the image
installs the compiled wheels (`uv pip install --no-deps <file>`). Then the final sync the
generated Dockerfile runs is asked with `--dry-run` what it would do: it must not install,
uninstall or build vllm or flash-attn. The same sync without the exclusions reverts the fork
(the bug this guards against), so the test can fail. The local packages are left out of the
dry run (`--no-install-project/--no-install-local`): building them needs the SkyRL sources.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.wheels import check_provided, pins_from_args
from gpurl_tasks.plan.profile import plan_for_config
from tests.conftest import REPO_ROOT, skyrl_lock, skyrl_pyproject
from tests.support.local_parts import python312
from tests.support.pyindex import make_wheel

pytestmark = pytest.mark.integration
COMMIT = "0b8acf049"



def _changes(output: str) -> list[str]:
    return [ln.strip() for ln in output.splitlines() if ln.strip()[:2] in ("+ ", "- ")]


def test_the_final_sync_leaves_the_compiled_wheels_alone(tmp_path: Path) -> None:
    lock = skyrl_lock(COMMIT)
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH"
    config = load_config(REPO_ROOT, profile="gpu-rl", env={}, overrides={
        "python.extras": ["vllm"], "lock": str(lock), "build.vllm-version": "0.16.0",
        "build.post-install": [],  # gpu-rl's post-installs pin against its own lock, not SkyRL's
        "layers.size-overrides": str(REPO_ROOT / "sizes" / "skyrl-train.json")})
    plan = plan_for_config(config, repack=True)
    assert plan.final_exclusions == ("flash-attn", "vllm")
    assert not {"flash-attn", "vllm"} & {p.name for p in plan.closure}  # in no slice
    lines, problems = check_provided(plan.provided, pins_from_args({}, config.build, config.target),
                                     config.build.wheel_globs)
    assert problems == [] and "vllm: lock 0.16.0, compiled 0.16.0+g76259c63a.cu128" in lines

    project = tmp_path / "skyrl-train"
    (project / "skyrl-gym").mkdir(parents=True)
    shutil.copy(lock, project / "uv.lock")
    shutil.copy(skyrl_pyproject(COMMIT), project / "pyproject.toml")
    (project / "skyrl-gym" / "pyproject.toml").write_text('[project]\nname = "skyrl-gym"\n'
                                                          'version = "0.1.0"\n')
    venv = tmp_path / "venv"
    python = python312()
    # nox runs the tests with its own session interpreter in UV_PYTHON / VIRTUAL_ENV (3.11)
    env = {**{k: v for k, v in os.environ.items() if k not in ("UV_PYTHON", "VIRTUAL_ENV")},
           "UV_PROJECT_ENVIRONMENT": str(venv), "UV_PYTHON_DOWNLOADS": "never",
           "UV_PYTHON": python, "UV_NO_CACHE": "1"}
    subprocess.run([uv, "venv", "-q", "--python", python, str(venv)], env=env, check=True)
    wheels = tmp_path / "wheels"
    stand_ins = [make_wheel(wheels, "vllm", "0.16.0+g76259c63a.cu128", payload_bytes=1000),
                 make_wheel(wheels, "flash-attn", "2.8.3", payload_bytes=1000)]
    subprocess.run([uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"),
                    "--no-deps", *map(str, stand_ins)], env=env, check=True)

    keep_local_out = ["--no-install-project", "--no-install-local"]
    final = subprocess.run([uv, "sync", *plan.final_sync_flags, *keep_local_out, "--dry-run"],
                           cwd=project, env=env, capture_output=True, text=True)
    assert final.returncode == 0, final.stderr
    changes = _changes(final.stderr)
    assert len(changes) > 150  # the closure would be installed: the dry run saw it
    touched = [c for c in changes if c.split()[1].split("==")[0] in ("vllm", "flash-attn")]
    assert touched == [], final.stderr

    flags = list(plan.final_sync_flags)
    without = flags[:flags.index("--no-install-package")]  # the exclusions come last
    control = subprocess.run([uv, "sync", *without, *keep_local_out, "--dry-run"],
                             cwd=project, env=env, capture_output=True, text=True)
    assert control.returncode == 0, control.stderr
    reverted = [c for c in _changes(control.stderr) if "vllm" in c.split()[1]]
    assert "- vllm==0.16.0+g76259c63a.cu128" in " ".join(reverted)  # without them: the fork goes
