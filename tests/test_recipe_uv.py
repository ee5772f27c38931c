"""The demo's planned recipe: its RUN lines executed by real sh + real uv on the real demo lock.

What a Docker build would do in the rl stage, minus the container: each slice RUN installs
exactly its layer from the committed slice file, the slices together are exactly the lock, the
final sync installs only the local package and keeps a `--no-deps` wheel installed (it is
--inexact; an exact sync would uninstall it).
The demo lock points at the loopback index, so the test fills it (exact pins from PyPI, as
`invoke setup-local` does) and serves it while the RUN lines execute; under CI a failure to
reach PyPI fails.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]

from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.model import render
from gpurl_tasks.dockerfile.recipe import render_recipe
from gpurl_tasks.local import download, setup
from gpurl_tasks.local.builder import serving_index
from gpurl_tasks.plan.model import Slice
from gpurl_tasks.plan.profile import plan_for_config
from tests.conftest import REPO_ROOT

DEMO = REPO_ROOT / "examples" / "demo"
def _installed(venv: Path) -> set[str]:
    site = next(venv.glob("lib/python3*/site-packages"))
    return {p.name.split("-")[0].lower().replace("_", "-") for p in site.glob("*.dist-info")}


@pytest.mark.integration
@pytest.mark.slow
def test_demo_rl_runs_install_layer_by_layer(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.fail("uv is not on PATH")
    config = load_config(REPO_ROOT, profile="demo", env={})
    plan = plan_for_config(config)
    assert len(plan.layers) >= 3, "the demo cap should give several layers"
    text = render(render_recipe(config, plan, lock_sha256="0" * 64))
    structure = DockerfileParser(fileobj=io.BytesIO(text.encode())).structure
    # the image as the chain builds it: env-base, env-chain, rl (the slice-NN stages are the
    # same installs, one by one, for composing)
    stage, rl = "", []
    for entry in structure:
        if entry["instruction"] == "FROM":
            stage = entry["value"].rpartition(" AS ")[2]
        elif stage in ("env-base", "env-chain", "rl"):
            rl.append(entry)
    slices = tmp_path / "layers"
    copies = [e["value"].split() for e in rl if e["instruction"] == "COPY"
              and e["value"].split()[-1].startswith(f"{Slice.IMAGE_DIR}/")]
    runs = [e["value"].replace(f"{Slice.IMAGE_DIR}/", f"{slices}/") for e in rl
            if e["instruction"] == "RUN" and ("uv sync" in e["value"] or Slice.IMAGE_DIR in e["value"]
                                              or e["value"].startswith(f"uv venv {config.build.venv} "))]
    # env-base's RUN makes the venv, then the workspace directory (`&& mkdir -p`, not run here)
    assert runs[0].startswith(f"uv venv {config.build.venv} ") and len(runs) == len(plan.layers) + 2
    slices.mkdir()
    for source, dest in copies:  # the committed slice files, as the COPYs put them
        shutil.copy(REPO_ROOT / source, slices / Path(dest).name)

    work = tmp_path / "app"
    work.mkdir()
    for name in ("pyproject.toml", "uv.lock"):
        shutil.copy(DEMO / name, work / name)
    venv = tmp_path / "venv"
    env = {**os.environ, "UV_NO_CACHE": "1", "UV_COMPILE_BYTECODE": "0", "UV_LINK_MODE": "copy",
           "UV_PYTHON": config.target.python, "UV_PYTHON_DOWNLOADS": "never",
           "UV_PROJECT_ENVIRONMENT": str(venv), "VIRTUAL_ENV": str(venv)}
    env.setdefault("UV_SYSTEM_CERTS", "1")  # this machine reaches PyPI through the system store

    def sh(script: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(["sh", "-c", script], cwd=work, env=env, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    cache = setup.cache_dir(REPO_ROOT)
    setup.package_index(config, cache)
    download.download(["six==1.17.0"], setup.index_dir(cache),  # the stand-in wheel below
                     target=download.DownloadTarget(python_version=config.target.python))
    with serving_index(config.build.index_url, setup.index_dir(cache)):
        sh(runs[0].partition("&&")[0].replace(config.build.venv, str(venv)))
        seen: set[str] = set()
        for i, layer in enumerate(plan.layers):
            sh(runs[i + 1])
            now = _installed(venv)
            assert now - seen == set(layer.names), f"slice {layer.name} installed the wrong packages"
            seen = now

        sh(f"{uv} pip install --no-deps six")  # stands in for the compiled --no-deps wheels
        for name in ("src",):
            shutil.copytree(DEMO / name, work / name)
        done = sh(runs[-1])  # the final sync, as rendered
        changed = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()[:2] in ("+ ", "- ")]
        assert [c.split("==")[0] for c in changed] == ["+ gpurl-demo"], done.stderr  # local only
        final = _installed(venv)
        assert final == seen | {"six", "gpurl-demo"}
        exact = runs[-1].replace("--inexact", "")
        sh(exact)
    assert "six" not in _installed(venv), "an exact sync removes post-slice installs"
