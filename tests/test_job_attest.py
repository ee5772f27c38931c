"""The cluster job's attachment of the SBOM and provenance, outside kaniko:
The job zipapp's `attest` run as the job runs it (`python3 -I`, no gpurl importable) on a pushed
image, its layouts pushed with real crane, read back by verify-layers' reader, on both kinds of
registry: Debian's distribution 2.8 (no referrers API: crane lists each artifact under the
`sha256-<hex>` tag by its config's media type, the tool's index lists them by artifactType) and
go-containerregistry's registry with the referrers API (tests/support/referrers_registry.py:
no tag is written, the API lists them). The local build's `attach_attestations` is checked
against the API registry too. The real kaniko job runs in tests/test_kaniko_e2e.py.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sbom as cdx
from gpurl_tasks.attest.collect import listed
from gpurl_tasks.cluster.kaniko import job_app, skeleton_text
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.provenance import LABEL_CONFIG_HASH, LABEL_LOCK_HASH
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.local.from_source import build_binary, crane_release, go_toolchain, load_sources
from gpurl_tasks.oci.referrers import fallback_tag, find
from gpurl_tasks.oci.registry import ManifestUnknown, RegistryClient
from gpurl_tasks.release.attested import BuildContext, attach_attestations, read_attestations
from gpurl_tasks.release.flow import verify_image
from tests.conftest import REPO_ROOT
from tests.support.demo_tree import CACHE
from tests.support.local_parts import need
from tests.support.pusher import push_image, random_layer, tar_gz_layer
from tests.support.referrers_registry import referrers_registry
from tests.support.registry_server import RegistryServer

pytestmark = pytest.mark.integration

CANARY = "ghp_CANARYjobAttest5b7a0f3e9d1c"
STATUS = ("Package: libc6\nStatus: install ok installed\nArchitecture: amd64\n"
          "Version: 2.36-9+deb12u10\nDescription: GNU C Library\n continued line: not a field\n\n"
          "Package: gone\nStatus: purge ok not-installed\nArchitecture: amd64\nVersion: 1\n\n"
          "Package: ca-certificates\nStatus: install ok installed\nArchitecture: all\n"
          "Version: 20230311\n")


@dataclasses.dataclass(frozen=True)
class Served:
    host: str
    url: str


@pytest.fixture(scope="module")
def api_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    log = tmp_path_factory.mktemp("referrers-registry") / "registry.log"
    with referrers_registry(CACHE / "builders", log) as host:
        yield Served(host=host, url=f"http://{host}")


@pytest.fixture(scope="module")
def crane(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Real crane, built from the source archive as `setup-kaniko` builds it."""
    sources_dir = load_config(REPO_ROOT, profile="demo", env={}).cluster.source_archives
    need(sources_dir.is_dir(), f"no crane source archive at {sources_dir}")
    go_requirement, sources = load_sources(sources_dir)
    cache = CACHE / "builders"
    archive, _ = crane_release(build_binary(sources["crane"], cache, go_toolchain(
        cache, go_requirement)), tmp_path_factory.mktemp("crane"))
    with tarfile.open(archive) as tar:
        tar.extract("crane", archive.parent, filter="data")
    return archive.parent / "crane"


def _config(host: str) -> Config:
    return load_config(REPO_ROOT, profile="demo", env={
        "GPURL_REGISTRY_HOST": host, "GPURL_VERIFY_MIN_LAYERS": "2",
        "GPURL_VERIFY_ATTESTATIONS": "required"})


def _push(served: Served | RegistryServer, config: Config, tag: str, seed: int) -> str:
    lock = hashlib.sha256(config.lock.read_bytes()).hexdigest()
    push_image(served.url, config.registry.repository, [
        tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /"),
        random_layer(50_000, "RUN /bin/sh -c uv sync --frozen", seed=seed)],
        tag=tag, labels={LABEL_LOCK_HASH: lock, LABEL_CONFIG_HASH: "c" * 64})
    return f"{served.host}/{config.registry.repository}:{tag}"


def _job_attach(tmp: Path, crane: Path, config: Config, ref: str,
                commit: str = "fedcba9876540000000000000000000000000000",
                inputs_tag: str = "") -> tuple[str, str]:
    """The job's attestation step as the job script runs it (`attest job` of the zipapp, with
    the image's python3 isolated and real crane; the job script passes `$INPUTS_TAG`, empty
    when unset); returns (the pushed digest, its log)."""
    image, tag = ref.rsplit(":", 1)
    run = {"env": {"PATH": "/usr/bin:/bin", "DOCKER_TOKEN": CANARY, "HOME": str(tmp)},
           "capture_output": True, "text": True, "timeout": 120}
    digest = subprocess.run([str(crane), "digest", ref], check=True, **run).stdout.strip()
    (tmp / "status").write_text(STATUS)
    (tmp / "skeleton.json").write_text(skeleton_text(config))
    tool = tmp / "job.pyz"
    tool.write_bytes(job_app().data)
    done = subprocess.run(
        ["python3", "-I", "-B", str(tool), "attest", "job", "--skeleton", str(tmp / "skeleton.json"),
         "--crane", str(crane), "--out", str(tmp / "attest"), "--image", image, "--tag", tag,
         "--digest", digest, "--dpkg-status", str(tmp / "status"),
         "--base-image", "gpurl/bookworm-python:3.11@sha256:" + "b" * 64,
         "--builder", "registry.invalid/kaniko@sha256:" + "e" * 64,
         "--invocation", "iris:gpurl-kaniko-x", "--commit", commit,
         "--source-id", "fedcba987654", "--retries", "0", "--retry-max-wait", "1",
         "--inputs-tag", inputs_tag], cwd="/", **run)
    assert done.returncode == 0, done.stdout + done.stderr
    assert CANARY not in done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"==> SBOM and provenance of {ref}@{digest}"
    # the base image is not in this registry: named as configured, the registry's answer said
    assert lines[1].startswith("    the base image's digest is unknown (")
    assert [line.split(":")[0] for line in lines[3:5]] == ["    sbom", "    provenance"]
    return digest, done.stdout


def _check_read_back(config: Config, ref: str, digest: str, via: str) -> None:
    client = RegistryClient(config.registry.host)
    attached = read_attestations(client, parse_reference(ref), digest)
    assert attached.via == via
    assert attached.sbom is not None and attached.provenance is not None
    assert CANARY not in json.dumps([attached.sbom, attached.provenance])
    apt = {c["name"] for c in attached.sbom["components"] if c.get("purl", "").startswith("pkg:deb/")}
    assert apt == {"libc6", "ca-certificates"}  # dpkg's installed ones, from its status file
    expected, _ = listed(config)
    assert len([c for c in attached.sbom["components"]
                if c.get("purl", "").startswith("pkg:pypi/")]) >= len(expected)
    assert slsa.commit_of(attached.provenance).startswith("fedcba987654")
    _, report = verify_image(config, parse_reference(ref), client)
    assert report.ok, report.human()
    assert any("packages equal the lock's closure" in n for n in report.notes), report.notes
    client.close()


def test_the_job_tool_attaches_through_the_fallback_tag_on_distribution(
        registry: RegistryServer, crane: Path, tmp_path: Path) -> None:
    config = _config(registry.host)
    ref = _push(registry, config, "demo-fedcba987654", 31)
    digest, said = _job_attach(tmp_path, crane, config, ref)
    assert "    2 apt packages" in said
    assert said.endswith(f"attested {ref.rsplit(':', 1)[0]}@{digest}: SBOM and provenance, "
                         f"listed by the tag {ref.rsplit(':', 1)[0]}:{fallback_tag(digest)}\n")
    client = RegistryClient(registry.host)
    _, _, index = client.manifest(parse_reference(ref), fallback_tag(digest))
    # crane's entries (by the empty config's media type) replaced by the documents' own types
    assert sorted(m["artifactType"] for m in index["manifests"]) == sorted(
        [cdx.MEDIA_TYPE, slsa.MEDIA_TYPE])
    _check_read_back(config, ref, digest, fallback_tag(digest))
    # attested again from another commit: the tag keeps listing the first provenance, read
    # back from the registry into the index's layout, beside the new one
    _job_attach(tmp_path, crane, config, ref, commit="0123456789ab" + "0" * 28)
    _, _, again = client.manifest(parse_reference(ref), fallback_tag(digest))
    assert [m for m in again["manifests"] if m in index["manifests"]] == index["manifests"]
    assert sorted(m["artifactType"] for m in again["manifests"]) == sorted(
        [cdx.MEDIA_TYPE, slsa.MEDIA_TYPE, slsa.MEDIA_TYPE])
    client.close()


def test_the_job_tool_attaches_through_the_referrers_api(
        api_registry: Served, crane: Path, tmp_path: Path) -> None:
    config = _config(api_registry.host)
    ref = _push(api_registry, config, "demo-fedcba987654", 32)
    inputs = "inputs-" + "a" * 64
    digest, said = _job_attach(tmp_path, crane, config, ref, inputs_tag=inputs)
    image = ref.rsplit(":", 1)[0]
    assert said.endswith(": SBOM and provenance, listed by the registry's referrers API\n"
                         f"recorded {image}@{digest} as {inputs}\n")
    client = RegistryClient(api_registry.host)
    # the next `invoke build` of these inputs finds the image by that tag (release/reuse.py)
    assert client.lookup(parse_reference(f"{image}:{inputs}")) == digest
    assert client.referrers(parse_reference(ref), digest) is not None
    with pytest.raises(ManifestUnknown):  # the API lists them: no tag was written
        client.manifest(parse_reference(ref), fallback_tag(digest))
    client.close()
    _check_read_back(config, ref, digest, "referrers API")


def test_the_local_build_attaches_through_the_referrers_api(api_registry: Served) -> None:
    config = _config(api_registry.host)
    ref = _push(api_registry, config, "demo-fedcba987654", 33)
    client = RegistryClient(api_registry.host)
    image = client.pull(parse_reference(ref))
    context = BuildContext(apt=cdx.apt_packages_from_status(STATUS), wheels=(),
                           base_image="gpurl/bookworm-python:3.11", builder="buildkit (test)",
                           invocation="local:test",
                           commit="fedcba9876540000000000000000000000000000")
    written = attach_attestations(config, image, client, context)
    assert {r.via for r in written} == {"referrers API"}
    with pytest.raises(ManifestUnknown):
        client.manifest(image.ref, fallback_tag(image.top_digest))
    found = {r.artifact_type for r in find(client, image.ref, image.top_digest)}
    assert found == {cdx.MEDIA_TYPE, slsa.MEDIA_TYPE}
    client.close()
    _check_read_back(config, ref, image.top_digest, "referrers API")
