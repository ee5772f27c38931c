"""The rendered kaniko script, run for real under bash.

Stand-ins (kaniko and crane cannot run here): `crane` comes from a checksum-pinned
tarball served on 127.0.0.1 and its `export` lays down a stand-in `/kaniko/executor`
under a temp root (GPURL_KANIKO_ROOT); both record their argv. Wheels and MANIFEST come
from a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import platform
import re
import shlex
import shutil
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import httpx
import pytest

from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sbom as cdx
from gpurl_tasks.attest.collect import listed
from gpurl_tasks.attest.sbom import python_components, requirement_name
from gpurl_tasks.cluster.kaniko import JOB_APP, job_app
from gpurl_tasks.config import load_config
from tests.conftest import REPO_ROOT
from tests.support.kaniko_harness import (
    AS_CLUSTER,
    STANDIN_DIGEST,
    ComposeParts,
    Rig,
    compose_parts,
    rig,
)
from tests.support.local_parts import build_source_wheel, need
from tests.support.registry_state import manifest

pytestmark = pytest.mark.integration

GITSHA = "0123abc"
CANARY = "ghp_CANARY7f3e9d1c5b"
OCI = "application/vnd.oci.image.manifest.v1+json"


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ComposeParts]:
    with compose_parts(tmp_path_factory.mktemp("compose")) as made:
        yield made


@pytest.fixture
def r(tmp_path: Path, parts: ComposeParts) -> Iterator[Rig]:
    need(shutil.which("bash") and shutil.which("python3"), "bash and python3 are needed to run the script")
    with rig(tmp_path, parts) as prepared:
        yield prepared


def _env(**extra: str) -> dict[str, str]:
    return {"GITSHA": GITSHA, "DOCKER_TOKEN": CANARY, "DOCKER_USER_ID": "alice", **extra}


def _executor_argv(r: Rig) -> list[str]:
    """The final build's argv: the last executor run (env-base's and the composing build's
    come first)."""
    *_, call = r.calls("executor")
    return shlex.split(call)[1:]


def _env_image(r: Rig) -> str:
    """The composed environment's reference, as compose-env wrote it for the final build."""
    return (r.root / "kaniko" / "gpurl" / "env-image").read_text().strip()


def test_success_runs_executor_with_exactly_the_expected_flags(r: Rig) -> None:
    proc = r.run(_env())
    assert proc.returncode == 0, proc.stderr
    argv = _executor_argv(r)
    digest_file = argv[argv.index("--digest-file") + 1]
    build_id = argv[argv.index("--cache-copy-layers") + 2].removeprefix("BUILD_ID=")
    image = "ghcr.io/open-thoughts/openthoughts-agent"
    assert argv == [
        "--context", f"dir://{r.root}/kaniko/context",
        "--dockerfile", "docker/Dockerfile.gpu-rl",
        "--build-arg", "WHEEL_SOURCE=prebuilt-wheelhouse",
        "--build-arg", f"GITSHA={GITSHA}",
        "--skip-unused-stages",
        "--custom-platform=linux/amd64",  # the variant's target.platform, not the node's
        "--compressed-caching=false",
        f"--compression-level={r.config.cluster.kaniko_gzip_level}",
        f"--snapshot-mode={r.config.cluster.snapshot_mode}",
        "--cache=true",
        "--cache-copy-layers",  # the generated Dockerfile's last RUN keeps its stage unpacked
        "--build-arg", f"BUILD_ID={build_id}",
        f"--cache-repo={r.config.cluster.cache_repo}",
        f"--push-retry={r.config.registry.retries}",
        f"--image-download-retry={r.config.registry.retries}",
        f"--image-fs-extract-retry={r.config.registry.retries}",
        "--skip-push-permission-check",  # one unretried POST; the retried push is the check
        "--destination", f"{image}:gpu-rl-{GITSHA}",
        "--digest-file", digest_file,
        "--build-arg", f"ENV_SOURCE={_env_image(r)}",  # FROM the composed environment
        "--build-arg", "COMPILED_SOURCE=env",  # which holds the fetched wheels' layer
    ]
    assert "--single-snapshot" not in argv
    assert re.fullmatch(r"[0-9a-f]{32}", build_id)
    again = r.run(_env())
    assert again.returncode == 0, again.stderr
    rerun = _executor_argv(r)
    assert rerun[rerun.index("--cache-copy-layers") + 2] != f"BUILD_ID={build_id}"  # anew each run
    assert f"pushed {image}:gpu-rl-{GITSHA}@{STANDIN_DIGEST}" in proc.stdout
    for name in r.wheels:  # fetched into the context's wheelhouse before the executor ran
        assert (r.root / "kaniko" / "context" / "docker" / "wheelhouse" / name).is_file()
        assert not (r.root / "app" / "docker" / "wheelhouse" / name).exists()  # not the bundle


def test_the_environment_is_composed_on_env_base_before_the_final_build(
        tmp_path: Path, parts: ComposeParts) -> None:
    """The composed path, as every cluster profile runs it: env-base is built and pushed to
    the cache repository, the composing build runs the job's compose-env (its zipapp: real uv
    stages each slice, real crane pushes the records and the composed image to a real
    registry, here an empty cache repository), and the final build runs FROM that image. The
    executor is a stand-in (see kaniko_harness); the registry's own answers are checked."""
    with rig(tmp_path, parts, own_cache=True) as r:
        proc = r.run(_env())
    assert proc.returncode == 0, proc.stderr
    work = r.root / "kaniko" / "gpurl"
    env_base, composing, final = (shlex.split(call)[1:] for call in r.calls("executor"))
    cache = r.config.cluster.cache_repo
    assert env_base[env_base.index("--target") + 1] == "env-base"
    assert env_base[env_base.index("--destination") + 1] == f"{cache}:env-base-{GITSHA}"
    assert composing[composing.index("--dockerfile") + 1] == f"{work}/compose-env.Dockerfile"
    assert "--no-push" in composing
    reference = _env_image(r)
    assert final[-4:] == ["--build-arg", f"ENV_SOURCE={reference}",
                          "--build-arg", "COMPILED_SOURCE=env"]
    written = [line for line in proc.stdout.splitlines() if ": written " in line]
    # the slices, then the prebuilt compiled wheels the job fetched, as one more layer
    assert sorted(line.split(": written ")[0] for line in written) == [
        "    01-alpha", "    02-beta", "    compiled-wheels"]
    assert f"==> environment {reference} (2 slice(s) written, 0 of them as their record's " \
           "blob was gone; 0 cached; the compiled wheels' layer written)" in proc.stdout
    host, _, path = cache.partition("/")
    with httpx.Client(base_url=f"http://{host}", timeout=30) as http:
        base = manifest(http, path, f"env-base-{GITSHA}")
        image = manifest(http, path, reference.rpartition("@")[2])
        pushed = http.head(f"/v2/{path}/manifests/env-base-{GITSHA}", headers={"Accept": OCI})
    assert base is not None and image is not None
    # the digest file the executor wrote is the registry's digest of env-base
    assert (work / "env-base.digest").read_text() == pushed.headers["Docker-Content-Digest"]
    # env-base's layer, then each slice's blob as compose-env said it wrote them, in plan
    # order, the compiled layer last
    said = {line.split(": written ")[0].strip(): json.loads(line.split(": written ")[1])["digest"]
            for line in written}
    assert [layer["digest"] for layer in image["layers"]] == [
        base["layers"][0]["digest"], said["01-alpha"], said["02-beta"], said["compiled-wheels"]]


def test_crane_exports_the_pinned_executor_over_the_root(r: Rig) -> None:
    assert r.run(_env()).returncode == 0
    export, lookup, *after_push = r.calls("crane")
    # crane -v: the retry wrapper reads the registry's last status and Retry-After from its log
    assert shlex.split(export)[1:] == ["-v", "export", "--platform", "linux/amd64",
                                       "registry.invalid/kaniko/executor@sha256:" + "ab" * 32,
                                       f"{r.root}/kaniko/gpurl/executor.tar"]
    assert shlex.split(lookup)[1:] == ["-v", "digest",
                                       f"{r.config.registry.image}:gpu-rl-{GITSHA}"]
    # the attestation step's reads go through writer/crane.py, as crane -v too
    assert [shlex.split(c)[1:3] for c in after_push][:3] == [
        ["-v", "manifest"], ["-v", "config"], ["-v", "digest"]]


@pytest.mark.parametrize("variable", ["REGISTRY_RETRIES", "REGISTRY_RETRY_MAX_WAIT"])
def test_retry_bounds_that_are_no_numbers_are_refused_before_any_registry_call(
        r: Rig, variable: str) -> None:
    proc = r.run(_env(**{variable: "3; rm -rf /"}))
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].endswith(
        "REGISTRY_RETRIES and REGISTRY_RETRY_MAX_WAIT must be whole numbers")
    assert r.calls("crane") == [] and r.calls("executor") == []


def test_the_pushed_image_gets_its_sbom_and_provenance_from_the_one_writer(r: Rig) -> None:
    """After the push the script writes both documents with the bundle's attest tool (the
    attest modules' own text) from the skeleton `invoke generate` wrote, the digest as their
    subject, and pushes each as an artifact by its digest; the token reaches neither."""
    proc = r.run(_env())
    assert proc.returncode == 0, proc.stderr
    attest = r.root / "kaniko" / "gpurl" / "attest"
    pushes = [shlex.split(c)[3:] for c in r.calls("crane") if shlex.split(c)[1:3] == ["-v", "push"]]
    image = r.config.registry.image
    assert [(Path(d).name, ref.split("@")[0]) for d, ref in pushes] == [
        ("sbom", image), ("provenance", image)]
    found = {}
    for directory, ref in pushes:
        index = json.loads((Path(directory) / "index.json").read_text())
        digest = index["manifests"][0]["digest"]
        assert ref == f"{image}@{digest}"  # pushed by the digest of the manifest it holds
        blobs = Path(directory) / "blobs" / "sha256"
        artifact = json.loads((blobs / digest.split(":")[1]).read_text())
        assert artifact["subject"]["digest"] == STANDIN_DIGEST
        layer = artifact["layers"][0]
        found[artifact["artifactType"]] = (blobs / layer["digest"].split(":")[1]).read_text()
        assert CANARY not in found[artifact["artifactType"]]
    sbom = json.loads(found[cdx.MEDIA_TYPE])
    statement = json.loads(found[slsa.MEDIA_TYPE])
    expected, declared = listed(r.config)
    assert python_components(sbom).get("registry") == {
        (p.name, p.version) for p in expected if p.source == "registry"}
    assert {n for n, _ in python_components(sbom)["post-install"]} == {
        requirement_name(x) for x in declared}
    wheels = {c["name"] for c in sbom["components"]
              if {"name": "gpurl:source", "value": "compiled-wheel"} in c["properties"]}
    assert len(wheels) == len(r.wheels) > 0
    assert slsa.commit_of(statement) == GITSHA
    run = statement["predicate"]["runDetails"]
    assert run["builder"]["id"] == r.config.cluster.kaniko_executor
    assert run["metadata"]["invocationId"] == f"iris:gpurl-kaniko-{GITSHA}"
    assert "SBOM and provenance, listed by the registry's referrers API" in proc.stdout
    assert attest.is_dir()


def test_an_existing_immutable_tag_stops_before_the_build(r: Rig) -> None:
    """The immutable tag is looked up with crane (after the auth file, before the wheels and
    the executor); an existing one is never moved without OVERWRITE_TAG=1 (stand-in crane)."""
    existing = "sha256:" + "e1" * 32
    proc = r.run(_env(STANDIN_EXISTING_DIGEST=existing))
    assert proc.returncode != 0
    assert f"gpu-rl-{GITSHA} already exists as {existing}" in proc.stderr
    assert "never moved" in proc.stderr and "--force" in proc.stderr
    assert r.calls("executor") == []
    assert not (r.root / "kaniko" / "context" / "docker" / "wheelhouse" / r.wheels[0]).exists()
    forced = r.run(_env(STANDIN_EXISTING_DIGEST=existing, OVERWRITE_TAG="1"))
    assert forced.returncode == 0, forced.stderr
    assert f"overwriting {existing}" in forced.stdout
    argv = _executor_argv(r)  # the final build ran, to the immutable tag
    assert argv[argv.index("--destination") + 1] == f"{r.config.registry.image}:gpu-rl-{GITSHA}"


def test_a_failed_tag_lookup_is_not_taken_for_a_free_tag(r: Rig) -> None:
    proc = r.run(_env(STANDIN_CRANE_ERROR="UNAUTHORIZED: authentication required"))
    assert proc.returncode != 0
    assert "cannot check whether" in proc.stderr and "UNAUTHORIZED" in proc.stderr
    assert r.calls("executor") == []


def test_a_dirty_source_id_is_accepted_and_junk_is_refused(r: Rig) -> None:
    dirty = f"{GITSHA}-dirty-0123456789ab"
    assert r.run(_env(GITSHA=dirty)).returncode == 0
    assert _executor_argv(r)[_executor_argv(r).index("--destination") + 1].endswith(f":gpu-rl-{dirty}")
    proc = r.run(_env(GITSHA=f"{GITSHA}-dirty-x"))
    assert proc.returncode != 0 and "GITSHA must be a lowercase hex commit id" in proc.stderr


def test_auth_file_is_written_after_the_overlay(r: Rig) -> None:
    """The stand-in image ships its own kaniko/.docker/config.json ({}); the executor must
    see the registry auth, so the script wrote it after `crane export`, not before."""
    assert r.run(_env()).returncode == 0
    seen = json.loads(r.auth_seen.read_text())
    auth = seen["auths"]["ghcr.io"]["auth"]
    assert base64.b64decode(auth).decode() == f"alice:{CANARY}"
    assert "token-in-env=\n" in r.log.read_text() + "\n"  # the token is unset before kaniko


def test_push_floating_adds_the_floating_tag(r: Rig) -> None:
    assert r.run(_env(PUSH_FLOATING="1")).returncode == 0
    argv = _executor_argv(r)
    dests = [argv[i + 1] for i, a in enumerate(argv) if a == "--destination"]
    image = "ghcr.io/open-thoughts/openthoughts-agent"
    assert dests == [f"{image}:gpu-rl-{GITSHA}", f"{image}:gpu-rl"]


def test_megatron_variant_builds_its_own_dockerfile_and_tags(r: Rig) -> None:
    """What `invoke build --variant megatron` sets (see test_iris_contract): no build arg."""
    assert r.run(_env(DOCKERFILE="docker/Dockerfile.gpu-rl-megatron",
                      TAG_PREFIX="gpu-rl-megatron")).returncode == 0
    argv = _executor_argv(r)
    assert argv[argv.index("--dockerfile") + 1] == "docker/Dockerfile.gpu-rl-megatron"
    assert not any("INSTALL_MEGATRON" in a for a in argv)
    assert argv[argv.index("--destination") + 1].endswith(f":gpu-rl-megatron-{GITSHA}")


@pytest.mark.parametrize("path", ["/etc/passwd", "../x/Dockerfile", ""])
def test_a_dockerfile_outside_the_context_is_refused(r: Rig, path: str) -> None:
    proc = r.run(_env(DOCKERFILE=path))
    if path:
        assert proc.returncode != 0 and "DOCKERFILE must be a path inside" in proc.stderr
    else:  # empty means the default, as for the other inputs
        assert proc.returncode == 0, proc.stderr


def test_missing_gitsha_stops_before_anything(r: Rig) -> None:
    env = _env()
    del env["GITSHA"]
    proc = r.run(env)
    assert proc.returncode != 0
    assert "GITSHA is required" in proc.stderr
    assert r.calls("crane") == [] and r.calls("executor") == []


def test_single_snapshot_is_refused_with_the_reason(r: Rig) -> None:
    proc = r.run(_env(SINGLE_SNAPSHOT="1"))
    assert proc.returncode != 0
    assert "SINGLE_SNAPSHOT=1 is refused" in proc.stderr
    assert "cannot be pulled" in proc.stderr
    assert r.calls("executor") == []


def test_missing_wheel_stops_before_the_executor(r: Rig) -> None:
    (r.served / "wheels" / r.wheels[1]).unlink()
    proc = r.run(_env())
    assert proc.returncode != 0
    assert f"wheel {r.wheels[1]} is missing" in proc.stderr
    assert "not compiling instead" in proc.stderr
    assert r.calls("executor") == []


def test_checksum_mismatch_stops_before_the_executor(r: Rig) -> None:
    (r.served / "wheels" / r.wheels[0]).write_bytes(b"tampered")
    proc = r.run(_env())
    assert proc.returncode != 0
    assert f"checksum mismatch for {r.wheels[0]}" in proc.stderr
    assert r.calls("executor") == []


def test_a_zipapp_other_than_the_one_submitted_stops_before_the_executor(r: Rig) -> None:
    """The bundle's gpurl (the zipapp invoke build staged) runs only with the sha256 the
    script was rendered with: an edited one is refused before any build."""
    app = r.root / "app" / JOB_APP
    app.write_bytes(app.read_bytes() + b"\n")
    proc = r.run(_env())
    assert proc.returncode != 0
    assert f"{JOB_APP} is not the zipapp invoke build staged (expected sha256 " \
           f"{job_app().sha256})" in proc.stderr
    assert r.calls("executor") == []


def test_manifest_without_an_entry_names_the_wheel(r: Rig) -> None:
    manifest = r.served / "wheels" / "MANIFEST"
    manifest.write_text("".join(f"{line}\n" for line in manifest.read_text().splitlines()[:2]))
    proc = r.run(_env())
    assert proc.returncode != 0
    assert f"MANIFEST at {r.base_url}/wheels has no entry for {r.wheels[1]}" in proc.stderr
    assert r.calls("executor") == []


def test_a_manifest_with_another_abi_key_stops_before_any_wheel_download(r: Rig) -> None:
    """Wheels compiled for another arch list: the script fails right after the MANIFEST
    fetch, naming both keys, before it downloads a wheel or runs the executor."""
    manifest = r.served / "wheels" / "MANIFEST"
    text = manifest.read_text()
    assert "arch-list=8.0;9.0" in text.splitlines()[0]  # gpu-rl's configured arch list
    manifest.write_text(text.replace("arch-list=8.0;9.0", "arch-list=8.0", 1))
    proc = r.run(_env())
    assert proc.returncode != 0
    assert "records another ABI key" in proc.stderr
    assert "expected 'fork=76259c63a flash-attn=2.8.3 torch=2.11.0 cuda=cu128 py=cp312 " \
           "platform=linux_x86_64 arch-list=8.0;9.0'" in proc.stderr
    assert "found 'fork=76259c63a flash-attn=2.8.3 torch=2.11.0 cuda=cu128 py=cp312 " \
           "platform=linux_x86_64 arch-list=8.0'" in proc.stderr
    assert not any((r.root / "kaniko" / "context" / "docker" / "wheelhouse" / n).exists()
                   for n in r.wheels)
    assert r.calls("executor") == []


def test_a_manifest_without_an_abi_key_stops(r: Rig) -> None:
    manifest = r.served / "wheels" / "MANIFEST"
    manifest.write_text("".join(line + "\n" for line in manifest.read_text().splitlines()[1:]))
    proc = r.run(_env())
    assert proc.returncode != 0 and "found 'none'" in proc.stderr
    assert r.calls("executor") == []


def test_missing_manifest_stops(r: Rig) -> None:
    (r.served / "wheels" / "MANIFEST").unlink()
    proc = r.run(_env())
    assert proc.returncode != 0 and "MANIFEST is missing" in proc.stderr
    assert r.calls("executor") == []


def test_wheel_builder_path_fetches_no_wheels(r: Rig) -> None:
    shutil.rmtree(r.served / "wheels")
    assert r.run(_env(WHEEL_SOURCE="wheel-builder")).returncode == 0
    assert "WHEEL_SOURCE=wheel-builder" in _executor_argv(r)


def test_missing_token_stops_before_the_executor(r: Rig) -> None:
    env = _env()
    del env["DOCKER_TOKEN"]
    proc = r.run(env)
    assert proc.returncode != 0 and "DOCKER_TOKEN is not set" in proc.stderr
    assert r.calls("executor") == []


def test_canary_token_never_appears_under_bash_x(r: Rig) -> None:
    proc = r.run(_env(), trace=True)
    assert proc.returncode == 0, proc.stderr
    assert "+ " in proc.stderr  # tracing really was on
    encoded = base64.b64encode(f"alice:{CANARY}".encode()).decode()
    for leaked in (CANARY, encoded):
        assert leaked not in proc.stdout
        assert leaked not in proc.stderr
    # tracing was switched back on after the token was consumed
    assert f"+ {r.root}/kaniko/executor --context" in proc.stderr


def test_crane_checksum_mismatch_stops(
        tmp_path: Path, parts: ComposeParts) -> None:
    with rig(tmp_path, parts, crane_sha256="0" * 64) as bad:
        proc = bad.run(_env())
    assert proc.returncode != 0
    assert "crane archive checksum mismatch" in proc.stderr
    assert bad.calls("crane") == [] and bad.calls("executor") == []


def test_demo_as_a_cluster_profile_fetches_its_own_built_wheel(
        tmp_path: Path, parts: ComposeParts) -> None:
    """The wheel its wheel-builder makes (the real build backend on the target's Python),
    published with its MANIFEST, is exactly what the demo's script fetches and checks."""
    need(shutil.which("bash") and shutil.which("python3"), "bash and python3 are needed to run the script")
    demo = load_config(REPO_ROOT, profile="demo", env={})
    (spec,) = demo.build.wheel_specs
    built = build_source_wheel(REPO_ROOT / spec[2:], demo.target.python, tmp_path / "build")
    (tmp_path / "rig").mkdir()
    with rig(tmp_path / "rig", parts, profile="demo", overrides=AS_CLUSTER, wheels=[built]) as demo_rig:
        proc = demo_rig.run(_env(WHEEL_SOURCE="prebuilt-wheelhouse"))
        assert proc.returncode == 0, proc.stderr
        assert demo_rig.wheels == (built.name,)
        fetched = demo_rig.root / "kaniko" / "context" / "docker" / "wheelhouse-demo" / built.name
        assert fetched.read_bytes() == built.read_bytes()
        assert f"    ok {built.name}" in proc.stdout
        assert "--dockerfile" in _executor_argv(demo_rig)


def test_a_profile_without_compiled_wheels_skips_the_fetch(
        tmp_path: Path, parts: ComposeParts) -> None:
    need(shutil.which("bash") and shutil.which("python3"), "bash and python3 are needed to run the script")
    with rig(tmp_path, parts, profile="heavy", overrides=AS_CLUSTER, wheels=[]) as heavy:
        (heavy.served / "wheels" / "MANIFEST").unlink()  # nothing is published for it
        proc = heavy.run(_env(WHEEL_SOURCE="prebuilt-wheelhouse"))
    assert proc.returncode == 0, proc.stderr
    assert heavy.wheels == ()
    assert not [a for a in _executor_argv(heavy) if a.startswith("WHEEL_SOURCE")]
    assert not list((heavy.root / "kaniko").rglob("MANIFEST"))  # nothing fetched


# --- the variant's platform: the node it runs on, the executor's and the wheels' platform ----


def _rig_ready() -> None:
    need(shutil.which("bash") and shutil.which("python3"), "bash and python3 are needed to run the script")


def test_a_script_on_a_node_of_another_platform_stops_in_one_line_naming_its_cluster(
        tmp_path: Path, parts: ComposeParts) -> None:
    """The multiarch variant of the other platform than this machine's (gb200, aarch64, here)
    on this node: one line naming the platform, the node's and the variant's cluster, before
    crane is fetched or anything else runs."""
    _rig_ready()
    machine = platform.machine()
    need(machine in ("x86_64", "aarch64"), f"a node of a platform gpurl builds, not {machine}")
    other, arch, oci, cluster = (("gb200", "aarch64", "linux/arm64", "cw-us-east-08a")
                                 if machine == "x86_64" else
                                 ("h100", "x86_64", "linux/amd64", "cw-us-east-02a"))
    with rig(tmp_path, parts, profile="multiarch", variant=other, wheels=[]) as away:
        assert (away.config.target.arch, away.config.cluster.name) == (arch, cluster)
        proc = away.run(_env())
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [
        f"build.sh: error: this job builds the {oci} ({arch}) image but runs on a {machine} node: "
        f"submit it to cluster {cluster} (invoke build runs each variant on its own)"]
    assert away.calls("crane") == [] and away.calls("executor") == []
    assert not (away.root / "kaniko").exists()  # nothing written, not even the work dir


def test_the_aarch64_script_on_an_aarch64_node_exports_and_builds_for_linux_arm64(
        tmp_path: Path, parts: ComposeParts) -> None:
    """The gb200 variant's real script where its platform check passes (a stand-in `uname`
    says aarch64, as a GB200 node does): the executor is exported for linux/arm64 and every
    executor run builds for it; the same script on this x86 node was refused above."""
    _rig_ready()
    with rig(tmp_path, parts, profile="multiarch", variant="gb200", wheels=[]) as gb200:
        proc = gb200.run({**_env(), **gb200.on_node("aarch64")})
        assert proc.returncode == 0, proc.stderr
        export = shlex.split(gb200.calls("crane")[0])[1:]
        assert export[:4] == ["-v", "export", "--platform", "linux/arm64"]
        assert "--custom-platform=linux/arm64" in _executor_argv(gb200)
        script = gb200.script.read_text()
    assert "TARGET_ARCH=aarch64\n" in script and "CLUSTER_NAME=cw-us-east-08a\n" in script
    for x86 in ("amd64", "x86_64"):  # no amd64 assumption is left in the aarch64 script
        assert x86 not in script


def _aarch64_rig(tmp_path: Path, parts: ComposeParts) -> AbstractContextManager[Rig]:
    """gpu-rl (a profile with compiled wheels) as an aarch64 variant: its MANIFEST's key names
    linux_aarch64 (the rig writes the key of the config's pins, as a wheel-builder does). Its
    workspace is the multiarch fixture's, whose lock resolves for aarch64 (rl/uv.lock resolves
    for x86_64 only, and an aarch64 image of it is refused where the lock is read). Its
    environment is the chain: a composing job installs the aarch64 wheels natively, which
    this x86_64 machine cannot (the composed aarch64 script runs above, for the multiarch
    variant without compiled wheels)."""
    _rig_ready()
    return rig(tmp_path, parts, chain=True,
               overrides={"target.arch": "aarch64", "workspace": "examples/multiarch",
                          "target.python": "3.11", "python.extras": []})


def test_an_aarch64_script_expects_the_linux_aarch64_manifest(
        tmp_path: Path, parts: ComposeParts) -> None:
    with _aarch64_rig(tmp_path, parts) as arm:
        manifest = (arm.served / "wheels" / "MANIFEST").read_text()
        assert " platform=linux_aarch64 " in manifest.splitlines()[0]
        assert all(name.endswith("_aarch64.whl") for name in arm.wheels), arm.wheels
        assert "  --wheel-platform linux_aarch64\n" in arm.script.read_text()
        proc = arm.run({**_env(), **arm.on_node("aarch64")})
        assert proc.returncode == 0, proc.stderr
        for name in arm.wheels:
            assert f"    ok {name}" in proc.stdout


def test_a_manifest_of_the_other_platform_is_named_as_such(
        tmp_path: Path, parts: ComposeParts) -> None:
    """An x86_64 wheelhouse behind an aarch64 job's wheel-base-url: the script stops right
    after the MANIFEST, saying plainly that it is for linux_x86_64 and the job wants
    linux_aarch64 (not only "another ABI key"), before any wheel is fetched."""
    with _aarch64_rig(tmp_path, parts) as arm:
        manifest = arm.served / "wheels" / "MANIFEST"
        manifest.write_text(manifest.read_text().replace(" platform=linux_aarch64 ",
                                                         " platform=linux_x86_64 ", 1))
        proc = arm.run({**_env(), **arm.on_node("aarch64")})
        assert proc.returncode == 1
        assert proc.stderr.splitlines()[-1] == (
            f"gpurl job: error: the MANIFEST at {arm.base_url}/wheels is for platform "
            "linux_x86_64, not this job's linux_aarch64: point build.wheel-base-url at the "
            "linux_aarch64 wheels (not compiling instead; set WHEEL_SOURCE=wheel-builder to "
            "compile)")
        assert "another ABI key" not in proc.stderr
        assert not any((arm.root / "kaniko" / "context" / "docker" / "wheelhouse" / n).exists()
                       for n in arm.wheels)
        assert arm.calls("executor") == []
