"""What the team's hand-written image checks, built for real by the demo profile with the local
Docker engine (BuildKit), the loopback registry and package index: the arch list reaching the
compile, the MANIFEST's ABI key stopping a wrong wheelhouse before any install, a post-install
and the package-set proof, the `uv pip check` gate, the environment at its configured path,
and the provenance labels and files read back from the pushed image.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile import provenance
from gpurl_tasks.dockerfile.generate import render_dockerfile
from gpurl_tasks.errors import BuildError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.local.builder import build_and_push
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.plan.profile import plan_for_config
from tests.support.demo_tree import CACHE, copy_tree, invoke
from tests.support.local_parts import need

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

PROVENANCE = "/etc/gpurl/provenance"


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need(shutil.which("docker"), "no Docker engine on this machine")
    return copy_tree(tmp_path_factory.mktemp("demo-checks"))


@pytest.fixture(scope="module")
def built(tree: Path) -> dict[str, Any]:
    """`invoke demo --json`: setup, generate, the wheel-builder's compile, build + push, pin."""
    done = invoke(tree, "demo", "--json")
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _reference(built: dict[str, Any]) -> str:
    return str(built["reference"])


def _in_image(reference: str, *argv: str) -> str:
    done = subprocess.run(["docker", "run", "--rm", "--network", "none", reference, *argv],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_pushed_image_carries_the_provenance_labels_and_files(tree: Path,
                                                                   built: dict[str, Any]) -> None:
    config = load_config(tree, profile="demo", env={})
    ref = parse_reference(_reference(built), default_host=config.registry.host, bare=True)
    with RegistryClient(ref.host) as registry:
        image = registry.pull(ref)
    labels = image.labels
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=tree, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert labels[provenance.LABEL_OCI_REVISION] == labels[provenance.LABEL_GIT_SHA]
    assert labels[provenance.LABEL_OCI_REVISION].startswith(sha)
    assert labels[provenance.LABEL_OCI_SOURCE] == config.build.source_url != ""
    manifest = _in_image(_reference(built), "cat", f"{PROVENANCE}/wheels.MANIFEST").splitlines()
    assert manifest[0] == ("# gpurl-abi fork=- flash-attn=- torch=- cuda=cu128 py=cp311 "
                           "platform=linux_x86_64 arch-list=8.0;9.0")
    wheels = list((tree / config.build.wheelhouse).glob("gpurl_demo_ext-*.whl"))
    assert len(wheels) == 1
    for path in wheels:  # the wheel the build installed, by its sha256
        assert f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}" in manifest
    freeze = _in_image(_reference(built), "cat", f"{PROVENANCE}/freeze.txt").splitlines()
    assert "rich==13.9.4" in freeze and any(line.startswith("markdown-it-py==") for line in freeze)
    locked = _in_image(_reference(built), "cat", f"{PROVENANCE}/freeze-lock.txt").splitlines()
    assert not [line for line in locked if line.startswith(("rich", "markdown-it-py"))]
    assert set(locked) <= set(freeze)
    assert _in_image(_reference(built), "cat", f"{PROVENANCE}/sources.txt") == ""  # no git source


def test_the_environment_is_at_the_configured_path_with_the_compiled_arch_list(
        tree: Path, built: dict[str, Any]) -> None:
    venv = load_config(tree, profile="demo", env={}).build.venv
    assert venv == "/opt/demo/envs/rl"
    out = _in_image(_reference(built), f"{venv}/bin/python", "-c",
                    "import sys, gpurl_demo_ext, rich; print(sys.prefix, gpurl_demo_ext.ARCH_LIST)")
    assert out.split() == [venv, "8.0;9.0"]
    assert not _in_image(_reference(built), "sh", "-c", "ls /opt/venv 2>/dev/null || true")


def test_the_gate_and_the_proof_hold_in_the_pushed_image(tree: Path,
                                                         built: dict[str, Any]) -> None:
    """The checks the build ran, run again in the pushed image: the one allowed conflict and
    no other; without the allowance it is a new conflict."""
    allow = load_config(tree, profile="demo", env={}).build.pip_check_allow
    gate = _in_image(_reference(built), "python", "-B", "/etc/gpurl/envcheck.py", "pip-check",
                     *(w for p in allow for w in ("--allow", p)))
    assert "uv pip check: 1 allowed conflict(s), no other" in gate
    proof = _in_image(_reference(built), "python", "-B", "/etc/gpurl/envcheck.py", "prove",
                      "--lock-set", f"{PROVENANCE}/freeze-lock.txt", "--out", "/tmp/freeze.txt",
                      "--post-install", "rich==13.9.4")
    assert "package set: the lock's" in proof and "(1 post-install(s)" in proof


def _build(tree: Path, tmp_path: Path, name: str, wheel_source: str, **overrides: Any) -> str:
    """Build a Dockerfile rendered from the demo's config with `overrides`; the build log."""
    config = load_config(tree, profile="demo", env={}, overrides=overrides)
    dockerfile = tree / "docker" / f"Dockerfile.{name}"
    dockerfile.write_text(render_dockerfile(config, plan_for_config(config)))
    log = tmp_path / "build.log"
    with pytest.raises(BuildError):
        build_and_push(config, git_sha="0000000", dockerfile=dockerfile, cache=CACHE,
                       build_args={"WHEEL_SOURCE": wheel_source, "GITSHA": "0000000"},
                       log_file=log)
    return log.read_text()


def test_a_new_conflict_fails_the_gate(tree: Path, built: dict[str, Any], tmp_path: Path) -> None:
    log = _build(tree, tmp_path, "nogate", "prebuilt-wheelhouse", **{"build.pip-check-allow": []})
    assert ("new conflict: The package `gpurl-demo-ext` requires `pyyaml<6`, but `6.0.4` is "
            "installed") in log


def test_wheels_for_another_arch_list_stop_the_build_before_any_install(
        tree: Path, built: dict[str, Any], tmp_path: Path) -> None:
    """A prebuilt wheelhouse whose MANIFEST records "8.0" (the config says "8.0;9.0"): the rl
    stage's first RUN fails, naming both keys, before a wheel, the sync or a post-install."""
    config = load_config(tree, profile="demo", env={})
    wheelhouse = tree / config.build.wheelhouse
    manifest = wheelhouse / "MANIFEST"
    assert manifest.read_text().startswith("# gpurl-abi ")  # `invoke demo` exported it
    manifest.write_text(manifest.read_text().replace("arch-list=8.0;9.0", "arch-list=8.0", 1))
    log = _build(tree, tmp_path, "wrongkey", "prebuilt-wheelhouse")
    assert "MANIFEST ABI key differs: expected 'fork=- flash-attn=- torch=- cuda=cu128 " \
           "py=cp311 platform=linux_x86_64 arch-list=8.0;9.0', found 'fork=- flash-attn=- " \
           "torch=- cuda=cu128 py=cp311 platform=linux_x86_64 arch-list=8.0'" in log
    assert "envcheck.py lock-set" not in log  # no step after the wheels' install ran
