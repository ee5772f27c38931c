"""An image's SBOM and provenance: written exact, attached at a real registry, read back and
checked by verify-layers.

The registry is Debian's distribution registry 2.8 on loopback, which has no OCI referrers API
(as ghcr.io has none): the `sha256-<digest>` tag fallback is what is written and read. No
registry that serves the referrers API installs from this machine's package sources (Debian's
is distribution 2.8.2; the API came with v3); tests/test_job_attest.py runs
go-containerregistry's registry, built from the crane source archive with the API on.
The image is pushed by the tests' own pusher, labelled as a gpurl build of the demo profile at
this checkout's lock; the SBOM is validated against CycloneDX's own 1.6 schema.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sameinputs
from gpurl_tasks.attest import sbom as cdx
from gpurl_tasks.attest.collect import listed
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.provenance import LABEL_CONFIG_HASH, LABEL_LOCK_HASH
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.referrers import fallback_tag, fetch, find
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.release.attested import (
    BuildContext,
    attach_attestations,
    documents,
    read_attestations,
)
from gpurl_tasks.release.flow import verify_image
from gpurl_tasks.writer.ocispec import OCI_INDEX
from tests.conftest import REPO_ROOT
from tests.support.pusher import push_image, random_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer

pytestmark = pytest.mark.integration

COMMIT = "1234567890abcdef1234567890abcdef12345678"
DPKG = "ca-certificates\t20230311\tall\nlibc6\t2.36-9+deb12u10\tamd64\npython3.11\t3.11.2-6\tamd64\n"


def _config(server: RegistryServer, attestations: str = "required") -> Config:
    config = load_config(REPO_ROOT, profile="demo", env={
        "GPURL_REGISTRY_HOST": server.host, "GPURL_VERIFY_MIN_LAYERS": "2",
        "GPURL_VERIFY_ATTESTATIONS": attestations})
    return config


def _push(server: RegistryServer, config: Config, tag: str, seed: int) -> str:
    """A distinct image per test (attestations belong to a digest, whatever its tag)."""
    lock = hashlib.sha256(config.lock.read_bytes()).hexdigest()
    push_image(server.url, config.registry.repository, [
        tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /"),
        random_layer(50_000, "RUN /bin/sh -c uv sync --frozen", seed=seed)],
        tag=tag, labels={LABEL_LOCK_HASH: lock, LABEL_CONFIG_HASH: "c" * 64})
    return f"{server.host}/{config.registry.repository}:{tag}"


def _context(commit: str = COMMIT) -> BuildContext:
    return BuildContext(apt=cdx.apt_packages_from_dpkg(DPKG),
                        wheels=(cdx.CompiledWheel(filename="gpurl_demo_ext-0.1.0-cp311-cp311-"
                                                  "linux_x86_64.whl", sha256="a" * 64),),
                        base_image="gpurl/bookworm-python:3.11@sha256:" + "b" * 64,
                        builder="buildkit (docker 20.10)", invocation="local-test",
                        commit=commit)


def _pulled(server: RegistryServer, ref: str):  # type: ignore[no-untyped-def]
    client = RegistryClient(server.host)
    return client, client.pull(parse_reference(ref))


def test_the_sbom_is_valid_cyclonedx_and_lists_the_lock_exactly(registry: RegistryServer) -> None:
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    config = _config(registry)
    client, image = _pulled(registry, _push(registry, config, f"demo-{COMMIT[:12]}", 1))
    sbom, statement = documents(config, image, _context())
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(sbom.decode()) is None
    doc = json.loads(sbom)
    found = cdx.python_components(doc)
    locked = set().union(*(v for k, v in found.items()
                           if k not in ("compiled-wheel", "post-install")))
    expected, declared = listed(config)
    assert locked == {(p.name, p.version) for p in expected}
    assert {n for n, _ in found.get("post-install", set())} == {
        cdx.requirement_name(line) for line in declared}
    assert {c["name"] for c in doc["components"] if "pkg:deb/" in c.get("purl", "")} == {
        "ca-certificates", "libc6", "python3.11"}
    hashed = [c for c in doc["components"] if c.get("purl", "").startswith("pkg:pypi/pyyaml@")]
    assert hashed and len(hashed[0]["hashes"][0]["content"]) == 64
    # the same inputs give the same bytes (no timestamp; the serial number is the content's)
    assert documents(config, image, _context()) == (sbom, statement)
    facts = json.loads(statement)
    assert facts["predicateType"] == slsa.PREDICATE_TYPE
    assert facts["subject"][0]["digest"]["sha256"] == image.top_digest.split(":")[1]
    assert slsa.commit_of(facts) == COMMIT
    client.close()


def test_attached_through_the_fallback_tag_and_read_back(registry: RegistryServer) -> None:
    config = _config(registry)
    ref = _push(registry, config, f"demo-{COMMIT[:12]}", 2)
    client, image = _pulled(registry, ref)
    assert client.referrers(image.ref, image.top_digest) is None  # distribution 2.8 has no API
    written = attach_attestations(config, image, client, _context())
    again = attach_attestations(config, image, client, _context())
    assert [r.digest for r in again] == [r.digest for r in written]  # idempotent
    tag = fallback_tag(image.top_digest)
    assert tag == "sha256-" + image.top_digest.split(":")[1]
    _, media_type, index = client.manifest(image.ref, tag)
    assert media_type == OCI_INDEX and len(index["manifests"]) == 2  # not four
    found = {r.artifact_type: r for r in find(client, image.ref, image.top_digest)}
    assert set(found) == {cdx.MEDIA_TYPE, slsa.MEDIA_TYPE}
    assert {r.via for r in found.values()} == {tag}
    sbom, statement = documents(config, image, _context())
    assert fetch(client, image.ref, found[cdx.MEDIA_TYPE]) == json.loads(sbom)
    assert fetch(client, image.ref, found[slsa.MEDIA_TYPE]) == json.loads(statement)
    # each artifact names the image as its subject
    _, _, artifact = client.manifest(image.ref, found[cdx.MEDIA_TYPE].digest)
    assert artifact["subject"]["digest"] == image.top_digest
    _, report = verify_image(config, image.ref, client)
    assert report.ok, report.human()
    assert any("packages equal the lock's closure" in n for n in report.notes)
    assert any(f"built from {COMMIT}" in n for n in report.notes)
    client.close()


def test_an_image_without_attestations_fails_when_they_are_required(
        registry: RegistryServer) -> None:
    config = _config(registry)
    client, image = _pulled(registry, _push(registry, config, "demo-abcdef0123ab", 3))
    _, report = verify_image(config, image.ref, client)
    assert {f.code for f in report.findings if f.failing} >= {"no-sbom", "no-provenance"}
    _, lenient = verify_image(_config(registry, "if-present"), image.ref, client)
    assert not [f for f in lenient.findings if f.code.startswith("no-")]
    assert "no SBOM or provenance attached to the image; not required (verify.attestations)" \
        in lenient.notes
    client.close()


def test_a_tampered_sbom_or_another_commits_provenance_fails(registry: RegistryServer) -> None:
    from gpurl_tasks.oci.referrers import attach

    config = _config(registry)
    client, image = _pulled(registry, _push(registry, config, "demo-fedcba987654", 4))
    context = _context(commit="fedcba9876540000000000000000000000000000")
    sbom, statement = documents(config, image, context)
    doc = json.loads(sbom)
    removed = next(c for c in doc["components"] if c["name"] == "pyyaml")
    doc["components"].remove(removed)
    subject = client.descriptor(image.ref, image.top_digest)
    attach(client, image.ref, subject, cdx.MEDIA_TYPE, json.dumps(doc).encode())
    other = json.loads(statement)
    other["predicate"]["buildDefinition"]["externalParameters"]["commit"] = COMMIT
    attach(client, image.ref, subject, slsa.MEDIA_TYPE, json.dumps(other).encode())
    _, report = verify_image(config, image.ref, client)
    failing = {f.code: f.message for f in report.findings if f.failing}
    assert "sbom-differs" in failing and removed["name"] in failing["sbom-differs"]
    assert "provenance-commit" in failing and COMMIT in failing["provenance-commit"]
    client.close()


def test_dpkg_listing_is_parsed_and_sorted() -> None:
    parsed = cdx.apt_packages_from_dpkg("zlib1g\t1:1.2.13\tamd64\n\nbad line\n" + DPKG)
    assert [p.name for p in parsed] == ["ca-certificates", "libc6", "python3.11", "zlib1g"]
    assert dataclasses.asdict(parsed[-1]) == {"name": "zlib1g", "version": "1:1.2.13",
                                              "architecture": "amd64"}


def test_the_provenance_reads_no_commit_from_a_foreign_document() -> None:
    assert slsa.commit_of({"predicate": {"buildDefinition": {}}}) is None
    assert slsa.commit_of({"predicate": "x"}) is None


def test_invoke_sbom_sums_up_what_is_attached(registry: RegistryServer, tmp_path: Path) -> None:
    """The task as a user runs it: a summary, --json, the whole document, and an image with none."""
    from tests.support.tasks_runner import run_task

    config = _config(registry)
    ref = _push(registry, config, "demo-0a0a0a0a0a0a", 5)
    client, image = _pulled(registry, ref)
    attach_attestations(config, image, client, _context())
    client.close()
    env = {"GPURL_REGISTRY_HOST": registry.host, "HOME": str(tmp_path)}
    done = run_task("sbom", "--profile", "demo", "--ref", ref, env=env)
    assert done.returncode == 0, done.stderr
    assert "SBOM: CycloneDX 1.6" in done.stdout and "3 apt" in done.stdout
    assert f"provenance: commit {COMMIT}" in done.stdout
    payload = json.loads(run_task("sbom", "--profile", "demo", "--ref", ref, "--json",
                                  env=env).stdout)
    assert payload["sbom"]["apt"] == 3 and payload["provenance"]["predicateType"]
    whole = json.loads(run_task("sbom", "--profile", "demo", "--ref", ref, "--document",
                                env=env).stdout)
    assert whole["bomFormat"] == "CycloneDX"
    bare = _push(registry, config, "demo-0b0b0b0b0b0b", 6)
    none = run_task("sbom", "--profile", "demo", "--ref", bare, env=env)
    assert none.returncode == 0 and "SBOM: none attached" in none.stdout


def test_diff_reads_the_packages_from_both_sboms(registry: RegistryServer) -> None:
    """Two images whose SBOMs differ in one apt package: `diff` names it (the locks alone
    could not: the apt set is read in the image)."""
    from gpurl_tasks.release.diff import diff_task

    config = _config(registry)
    refs = [_push(registry, config, f"demo-0c0c0c0c0c0{i}", 10 + i) for i in range(2)]
    for ref, libc in zip(refs, ("2.36-9+deb12u10", "2.36-9+deb12u11"), strict=True):
        client, image = _pulled(registry, ref)
        context = dataclasses.replace(_context(), apt=cdx.apt_packages_from_dpkg(
            DPKG.replace("2.36-9+deb12u10", libc)))
        attach_attestations(config, image, client, context)
        client.close()
    found = diff_task(config, *refs)
    assert "packages from the images' SBOMs" in found.notes
    assert found.packages is not None
    changed = {p.name: (p.before, p.after) for p in found.packages}
    assert changed == {"libc6 (apt)": ("2.36-9+deb12u10", "2.36-9+deb12u11")}


def test_another_locks_image_is_not_compared_with_this_lock(registry: RegistryServer) -> None:
    """An image built from another lock (its lock-hash label) keeps its SBOM unjudged: this
    checkout's closure says nothing about it; its provenance is still checked."""
    config = _config(registry)
    ref = f"{registry.host}/{config.registry.repository}:demo-0d0d0d0d0d0d"
    push_image(registry.url, config.registry.repository, [
        tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /"),
        random_layer(50_000, "RUN /bin/sh -c uv sync --frozen", seed=20)],
        tag="demo-0d0d0d0d0d0d", labels={LABEL_LOCK_HASH: "e" * 64})
    client, image = _pulled(registry, ref)
    attach_attestations(config, image, client, _context(commit="0d0d0d0d0d0d" + "0" * 28))
    _, report = verify_image(config, image.ref, client)
    assert not [f for f in report.findings if f.code.startswith(("sbom", "no-"))]
    assert any("built from another lock" in n for n in report.notes)
    assert any("provenance: built from 0d0d0d0d0d0d" in n for n in report.notes)
    client.close()


def test_a_tag_a_build_of_the_same_inputs_put_verifies_and_one_put_by_hand_does_not(
        registry: RegistryServer) -> None:
    """A new commit whose inputs equal a pushed image's: `reuse_pushed` puts the new commit's
    tag on the image built from the old one, and verify-layers of that tag passes on the
    statement the reuse attached (the provenance names the old commit, as it must). The same
    image under a third commit's tag put by hand, with no statement, still fails."""
    from gpurl_tasks.files import read_text
    from gpurl_tasks.rebuild.inputs import BuildInputs
    from gpurl_tasks.release.reuse import expected_labels, record, reuse_pushed

    config = _config(registry)
    labels = expected_labels(read_text(config.build.dockerfile, what="Dockerfile"))
    built_tag, later = f"demo-{COMMIT[:12]}", "abcdef0123456789abcdef0123456789abcdef01"
    push_image(registry.url, config.registry.repository, [
        tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /"),
        random_layer(50_000, "RUN /bin/sh -c uv sync --frozen", seed=5)],
        tag=built_tag, labels=labels)
    client, image = _pulled(registry, f"{registry.host}/{config.registry.repository}:{built_tag}")
    attach_attestations(config, image, client, _context())
    inputs = BuildInputs(key="5" * 64, base="gpurl/bookworm-python:3.11")
    record(config, inputs, image.top_digest)
    said: list[str] = []
    reference = f"{registry.host}/{config.registry.repository}:demo-{later[:12]}"
    reused = reuse_pushed(config, inputs, reference=reference, floating=None, dry_run=False,
                          say=said.append)
    assert reused is not None and reused.digest == image.top_digest, said
    _, report = verify_image(config, parse_reference(reference), client)
    assert report.ok, report.human()
    assert any(f"built from {COMMIT}; the tag naming {later[:12]} was put on it by a build of "
               f"the same inputs (inputs-{'5' * 64})" in n for n in report.notes), report.notes
    shown = read_attestations(client, parse_reference(reference), image.top_digest)
    assert (f"same inputs: demo-{later[:12]} put on this image by a build of the same inputs "
            f"(inputs-{'5' * 64})") in shown.human()
    assert shown.to_json()["same_inputs"] == [{"tag": f"demo-{later[:12]}",
                                               "inputs_tag": f"inputs-{'5' * 64}"}]
    by_hand = "demo-0123456789ab"
    client.tag_manifest(image.ref, image.top_digest, by_hand)
    _, refused = verify_image(config, dataclasses.replace(image.ref, tag=by_hand), client)
    failing = {f.code: f.message for f in refused.findings if f.failing}
    assert "provenance-commit" in failing and "0123456789ab" in failing["provenance-commit"]
    client.close()


_HEX = "0123456789abcdef"


@given(tag=st.from_regex(r"[a-z]{1,8}-[0-9a-f]{7,12}", fullmatch=True),
       digest=st.text(_HEX, min_size=64, max_size=64),
       other=st.text(_HEX, min_size=64, max_size=64),
       key=st.text(_HEX, min_size=64, max_size=64))
def test_a_same_inputs_statement_vouches_for_its_own_tag_on_its_own_digest_only(
        tag: str, digest: str, other: str, key: str) -> None:
    document = json.loads(sameinputs.statement(name="gpurl/demo", digest=f"sha256:{digest}",
                                               tag=tag, inputs_tag=f"inputs-{key}"))
    assert sameinputs.vouching([document], f"sha256:{digest}", tag) == f"inputs-{key}"
    assert sameinputs.vouching([document], f"sha256:{digest}", tag + "0") is None
    if other != digest:
        assert sameinputs.vouching([document], f"sha256:{other}", tag) is None
    foreign = {**document, "predicateType": slsa.PREDICATE_TYPE}
    assert sameinputs.vouching([foreign], f"sha256:{digest}", tag) is None
