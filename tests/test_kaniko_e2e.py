"""The cluster build for real: the generated kaniko script, unmodified, with real kaniko and crane.

kaniko (upstream v1.23.2 and the maintained fork v1.28.3) and crane v0.20.3 are built here
from their source archives (`cluster.source-archives`, ../shared/third_party beside the
checkout; a user's clone has none, and these tests then skip saying so). The script runs in a
container as in the iris job: the files iris bundles, in a directory mounted read-write at /app
(iris's Kubernetes runtime mounts the task's workdir as an emptyDir an init container fills) of
an ubuntu-like image with bash and curl, no GPURL_KANIKO_ROOT, so crane really overlays the
executor over `/`.
Config points it at loopback parts only: the executor image and the base image in the plain
loopback registry (anonymous pulls, as gcr.io serves them), crane's release archive on a
loopback file server, and a destination registry with TLS and an htpasswd login standing in
for GHCR (the cluster and GHCR cannot run here). The token reaches that registry for real and
never the job's output (a canary).

Each executor builds the demo cold, again with nothing changed, and after a small lock bump;
`verify-layers` and `pin` run on what it pushed. The script composes the environment
(`cluster.env-source = composed`): kaniko builds env-base, gpurl's layer writer writes each
slice in an unpushed kaniko build FROM it, crane composes them; so each slice layer must be the
very blob the local path writes for it, and the final sync must install the local packages only.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpurl_tasks.attest.collect import listed
from gpurl_tasks.attest.sbom import python_components, requirement_name
from gpurl_tasks.cluster.bundle import bundle_files, stage_workspace
from gpurl_tasks.cluster.kaniko import job_files, render_script
from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.context import ignored_paths
from gpurl_tasks.dockerfile.generate import layer_count
from gpurl_tasks.dockerfile.recipe import WORKDIR
from gpurl_tasks.git import ls_bundle_files
from gpurl_tasks.local.builder import build_command, serving_index
from gpurl_tasks.local.engine import find_buildkit_client
from gpurl_tasks.local.from_source import Builders, job_image, run_job, setup_kaniko
from gpurl_tasks.local.setup import index_dir
from gpurl_tasks.local.stage import stage_slice
from gpurl_tasks.plan.model import Slice
from gpurl_tasks.plan.profile import plan_for_config
from tests.conftest import REPO_ROOT
from tests.support.demo_tree import BUMPED, CACHE, copy_tree, demo_wheelhouse, invoke, relock
from tests.support.faults import FaultProxy, Rates
from tests.support.htpasswd import basic_auth_yaml
from tests.support.local_parts import need
from tests.support.rangeserver import serve_files
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.registry_state import sound
from tests.support.tasks_runner import one_variant
from tests.support.tls import LocalCA, make_ca

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.kaniko, pytest.mark.slow]
SCRIPT = "/job/build.sh"  # where the job's script is mounted: iris hands it over in BUILD_B64

SOURCES = load_config(REPO_ROOT, profile="demo", env={}).cluster.source_archives
PLAIN = "127.0.0.1:5005"  # setup-local's registry (the demo's): executor and base image
BASE = "gpurl/bookworm-python:3.11"
JOB_IMAGE = "gpurl/kaniko-job:bookworm"
USER = "gpurl"
CANARY = "ghp_CANARYkanikoE2E0f3e9d1c5b7a"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
REBUILT_DOC = "Demo C extension, rebuilt."  # in the rebuilt wheel's compiled module only


@dataclass(frozen=True)
class Parts:
    builders: Builders
    registry: RegistryServer
    ca: LocalCA
    ca_dir: Path  # mounted at /ca in the job: the system bundle plus the test CA
    crane_url: str
    wheel_url: str  # the demo's compiled wheel and its MANIFEST, shaped like the wheel dataset
    rebuilt_wheel_url: str  # that wheel rebuilt: its name and version, other compiled bytes
    crane: Path  # the crane the job runs, here on the host to read what the registry holds
    docker_config: Path  # its login to the TLS registry


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parts]:
    need(SOURCES.is_dir(), f"no kaniko/crane source archives at {SOURCES}: the real-kaniko tests "
         "need upstream's release sources (set cluster.source-archives, see README)")
    builders = setup_kaniko(CACHE / "builders", SOURCES, PLAIN)
    job_image(BASE, JOB_IMAGE)
    for argv in (["docker", "tag", BASE, f"{PLAIN}/{BASE}"], ["docker", "push", f"{PLAIN}/{BASE}"]):
        subprocess.run(argv, check=True, capture_output=True)
    tmp = tmp_path_factory.mktemp("kaniko-parts")
    ca = make_ca(tmp / "ca")
    ca_dir = tmp / "trust"
    ca_dir.mkdir()
    (ca_dir / "bundle.pem").write_bytes(HOST_CA.read_bytes() + ca.ca.read_bytes())
    served = tmp / "served"
    demo_wheelhouse(served / "wheels", tmp / "wheel")
    demo_wheelhouse(served / "wheels-rebuilt", tmp / "wheel-rebuilt", module_doc=REBUILT_DOC)
    shutil.copy2(builders.crane_archive, served)
    with tarfile.open(builders.crane_archive) as archive:
        archive.extract("crane", tmp / "bin", filter="data")
    docker_config = tmp / "docker"
    docker_config.mkdir()
    with running_registry(tmp / "registry", tls=ca,
                          auth_yaml=basic_auth_yaml(tmp, USER, CANARY)) as registry, \
            serve_files(served) as url:
        auth = base64.b64encode(f"{USER}:{CANARY}".encode()).decode()
        (docker_config / "config.json").write_text(
            json.dumps({"auths": {registry.host: {"auth": auth}}}))
        yield Parts(builders=builders, registry=registry, ca=ca, ca_dir=ca_dir,
                    crane_url=f"{url}/{builders.crane_archive.name}", wheel_url=f"{url}/wheels",
                    rebuilt_wheel_url=f"{url}/wheels-rebuilt",
                    crane=tmp / "bin" / "crane", docker_config=docker_config)


def _as_cluster_profile(tree: Path, parts: Parts, executor: str, host: str = "",
                        repository: str = "") -> None:
    """The demo profile built on the cluster path: backend iris, loopback pins;
    the destination registry `host` (default the TLS registry's own) and `repository`
    (default one per executor)."""
    edits = [
        ('workspace = "examples/demo"\nbackend = "local"', 'workspace = "examples/demo"\nbackend = "iris"'),
        ('base-image = "gpurl/bookworm-python:3.11"',
         f'base-image = "{PLAIN}/{BASE}"'),
        # a repository (and cache repository) per executor: each writes its own slices
        ('host = "127.0.0.1:5005"\nrepository = "gpurl/demo"',
         f'host = "{host or parts.registry.host}"\n'
         f'repository = "{repository or f"gpurl/demo-{executor}"}"'),
        ('floating-tag = "demo"\nuser = ""', f'floating-tag = "demo"\nuser = "{USER}"'),
        ("[tool.gpurl.profiles.demo.layers]",
         "[tool.gpurl.profiles.demo.cluster]\n"
         f'kaniko-executor = "{parts.builders.executors[executor]}"\n'
         f'crane-url = "{parts.crane_url}"\ncrane-sha256 = "{parts.builders.crane_sha256}"\n\n'
         "[tool.gpurl.profiles.demo.layers]"),
        ('wheel-source = "wheel-builder"', f'wheel-source = "prebuilt-wheelhouse"\n'
         f'wheel-base-url = "{parts.wheel_url}"'),
    ]
    _reconfigure(tree, edits, "cluster")


def _reconfigure(tree: Path, edits: list[tuple[str, str]], message: str) -> None:
    """Each (old, new) edit of the tree's pyproject, once, in order; `invoke generate`;
    committed (the tag names a commit)."""
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    pyproject.write_text(text)
    done = invoke(tree, "generate", "--profile", "demo")
    assert done.returncode == 0, done.stderr
    _commit(tree, message)


def _commit(tree: Path, message: str) -> None:
    for argv in (["git", "add", "-A"], ["git", "-c", "user.name=gpurl", "-c",
                                        "user.email=gpurl@localhost", "commit", "-qm", message]):
        subprocess.run(argv, cwd=tree, check=True)


def _env(parts: Parts) -> dict[str, str]:
    return {**os.environ, "GPURL_REGISTRY_TOKEN": CANARY,
            "SSL_CERT_FILE": str(parts.ca_dir / "bundle.pem")}


@dataclass(frozen=True)
class Built:
    reference: str  # REPO:TAG@sha256:...
    output: str
    layers: list[dict[str, Any]]
    bundle: Path  # the job's /app, as the build left it


def _bundle(tree: Path, dest: Path, profile: str = "demo") -> tuple[dict[str, str], dict[Path, str]]:
    """The workspace `invoke build` stages from `tree` (the files iris uploads and the job's
    own: its zipapp, slice index and skeleton), written into `dest` as iris's init container
    unpacks it into the job's workdir volume, and the script it submits, rendered beside it:
    ({path: sha256}, the script's mount at SCRIPT)."""
    config = load_config(tree, profile=profile, env={})
    dest.mkdir(parents=True)
    stage_workspace(tree, bundle_files(tree, ls_bundle_files), job_files(config), dest)
    script = dest.parent / f"{dest.name}.sh"
    script.write_text(render_script(config))
    return _contents(dest), {script: SCRIPT}


def _contents(root: Path) -> dict[str, str]:
    """{path: sha256} of every file under `root`."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in root.rglob("*") if p.is_file() or p.is_symlink()}


def _job_env(gitsha: str, cert_file: bool) -> dict[str, str]:
    return {"GITSHA": gitsha, "DOCKER_TOKEN": CANARY, "DOCKER_USER_ID": USER,
            "GIT_COMMIT": full_commit(gitsha), "JOB_NAME": f"gpurl-kaniko-{gitsha}",
            **({"SSL_CERT_FILE": "/ca/bundle.pem"} if cert_file else {})}


def _run(tree: Path, parts: Parts, gitsha: str, *, image: str = JOB_IMAGE,
         cert_file: bool = True, name: str | None = None) -> tuple[int, str, dict[str, str], Path]:
    """The committed script in a job container, the bundle mounted at /app as iris mounts it:
    (exit code, output, the bundle's files as the job got them, the bundle)."""
    config = load_config(tree, profile="demo", env={})
    bundle = tree.parent / f"bundle-{gitsha}"
    shutil.rmtree(bundle, ignore_errors=True)
    files, script = _bundle(tree, bundle)
    with serving_index(config.build.index_url, index_dir(CACHE)):
        code, output = run_job(bundle, SCRIPT, _job_env(gitsha, cert_file), image=image,
                               mounts={**script, **({parts.ca_dir: "/ca"} if cert_file else {})},
                               timeout=1800, name=name)
    return code, output, files, bundle


def _build(tree: Path, parts: Parts, gitsha: str, *, image: str = JOB_IMAGE,
           cert_file: bool = True) -> Built:
    """Run the committed script in a job container (the bundle mounted at /app; the test CA
    trusted through SSL_CERT_FILE on a mount, or with `cert_file` False through `image`'s
    own /etc/ssl alone), check that the build left the bundle exactly as the job got it, then
    verify-layers."""
    config = load_config(tree, profile="demo", env={})
    code, output, files, bundle = _run(tree, parts, gitsha, image=image, cert_file=cert_file)
    # the composing build's own lines, when it ran, else the end of the job's output
    assert code == 0, output.rsplit("Running: [/bin/bash", 1)[-1][-6000:]
    assert _contents(bundle) == files, "the build changed the job's bundle"
    secret_forms = (CANARY, base64.b64encode(f"{USER}:{CANARY}".encode()).decode())
    assert not [form for form in secret_forms if form in output]
    pushed = [line for line in output.splitlines() if line.startswith("pushed ")]
    assert len(pushed) == 1, output[-2000:]
    reference = pushed[0].split()[1]
    assert reference.startswith(f"{config.registry.image}:demo-{gitsha}@sha256:")
    verified = invoke(tree, "verify-layers", "--profile", "demo", "--ref", reference, "--json",
                      env=_env(parts))
    assert verified.returncode == 0, verified.stdout + verified.stderr
    return Built(reference=reference, output=output,
                 layers=one_variant(verified.stdout)["layers"], bundle=bundle)


def _killed(tree: Path, parts: Parts, gitsha: str, at: str) -> str:
    """The job stopped as a node stops it (`docker kill`: SIGKILL, no cleanup) as soon as its
    log (stdout and stderr as they came) matches `at`; its output. Fails unless the kill
    ended it."""
    name = f"gpurl-killed-{gitsha}-{uuid.uuid4().hex[:8]}"
    pattern = re.compile(at, flags=re.M)
    killed, done = threading.Event(), threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 1500
        while not done.is_set() and time.monotonic() < deadline:
            logs = subprocess.run(["docker", "logs", name], stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True).stdout
            if pattern.search(logs):
                if subprocess.run(["docker", "kill", name], capture_output=True).returncode == 0:
                    killed.set()
                return
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        code, output, _, _ = _run(tree, parts, gitsha, name=name)
    finally:
        done.set()
        watcher.join(timeout=60)
    assert killed.is_set() and code == 137, (at, code, output[-3000:])
    return output


def _held(parts: Parts, *repositories: str) -> dict[str, list[str]]:
    """{repository: its tags}, once they hold still, every manifest naming only blobs the
    registry holds: what a stopped job left is complete or absent, never half there."""
    with httpx.Client(base_url=parts.registry.url, verify=parts.ca.context(),
                      auth=(USER, CANARY), timeout=30) as http:
        return sound(http, repositories, settle=2.0)


def full_commit(gitsha: str) -> str:
    """The full commit `invoke build` passes beside the tag's short one (these trees' tags
    name made-up commits: the short one, padded)."""
    return gitsha + "0" * (40 - len(gitsha))


def test_the_job_attaches_the_sbom_and_provenance_that_verify_layers_requires(
        parts: Parts, cluster: tuple[str, Path, Built]) -> None:
    """After its push the job writes both documents with gpurl's attest modules (the bundle's
    zipapp's `attest`) and attaches them to the pushed digest: verify-layers, with them
    required, finds both under the referrers tag (the registry has no referrers API); the
    SBOM's Python packages are exactly the lock's closure plus the declared installs, its apt
    packages dpkg's in the image; the provenance names the tag's commit and the executor by
    digest; the token is in neither."""
    executor, tree, built = cluster
    assert re.search(r"^attested \S+: SBOM and provenance, listed by the tag \S+:sha256-",
                     built.output, flags=re.M), built.output[-3000:]
    env = {**_env(parts), "GPURL_VERIFY_ATTESTATIONS": "required"}
    verified = invoke(tree, "verify-layers", "--profile", "demo", "--ref", built.reference,
                      "--json", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    notes = one_variant(verified.stdout)["notes"]
    gitsha = built.reference.split(":demo-")[1].split("@")[0]
    assert any("packages equal the lock's closure" in n for n in notes), notes
    assert any(f"built from {full_commit(gitsha)}" in n for n in notes), notes
    shown = invoke(tree, "sbom", "--profile", "demo", "--ref", built.reference, "--document",
                   "--json", env=_env(parts))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert CANARY not in shown.stdout
    found = json.loads(shown.stdout)
    sbom, statement = found["sbom"], found["provenance"]
    config = load_config(tree, profile="demo", env={})
    expected, declared = listed(config)
    components = python_components(sbom)
    assert set().union(*(v for k, v in components.items()
                         if k not in ("compiled-wheel", "post-install"))) == {
        (p.name, p.version) for p in expected}
    assert {n for n, _ in components.get("post-install", set())} == {
        requirement_name(x) for x in declared}
    assert {n for n, _ in components["compiled-wheel"]} == {"gpurl_demo_ext"}
    apt = [c for c in sbom["components"] if c.get("purl", "").startswith("pkg:deb/")]
    assert len(apt) > 50 and any(c["name"] == "libc6" for c in apt), len(apt)
    run = statement["predicate"]["runDetails"]
    assert run["builder"]["id"] == parts.builders.executors[executor]
    assert run["metadata"]["invocationId"] == f"iris:gpurl-kaniko-{gitsha}"
    assert statement["subject"][0]["digest"]["sha256"] == built.reference.split("@sha256:")[1]
    print(f"{executor}: SBOM {len(sbom['components'])} components ({len(apt)} apt); provenance "
          f"builder {run['builder']['id']}")
    by_kind: dict[str, dict[str, Any]] = {}
    for component in sbom["components"]:  # the first component of each kind, for the record
        kind = next((p["value"] for p in component.get("properties", [])
                     if p["name"] == "gpurl:source"), "?")
        by_kind.setdefault(kind, component)
    print(json.dumps({**{k: v for k, v in sbom.items() if k != "components"},
                      "components (first of each kind)": list(by_kind.values())}, indent=1))
    print(json.dumps(statement, indent=1))


def _slice_runs(layers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in layers if row.get("sync_step") is not None]


def _blob_files(parts: Parts, reference: str, digest: str) -> dict[str, bytes]:
    """{file name: its bytes} of one pushed layer, read through the registry API with the
    login (a link's bytes are empty)."""
    repo = reference.split("/", 1)[1].split(":")[0].split("@")[0]
    url = f"https://{parts.registry.host}/v2/{repo}/blobs/{digest}"
    with httpx.Client(verify=parts.ca.context(), auth=(USER, CANARY), timeout=60) as client:
        blob = client.get(url, follow_redirects=True)
    blob.raise_for_status()
    with tarfile.open(fileobj=io.BytesIO(blob.content), mode="r:gz") as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else b"")  # type: ignore[union-attr]
                for m in tar.getmembers() if not m.isdir()}


def _blob_names(parts: Parts, reference: str, digest: str) -> list[str]:
    """The file names in one pushed layer."""
    return list(_blob_files(parts, reference, digest))


@pytest.fixture(scope="module", params=["upstream", "fork"])
def cluster(request: pytest.FixtureRequest, parts: Parts,
            tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, Built]:
    """(executor, the committed cluster-profile tree, its cold build)."""
    executor = str(request.param)
    tree = copy_tree(tmp_path_factory.mktemp(f"kaniko-{executor}"))
    _as_cluster_profile(tree, parts, executor)
    return executor, tree, _build(tree, parts, "c01d" + ("0a1" if executor == "upstream" else "0f1"))


def test_the_script_builds_pushes_and_the_pushed_slices_match_the_plan(
        cluster: tuple[str, Path, Built]) -> None:
    """Every slice layer the plan predicts is in the image, each MB-sized one within 3% of
    its prediction (the script sets the gzip level the prediction holds for; the pinned
    post-installs' slice, last, has no recorded size to predict from)."""
    executor, tree, built = cluster
    runs = _slice_runs(built.layers)
    plan = plan_for_config(load_config(tree, profile="demo", env={}))
    assert len(runs) == len(plan.layers) and plan.layers[-1].label == "post-install"
    errors = {row["instruction"][-30:]: row["error_percent"] for row in runs[:-1]
              if row["size"] >= 10**6}
    assert errors and all(abs(e) <= 3.0 for e in errors.values()), (executor, errors)
    # and each is exactly the blob the job recorded for it (its history names the record)
    assert all(row["exact"] and row["record"] for row in runs), (executor, runs)
    # the layers `invoke plan` counts; the count knows the fork by its image's name (its
    # empty ARG, ENV and LABEL layers), which the mirror here does not carry
    config = load_config(tree, profile="demo", env={})
    if executor == "fork":
        config = config.with_variant_settings(cluster=dataclasses.replace(
            config.cluster, kaniko_executor="ghcr.io/osscontainertools/kaniko:v1.28.3"))
    assert len(built.layers) == layer_count(config, plan_for_config(config)).total, executor
    print(f"{executor}: {len(built.layers)} layers; MB-slice errors "
          + ", ".join(f"{e:+.1f}%" for e in errors.values()))


def test_each_slice_is_the_blob_the_local_path_writes(
        cluster: tuple[str, Path, Built]) -> None:
    """One slice, one blob, on every builder: the local path (BuildKit's env-base, a staging
    container of it, the same writer) writes every slice of the plan into the very blob the
    cluster job wrote, though the two env-base images are different builds."""
    executor, tree, built = cluster
    config = load_config(tree, profile="demo", env={})
    plan = plan_for_config(config)
    client = find_buildkit_client()[0]
    out = tree / ".cache" / "local-slices"
    out.mkdir(parents=True, exist_ok=True)
    with serving_index(config.build.index_url, index_dir(CACHE)):
        iid = out / "env-base.iid"
        argv = build_command(client, dockerfile=config.build.dockerfile, context=tree,
                             build_args={}, target="env-base", iidfile=iid)
        subprocess.run(argv, check=True, capture_output=True, env={**os.environ,
                                                                   "DOCKER_BUILDKIT": "1"})
        local = {step.slice.image_path.rsplit("/", 1)[1]: stage_slice(
            client, image=iid.read_text().strip(), slice_file=step.slice.path(config.variant),
            dest=step.slice.image_path, out_dir=out, name=step.name, venv=config.build.venv,
            level=config.layers.slice_gzip_level).blob.digest for step in plan.layers}
    assert _by_slice(_slice_runs(built.layers)) == local, executor


def test_the_final_sync_installs_only_the_local_packages(cluster: tuple[str, Path, Built]) -> None:
    """The proof of equality: run FROM the composed environment, `uv sync --frozen` finds every
    slice's package in place, installs the workspace's own packages and touches nothing else."""
    executor, tree, built = cluster
    plan = plan_for_config(load_config(tree, profile="demo", env={}))
    # the sync's own output: from the line kaniko logs as it runs it (an earlier line names it
    # too, when kaniko probes its cache) up to the next instruction it runs
    ran = built.output.split("] RUN uv sync --frozen", 1)[1]
    said = re.split(r"\] RUN ", ran, maxsplit=1)[0]
    installed = re.findall(r"^\s*\+ ([A-Za-z0-9_.-]+)==", said, flags=re.M)
    assert sorted(installed) == sorted(plan.local), (executor, said[-2000:])
    assert not re.search(r"^\s*[-~] ", said, flags=re.M), said[-2000:]


def test_the_prebuilt_path_fetches_the_wheel_and_never_builds_the_wheel_builder(
        cluster: tuple[str, Path, Built]) -> None:
    """The cluster's default path: the script fetches the published wheel and checks it
    against MANIFEST; --skip-unused-stages keeps kaniko off the wheel-builder stage."""
    _, _, built = cluster
    assert "    ok gpurl_demo_ext-" in built.output
    assert "RUN uv sync --frozen" in built.output  # the executor logs each RUN it runs...
    assert "-m pip wheel" not in built.output  # ...and the wheel-builder's compile is not one
    assert "compiled wheels installed: gpurl_demo_ext==" in built.output


def test_the_images_workspace_holds_exactly_what_the_dockerfile_copies(
        parts: Parts, cluster: tuple[str, Path, Built]) -> None:
    """The context lives under /kaniko and the image's workspace away from the job's /app
    mount: the bundle never enters the image, and the workspace COPY is the only layer with
    files under the workspace."""
    _, tree, built = cluster
    config = load_config(tree, profile="demo", env={})
    ignored = set(ignored_paths(config))
    listed = subprocess.run(["git", "ls-files", "examples/demo"], cwd=tree, capture_output=True,
                            text=True, check=True).stdout.split()
    workspace = WORKDIR.lstrip("/") + "/"
    expected = {workspace + name.removeprefix("examples/demo/") for name in listed
                if not any(name == rule or name.startswith(rule + "/") for rule in ignored)}
    in_workspace: set[str] = set()
    for row in built.layers[1:]:  # the base image's own layer holds no workspace
        if row["size"] < 50 * 10**6:
            names = _blob_names(parts, built.reference, row["digest"])
            assert not [n for n in names if n.startswith("app/")], row
            in_workspace |= {n for n in names if n.startswith(workspace)}
    assert in_workspace == expected


def _exported(parts: Parts, reference: str) -> dict[str, tarfile.TarInfo | bytes]:
    """The pushed image's filesystem as `crane export` flattens it: {path: its bytes for a
    regular file under the workspace or the venv's site-packages, else its tar entry}."""
    env = {**os.environ, "DOCKER_CONFIG": str(parts.docker_config),
           "SSL_CERT_FILE": str(parts.ca_dir / "bundle.pem")}
    done = subprocess.run([str(parts.crane), "export", reference, "-"], env=env,
                          capture_output=True, check=True, timeout=600)
    files: dict[str, tarfile.TarInfo | bytes] = {}
    venv = load_config(REPO_ROOT, profile="demo", env={}).build.venv
    keep = (WORKDIR.lstrip("/") + "/", venv.lstrip("/") + "/lib/")
    with tarfile.open(fileobj=io.BytesIO(done.stdout), mode="r:") as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            extracted = tar.extractfile(member) if member.isfile() and name.startswith(keep) \
                else None
            files[name] = extracted.read() if extracted else member
    return files


def test_the_registry_holds_the_workspace_and_the_local_package_the_final_sync_installed(
        parts: Parts, cluster: tuple[str, Path, Built]) -> None:
    """What the registry holds, flattened by crane: the workspace's pyproject.toml and uv.lock
    (the bundle's own bytes) at the image's workspace, and the local package the final sync
    installed in editable mode: its dist-info's RECORD files all present, its .pth naming a
    directory of the image that holds the package's module. The job's /app held the bundle
    throughout (checked after every build)."""
    executor, tree, built = cluster
    files = _exported(parts, built.reference)
    workspace = WORKDIR.lstrip("/")
    for name in ("pyproject.toml", "uv.lock"):
        assert files.get(f"{workspace}/{name}") == (tree / "examples/demo" / name).read_bytes(), \
            (executor, name)
    site = next(n.rsplit("/", 1)[0] for n in files if re.search(r"/site-packages/[^/]+$", n))
    (record,) = [n for n in files if re.fullmatch(
        rf"{re.escape(site)}/gpurl_demo-[^/]+\.dist-info/RECORD", n)]
    recorded = [line.split(",")[0] for line in bytes(files[record]).decode().splitlines() if line]
    missing = [n for n in recorded if posixpath.normpath(f"{site}/{n}") not in files]
    assert recorded and not missing, (executor, missing)
    (pth,) = [n for n in recorded if n.endswith(".pth")]
    paths = [line for line in bytes(files[f"{site}/{pth}"]).decode().splitlines()
             if line and not line.startswith("import")]
    assert paths == [f"{WORKDIR}/src"], (executor, paths)
    assert f"{workspace}/src/gpurl_demo/__init__.py" in files, executor
    assert not [n for n in files if n == "app" or n.startswith("app/")], executor


def test_pin_writes_the_pushed_digest(parts: Parts, cluster: tuple[str, Path, Built]) -> None:
    _, tree, built = cluster
    done = invoke(tree, "pin", "--profile", "demo", "--ref", built.reference, env=_env(parts))
    assert done.returncode == 0, done.stdout + done.stderr
    config = load_config(tree, profile="demo", env={})
    assert built.reference.split("@")[1] in config.launcher.path.read_text()
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=tree, check=True)


def test_a_ca_the_job_trusts_through_its_etc_ssl_alone_holds_for_every_executor_run(
        parts: Parts, cluster: tuple[str, Path, Built], tmp_path: Path) -> None:
    """An on-premises registry behind a private CA that the task image trusts through
    /etc/ssl (update-ca-certificates), no SSL_CERT_FILE and no mount: kaniko's reset after
    its first run puts env-base's /etc/ssl in place of the job's, and the composing and the
    final build still reach the registry, through the copy the script keeps under /kaniko."""
    executor, tree, _ = cluster
    (tmp_path / "gpurl-test-ca.crt").write_bytes(parts.ca.ca.read_bytes())
    (tmp_path / "Dockerfile").write_text(
        f"FROM {JOB_IMAGE}\nCOPY gpurl-test-ca.crt /usr/local/share/ca-certificates/\n"
        "RUN update-ca-certificates\n")
    trusting = f"{JOB_IMAGE}-private-ca"
    subprocess.run(["docker", "build", "--network", "host", "-q", "-t", trusting, str(tmp_path)],
                   check=True, capture_output=True, timeout=600)
    built = _build(tree, parts, "ca0d" + ("0a1" if executor == "upstream" else "0f1"),
                   image=trusting, cert_file=False)
    said = re.search(r"==> CA bundle for every step: (\S+) \((\d+) certificates\)", built.output)
    assert said and said.group(1) == "/kaniko/gpurl/ca-certificates.crt", built.output[:3000]
    counts = [int(subprocess.run(
        ["docker", "run", "--rm", name, "grep", "-c", "BEGIN CERTIFICATE",
         "/etc/ssl/certs/ca-certificates.crt"], check=True, capture_output=True, text=True,
        timeout=120).stdout) for name in (JOB_IMAGE, trusting)]
    assert counts[1] == counts[0] + 1 == int(said.group(2)), (counts, said.group(2))
    assert "==> environment " in built.output and "x509" not in built.output


def test_a_record_whose_blob_the_registry_lost_is_written_again(
        parts: Parts, cluster: tuple[str, Path, Built]) -> None:
    """A slice's blob deleted from the registry's storage, its record's tag kept (a cleanup,
    a lost disk): the job checks each record's blobs before it composes, writes that slice
    again into the same blob and says so, reuses every other slice, and the image it pushes
    names only blobs the registry holds (verify-layers HEADs each one: `_build` runs it)."""
    executor, tree, cold = cluster
    runs = _slice_runs(cold.layers)
    lost = runs[len(runs) // 2]
    parts.registry.remove_blob(lost["digest"])
    rebuilt = _build(tree, parts, "b10b" + ("0a1" if executor == "upstream" else "0f1"))
    said = re.findall(r"^\s*(\S+): its record (\S+) names blob (\S+), which the registry no "
                      r"longer holds: written again$", rebuilt.output, flags=re.M)
    assert [(tag, blob) for _, tag, blob in said] == [(lost["record"], lost["digest"])], \
        (executor, said, rebuilt.output[-3000:])
    assert "1 slice(s) written, 1 of them as their record's blob was gone" in rebuilt.output
    assert [r["digest"] for r in _slice_runs(rebuilt.layers)] == [r["digest"] for r in runs]
    assert all(row["exact"] for row in _slice_runs(rebuilt.layers))
    print(f"{executor}: the record {lost['record']} lost blob {lost['digest'][:19]}; "
          f"rewritten, {len(runs) - 1} slices reused")


def _slice_files(tree: Path) -> dict[str, str]:
    """{slice file name: its text} of the committed plan (shared and variant slices)."""
    return {p.name: p.read_text() for p in (tree / "docker" / "layers" / "demo").rglob("*.txt")}


def _by_slice(runs: list[dict[str, Any]]) -> dict[str, str]:
    """{the slice file a layer installs (from its history entry): the layer's blob digest}."""
    names = (re.search(rf"{re.escape(Slice.IMAGE_DIR)}/(\S+)", row["instruction"]) for row in runs)
    return {found.group(1): row["digest"] for found, row in zip(names, runs, strict=True)
            if found}


def _layer(built: Built, instruction: str) -> dict[str, Any]:
    """The one layer whose history entry matches `instruction` (a regular expression) from
    its start."""
    (row,) = [r for r in built.layers if re.match(instruction, r["instruction"])]
    return row


def _apt(tree: Path, parts: Parts, built: Built) -> list[tuple[str, str]]:
    """The apt packages the SBOM the job attached names (the image's dpkg status, as the
    job's attestation step read it)."""
    shown = invoke(tree, "sbom", "--profile", "demo", "--ref", built.reference, "--document",
                   "--json", env=_env(parts))
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return sorted((c["name"], c.get("version", "")) for c in json.loads(shown.stdout)["sbom"][
        "components"] if c.get("purl", "").startswith("pkg:deb/"))


# the asserts RUN's own output, printed only when it runs (never when taken from the cache)
ASSERTS_RAN = re.compile(r"^build assert 1/\d+$", flags=re.M)
# the compiled wheels' layer gpurl wrote on the composed environment, as history names it
COMPILED = r"gpurl \S+: uv pip install .* /tmp/wheels/gpurl_demo_ext-.* # record slice-compiled-wheels-"


def test_a_rebuild_pushes_no_layer_and_a_code_change_or_a_bump_keeps_the_compiled_layer(
        parts: Parts, cluster: tuple[str, Path, Built]) -> None:
    """Nothing changed (the executor run all the same): no layer blob of the whole image is
    new. Every COPY comes from kaniko's cache as every RUN does, and the last stage, though
    wholly cached but for its BUILD_ID RUN, is unpacked: the attestation step reads the same
    apt set as the cold build's. A code change: the workspace's layer is new, the compiled
    wheels' layer (written on the composed environment, keyed by their MANIFEST) is the same
    blob. A small lock bump (one tail package, one slice file edited): the composed
    environment writes exactly the slices whose file changed and reuses every other slice's
    blob, wherever it sits in the plan (no slice's cache chains another's), and the compiled
    layer's. Then the compiled wheel rebuilt (its name and version, other bytes) and nothing
    else: its layer is a new blob holding the new bytes, never the cached one of the old
    wheel. Last a new
    base image, the lock and the workspace as they were: every slice is reused, and the final
    stage runs again on the new environment, its build asserts with it."""
    executor, tree, cold = cluster
    mark = "0a1" if executor == "upstream" else "0f1"
    held = parts.registry.blobs()
    warm = _build(tree, parts, "c02d" + mark)
    stored = parts.registry.blobs()
    repushed = [(row["instruction"], row["size"]) for row in warm.layers
                if row["digest"] not in held]
    print(f"{executor} rebuild, nothing changed: {len(repushed)} new layer blob(s) "
          f"{repushed}; the registry stored {len(stored) - len(held)} new blob(s), "
          f"{sum(v for k, v in stored.items() if k not in held):,} bytes in all")
    assert repushed == [], (executor, repushed)
    assert [r["digest"] for r in warm.layers] == [r["digest"] for r in cold.layers]
    assert "0 slice(s) written" in warm.output, warm.output[-2000:]
    assert _apt(tree, parts, warm) == _apt(tree, parts, cold)
    assert not ASSERTS_RAN.search(warm.output)  # taken from the cache, as every RUN was

    code = tree / "examples" / "demo" / "src" / "gpurl_demo" / "__init__.py"
    code.write_text(code.read_text() + "# a code change\n")
    _commit(tree, "code")
    coded = _build(tree, parts, "c025" + mark)
    fresh = [(r["instruction"][:60], r["size"]) for r in coded.layers
             if r["digest"] not in {w["digest"] for w in warm.layers}]
    print(f"{executor} code change: {len(fresh)} new layer blob(s), "
          f"{sum(size for _, size in fresh):,} bytes: {fresh}")
    assert _layer(coded, COMPILED)["digest"] == _layer(warm, COMPILED)["digest"]
    demo = posixpath.relpath(load_config(tree, profile="demo", env={}).workspace, tree)
    workspace = re.escape(f"COPY {demo}/ ")
    assert _layer(coded, workspace)["digest"] != _layer(warm, workspace)["digest"]
    assert [r["digest"] for r in _slice_runs(coded.layers)] == \
        [r["digest"] for r in _slice_runs(warm.layers)]

    before = _slice_files(tree)
    done = invoke(tree, "fill-index", "--profile", "demo", "--pins", BUMPED)
    assert done.returncode == 0, done.stderr
    relock(tree, ('dependencies = [', f'dependencies = [\n  "{BUMPED}",'),
           upgrade=BUMPED.split("==")[0])
    after = _slice_files(tree)
    changed = {name.split("-", 1)[1] for name, text in after.items() if before.get(name) != text}
    bumped = _build(tree, parts, "c03d" + mark)
    old, new = _by_slice(_slice_runs(coded.layers)), _by_slice(_slice_runs(bumped.layers))
    rewritten = {label for label, digest in new.items() if old.get(label) != digest}
    assert changed and rewritten == changed, (executor, changed, rewritten)
    assert f"{len(changed)} slice(s) written" in bumped.output
    assert "the compiled wheels' layer cached" in bumped.output
    assert _layer(bumped, COMPILED)["digest"] == _layer(coded, COMPILED)["digest"]
    had = {row["digest"] for row in coded.layers}
    fresh_rows = [row for row in bumped.layers if row["digest"] not in had]
    print(f"{executor} bump {BUMPED}: {len(fresh_rows)} new blobs, "
          f"{sum(r['size'] for r in fresh_rows):,} bytes of "
          f"{sum(r['size'] for r in bumped.layers):,}; slices rewritten "
          f"{sorted(rewritten)} of {len(new)}; new: "
          f"{[(r['instruction'][:60], r['size']) for r in fresh_rows]}")

    _reconfigure(tree, [(f'wheel-base-url = "{parts.wheel_url}"',
                         f'wheel-base-url = "{parts.rebuilt_wheel_url}"')], "the wheel rebuilt")
    rewheeled = _build(tree, parts, "c04d" + mark)
    compiled = _layer(rewheeled, COMPILED)
    assert compiled["digest"] != _layer(bumped, COMPILED)["digest"], executor
    modules = [data for name, data in _blob_files(parts, rewheeled.reference,
                                                  compiled["digest"]).items()
               if name.rsplit("/", 1)[-1].startswith("gpurl_demo_ext") and name.endswith(".so")]
    assert len(modules) == 1 and REBUILT_DOC.encode() in modules[0], executor
    assert [r["digest"] for r in _slice_runs(rewheeled.layers)] == \
        [r["digest"] for r in _slice_runs(bumped.layers)]

    rebased_image = f"{PLAIN}/gpurl/bookworm-python:3.11-rebased-{executor}"
    done = subprocess.run([str(parts.crane), "mutate", "--insecure", f"{PLAIN}/{BASE}", "--label",
                           "org.gpurl.test=rebased", "--tag", rebased_image],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    _reconfigure(tree, [(f'base-image = "{PLAIN}/{BASE}"', f'base-image = "{rebased_image}"')],
                 "a new base image")
    rebased = _build(tree, parts, "c05d" + mark)
    assert "0 slice(s) written" in rebased.output, rebased.output[-2000:]
    assert ASSERTS_RAN.search(rebased.output), executor


@pytest.mark.kaniko_faults
def test_the_job_completes_through_registry_faults_and_its_rerun_reuses_every_slice(
        parts: Parts, tmp_path: Path) -> None:
    """The destination registry behind the seeded fault proxy (5xx on uploads and manifest
    PUTs, 429 with Retry-After, for kaniko, crane and verify-layers alike): upstream's executor
    and crane retry, the job's wrapper says each retry it makes, the job pushes a complete
    image (`_build` verify-layers HEADs every blob), and a rerun of the same tree through the
    same faults writes no slice. Upstream only: one executor's cold build is the cost."""
    # 429s at 2% of all requests failed the job at its first crane rebase (four attempts,
    # each of some 40 requests, crane retrying no 429 on a read): bounded retries of a whole
    # call hold at a lower rate, which is what this case asserts
    rates = Rates(seed=40, upload_5xx=0.15, manifest_put_5xx=0.25, too_many=0.004,
                  retry_after="1", streak=2)
    with FaultProxy(parts.registry.port, tls=parts.ca, rates=rates) as proxy:
        tree = copy_tree(tmp_path / "tree")
        # a repository of its own: its cache holds no slice another test wrote
        _as_cluster_profile(tree, parts, "upstream", host=proxy.host,
                            repository="gpurl/demo-faults")
        cold = _build(tree, parts, "fa170a1")
        cold_faults = dict(proxy.injected)
        warm = _build(tree, parts, "fa171a1")
        warm_faults = dict(proxy.injected)
    retries = [line for line in cold.output.splitlines() if line.startswith("    retry ")]
    assert sum(cold_faults.values()) >= 5, cold_faults
    assert "0 slice(s) written" in warm.output, warm.output[-2000:]
    assert [r["digest"] for r in _slice_runs(warm.layers)] == \
        [r["digest"] for r in _slice_runs(cold.layers)]
    print(f"upstream through faults: cold {cold_faults}, {len(retries)} wrapper retries; "
          f"rerun {warm_faults}, {len(_slice_runs(warm.layers))} slices reused")


_COMPOSED = re.compile(r"==> environment \S+ \((\d+) slice\(s\) written, (\d+) of them as their "
                       r"record's blob was gone; (\d+) cached[;)]")


@pytest.mark.kaniko_faults
def test_a_job_killed_at_each_step_leaves_the_registry_sound_and_the_rerun_finishes(
        parts: Parts, tmp_path: Path) -> None:
    """One commit's job killed as a node kills it (SIGKILL) in the env-base build, after its
    first slice is written, then in the final build; then run to the end. After each kill the
    registry holds no immutable tag, and every manifest it holds (env-base, records) names
    only blobs it has; each rerun reuses every slice a run before it recorded in full, and the
    last one pushes a complete image (`_build` verify-layers HEADs every blob). Upstream only:
    four runs of one executor are the cost."""
    tree = copy_tree(tmp_path / "tree")
    image_repo = "gpurl/demo-kills"
    _as_cluster_profile(tree, parts, "upstream", repository=image_repo)
    cache_repo = f"{image_repo}/cache"
    config = load_config(tree, profile="demo", env={})
    assert config.registry.image.endswith(image_repo)
    gitsha = "d1e00a1"
    slices = len(list((tree / "docker" / "layers" / "demo" / "shared").glob("*.txt")))
    immutable = f"demo-{gitsha}"

    def records(held: dict[str, list[str]]) -> int:
        return sum(tag.startswith("slice-") for tag in held.get(cache_repo, []))

    _killed(tree, parts, gitsha, r"==> kaniko build of env-base[\s\S]*RUN ")
    after_base = _held(parts, image_repo, cache_repo)
    assert immutable not in after_base[image_repo] and records(after_base) == 0, after_base
    out = _killed(tree, parts, gitsha, r"^    \S+: written ")
    after_slice = _held(parts, image_repo, cache_repo)
    assert immutable not in after_slice[image_repo], after_slice
    assert 1 <= records(after_slice) <= slices, (after_slice, out[-2000:])
    out = _killed(tree, parts, gitsha, r"==> kaniko build of \S+:demo-[\s\S]*RUN ")
    composed = _COMPOSED.search(out)
    assert composed, out[-3000:]
    written, _, cached = (int(n) for n in composed.groups())
    assert cached == records(after_slice) and written == slices - cached, (composed.groups(),)
    after_final = _held(parts, image_repo, cache_repo)
    assert immutable not in after_final[image_repo] and records(after_final) == slices
    done = _build(tree, parts, gitsha)
    assert "0 slice(s) written" in done.output, done.output[-2000:]
    assert immutable in _held(parts, image_repo, cache_repo)[image_repo]
    print(f"killed in env-base (0 records), after a slice ({records(after_slice)} of {slices} "
          f"recorded), in the final build ({cached} reused, {written} written); the last run "
          f"reused all {slices} and pushed {done.reference}")


@pytest.mark.kaniko_faults
def test_two_jobs_of_two_commits_at_once_on_one_cache_each_push_their_own_image(
        parts: Parts, tmp_path: Path) -> None:
    """Two commits (the demo and a small lock bump of it) built at the same time on one cache
    repository: both jobs finish, each image is complete and verified for its own commit, the
    slices they share are one blob each, and the bumped slice differs. The records' writes are
    idempotent (the same key, the same bytes), so neither job's write can spoil the other's."""
    repo = "gpurl/demo-two"
    one, two = copy_tree(tmp_path / "one"), copy_tree(tmp_path / "two")
    for tree in (one, two):
        _as_cluster_profile(tree, parts, "upstream", repository=repo)
    done = invoke(two, "fill-index", "--profile", "demo", "--pins", BUMPED)
    assert done.returncode == 0, done.stderr
    relock(two, ('dependencies = [', f'dependencies = [\n  "{BUMPED}",'),
           upgrade=BUMPED.split("==")[0])
    changed = {n for n, text in _slice_files(two).items() if _slice_files(one).get(n) != text}
    assert changed
    results: dict[str, Built | BaseException] = {}

    spans: dict[str, tuple[float, float]] = {}

    def build(key: str, tree: Path, gitsha: str) -> None:
        start = time.monotonic()
        try:
            results[key] = _build(tree, parts, gitsha)
        except BaseException as exc:  # reported below, in the test's own thread
            results[key] = exc
        spans[key] = (start, time.monotonic())

    jobs = [threading.Thread(target=build, args=("one", one, "7a000a1")),
            threading.Thread(target=build, args=("two", two, "7b000a1"))]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join()
    failed = {k: v for k, v in results.items() if isinstance(v, BaseException)}
    assert not failed, failed
    (a0, a1), (b0, b1) = spans["one"], spans["two"]
    overlap = min(a1, b1) - max(a0, b0)
    assert overlap > 0.5 * min(a1 - a0, b1 - b0), spans  # the jobs ran at once, not in turn
    first, second = results["one"], results["two"]
    assert isinstance(first, Built) and isinstance(second, Built)
    assert ":demo-7a000a1@" in first.reference and ":demo-7b000a1@" in second.reference
    old, new = _by_slice(_slice_runs(first.layers)), _by_slice(_slice_runs(second.layers))
    differ = {name for name in new if old.get(name) != new[name]}
    assert differ and differ == {n.split("-", 1)[1] for n in changed}, (differ, changed)
    _held(parts, repo, f"{repo}/cache")
    print(f"two jobs at once on one cache: both pushed; {len(new) - len(differ)} slices shared "
          f"as one blob each, {sorted(differ)} their own")


def _gpurl(tree: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The `gpurl` command in `tree` (a project without gpurl's own tasks.py: this checkout's
    package)."""
    return subprocess.run([sys.executable, "-m", "gpurl_tasks", *args], cwd=tree,
                          env={**env, "PYTHONPATH": str(REPO_ROOT)}, capture_output=True,
                          text=True, timeout=600)


def test_a_hand_written_dockerfile_builds_as_iris_runs_it_and_is_pinned(
        parts: Parts, tmp_path: Path) -> None:
    """One small build of a hand-written Dockerfile (build.generate = false): the `sft`
    profile of tests/data/handwritten, its committed script generated for the loopback parts
    and run by the upstream executor in a job container with the bundle at /app; its build arg
    reaches the image, its .dockerignore keeps a file out; verify-layers (attestations
    required) and pin take what it pushed."""
    tree = tmp_path / "handwritten"
    shutil.copytree(REPO_ROOT / "tests" / "data" / "handwritten", tree)
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    for old, new in [
        ('host = "registry.example.test"\nrepository = "team/images"\nuser = "builder"',
         f'host = "{parts.registry.host}"\nrepository = "team/sft"\nuser = "{USER}"'),
        ('"BASE_IMAGE=debian:bookworm-slim"]', f'"BASE_IMAGE={PLAIN}/{BASE}"]'),
        ("[tool.gpurl.profiles.sft.launcher]",
         "[tool.gpurl.profiles.sft.cluster]\n"
         f'kaniko-executor = "{parts.builders.executors["upstream"]}"\n'
         f'crane-url = "{parts.crane_url}"\ncrane-sha256 = "{parts.builders.crane_sha256}"\n\n'
         "[tool.gpurl.profiles.sft.verify]\nmin-layers = 1\n\n"
         "[tool.gpurl.profiles.sft.launcher]"),
    ]:
        assert old in text, old
        text = text.replace(old, new, 1)
    pyproject.write_text(text)
    generated = _gpurl(tree, "generate", "--profile", "sft", env=_env(parts))
    assert generated.returncode == 0, generated.stdout + generated.stderr
    git = ["git", "-c", "user.name=gpurl", "-c", "user.email=gpurl@localhost"]
    for argv in (["git", "init", "-q"], ["git", "add", "-A"], [*git, "commit", "-qm", "sft"]):
        subprocess.run(argv, cwd=tree, check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, check=True,
                            capture_output=True, text=True).stdout.strip()
    gitsha = commit[:7]
    bundle = tmp_path / "bundle"
    _, script = _bundle(tree, bundle, "sft")
    code, output = run_job(bundle, SCRIPT, {
        "GITSHA": gitsha, "DOCKER_TOKEN": CANARY, "DOCKER_USER_ID": USER, "GIT_COMMIT": commit,
        "JOB_NAME": f"gpurl-kaniko-{gitsha}", "SSL_CERT_FILE": "/ca/bundle.pem"},
        image=JOB_IMAGE, mounts={**script, parts.ca_dir: "/ca"}, timeout=900)
    assert code == 0, output[-6000:]
    assert "--skip-unused-stages" in next(iter(script)).read_text()
    secret_forms = (CANARY, base64.b64encode(f"{USER}:{CANARY}".encode()).decode())
    assert not [form for form in secret_forms if form in output]
    (pushed,) = [line for line in output.splitlines() if line.startswith("pushed ")]
    reference = pushed.split()[1]
    assert reference.startswith(f"{parts.registry.host}/team/sft:sft-{gitsha}@sha256:")
    files = _exported(parts, reference)
    assert "opt/sft/train.py" in files and "opt/sft/VERSION" in files
    assert "opt/sft/NOTES.md" not in files  # .dockerignore: **/*.md
    verified = _gpurl(tree, "verify-layers", "--profile", "sft", "--ref", reference, "--json",
                      env={**_env(parts), "GPURL_VERIFY_ATTESTATIONS": "required"})
    assert verified.returncode == 0, verified.stdout + verified.stderr
    pinned = _gpurl(tree, "pin", "--profile", "sft", "--ref", reference, env=_env(parts))
    assert pinned.returncode == 0, pinned.stdout + pinned.stderr
    assert reference.split("@")[1] in (tree / "cloud" / "iris" / "launch_rl_iris.py").read_text()
