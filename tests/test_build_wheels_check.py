"""`invoke build-wheels` checks what it exported: a real BuildKit build on the real engine.

The wheel-builder stage here writes a correctly named and tagged wheel (with a .dist-info)
and its MANIFEST with python3's zipfile and the real sha256sum instead of compiling one, so
the test is about the check wired after the export, not about compilers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpurl_tasks.config import load_config
from gpurl_tasks.errors import BuildError, ExitCode
from gpurl_tasks.local import base_image, engine
from tests.conftest import REPO_ROOT
from tests.support.demo_tree import DEMO_ABI_LINE
from tests.support.local_parts import need

_WRITE_WHEEL = (
    "import sys, zipfile; tag = sys.argv[1]; info = 'gpurl_demo_ext-0.1.0.dist-info'; "
    "z = zipfile.ZipFile(f'gpurl_demo_ext-0.1.0-{tag}.whl', 'w'); "
    "z.writestr(f'{info}/METADATA', 'Metadata-Version: 2.1\\nName: gpurl-demo-ext\\n"
    "Version: 0.1.0\\n'); "
    "z.writestr(f'{info}/WHEEL', f'Wheel-Version: 1.0\\nRoot-Is-Purelib: false\\nTag: {tag}\\n'); "
    "z.close()"
)




def _dockerfile(base: str, tag: str) -> str:
    return (f"FROM {base} AS wheel-builder\n"
            f"RUN mkdir /wheels && cd /wheels && python3 -c \"{_WRITE_WHEEL}\" {tag} "
            f"&& {{ echo '{DEMO_ABI_LINE}'; sha256sum -- *.whl; }} > MANIFEST\n")


@pytest.fixture(scope="module")
def demo_base() -> str:
    need(engine.engine_answers("docker") or engine.engine_answers("/usr/bin/docker"),
         "no Docker engine answers (run `invoke setup-local`)")
    try:
        client = engine.find_buildkit_client()[0]
    except BuildError as exc:
        need(False, str(exc))
        raise
    base = load_config(REPO_ROOT, profile="demo", env={}).build.base_image
    need(base_image.image_id(client, base), f"base image {base} is absent "
                                            "(run `invoke setup-local`)")
    return base


def _build_wheels(tmp_path: Path, base: str, tag: str) -> subprocess.CompletedProcess[str]:
    """`invoke build-wheels` of a Dockerfile under `tmp_path`, which must lie inside the
    repository (the Dockerfile and wheelhouse are config paths)."""
    dockerfile = tmp_path / f"Dockerfile.{tag}"
    dockerfile.write_text(_dockerfile(base, tag))
    env = {**os.environ, "GPURL_BUILD_WHEELHOUSE": str(tmp_path / "wheelhouse"),
           "GPURL_BUILD_INDEX_URL": "",  # the stage installs nothing: no index to serve
           "GPURL_CACHE_DIR": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "invoke", "build-wheels", "--profile", "demo",
                           "--dockerfile", str(dockerfile), "--json"], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, check=False, timeout=900)


@pytest.mark.integration
@pytest.mark.docker
def test_build_wheels_passes_a_wheel_the_demo_installs(repo_tmp: Path, demo_base: str) -> None:
    done = _build_wheels(repo_tmp, demo_base, "cp311-cp311-linux_x86_64")
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert sorted(Path(f).name for f in out["files"]) == [
        "MANIFEST", "gpurl_demo_ext-0.1.0-cp311-cp311-linux_x86_64.whl"]
    assert out["check"]["ok"] is True
    assert out["check"]["expected"] == {"gpurl-demo-ext": "gpurl_demo_ext-*.whl"}


@pytest.mark.integration
@pytest.mark.docker
def test_build_wheels_fails_on_a_wheel_for_another_python(repo_tmp: Path,
                                                          demo_base: str) -> None:
    done = _build_wheels(repo_tmp, demo_base, "cp312-cp312-linux_x86_64")
    assert done.returncode == ExitCode.CHECK_FAILED, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["check"]["ok"] is False
    assert [m["problem"] for m in out["check"]["mismatches"]] == [
        "tag cp312-cp312-linux_x86_64 does not install on cp311 linux_x86_64"]
    assert (repo_tmp / "wheelhouse" / "gpurl_demo_ext-0.1.0-cp312-cp312-linux_x86_64.whl"
            ).is_file()  # exported as built: the check reports, it does not hide the file
