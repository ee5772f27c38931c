"""`invoke diff`: two images pushed to a real loopback `docker-registry`, read back through the
registry API. The images carry gpurl's labels and slice RUNs (pushed with tests/support/
pusher.py, the local path's layer shapes), and their git-sha labels name two commits of a
throwaway repository whose demo lock differs by one package: the diff names the package, the
changed slice and the exact bytes a node holding the first must pull for the second. An image
without gpurl labels falls back to layers and bytes, and says so."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.provenance import LABEL_GIT_SHA, LABEL_LOCK_HASH
from gpurl_tasks.release.diff import PackageChange, diff_task
from tests.conftest import REPO_ROOT
from tests.support.git import git
from tests.support.pusher import LayerSpec, push_image, random_layer
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.tasks_runner import run_task


def _slice(label: str, size: int, seed: int) -> LayerSpec:
    return random_layer(size, "RUN uv pip install --no-deps --require-hashes -r "
                              f"/tmp/gpurl-layers/{label}.txt", seed=seed)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    with running_registry(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    """The demo workspace at two commits: pyyaml 6.0.4, then 6.0.5 (returns root, sha1, sha2)."""
    root = tmp_path / "repo"
    (root / "examples").mkdir(parents=True)
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(REPO_ROOT / "examples" / "demo", root / "examples" / "demo",
                    ignore=shutil.ignore_patterns(".venv", "__pycache__", "*.egg-info"))
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "one")
    first = git(root, "rev-parse", "--short", "HEAD").strip()
    lock = root / "examples" / "demo" / "uv.lock"
    text = lock.read_text()
    assert 'name = "pyyaml"\nversion = "6.0.4"' in text
    lock.write_text(text.replace('name = "pyyaml"\nversion = "6.0.4"',
                                 'name = "pyyaml"\nversion = "6.0.5"'))
    git(root, "commit", "-qam", "bump pyyaml")
    return root, first, git(root, "rev-parse", "--short", "HEAD").strip()


def _labels(root: Path, sha: str) -> dict[str, str]:
    lock = git(root, "show", f"{sha}:examples/demo/uv.lock")
    return {LABEL_GIT_SHA: sha, LABEL_LOCK_HASH: hashlib.sha256(lock.encode()).hexdigest()}


def test_diff_of_a_small_bump(registry: RegistryServer, repo: tuple[Path, str, str]) -> None:
    root, first, second = repo
    base = random_layer(40_000, "ADD rootfs.tar /", seed=1)
    kept = _slice("group-01", 30_000, seed=2)
    old_yaml, new_yaml = _slice("pyyaml", 5_000, seed=3), _slice("pyyaml", 5_000, seed=4)
    added = _slice("group-09", 2_000, seed=5)
    final = random_layer(100, "RUN uv sync --frozen --inexact", seed=6)
    one = push_image(registry.url, "org/img", [base, kept, old_yaml, final], tag="demo-one",
                     labels=_labels(root, first), empty_history=[(1, "ENV A=1")])
    two = push_image(registry.url, "org/img", [base, kept, new_yaml, added, final],
                     tag="demo-two", labels=_labels(root, second))
    config = load_config(root, profile="demo", env={"GPURL_REGISTRY_HOST": registry.host})
    result = diff_task(config, f"{registry.host}/org/img:demo-one",
                       f"{registry.host}/org/img@{two.manifest_digest}")
    assert result.pull_bytes == new_yaml.size + added.size  # exactly the layers one lacks
    assert result.shared_bytes == base.size + kept.size + final.size
    assert result.gone_layers == 1  # the old pyyaml slice
    assert result.largest_new is not None and result.largest_new.digest == new_yaml.digest
    assert result.slices == {"shared": ("group-01",), "changed": ("pyyaml",),
                             "added": ("group-09",), "removed": ()}
    assert result.packages == (PackageChange(name="pyyaml", before="6.0.4", after="6.0.5"),)
    text = result.human()
    assert f"pulls {new_yaml.size + added.size:,} bytes" in text
    assert "~ pyyaml 6.0.4 -> 6.0.5" in text and "changed pyyaml" in text
    assert one.manifest_digest[:19] in text
    data = result.to_json()
    assert data["pull_bytes"] == new_yaml.size + added.size
    assert data["packages"] == [{"name": "pyyaml", "before": "6.0.4", "after": "6.0.5"}]


def test_same_lock_means_no_package_change(registry: RegistryServer,
                                           repo: tuple[Path, str, str]) -> None:
    root, first, _ = repo
    layer = _slice("group-01", 1_000, seed=11)
    push_image(registry.url, "org/same", [layer], tag="a", labels=_labels(root, first))
    push_image(registry.url, "org/same", [layer], tag="b", labels=_labels(root, first))
    config = load_config(root, profile="demo", env={"GPURL_REGISTRY_HOST": registry.host})
    result = diff_task(config, f"{registry.host}/org/same:a", f"{registry.host}/org/same:b")
    assert result.pull_bytes == 0 and result.packages == ()
    assert any("same lock" in note for note in result.notes)


def test_a_commit_this_clone_lacks_makes_the_package_diff_unavailable(
        registry: RegistryServer, repo: tuple[Path, str, str]) -> None:
    root, first, _ = repo
    push_image(registry.url, "org/gone", [_slice("a", 500, seed=21)], tag="a",
               labels=_labels(root, first))
    push_image(registry.url, "org/gone", [_slice("a", 500, seed=22)], tag="b",
               labels={LABEL_GIT_SHA: "0123abc", LABEL_LOCK_HASH: "f" * 64})
    config = load_config(root, profile="demo", env={"GPURL_REGISTRY_HOST": registry.host})
    result = diff_task(config, f"{registry.host}/org/gone:a", f"{registry.host}/org/gone:b")
    assert result.packages is None
    assert any(n.startswith("package diff unavailable:") and "0123abc" in n
               for n in result.notes), result.notes


def test_invoke_diff_of_images_gpurl_did_not_build(registry: RegistryServer) -> None:
    """No labels, no slice RUNs: layers and bytes only, said so; --json is one object."""
    shared = random_layer(3_000, "ADD file:abc in /", seed=31)
    new = random_layer(7_000, "RUN apt-get install -y curl", seed=32)
    push_image(registry.url, "other/img", [shared], tag="v1")
    push_image(registry.url, "other/img", [shared, new], tag="v2")
    env = {"GPURL_REGISTRY_HOST": registry.host}
    done = run_task("diff", f"{registry.host}/other/img:v1",
                    f"{registry.host}/other/img:v2", "--json", "--profile", "demo", env=env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["pull_bytes"] == new.size and data["packages"] is None
    assert data["largest_new_layer"]["instruction"] == "RUN apt-get install -y curl"
    notes = " ".join(data["notes"])
    assert "package diff unavailable" in notes and "no org.gpurl.git-sha label" in notes
    assert "no slice layers" in notes
    human = run_task("diff", f"{registry.host}/other/img:v1",
                     f"{registry.host}/other/img:v2", "--profile", "demo", env=env)
    assert f"pulls {new.size:,} bytes" in human.stdout


def test_invoke_diff_errors_are_one_line_with_a_hint(registry: RegistryServer) -> None:
    env = {"GPURL_REGISTRY_HOST": registry.host}
    missing = run_task("diff", f"{registry.host}/other/img:v1", "", "--profile", "demo", env=env)
    # an empty value is refused as it is parsed, like every required argument
    assert missing.returncode == 2 and missing.stderr.startswith("error: SECOND is empty")
    assert len(missing.stderr.splitlines()) == 2 and "hint:" in missing.stderr
    alone = run_task("diff", f"{registry.host}/other/img:v1", "--profile", "demo", env=env)
    assert alone.returncode == 2 and alone.stderr.startswith("error: diff needs SECOND")
    absent = run_task("diff", f"{registry.host}/none/img:v1",
                      f"{registry.host}/none/img:v2", "--profile", "demo", env=env)
    assert absent.returncode == 2, absent.stderr
    assert absent.stderr.startswith("error: ") and "\n  hint: " in absent.stderr
    assert "Traceback" not in missing.stderr + absent.stderr
