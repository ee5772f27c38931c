"""The heavy profile's committed files are current: lock, plan and Dockerfile (nothing downloaded).

`nox -s bench-heavy` builds it for real; this cheap check only reads the committed files, so a
stale lock or Dockerfile fails the normal suite instead of a 20-minute benchmark.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from benchmarks import real_scale
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.generate import generate
from gpurl_tasks.plan.planner import group_label, group_of
from gpurl_tasks.plan.profile import plan_for_config
from tests.conftest import REPO_ROOT

GB = 10**9


def _config() -> Config:
    return load_config(REPO_ROOT, profile="heavy", env={})


def test_lock_matches_the_workspace_and_its_loopback_index() -> None:
    config = _config()
    pyproject = tomllib.loads((config.workspace / "pyproject.toml").read_text())
    lock = tomllib.loads(config.lock.read_text())
    root = next(p for p in lock["package"] if p["name"] == pyproject["project"]["name"])
    locked = {str(Requirement(f"{r['name']}{r.get('specifier', '')}"))
              for r in root["metadata"]["requires-dist"]}
    assert locked == {str(Requirement(d)) for d in pyproject["project"]["dependencies"]}, \
        "examples/heavy/uv.lock is stale: re-lock it against the loopback index (see its pyproject)"
    registry = [p for p in lock["package"] if "registry" in p["source"]]
    assert {p["source"]["registry"] for p in registry} == {config.build.index_url}
    assert all("size" in w for p in registry for w in p["wheels"]), "every wheel size is recorded"
    names = {p["name"] for p in registry}
    assert "triton" in names and {"nvidia-cublas-cu12", "nvidia-cudnn-cu12"} <= names


def test_plan_spans_independent_layers_under_the_cap() -> None:
    config = _config()
    plan = plan_for_config(config)
    layout = config.layers.layout
    sizes = [layer.compressed_bytes for layer in plan.layers]
    assert plan.cap_bytes == GB and plan.mode == "independent"
    assert max(sizes) <= plan.cap_bytes and sum(sizes) >= 3 * GB
    for layer in plan.layers:  # a large package alone; the rest in their hash group
        label = layer.label
        for p in layer.packages:
            if p.compressed_bytes >= layout.own_layer:
                assert layer.names == (p.name,)
            else:
                assert label == group_label(group_of(p.name, layout.tail_groups))


def _bump_in_lock(text: str, name: str) -> tuple[str, str]:
    """The lock text with `name` at another version (new wheel name and hash), as a re-lock
    writes it; and the old version."""
    old = re.search(rf'^name = "{name}"\nversion = "([^"]+)"', text, re.M)
    assert old is not None
    version = old.group(1)
    new = version + ".post1"
    start = old.start()
    end = text.index("\n[[package]]", start)
    entry = text[start:end].replace(f'version = "{version}"', f'version = "{new}"')
    entry = entry.replace(f"{name}-{version}-", f"{name}-{new}-")
    entry = re.sub(r"sha256:[0-9a-f]{64}", "sha256:" + hashlib.sha256(new.encode()).hexdigest(), entry)
    return text[:start] + entry + text[end:], version


def test_bump_copy_starts_from_the_committed_slices(tmp_path: Path) -> None:
    """bench-heavy's bump copy holds the committed slice files, so re-planning the bumped lock
    keeps every unchanged package in its slice and changes only the bumped package's slice."""
    config = _config()
    dest = tmp_path / "bump"
    workspace = real_scale.stage_bump_workspace(config, dest)
    committed = config.build.slices / config.profile
    copied = dest / committed.relative_to(config.root)
    assert {p.name: p.read_text() for p in committed.glob("*.txt")} == \
        {p.name: p.read_text() for p in copied.glob("*.txt")}
    name = real_scale.BUMP[0]
    text, version = _bump_in_lock((workspace / "uv.lock").read_text(), name)
    (workspace / "uv.lock").write_text(text)
    before = plan_for_config(config)
    after = plan_for_config(load_config(dest, profile="heavy", env={}))
    where = {p.name: layer.name for layer in before.layers for p in layer.packages}
    assert {p.name: layer.name for layer in after.layers for p in layer.packages} == where
    changed = {layer.name for layer in after.layers} ^ {layer.name for layer in before.layers}
    lines = {layer.name: {p.requirement for p in layer.packages} for layer in before.layers}
    edited = [layer.name for layer in after.layers
              if {p.requirement for p in layer.packages} != lines[layer.name]]
    assert not changed and edited == [where[name]]
    assert {p.name: p.version for p in after.closure}[name] != version


def test_committed_dockerfile_is_current() -> None:
    result = generate(_config(), check=True)  # raises StaleFileError when stale
    assert result.steps >= 4 and not result.changed


def test_report_section_is_spliced_in_place() -> None:
    first = real_scale.splice_section("# Report\n\ntext\n", "## Real scale\n\none\n")
    again = real_scale.splice_section(first + "\n## later\n", "## Real scale\n\ntwo\n")
    assert "one" not in again and again.count(real_scale.BEGIN) == 1
    assert again.index("two") < again.index("## later")
    assert "No measured run yet" in real_scale.render_section(None)
