"""The heavy profile's committed files are current: lock, plan and Dockerfile (nothing downloaded).

`nox -s bench-heavy` builds it for real; this cheap check only reads the committed files, so a
stale lock or Dockerfile fails the normal suite instead of a 20-minute benchmark.
"""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement

from benchmarks import real_scale
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.generate import generate
from gpurl_tasks.plan.planner import TAIL_SHARE
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


def test_plan_spans_at_least_four_gb_scale_layers_under_the_cap() -> None:
    plan = plan_for_config(_config())
    sizes = [layer.compressed_bytes for layer in plan.layers]
    assert plan.cap_bytes == GB
    assert len(sizes) >= 4 and max(sizes) <= plan.cap_bytes
    assert sum(sizes) >= 3 * GB
    assert min(sizes[:-1]) >= plan.cap_bytes // 2  # GB-scale layers, then the light tail
    assert sizes[-1] <= TAIL_SHARE * sum(sizes)


def test_committed_dockerfile_is_current() -> None:
    result = generate(_config(), check=True)  # raises StaleFileError when stale
    assert result.steps >= 4 and not result.changed


def test_report_section_is_spliced_in_place() -> None:
    first = real_scale.splice_section("# Report\n\ntext\n", "## Real scale\n\none\n")
    again = real_scale.splice_section(first + "\n## later\n", "## Real scale\n\ntwo\n")
    assert "one" not in again and again.count(real_scale.BEGIN) == 1
    assert again.index("two") < again.index("## later")
    assert "No measured run yet" in real_scale.render_section(None)
