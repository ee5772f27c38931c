"""The slice layers gpurl writes itself, on the local path, end to end: the real Docker engine
(env-base and the staging containers), the real loopback registry and package index, the
demo's real packages and uv.

- the same slices from empty caches (a fresh cache repository, a different build of env-base)
  are the same blobs;
- the demo builds through them, verify-layers passes, and the final `uv sync --frozen`
  installs only the local packages and reinstalls nothing;
- after a small lock bump, only the changed slice is written again and pulled.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.generate import fitted_plan, layer_count
from gpurl_tasks.dockerfile.recipe import WORKDIR
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.local.build_log import parse_plain_progress, vertex_output
from gpurl_tasks.local.builder import serving_index
from gpurl_tasks.local.compose_env import compose_environment
from gpurl_tasks.local.engine import find_buildkit_client
from gpurl_tasks.local.setup import index_dir
from gpurl_tasks.oci.composing import ClientRegistry
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import parse_manifest
from gpurl_tasks.plan.profile import plan_for_config
from gpurl_tasks.release.configured import client_settings
from gpurl_tasks.release.verify import FINAL_SYNC_MARKERS
from gpurl_tasks.writer.composition import Composition
from gpurl_tasks.writer.ocispec import canonical_json
from gpurl_tasks.writer.orchestration import BlobsMissing, check_layers
from tests.conftest import REPO_ROOT
from tests.support.demo_tree import BUMPED, CACHE, copy_tree, invoke, relock
from tests.support.local_parts import need
from tests.support.pull_engine import pull_engine
from tests.support.registry_server import running_registry
from tests.support.tasks_runner import one_variant

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def client() -> str:
    need(shutil.which("docker") or shutil.which("dockerd"), "no Docker engine on this machine")
    return find_buildkit_client()[0]


def _fresh_cache(config: Config) -> Config:
    """The config with a cache repository nobody has written to."""
    repo = f"{config.registry.host}/gpurl/demo/cache-{uuid.uuid4().hex[:12]}"
    return config.with_variant_settings(cluster=dataclasses.replace(config.cluster,
                                                                   cache_repo=repo))


def test_the_same_slices_from_empty_caches_are_the_same_blobs(client: str,
                                                              tmp_path: Path) -> None:
    """Two fresh cache repositories, and env-base built twice differently (the second build
    adds a file of its own, so its image id and layers differ as after any rebuild): every
    slice is staged and written again, and every slice's blob digest is the same."""
    config = load_config(REPO_ROOT, profile="demo", env={})
    plan = fitted_plan(config)
    other = tmp_path / "Dockerfile.rebuilt"
    marker = f"RUN uv venv {config.build.venv} \\\n && mkdir -p {WORKDIR}\n"
    text = config.build.dockerfile.read_text()
    assert text.count(marker) == 1
    other.write_text(text.replace(marker, marker + f"RUN echo {uuid.uuid4().hex} > /etc/rebuilt\n"))
    runs = []
    with serving_index(config.build.index_url, index_dir(CACHE)):
        for n, dockerfile in enumerate((config.build.dockerfile, other)):
            runs.append(compose_environment(
                _fresh_cache(config), plan, client=client, dockerfile=dockerfile,
                context=REPO_ROOT, build_args={"GITSHA": "test"}, log_dir=tmp_path / f"log{n}"))
    first, second = runs
    assert first.base_id != second.base_id
    assert [s.built for s in first.slices] == [True] * len(plan.layers)
    assert [s.built for s in second.slices] == [True] * len(plan.layers)
    assert [(s.name, s.blob, s.size) for s in first.slices] == \
        [(s.name, s.blob, s.size) for s in second.slices]
    # the registry holds what was said: the composed image's layers end with those blobs
    ref = parse_reference(second.reference, default_host=config.registry.host)
    with open_client(client_settings(config), ref) as registry:
        _, _, manifest = registry.manifest(ref)
    layers = parse_manifest(manifest, "composed").layers
    assert [d.digest for d in layers[-len(plan.layers):]] == [s.blob for s in second.slices]
    timing = ", ".join(f"{s.name} {s.seconds:.1f}s" for s in first.slices)
    print(f"{len(plan.layers)} slices written twice from empty caches, same digests; "
          f"per slice (stage + write): {timing}")


def test_a_record_whose_blob_is_gone_is_written_again_and_no_manifest_names_a_lost_blob(
        client: str, tmp_path: Path) -> None:
    """A registry of its own (blobs are removed from its storage): a slice's record keeps its
    tag when its blob is deleted (a cleanup, a lost disk). The next composition checks each
    record's blob (HEAD), writes that slice again into the same blob, says so, and reuses the
    rest; the composed image's every blob is in the registry. A composed manifest naming a
    blob the registry lost is refused before it is written, naming the slice."""
    base = load_config(REPO_ROOT, profile="demo", env={})
    plan = fitted_plan(base)
    with running_registry(tmp_path / "registry") as server, \
            serving_index(base.build.index_url, index_dir(CACHE)):
        config = base.with_variant_settings(
            registry=dataclasses.replace(base.registry, host=server.host),
            cluster=dataclasses.replace(base.cluster, cache_repo=f"{server.host}/gpurl/demo/cache"))

        def compose(n: int) -> Any:
            return compose_environment(config, plan, client=client,
                                       dockerfile=config.build.dockerfile, context=REPO_ROOT,
                                       build_args={"GITSHA": "test"}, log_dir=tmp_path / f"log{n}")

        first = compose(0)
        assert all(s.built for s in first.slices)
        lost = first.slices[len(first.slices) // 2]
        server.remove_blob(lost.blob)
        second = compose(1)
        assert [(s.name, s.built, s.rewritten) for s in second.slices] == \
            [(s.name, s.name == lost.name, s.name == lost.name) for s in first.slices]
        assert [s.blob for s in second.slices] == [s.blob for s in first.slices]
        assert f"their record's blob gone from the registry: {lost.name}" in second.summary()
        ref = parse_reference(second.reference, default_host=server.host)
        with open_client(client_settings(config), ref) as registry:
            _, _, body = registry.manifest(ref)
            manifest = parse_manifest(body, "composed")
            assert all(registry.has_blob(ref, digest, push=False) for digest in
                       (*(d.digest for d in manifest.layers), manifest.config_digest))
            # the guard before the manifest is written: the same composition, one blob lost
            server.remove_blob(lost.blob)
            with pytest.raises(BlobsMissing, match=f"slice {lost.name}"):
                composed = Composition(manifest=canonical_json(body), config=canonical_json(
                    registry.blob_json(ref, manifest.config_digest)))
                assert composed.config_digest == manifest.config_digest
                check_layers(ClientRegistry(client=registry, cache=ref, target=ref), composed,
                             {s.blob: f"slice {s.name}" for s in second.slices})
    print(f"record of {lost.name} lost its blob: rewritten in the second composition "
          f"({second.seconds:.1f}s, {len(second.slices) - 1} slices reused)")


# --- the demo end to end through the written layers, then a small bump


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, client: str) -> Path:
    return copy_tree(tmp_path_factory.mktemp("written"))


def _build(tree: Path, *flags: str) -> dict[str, Any]:
    done = invoke(tree, "build", "--backend", "local", "--profile", "demo",
                  "--wheel-source", "wheel-builder", "--json", *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _final_sync_output(reference: str) -> str:
    """What the final `uv sync` printed, from the build's log file."""
    tag = reference.rsplit(":", 1)[1]
    log = (CACHE / "logs" / f"build-{tag}.log").read_text()
    steps = [s for s in parse_plain_progress(log)
             if all(m in s.instruction for m in FINAL_SYNC_MARKERS)]
    assert len(steps) == 1, [s.instruction for s in steps]
    assert steps[0].status != "cached", "the final sync was taken from the cache: nothing to read"
    return vertex_output(log, steps[0].vertex)


@pytest.fixture(scope="module")
def built(tree: Path) -> dict[str, Any]:
    """The demo built, its final stage run afresh (--no-cache) so its log says what the final
    sync did; the slices are reused or written as their cache tags say."""
    return _build(tree, "--no-cache")


def test_the_demo_builds_and_verifies_through_written_layers(tree: Path,
                                                             built: dict[str, Any]) -> None:
    """verify-layers passes and maps each written slice to its plan slice; the final sync,
    run FROM the composed image, installs the local packages only and reinstalls nothing."""
    done = invoke(tree, "verify-layers", "--profile", "demo", "--ref", built["reference"],
                  "--json")
    assert done.returncode == 0, done.stderr
    rows = one_variant(done.stdout)["layers"]
    config = load_config(tree, profile="demo", env={})
    plan = plan_for_config(config)
    steps = [r["sync_step"] for r in rows if r["sync_step"] is not None]
    assert steps == list(range(len(plan.layers)))
    assert len(rows) == layer_count(config, plan).total  # what `invoke plan` said it would be
    slices = {s["blob"] for s in built["environment"]["slices"]}
    assert {r["digest"] for r in rows if r["sync_step"] is not None} == slices
    # each slice written here names its record, and is exactly the blob recorded there (a
    # record written before records were named in history names none: a long-lived cache)
    named = [r for r in rows if r["record"]]
    tags = {s["reference"].rsplit(":", 1)[1] for s in built["environment"]["slices"]}
    assert all(r["exact"] for r in named) and {r["record"] for r in named} <= tags, named
    assert len(named) >= sum(1 for s in built["environment"]["slices"] if s["built"])
    said = _final_sync_output(built["reference"])
    installed = re.findall(r"^\s*\+ ([A-Za-z0-9_.-]+)==", said, flags=re.M)
    assert sorted(installed) == sorted(plan.local), said
    assert not re.search(r"^\s*[-~] ", said, flags=re.M), said  # nothing removed or replaced
    assert f"Installed {len(plan.local)} package" in said, said


def _timed(argv: list[str]) -> tuple[str, float]:
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, time.monotonic() - start


def _blobs(ctr: list[str]) -> set[str]:
    """The digests containerd's content store holds: what it fetched so far."""
    listing, _ = _timed([*ctr, "content", "ls", "-q"])
    return set(listing.split())


def test_a_small_bump_writes_and_pulls_only_the_changed_slice(tree: Path, built: dict[str, Any],
                                                             client: str) -> None:
    """pycparser moves to another release: one slice file changes, only that slice is written
    again, and a node holding the previous image fetches that slice's blob and no other
    slice's (besides the final stage's own layers, which a new lock changes).

    The node is containerd (the cluster's runtime) of a second, empty dockerd of the test's
    own (tests/support/pull_engine.py; the build engine already holds every layer), pulling
    with `ctr images pull` (fetch and unpack); what it fetched is read from its content store.
    `docker pull` on the same engine is reported too: Docker 20.10's own image store names a
    layer by its chain (the layers below it), so it fetches every layer above a changed one."""
    done = invoke(tree, "fill-index", "--profile", "demo", "--pins", BUMPED)
    assert done.returncode == 0, done.stderr
    relock(tree, ('dependencies = [', f'dependencies = [\n  "{BUMPED}",'),
           upgrade=BUMPED.split("==")[0])
    after = _build(tree, "--force")  # built, though an earlier run recorded these inputs
    before_slices = {s["name"]: s for s in built["environment"]["slices"]}
    after_slices = {s["name"]: s for s in after["environment"]["slices"]}
    moved = [n for n, s in after_slices.items() if s["blob"] != before_slices[n]["blob"]]
    assert len(moved) == 1, moved  # pycparser sits in one slice of the demo
    # written now, or by an earlier run of this same bump (the cache repository is shared)
    assert [n for n, s in after_slices.items() if s["built"]] in ([], moved)
    changed = after_slices[moved[0]]
    config = load_config(tree, profile="demo", env={})
    old, new = (f"{config.registry.image}@{r['digest']}" for r in (built, after))
    ref = parse_reference(new, default_host=config.registry.host)
    with open_client(client_settings(config), ref) as registry:
        _, _, manifest = registry.manifest(ref)
    sizes = {d.digest: d.size for d in parse_manifest(manifest, "new image").layers}
    root = Path(tempfile.mkdtemp(prefix="gpurl-pe-", dir="/tmp"))
    with pull_engine(root, client) as host:
        ctr = ["ctr", "-a", str(root / "exec" / "containerd" / "containerd.sock"), "-n", "node"]
        _, cold_s = _timed([*ctr, "images", "pull", "--plain-http", old])
        held = _blobs(ctr)
        _, warm_s = _timed([*ctr, "images", "pull", "--plain-http", new])
        fetched = sorted((_blobs(ctr) - held) & set(sizes))
        _timed([client, "-H", host, "pull", old])
        lines, docker_s = _timed([client, "-H", host, "pull", new])
    docker_fetched = [ln.split(":")[0] for ln in lines.splitlines()
                      if ln.endswith("Pull complete")]
    slice_blobs = {s["blob"] for s in after_slices.values()}
    print(f"cold pull of the previous image (containerd): {cold_s:.1f}s for "
          f"{sum(sizes.values()):,} bytes; after bump {BUMPED} (slice {moved[0]}): containerd "
          f"fetched {len(fetched)} layer blob(s), {sum(sizes[d] for d in fetched):,} bytes "
          f"({sum(sizes[d] for d in fetched if d in slice_blobs):,} in slices), in "
          f"{warm_s:.1f}s; docker pull fetched {len(docker_fetched)} layer(s) in {docker_s:.1f}s")
    assert changed["blob"] in fetched
    assert [d for d in fetched if d in slice_blobs] == [changed["blob"]]
    # the slice plus at most the layers built on the environment (the RUN/COPY lines of the
    # stages env-compiled and rl, counted from the generated Dockerfile: every other layer is
    # env-base's or another slice's, shared)
    dockerfile = (tree / "docker" / "Dockerfile.demo").read_text()
    final = dockerfile[dockerfile.index(" AS env-compiled\n"):].splitlines()
    assert len(fetched) <= 1 + sum(ln.startswith(("RUN ", "COPY ", "ADD ")) for ln in final), \
        fetched
    # `invoke diff` of the two pushed images says what the node just did, to the byte
    said = invoke(tree, "diff", old, new, "--profile", "demo", "--json")
    assert said.returncode == 0, said.stdout + said.stderr
    report = json.loads(said.stdout)
    assert report["pull_bytes"] == sum(sizes[d] for d in fetched)
    assert report["slices"]["changed"] == [moved[0].split("-", 1)[1]], report["slices"]
    name, version = BUMPED.split("==")
    assert next(p for p in report["packages"] if p["name"] == name)["after"] == version
