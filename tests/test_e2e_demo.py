"""The whole pipeline on this machine, as `invoke demo` runs it: the real Docker engine with
BuildKit, the real loopback registry and package index, the demo workspace's real packages.

The tests work on a copy of the working tree (so pinning never edits this checkout) that
shares the engine, registry and index cache with it.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.generate import render_dockerfile
from gpurl_tasks.errors import BuildError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.local.builder import build_and_push, serving_index
from gpurl_tasks.local.compose_env import compose_environment
from gpurl_tasks.local.engine import find_buildkit_client
from gpurl_tasks.local.setup import index_dir
from gpurl_tasks.oci.image import ACCEPT_MANIFESTS
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.plan.model import Slice
from gpurl_tasks.plan.profile import plan_for_config
from tests.conftest import REPO_ROOT
from tests.support.demo_tree import BUMPED, CACHE, copy_tree, invoke, relock
from tests.support.local_parts import need
from tests.support.pyindex import make_wheel
from tests.support.tasks_runner import one_variant

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    need(shutil.which("docker") or shutil.which("dockerd"), "no Docker engine on this machine")
    need(shutil.which("debootstrap") or os.environ.get("CI"), "debootstrap is not installed")
    return copy_tree(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def first(tree: Path) -> dict[str, Any]:
    """`invoke demo --json`: setup-local, plan, generate, wheels, build + push, verify, pin."""
    done = invoke(tree, "demo", "--json")
    assert done.returncode == 0, done.stderr[-4000:]
    for step in ("setup-local", "plan", "generate", "wheels", "build + push", "attest",
                 "verify-layers", "pin"):
        assert f"<== {step}:" in done.stderr  # each step printed with its duration
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _sync_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The slice layers (verify maps them to the plan's layers), in order."""
    return [row for row in result["verify"]["layers"] if row["sync_step"] is not None]


def test_one_pushed_layer_per_planned_slice(first: dict[str, Any]) -> None:
    rows = _sync_rows(first)
    assert len(rows) == len(first["plan"]["layers"]) >= 3
    assert first["verify"]["ok"]
    # the sync layers are the planned ones, in order, and the rest are the other instructions
    assert [row["sync_step"] for row in rows] == list(range(len(rows)))
    assert first["verify"]["layer_count"] > len(rows)


def test_sync_layers_match_the_predicted_sizes(first: dict[str, Any]) -> None:
    for row, layer in zip(_sync_rows(first), first["plan"]["layers"], strict=True):
        assert row["predicted"] == layer["compressed_bytes"]
        if layer["compressed_bytes"] >= 5_000_000:
            error = abs(row["size"] - row["predicted"]) / row["predicted"]
            assert error <= 0.10, f"sync layer {row['sync_step']}: {row['size']} vs {row['predicted']}"


def test_prebuilt_path_never_touches_the_wheel_builder(first: dict[str, Any]) -> None:
    assert "rl" in first["build"]["stages"]
    assert "wheel-builder" not in first["build"]["stages"]  # neither run nor taken from cache


def test_pinned_digest_is_the_registrys(tree: Path, first: dict[str, Any]) -> None:
    config = load_config(tree, profile="demo", env={})
    source = config.launcher.path.read_text()
    values = [node.value.value for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
              and any(isinstance(t, ast.Name) and t.id == config.launcher.variable
                      for t in node.targets)]
    host, _, rest = first["reference"].partition("/")
    repository, _, tag = rest.rpartition(":")
    answer = httpx.head(f"http://{host}/v2/{repository}/manifests/{tag}",
                        headers={"Accept": ACCEPT_MANIFESTS}, timeout=30)
    assert values == [f"{host}/{repository}@{answer.headers['Docker-Content-Digest']}"]


def test_the_pushed_image_carries_its_sbom_and_provenance(tree: Path,
                                                          first: dict[str, Any]) -> None:
    """The local build attached both at the registry (the loopback registry has no referrers
    API: through the fallback tag); verify-layers read them back and found them exact."""
    from gpurl_tasks.attest import provenance as slsa
    from gpurl_tasks.attest import sbom as cdx
    from gpurl_tasks.attest.collect import listed
    from gpurl_tasks.oci.referrers import fetch, find

    config = load_config(tree, profile="demo", env={})
    ref = parse_reference(first["reference"])
    with RegistryClient(ref.host) as client:
        digest = client.resolve(ref)
        found = {r.artifact_type: r for r in find(client, ref, digest)}
        assert set(found) == {cdx.MEDIA_TYPE, slsa.MEDIA_TYPE}
        sbom = fetch(client, ref, found[cdx.MEDIA_TYPE])
        statement = fetch(client, ref, found[slsa.MEDIA_TYPE])
    apt = {c["name"] for c in sbom["components"] if c.get("purl", "").startswith("pkg:deb/")}
    assert {"ca-certificates", "dpkg", "python3.11"} <= apt  # as dpkg lists them in the image
    locked = set().union(*(v for k, v in cdx.python_components(sbom).items()
                           if k not in ("compiled-wheel", "post-install")))
    assert locked == {(p.name, p.version) for p in listed(config)[0]}
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert slsa.commit_of(statement) == head
    assert statement["subject"][0]["digest"]["sha256"] == digest.split(":")[1]
    assert any("packages equal the lock's closure" in n for n in first["verify"]["notes"])


def test_pin_then_rebuild_gives_the_same_digest(tree: Path, first: dict[str, Any]) -> None:
    """The image does not contain its own pin (the launcher is kept out of the build context),
    so after `pin` edited the launcher a rebuild is the same image: every step cached, the
    same digest, nothing pushed, the immutable tag unmoved (issue 13). --force: a real build
    (without it the image of these inputs is found and tagged, test_same_inputs_run_no_build)."""
    done = invoke(tree, "build", "--backend", "local", "--profile", "demo",
                  "--wheel-source", "prebuilt-wheelhouse", "--json", "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads(done.stdout)
    assert again["reference"] == first["reference"]  # the pinned launcher does not dirty the tag
    assert again["digest"] == first["digest"] and again["pushed"] is False
    assert again["cached_steps"] == again["steps"]
    print(f"pin then rebuild: {again['digest']} (first {first['digest']})")


def test_the_demo_again_converges(tree: Path, first: dict[str, Any]) -> None:
    """`invoke demo` any number of times: the same digest, the launcher already pinned."""
    launcher = load_config(tree, profile="demo", env={}).launcher.path
    before = launcher.read_bytes()
    done = invoke(tree, "demo", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads(done.stdout)
    assert (again["reference"], again["digest"]) == (first["reference"], first["digest"])
    assert again["pinned"] is None and launcher.read_bytes() == before


def test_lint_and_generate_check_pass_after_the_demo(tree: Path, first: dict[str, Any]) -> None:
    """The README's two commands in this order on one clone: the main job, then the lint
    session (ruff over the launcher `pin` just wrote, mypy, hadolint, shellcheck,
    generate --check)."""
    assert "gpurl pin:" in load_config(tree, profile="demo", env={}).launcher.path.read_text()
    generated = invoke(tree, "generate", "--check")
    assert generated.returncode == 0, generated.stdout + generated.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPURL_", "VIRTUAL_ENV"))}
    lint = subprocess.run([sys.executable, "-m", "nox", "-s", "lint"], cwd=tree, env=env,
                          capture_output=True, text=True, timeout=1200)
    assert lint.returncode == 0, (lint.stdout + lint.stderr)[-4000:]


def test_a_dirty_tree_gets_its_own_tag(tree: Path, first: dict[str, Any]) -> None:
    """Uncommitted tracked edits that enter the image: PREFIX-SHA-dirty-<diff hash>, never
    the commit's tag (dry run: nothing is built)."""
    source = tree / "examples" / "demo" / "src" / "gpurl_demo" / "__init__.py"
    original = source.read_text()
    try:
        source.write_text(original + "# edited\n")
        done = invoke(tree, "build", "--backend", "local", "--profile", "demo", "--dry-run")
        assert done.returncode == 0, done.stderr
        assert f"{first['reference']}-dirty-" in done.stdout
    finally:
        source.write_text(original)


def tree_image(tree: Path) -> str:
    return load_config(tree, profile="demo", env={}).registry.image


def test_same_inputs_run_no_build(tree: Path, first: dict[str, Any]) -> None:
    """A new commit of the same inputs: the image the demo pushed (and recorded by its inputs)
    is tagged with the new commit's tag, no step runs and no blob is pushed, and verify-layers
    passes that tag (attestations required) on the statement the reuse attached; a dry run names
    that inputs tag, and with a workspace file edited another one (which no build recorded).
    --force builds (a real engine build: the only way to time what the no-op saves)."""
    flags = ("build", "--backend", "local", "--profile", "demo", "--wheel-source",
             "prebuilt-wheelhouse", "--json")
    git = ["git", "-c", "user.name=gpurl", "-c", "user.email=gpurl@localhost"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "same inputs"], cwd=tree,
                   check=True)
    source = tree / "examples" / "demo" / "src" / "gpurl_demo" / "__init__.py"
    try:
        planned = invoke(tree, *flags, "--dry-run")
        assert planned.returncode == 0, planned.stderr[-3000:]
        start = time.monotonic()
        done = invoke(tree, *flags)
        noop = time.monotonic() - start
        assert done.returncode == 0, done.stderr[-3000:]
        reused = json.loads(done.stdout)
        assert reused["reused"] is True and reused["digest"] == first["digest"]
        assert reused["reference"] != first["reference"]  # the new commit's tag...
        assert _registry_digest(reused["reference"]).endswith(first["digest"])  # ...on it
        assert "<== " not in done.stderr  # no step ran: neither compose nor build + push
        # the new commit's tag verifies: the provenance names the commit the image was built
        # from, and the reuse attached the statement that it put this tag there
        verified = invoke(tree, "verify-layers", "--profile", "demo", "--ref",
                          reused["reference"], env={**os.environ,
                                                    "GPURL_VERIFY_ATTESTATIONS": "required"})
        assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
        assert f"by a build of the same inputs ({reused['inputs_tag']})" in verified.stdout
        assert f"looks up {tree_image(tree)}:{reused['inputs_tag']}:" in planned.stderr
        source.write_text(source.read_text() + "# edited\n")
        edited = invoke(tree, *flags, "--dry-run")
        assert edited.returncode == 0, edited.stderr[-3000:]
        assert "looks up " in edited.stderr and reused["inputs_tag"] not in edited.stderr
        subprocess.run(["git", "checkout", "--", str(source)], cwd=tree, check=True)
        start = time.monotonic()
        forced = invoke(tree, *flags, "--force")
        full = time.monotonic() - start
        assert forced.returncode == 0, forced.stderr[-3000:]
        assert "reused" not in json.loads(forced.stdout) and "<== build + push:" in forced.stderr
        print(f"same inputs, new commit: no-op build {noop:.1f}s, --force build {full:.1f}s")
    finally:
        subprocess.run(["git", "checkout", "--", str(source)], cwd=tree, check=True)
        subprocess.run(["git", "reset", "-q", "--soft", "HEAD~1"], cwd=tree, check=True)


# --- the demo's two variants: both built, verified and pinned; their shared slices one set of blobs


def _registry_digest(reference: str) -> str:
    host, _, rest = reference.partition("/")
    repository, _, tag = rest.rpartition(":")
    answer = httpx.head(f"http://{host}/v2/{repository}/manifests/{tag}",
                        headers={"Accept": ACCEPT_MANIFESTS}, timeout=30)
    assert answer.status_code == 200, answer.status_code
    return f"{host}/{repository}@{answer.headers['Docker-Content-Digest']}"


def _launcher_values(tree: Path) -> dict[str, str]:
    source = load_config(tree, profile="demo", env={}).launcher.path.read_text()
    return {target.id: node.value.value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets if isinstance(target, ast.Name)}


def test_both_variants_built_verified_pinned_and_sharing_blobs(tree: Path,
                                                               first: dict[str, Any]) -> None:
    """`standard` and `extra` (the demo's small `six` extra): each built from its own
    Dockerfile, pushed, verified through the registry API and pinned to its own launcher
    variable; every layer up to the last shared slice is the same blob in both images."""
    built: dict[str, dict[str, Any]] = {}
    for variant in ("standard", "extra"):
        done = invoke(tree, "build", "--backend", "local", "--profile", "demo", "--variant",
                      variant, "--wheel-source", "prebuilt-wheelhouse", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        built[variant] = json.loads(done.stdout)
        verified = invoke(tree, "verify-layers", "--profile", "demo", "--variant", variant,
                          "--json")
        assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
        assert one_variant(verified.stdout)["ok"]
    standard, extra = built["standard"], built["extra"]
    assert standard["reference"] == first["reference"]  # the demo's own image, unchanged
    assert extra["reference"].rpartition(":")[2].startswith("demo-extra-")
    assert standard["digest"] != extra["digest"]

    pinned = invoke(tree, "pin", "--profile", "demo")  # every variant built at HEAD
    assert pinned.returncode == 0, pinned.stdout[-2000:] + pinned.stderr[-2000:]
    values = _launcher_values(tree)
    assert values["DEFAULT_RL_DOCKER_IMAGE"] == _registry_digest(standard["reference"])
    assert values["DEFAULT_RL_EXTRA_DOCKER_IMAGE"] == _registry_digest(extra["reference"])

    rows = {v: _layers(tree, built[v]["reference"]) for v in built}
    # the environment is composed from slice images: the shared slices are the lowest
    # `shared_layers` slice layers of each image, each one install layer
    shared = load_config(tree, profile="demo", variant="standard", env={})
    count = plan_for_config(shared).shared
    shared_slices = [i for i, row in enumerate(rows["standard"])
                     if row["sync_step"] is not None and row["sync_step"] < count]
    assert len(shared_slices) == count > 0, "no layer of the standard image installs a shared slice"
    top = max(shared_slices) + 1  # the shared slices and every layer below them
    assert [r["instruction"] for r in rows["extra"][:top]] == \
        [r["instruction"] for r in rows["standard"][:top]]
    assert [r["digest"] for r in rows["extra"][:top]] == \
        [r["digest"] for r in rows["standard"][:top]]
    # each variant's own slices (the extra's `six`) sit above the shared ones, in its image only
    own_slices = {v: [r["digest"] for r in rows[v][top:] if r["sync_step"] is not None]
                  for v in rows}
    extra_plan = plan_for_config(load_config(tree, profile="demo", variant="extra", env={}))
    assert len(own_slices["extra"]) == len(extra_plan.layers) - extra_plan.shared > 0
    # the lock's own slices differ; the pinned post-install slice (rich, the same pins for
    # both variants) is one blob in both images: written once, pushed once
    *locked, post_install = own_slices["extra"]
    assert extra_plan.layers[-1].label == "post-install"
    assert not set(locked) & {r["digest"] for r in rows["standard"]}
    assert post_install == own_slices["standard"][-1]
    # one blob in the registry serves both images (same repository)
    host, _, rest = standard["reference"].partition("/")
    repository = rest.rpartition(":")[0]
    for row in rows["standard"][:top]:
        answer = httpx.head(f"http://{host}/v2/{repository}/blobs/{row['digest']}", timeout=30)
        assert answer.status_code == 200, row["digest"]
    total = sum(r["size"] for r in rows["standard"][:top])
    slice_bytes = sum(rows["standard"][i]["size"] for i in shared_slices)
    own = {v: sum(r["size"] for r in rows[v][top:]) for v in rows}
    print(f"variants standard + extra: {top} shared layers, {total:,} bytes stored once "
          f"({len(shared_slices)} shared slice layers, {slice_bytes:,} bytes); own layers "
          f"{own['standard']:,} (standard) and {own['extra']:,} (extra) bytes")


# --- position-independent slice layers: the environment composed at the registry


def _image_layers(reference: str) -> list[tuple[str, int, str]]:
    """(digest, size, instruction) of each layer of a pushed image, through the registry API."""
    ref = parse_reference(reference)
    with RegistryClient(ref.host) as registry:
        image = registry.pull(ref)
    made = [h.created_by for h in image.history if not h.empty_layer]
    assert len(made) == len(image.layers)
    return [(d.digest, d.size, text) for d, text in zip(image.layers, made, strict=True)]


def _timed_build(config: Any, sha: str, *, composed: bool, logs: Path) -> tuple[Any, float]:
    """One build of the demo as `invoke build --backend local` runs it (composed, or the
    chain), under a tag of its own; returns the result and its seconds."""
    start = time.monotonic()
    args = {"WHEEL_SOURCE": "prebuilt-wheelhouse", "GITSHA": sha}
    environment = None
    if composed:
        with serving_index(config.build.index_url, index_dir(CACHE)):
            environment = compose_environment(
                config, plan_for_config(config), client=find_buildkit_client()[0],
                dockerfile=config.build.dockerfile, context=config.root, build_args=args,
                log_dir=logs / sha)
        args["ENV_SOURCE"] = environment.reference
    built = build_and_push(config, git_sha=sha, build_args=args, cache=CACHE)
    return (built, environment), time.monotonic() - start


def test_a_lowest_slice_change_pushes_only_that_slice(tree: Path, first: dict[str, Any],
                                                      tmp_path: Path) -> None:
    """The lowest slice's file changes (a comment: its packages stay): only that slice is
    staged and written again, and since its installed files did not change it is the same
    blob; every slice layer of the new image is the same registry blob as before; the final
    sync and asserts pass on the composed environment. The chain (ENV_SOURCE=env-chain) is
    built from the same edit for the price: it re-pushes every slice above the edit."""
    config = load_config(tree, profile="demo", env={})
    plan = plan_for_config(config)
    lowest = plan.layers[0].slice.path(config.variant)
    original = lowest.read_text()
    run = uuid.uuid4().hex[:4]
    (_, env_before), _ = _timed_build(config, f"c0a{run}1", composed=True, logs=tmp_path)
    _timed_build(config, f"c0a{run}2", composed=False, logs=tmp_path)  # the chain, cached now
    _, warm = _timed_build(config, f"c0a{run}5", composed=True, logs=tmp_path)
    _, chain_warm = _timed_build(config, f"c0a{run}6", composed=False, logs=tmp_path)
    try:
        lowest.write_text(original + f"# the lowest slice changed ({run})\n")  # new each run
        (built, env_after), composed_s = _timed_build(config, f"c0a{run}3", composed=True,
                                                      logs=tmp_path)
        (chained, _), chain_s = _timed_build(config, f"c0a{run}4", composed=False,
                                             logs=tmp_path)
    finally:
        lowest.write_text(original)
    assert env_before is not None and env_after is not None
    fresh = [s.name for s in env_after.slices if s.built]
    assert fresh == [plan.layers[0].name], fresh
    before = {s.name: s.blob for s in env_before.slices}
    after = {s.name: s.blob for s in env_after.slices}
    assert after == before  # the rewritten slice is the same blob: its files did not change
    # the pushed image holds exactly those slice blobs, in plan order
    new_layers = _image_layers(built.reference)
    old = {d for d, _, _ in _image_layers(f"{config.registry.image}:demo-c0a{run}1")}
    slice_rows = [(d, size) for d, size, text in new_layers if f"{Slice.IMAGE_DIR}/" in text
                  and "uv pip install" in text]
    assert [d for d, _ in slice_rows] == [s.blob for s in env_after.slices]
    new_slice_bytes = sum(size for d, size in slice_rows if d not in old)
    assert new_slice_bytes == 0
    new_bytes = sum(size for d, size, _ in new_layers if d not in old)
    chain_layers = _image_layers(chained.reference)
    chain_old = {d for d, _, _ in _image_layers(f"{config.registry.image}:demo-c0a{run}2")}
    chain_new = sum(size for d, size, _ in chain_layers if d not in chain_old)
    slice_total = sum(size for _, size in slice_rows)
    # the chain re-pushed every slice above the edited one (the chain's are RUNs of its own)
    chain_slices = [d for d, _, text in chain_layers if d not in chain_old
                    and f"{Slice.IMAGE_DIR}/" in text and "uv pip install" in text]
    assert len(chain_slices) == len(plan.layers)
    print(f"lowest slice changed: composed pushed {new_bytes:,} new bytes "
          f"({new_slice_bytes:,} in slice layers: 1 of {len(slice_rows)} slices rewritten "
          f"into the same blob), chain {chain_new:,} of {slice_total:,} "
          f"slice bytes; build seconds composed {composed_s:.1f} vs chain {chain_s:.1f} "
          f"(no change: composed {warm:.1f} vs chain {chain_warm:.1f})")


# --- cache-stable layers and the compiled wheels, end to end
# (before any --no-cache build: duplicate cache records for one key make the engine pick
# either lineage, and blobs below a slice would differ for reasons that are not the slices')


def _layers(tree: Path, reference: str) -> list[dict[str, Any]]:
    done = invoke(tree, "verify-layers", "--profile", "demo", "--ref", reference, "--json")
    assert done.returncode == 0, done.stderr
    layers: list[dict[str, Any]] = one_variant(done.stdout)["layers"]
    return layers


def test_a_small_bump_rebuilds_only_the_slice_it_lands_in(tree: Path, first: dict[str, Any],
                                                         ) -> None:
    """pycparser moves to another release on the loopback index: the lock changes, one line of
    the one slice that holds it changes, and every other slice layer is the same blob, the
    compiled wheels' layer too."""
    done = invoke(tree, "fill-index", "--profile", "demo", "--pins", BUMPED)
    assert done.returncode == 0, done.stderr
    # the baseline is built right here: the engine's cache may have evicted older builds;
    # both builds --force: an earlier run (another checkout's, on the shared registry) may
    # have recorded these inputs, and its image was made by that checkout's code
    baseline = invoke(tree, "build", "--backend", "local", "--profile", "demo",
                      "--wheel-source", "prebuilt-wheelhouse", "--json", "--force")
    assert baseline.returncode == 0, baseline.stderr[-3000:]
    relock(tree, ('dependencies = [', f'dependencies = [\n  "{BUMPED}",'),
            upgrade=BUMPED.split("==")[0])
    slices = sorted((tree / "docker" / "layers" / "demo").rglob("*.txt"))
    edited = [s.relative_to(tree).as_posix() for s in slices
              if s.read_text() != (REPO_ROOT / s.relative_to(tree)).read_text()]
    # pycparser is common to both variants: exactly one slice file is edited, one line of it
    assert len(edited) == 1, edited
    changed = edited
    built = invoke(tree, "build", "--backend", "local", "--profile", "demo",
                   "--wheel-source", "prebuilt-wheelhouse", "--json", "--force")
    assert built.returncode == 0, built.stderr[-3000:]
    before = _layers(tree, json.loads(baseline.stdout)["reference"])
    after = _layers(tree, json.loads(built.stdout)["reference"])
    slice_rows = [i for i, row in enumerate(after) if row["sync_step"] is not None]
    names = [layer.name for layer in plan_for_config(load_config(tree, profile="demo",
                                                                 env={})).layers]
    step = names.index(Path(changed[0]).stem)
    moved = next(i for i, row in enumerate(after) if row["sync_step"] == step)
    assert [r["digest"] for r in after[:moved]] == [r["digest"] for r in before[:moved]]
    # composed: every other slice layer, above the changed one too, is the same blob
    assert [after[i]["digest"] for i in slice_rows if i != moved] == \
        [r["digest"] for r in before if r["sync_step"] is not None and r["sync_step"] != step]
    # the compiled wheels' layer is the one gpurl wrote (its history names the install of the
    # wheel file, not the compiled stage's COPY), keyed by the MANIFEST: the same blob
    compiled = [[r["digest"] for r in layers if "/tmp/wheels/gpurl_demo_ext-" in r["instruction"]]
                for layers in (before, after)]
    assert len(compiled[0]) == 1 and compiled[1] == compiled[0], compiled
    had = {r["digest"] for r in before}
    python = sum(after[i]["size"] for i in slice_rows)
    new_python = sum(after[i]["size"] for i in slice_rows if after[i]["digest"] not in had)
    print(f"bump {BUMPED}: {new_python} new bytes in slice layers of {python} "
          f"({new_python / python:.1%}); layers below {changed[0]} reused")
    assert new_python <= 0.10 * python


def test_the_compiled_wheel_survives_a_lock_that_pins_its_name(tree: Path,
                                                              first: dict[str, Any]) -> None:
    """The lock pins gpurl-demo-ext 0.0.1, a pure-Python release on the loopback index that
    has no `add`; the image must hold the compiled wheel (its asserts pass only with it), and
    no slice or sync may install the lock's copy or put it back."""
    make_wheel(index_dir(CACHE), "gpurl-demo-ext", "0.0.1", payload_bytes=100)
    # the workspace's own pin is now a conflict `uv pip check` reports (the compiled 0.1.0
    # replaces it): the gate refuses it until it is declared, as a user declares it
    root = tree / "pyproject.toml"
    allowed = 'pip-check-allow = ["The package `gpurl-demo-ext` requires `pyyaml<6`, but `6.*` is installed"'
    assert allowed in root.read_text()
    root.write_text(root.read_text().replace(allowed, allowed + (
        ', "The package `gpurl-demo` requires `gpurl-demo-ext==0.0.1`, but `0.1.0` is installed"'), 1))
    relock(tree, ('dependencies = [', 'dependencies = [\n  "gpurl-demo-ext==0.0.1",'))
    dockerfile = (tree / "docker" / "Dockerfile.demo").read_text()
    assert "--no-install-package gpurl-demo-ext" in dockerfile
    slices = " ".join(s.read_text() for s in (tree / "docker" / "layers" / "demo").rglob("*.txt"))
    assert slices  # every variant's slices and the shared ones
    assert "gpurl-demo-ext" not in slices
    built = invoke(tree, "build", "--backend", "local", "--profile", "demo",
                   "--wheel-source", "prebuilt-wheelhouse", "--json")
    assert built.returncode == 0, built.stderr[-3000:]  # the compiled-wheel assert ran in it


def test_rebuild_needed_after_pin_and_after_a_lock_change(tree: Path, first: dict[str, Any]) -> None:
    now = invoke(tree, "rebuild-needed", "--profile", "demo", "--since", "HEAD", "--json")
    assert now.returncode == 0, now.stdout + now.stderr
    decisions = json.loads(now.stdout)["variants"]  # the demo's two variants
    assert {v: d["decision"] for v, d in decisions.items()} == {"standard": "none", "extra": "none"}
    lock = tree / "examples" / "demo" / "uv.lock"
    original = lock.read_text()
    try:
        lock.write_text(original.replace('name = "pyyaml"\nversion = "', 'name = "pyyaml"\nversion = "0', 1))
        changed = invoke(tree, "rebuild-needed", "--profile", "demo", "--since", "HEAD", "--json")
        assert changed.returncode == 10, changed.stdout + changed.stderr
        for decision in json.loads(changed.stdout)["variants"].values():
            assert decision["decision"] == "image"
            assert any("pyyaml" in r["detail"] for r in decision["reasons"])
    finally:
        lock.write_text(original)


def test_wheel_builder_path_builds_and_imports_the_compiled_wheel(tree: Path,
                                                                  first: dict[str, Any]) -> None:
    # --force: a --no-cache build is a new image, and the commit's tag already holds one
    done = invoke(tree, "build", "--backend", "local", "--profile", "demo",
                  "--wheel-source", "wheel-builder", "--no-cache", "--force", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    built = json.loads(done.stdout)
    # with --no-cache nothing comes from the cache: the C extension was compiled by this
    # build, and the rl stage's asserts (`import gpurl_demo_ext; ...add(2, 3) == 5`) ran on it
    assert {"wheel-builder", "rl"} <= set(built["stages_run"])
    assert built["cached_steps"] == 0


def test_a_broken_build_assert_fails_the_build(tree: Path, first: dict[str, Any]) -> None:
    config = load_config(tree, profile="demo", env={}, overrides={
        "build.import-asserts": ["import gpurl_demo_ext", "import gpurl_demo_not_there"]})
    broken = tree / "docker" / "Dockerfile.broken"
    broken.write_text(render_dockerfile(config, plan_for_config(config)))
    with pytest.raises(BuildError, match="gpurl_demo_not_there"):
        build_and_push(config, git_sha="0000000", dockerfile=broken, cache=CACHE,
                       build_args={"WHEEL_SOURCE": "prebuilt-wheelhouse", "GITSHA": "0000000"})


def test_demo_dry_run_describes_every_step_and_writes_nothing(tree: Path, first: dict[str, Any]) -> None:
    launcher = load_config(tree, profile="demo", env={}).launcher.path
    before = launcher.read_bytes()
    done = invoke(tree, "demo", "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    commands = json.loads(done.stdout)["commands"]
    tasks = [argv[1] for argv in commands if argv[0] == "invoke"]
    assert tasks == ["setup-local", "plan", "generate", "check-wheels", "verify-layers", "pin"]
    from gpurl_tasks.dockerfile.context import source_id
    from gpurl_tasks.local.builder import image_reference

    config = load_config(tree, profile="demo", env={})
    reference = image_reference(config, source_id(config))  # the tree as the tests left it
    assert ["docker", "push", reference] in commands  # the built image, pushed
    assert commands[-1][-2:] == ["--ref", reference]  # and pinned
    assert launcher.read_bytes() == before
