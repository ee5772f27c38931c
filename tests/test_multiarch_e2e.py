"""One config, two platforms, end to end on this machine: the multiarch profile's h100 image
built for real by the local path, its gb200 slices written here for aarch64, both images
composed at a real registry on loopback, the image index composed, read back, verified per
platform and pinned into a copy of the launcher, and the pinned arm64 image's layers read back
through the registry API and checked to be aarch64 objects.

What cannot run here is stood in for, and only that: this x86_64 machine has no emulation, so
the arm64 env-base (its apt installs and venv creation run arm64 binaries) is a one-layer image
whose config says linux/arm64, and the gb200 image is its composed environment (the final
stage's sync proof and asserts run the image's arm64 Python: the GB200 cluster's job). Its SBOM
and provenance are gpurl's own, attached as the local path attaches them.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import httpx
import pytest

from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.context import source_id
from gpurl_tasks.dockerfile.generate import fitted_plan
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.local.builder import serving_index
from gpurl_tasks.local.compose_env import BaseDocuments, Wanted, compose_at_registry
from gpurl_tasks.local.setup import cache_dir, index_dir, package_index
from gpurl_tasks.local.stage import StagedSlice
from gpurl_tasks.local.write_slices import SlicesWritten, write_slices
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import parse_manifest
from gpurl_tasks.release.attested import BuildContext, attach_attestations
from gpurl_tasks.release.configured import cache_repository, client_settings
from gpurl_tasks.writer.check import check_layer
from gpurl_tasks.writer.ocispec import OCI_INDEX
from tests.conftest import REPO_ROOT
from tests.support.launchers import assigned
from tests.support.local_parts import docker_ready
from tests.support.pusher import push_image, tar_gz_layer
from tests.support.registry_server import RegistryServer
from tests.support.tasks_runner import run_task

REPO = "gpurl/multiarch"
VENV = "/opt/multiarch/envs/rl"
LAUNCHER = REPO_ROOT / "examples/multiarch/cloud/iris/launch_rl_iris.py"


def _config(variant: str, host: str) -> Config:
    return load_config(REPO_ROOT, profile="multiarch", variant=variant,
                       env={"GPURL_REGISTRY_HOST": host})


def _gb200_image(config: Config, written: SlicesWritten, tmp: Path) -> str:
    """The gb200 image as this machine can make it, under its immutable tag: the slices
    written here composed by gpurl's one composition onto the arm64 env-base stand-in, then
    its SBOM and provenance attached. Returns its manifest digest."""
    cache = parse_reference(cache_repository(config), default_host=config.registry.host, bare=True)
    target = parse_reference(config.registry.image, default_host=config.registry.host, bare=True)
    base_layer = tar_gz_layer({"etc/os-release": b"ID=debian\nVERSION_ID=12\n",
                               f"{VENV.strip('/')}/pyvenv.cfg":
                               b"home = /usr/bin\nversion_info = 3.11.2\n"}, "ADD rootfs.tar /")
    push_image(f"http://{config.registry.host}", cache.repository, [base_layer],
               tag="env-base-arm64-standin", architecture="arm64")
    plan = fitted_plan(config)
    by_name = {s.name: s for s in written.slices}
    wanted = [Wanted(layer=layer, path=layer.slice.path(config.variant),
                     ref=dataclasses.replace(cache, tag=by_name[layer.name].key, digest=None))
              for layer in plan.layers]

    def stage(w: Wanted) -> StagedSlice:  # written already: a copy, which the recording removes
        done = by_name[w.layer.name]
        copy = tmp / f"{done.name}.tar.gz"
        shutil.copy(done.path, copy)
        return StagedSlice(path=copy, blob=done.blob, seconds=0.0, log="")

    tag = f"{config.registry.tag_prefix}-{source_id(config)}"
    with open_client(client_settings(config), cache) as registry:
        base_ref = dataclasses.replace(cache, tag="env-base-arm64-standin", digest=None)
        _, _, manifest = registry.manifest(base_ref)
        base = BaseDocuments(manifest=manifest, config=registry.blob_json(
            base_ref, parse_manifest(manifest, "env-base").config_digest))
        outcomes, _, env_digest = compose_at_registry(
            registry, cache=cache, target=target, base=base, wanted=wanted, stage=stage,
            venv=VENV, log_dir=tmp)
        assert [o.blob for o in outcomes] == [by_name[w.layer.name].blob.digest for w in wanted]
        # the composed environment's own bytes under the image's tag (the same digest)
        url = f"http://{config.registry.host}/v2/{target.repository}/manifests"
        raw = httpx.get(f"{url}/{env_digest}", headers={"Accept": str(base.media_type)}, timeout=10)
        raw.raise_for_status()
        httpx.put(f"{url}/{tag}", content=raw.content, timeout=10,
                  headers={"Content-Type": raw.headers["Content-Type"]}).raise_for_status()
        ref = dataclasses.replace(target, tag=tag, digest=None)
        image = registry.pull(ref, platform="linux/arm64")
        assert image.manifest_digest == env_digest
        attach_attestations(config, image, registry, BuildContext(
            apt=(), wheels=(), base_image="env-base-arm64-standin",
            builder="gpurl write-slices (x86_64, --python-platform)",
            invocation=f"test:{image.config_digest}", commit=source_id(config)))
        return image.manifest_digest


@pytest.mark.integration
@pytest.mark.docker
@pytest.mark.slow
def test_one_pin_for_both_clusters_from_one_config(registry: RegistryServer, repo_tmp: Path,
                                                   tmp_path: Path) -> None:
    docker_ready()
    h100, gb200 = _config("h100", registry.host), _config("gb200", registry.host)
    package_index(h100, cache_dir(h100.root))  # setup-local's step: both machines' wheels
    launcher = repo_tmp / "launch_rl_iris.py"
    shutil.copy(LAUNCHER, launcher)
    env = {"GPURL_REGISTRY_HOST": registry.host, "GPURL_LAUNCHER_PATH": str(launcher),
           "HOME": str(repo_tmp)}

    built = run_task("build", "-p", "multiarch", "--variant", "h100", "--backend", "local",
                     "--json", env=env, timeout=1200)
    assert built.returncode == 0, built.stderr
    amd64 = json.loads(built.stdout)["digest"]

    with serving_index(gb200.build.index_url, index_dir(cache_dir(gb200.root))):
        written = write_slices(gb200, output=tmp_path / "gb200", dry_run=False, say=print)
    assert isinstance(written, SlicesWritten) and len(written.slices) == 5
    arm64 = _gb200_image(gb200, written, tmp_path)

    pinned = run_task("pin", "-p", "multiarch", "--json", env=env, timeout=600)
    assert pinned.returncode == 0, pinned.stderr
    index = json.loads(pinned.stdout)["variants"]["h100+gb200"]["index"]
    sha = source_id(h100)
    assert index["reference"] == f"{registry.host}/{REPO}:multiarch-{sha}-index"

    # the index through the registry API itself: exactly the two images, each its platform
    answer = httpx.get(f"{registry.url}/v2/{REPO}/manifests/multiarch-{sha}-index",
                       headers={"Accept": OCI_INDEX}, timeout=10)
    answer.raise_for_status()
    assert answer.headers["Content-Type"] == OCI_INDEX
    assert answer.headers["Docker-Content-Digest"] == index["digest"]
    assert [(m["digest"], m["platform"]) for m in answer.json()["manifests"]] == [
        (amd64, {"os": "linux", "architecture": "amd64"}),
        (arm64, {"os": "linux", "architecture": "arm64"})]

    name = f"{registry.host}/{REPO}"
    assert {k: v for k, v in assigned(launcher.read_text()).items() if k != "RL_PYTHON"} == {
        "DEFAULT_RL_DOCKER_IMAGE": f"{name}@{index['digest']}",
        "DEFAULT_RL_AMD64_DOCKER_IMAGE": f"{name}@{amd64}",
        "DEFAULT_RL_ARM64_DOCKER_IMAGE": f"{name}@{arm64}"}

    verified = run_task("verify-layers", "-p", "multiarch", "--ref",
                        f"{name}:multiarch-{sha}-index", env=env, timeout=600)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "== linux/arm64 (variant gb200) ==" in verified.stdout

    # what the one pin gives a GB200 node: its slice layers, read back, hold aarch64 objects
    with httpx.Client(timeout=60) as http:
        manifest = http.get(f"{registry.url}/v2/{REPO}/manifests/{arm64}",
                            headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}).json()
        layers = {layer["digest"] for layer in manifest["layers"]}
        for s in written.slices:
            assert s.blob.digest in layers
            blob = tmp_path / f"pulled-{s.name}.tar.gz"
            blob.write_bytes(http.get(f"{registry.url}/v2/{REPO}/blobs/{s.blob.digest}").content)
            assert check_layer(blob, arch="aarch64", venv=VENV) == s.check

    # `invoke sbom` of the one pin: each platform's own SBOM and provenance
    for variant, digest in (("h100", amd64), ("gb200", arm64)):
        said = run_task("sbom", "-p", "multiarch", "--variant", variant, "--ref",
                        f"{name}@{index['digest']}", "--json", env=env)
        assert said.returncode == 0, said.stderr
        found = json.loads(said.stdout)
        assert found["digest"] == digest and found["sbom"] and found["provenance"], found
