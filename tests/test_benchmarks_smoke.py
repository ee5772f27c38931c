"""The benchmark harness's pure parts on a small synthetic lock (timings are not checked)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from benchmarks import layer_budget, quality, rebuild_cost
from benchmarks.common import LockInput, closure_sizes
from benchmarks.history import add_to_extra, bump_package, next_version
from benchmarks.prediction import MeasuredFileError, load_measured
from benchmarks.report import render_markdown
from benchmarks.run import run
from benchmarks.synth import SYNTH_EXTRA, synthetic_lock_text
from gpurl_tasks.config import Layout
from gpurl_tasks.plan.lock import Lock, parse_lock
from gpurl_tasks.plan.sizes import PackageSize, SizeSources

MB = 10**6


def _lock(packages: int = 120, heavy: int = 6) -> Lock:
    return parse_lock(synthetic_lock_text(packages=packages, heavy=heavy, seed=3), source="synth")


def _item(lock: Lock, label: str = "v0") -> LockInput:
    return LockInput(label=label, lock=lock, sources=SizeSources(), extras=(SYNTH_EXTRA,))


def _sizes(lock: Lock) -> list[PackageSize]:
    return closure_sizes(lock, (SYNTH_EXTRA,), SizeSources())[0]


def test_synthetic_lock_is_reproducible_and_has_the_heavy_packages() -> None:
    text = synthetic_lock_text(packages=120, heavy=6, seed=3)
    assert text == synthetic_lock_text(packages=120, heavy=6, seed=3)
    assert text != synthetic_lock_text(packages=120, heavy=6, seed=4)
    sizes = _sizes(parse_lock(text))
    assert sum(1 for s in sizes if s.compressed_bytes >= 100 * MB) == 6  # every heavy one, linux wheel


def test_quality_rows_cover_the_closure_and_respect_the_cap() -> None:
    sizes = _sizes(_lock())
    total = sum(s.compressed_bytes for s in sizes)
    cap = max(s.compressed_bytes for s in sizes) + 10 * MB
    rows = {r.method: r for r in quality.quality_rows(sizes, lock="synth", cap=cap)}
    planner = rows[quality.INDEPENDENT]
    assert planner.feasible and planner.largest <= cap
    assert planner.layers >= planner.lower_bound
    assert rows["single sync"].largest == total
    for split in (quality.single_sync(sizes), quality.per_heavy_package(sizes),
                  quality.first_fit_lock_order(sizes, cap)):
        assert sum(split) == total
    assert all(load <= cap for load in quality.first_fit_lock_order(sizes, cap))


def test_a_package_over_the_cap_is_reported_not_raised() -> None:
    sizes = _sizes(_lock())
    biggest = max(sizes, key=lambda s: s.compressed_bytes)
    planner = quality.quality_rows(sizes, lock="synth", cap=biggest.compressed_bytes - 1)[0]
    assert not planner.feasible and planner.layers == 0
    assert planner.note.startswith(f"infeasible: package {biggest.name} (")


def test_cache_keys_change_from_the_first_changed_step_on() -> None:
    steps = [rebuild_cost.BuildStep(instruction=f"RUN {i}", inputs="", layer_bytes=i + 1) for i in range(5)]
    changed = [*steps[:2], rebuild_cost.BuildStep(instruction="RUN x", inputs="", layer_bytes=3), *steps[3:]]
    old, new = rebuild_cost.cache_keys(steps), rebuild_cost.cache_keys(changed)
    assert old[:2] == new[:2] and all(a != b for a, b in zip(old[2:], new[2:], strict=True))
    assert rebuild_cost.rebuilt_bytes(steps, changed) == (3, 3 + 4 + 5)
    assert rebuild_cost.rebuilt_bytes(steps, steps) == (0, 0)


def test_rebuild_costs_of_a_small_bump() -> None:
    base = _lock()
    sizes = _sizes(base)
    light = min((s for s in sizes if s.compressed_bytes < MB), key=lambda s: s.name)
    bumped, extra = bump_package(base, light.name, light.version)
    assert extra == {}  # sizes come from the lock, no override to carry
    versions = [_item(base), _item(base, "same"), _item(bumped, "bumped")]
    cap = max(s.compressed_bytes for s in sizes) + 50 * MB
    costs = {(c.design, c.new): c for c in rebuild_cost.rebuild_costs(versions, cap=cap)}
    assert costs["chain (before)", "same"].bytes_rebuilt == 0  # byte-equal lock: all cached
    assert costs["chain (before)", "bumped"].fraction == 1.0
    chain = costs[rebuild_cost.ON_CHAIN, "bumped"]  # the same plan as one chain
    mine = costs[rebuild_cost.THIS_DESIGN, "bumped"]  # independent: only the bumped one's group
    floor = costs[rebuild_cost.FLOOR, "bumped"]
    assert costs[rebuild_cost.THIS_DESIGN, "same"].bytes_rebuilt == 0
    assert mine.layers_rebuilt == 1 and floor.layers_rebuilt == 1
    assert 0 < floor.bytes_rebuilt <= mine.bytes_rebuilt <= chain.bytes_rebuilt
    plan = rebuild_cost.plan_version(versions[0], cap)
    steps = rebuild_cost.slice_steps(plan, base)  # from the generated Dockerfile's rl stage
    assert sum(s.layer_bytes for s in steps) == plan.total_compressed_bytes


def test_layer_budget_runs_keep_the_budget_and_measure_against_none() -> None:
    """Budgets over a small bump sequence: one the free packing meets re-pushes what no
    budget does; a tight one keeps every image under it (at some cost per bump)."""
    base = _lock(packages=200, heavy=8)
    light = min((s for s in _sizes(base) if s.compressed_bytes < MB), key=lambda s: s.name)
    bumped, _ = bump_package(base, light.name, light.version)
    versions = [_item(base), _item(bumped, "bumped")]
    layout = {"fine": Layout(own_layer=MB // 2)}  # many own slices: the budget has work to do
    free, = layer_budget.budget_runs(versions, budgets=(None,), layouts=layout)
    roomy, tight = layer_budget.budget_runs(
        versions, budgets=(free.most_layers, free.most_layers - 15), layouts=layout)
    assert (roomy.repushed, roomy.most_slices, roomy.mean_repush_per_bump) == \
        (free.repushed, free.most_slices, free.mean_repush_per_bump)
    assert tight.most_layers <= free.most_layers - 15 < free.most_layers
    assert tight.mean_repush_per_bump >= free.mean_repush_per_bump
    assert 0 < free.floor <= min(free.repushed, tight.repushed)
    text = "\n".join(layer_budget.render_section({"note": "n", "runs": [
        r.to_json() for r in (free, roomy, tight)]}))
    assert text.count("| fine |") == 3 and "x1.00" in text


def test_bumps_edit_the_parsed_lock() -> None:
    assert next_version("2.9.1+cu128") == "2.9.2+cu128"
    assert next_version("0.0.32.post1") == "0.0.32.post2"
    base = _lock()
    closure = {s.name for s in _sizes(base)}
    grown = {s.name for s in _sizes(add_to_extra(base, SYNTH_EXTRA, "added-pkg", "1.0", 3 * MB))}
    assert grown == closure | {"added-pkg"}
    with pytest.raises(ValueError, match="no extra"):
        add_to_extra(base, "nope", "added-pkg", "1.0", 1)


def test_measured_layers_file(tmp_path: Path) -> None:
    path = tmp_path / "measured.json"
    assert load_measured(path) is None
    path.write_text(json.dumps({"build": "demo", "layers": [
        {"step": 0, "predicted": 110, "actual": 100}, {"step": 1, "predicted": 95, "actual": 100}]}))
    build = load_measured(path)
    assert build is not None
    assert [round(x.error_percent, 6) for x in build.layers] == [10.0, -5.0]
    assert build.max_abs_error_percent == pytest.approx(10.0)
    path.write_text(json.dumps({"layers": [{"step": 0, "predicted": -1, "actual": 1}]}))
    with pytest.raises(MeasuredFileError, match="predicted"):
        load_measured(path)


def test_report_without_real_locks_or_a_measured_build(tmp_path: Path) -> None:
    results = run(runs=1, locks_dir=tmp_path / "no-locks", measured=tmp_path / "none.json",
                  scratch=tmp_path, synth_packages=150, synth_heavy=5)
    text = render_markdown(json.loads(json.dumps(results)))  # survives the JSON round trip
    for heading in ("## 1. Planner speed", "## 2. Plan quality", "## 3. Size prediction",
                    "## 4. Rebuild cost across a lock history",
                    "## 5. The layer budget's re-push cost"):
        assert heading in text
    assert "No measured build yet" in text
    assert "As a whole process" in text  # invoke plan processes ran against bare tomllib ones
    assert all(p["plan_seconds"] > 0 and p["toml_seconds"] > 0
               for p in results["speed"]["processes"])
    assert f"Skipped real locks: no real SkyRL lock in {tmp_path / 'no-locks'}" in text


def test_kaniko_slice_timings_read_a_real_kaniko_log() -> None:
    """An excerpt of upstream kaniko v1.23.2's log of the demo (recorded here, ANSI codes
    kept): the first slice RUN of a stage takes the baseline snapshot (install 59 -> 61,
    then the layer push at 61); the next one's snapshot runs 61 -> 62."""
    from benchmarks.kaniko_scale import slice_timings

    log = (Path(__file__).parent / "data" / "kaniko" / "upstream-slice-runs.log").read_text()
    assert slice_timings(log) == [
        {"slice": "group-04", "install_s": 2, "snapshot_s": 0},
        {"slice": "group-05", "install_s": 0, "snapshot_s": 1},
        {"slice": "group-06", "install_s": 0, "snapshot_s": 0},
    ]


def test_noop_rebuild_section_states_both_paths_and_keeps_the_rest_of_the_report() -> None:
    """The no-op benchmark's ratio is baseline / no-op; its section replaces only itself, and
    a half that failed shows its error instead of figures."""
    from benchmarks.noop_rebuild import BEGIN, END, render_section, speedup, splice_section

    assert speedup(1.5, 4.5) == 3.0 and speedup(0.0, 1.0) == float("inf")
    data = {"measured_at": "2026-01-01 00:00 UTC", "cpus": 2,
            "local": {"first_s": 30.0, "noop_s": 1.5, "force_s": 4.5, "speedup": 3.0},
            "kaniko-upstream": {"failed": "the cold job failed: boom"}}
    section = render_section(data)
    assert "| 30.0s | 1.5s | 4.5s (`--force`, warm cache) | 3.0x |" in section
    assert "the cold job failed: boom" in section
    report = f"# head\n\n{BEGIN}\nold\n{END}\n\n## tail\n"
    assert splice_section(report, section) == f"# head\n\n{section}\n\n## tail\n"
    assert splice_section("# head\n", section).endswith(f"{section}\n")
    assert render_section(None).startswith(BEGIN)


def test_whole_image_baseline_is_the_script_without_its_compiled_layer() -> None:
    """The baseline arm runs today's script with the composition's compiled wheels taken out
    (nothing else in it differs), which a script without them refuses; its compiled-layer
    pattern finds both arms' layer; the section compares the two bumps."""
    from benchmarks.whole_image import (
        COMPILED,
        bump_ratio,
        new_layers,
        render_section,
        without_compiled_layer,
    )
    from gpurl_tasks.cluster.kaniko import render_script
    from gpurl_tasks.config import load_config
    from gpurl_tasks.writer.compiled import compiled_history
    from tests.conftest import REPO_ROOT

    script = render_script(load_config(REPO_ROOT, profile="gpu-rl", env={}))
    baseline = without_compiled_layer(script)
    changed = [(a, b) for a, b in zip(script.splitlines(), baseline.splitlines(), strict=True)
               if a != b]
    assert len(changed) == 1 and "--compiled-wheel" in changed[0][0], changed
    assert changed[0][1].endswith('--prebuilt-wheelhouse "$PREBUILT_WHEELHOUSE"')
    with pytest.raises(RuntimeError, match="names no --compiled-wheel"):
        without_compiled_layer(baseline)
    written = compiled_history(("gpurl_demo_ext-0.1.0-cp311-cp311-linux_x86_64.whl",), "/opt/v")
    assert COMPILED.search(written) and COMPILED.search("COPY --from=7 /tmp/gpurl-compiled/ /")
    assert not COMPILED.search("COPY examples/demo/ /opt/workspace/")
    assert new_layers([{"digest": "a"}, {"digest": "b"}], [{"digest": "a"}]) == [{"digest": "b"}]
    assert bump_ratio(300, 100) == 3.0 and bump_ratio(1, 0) == float("inf")
    bump = {"executor": "upstream", "step": "bump", "seconds": 60.0, "layers": 20,
            "image_bytes": 1_000_000, "compiled_bytes": 500_000, "slice_bytes": 1_000}
    data = {"measured_at": "2026-01-01 00:00 UTC", "cpus": 2, "compiled_mb": 1, "builds": [
        {**bump, "arm": "written", "new_blobs": 3, "new_bytes": 2_000, "compiled_new": False},
        {**bump, "arm": "copied", "new_blobs": 4, "new_bytes": 502_000, "compiled_new": True}]}
    section = render_section(data)
    assert "| upstream | written | bump | 60 | 3 | 2,000 | 0.20% | kept | 2.0x |" in section
    assert "| upstream | copied | bump | 60 | 4 | 502,000 | 50.20% | new | 502.0x |" in section
    assert "re-pushes 2,000 bytes against the previous release's 502,000 (251.0x less)" in section


def test_whole_history_counts_each_final_stage_layer_by_its_own_key() -> None:
    """Today's compiled layer moves with its wheels alone, the pinned post-installs with their
    pins alone, the rest of the rl stage with anything below it; the previous release's final
    stage moves whole with the environment. The floor takes the compiled wheels' change."""
    from benchmarks.whole_history import FinalStage, PairBytes, pair_bytes, render_section, summarize
    from gpurl_tasks.plan.model import Plan

    base = _lock()
    light = min((s for s in _sizes(base) if s.compressed_bytes < MB), key=lambda s: s.name)
    bumped, _ = bump_package(base, light.name, light.version)
    cap = max(s.compressed_bytes for s in _sizes(base)) + 50 * MB
    before, after = rebuild_cost.plan_sequence([_item(base), _item(bumped, "bumped")], cap=cap)
    wheels = FinalStage(compiled=frozenset({("vllm", "1")}), compiled_bytes=400 * MB,
                        locked=frozenset({"fastapi"}))
    newer = FinalStage(compiled=frozenset({("vllm", "2")}), compiled_bytes=410 * MB,
                       locked=wheels.locked)

    def step(old_plan: Plan, new_plan: Plan, old: FinalStage, new: FinalStage) -> PairBytes:
        return pair_bytes(old_plan, new_plan, old, new, post_installs=("fastapi", "harbor"),
                          post_install_bytes=30 * MB, rest_bytes=10 * MB, labels=("a", "b"))

    same = step(before, before, wheels, wheels)
    assert (same.slices, same.today, same.previous, same.floor) == (0, 0, 0, 0)
    bump = step(before, after, wheels, wheels)
    assert bump.slices > 0 and bump.today == 10 * MB
    assert bump.previous == (400 + 30 + 10) * MB
    assert bump.floor == rebuild_cost.floor_bytes(before, after)[1] > 0
    compiled = step(before, before, wheels, newer)
    assert compiled.slices == 0 and compiled.today == (410 + 10) * MB
    assert compiled.floor == 410 * MB and compiled.closure_changed
    taken = step(before, before, wheels, dataclasses.replace(wheels, locked=frozenset(
        {"fastapi", "harbor"})))  # the lock now holds a pinned post-install
    dropped = step(before, before, wheels, dataclasses.replace(wheels, locked=frozenset()))
    assert taken.today == dropped.today == (30 + 10) * MB and taken.previous == 0
    summary = summarize([bump, compiled, same])
    assert summary["steps"] == 2
    assert summary["today_vs_floor"] == pytest.approx(
        (bump.slices + bump.today + compiled.today) / (bump.floor + compiled.floor))
    data = {"measured_at": "2026-01-01 00:00 UTC", "cap": 4 * 10**9, "compiled": ["vllm"],
            "post_installs": ["fastapi", "harbor"], "estimates": {"post-install": 30 * MB},
            "pairs": [bump.to_json()], "summary": summary}
    section = render_section(data)
    assert f"**{summary['today_vs_floor']:.2f}x the floor**" in section
    assert "post-install 30.00 MB" in section and "nox -s bench-whole-history" in render_section(None)


def test_whole_history_on_the_real_lock_history_never_costs_more_than_before() -> None:
    """The model on the shared lock history (absent from a user's clone: skipped there): a
    step that changes nothing costs nothing, and today's final stage never re-pushes more than
    the previous release's."""
    from benchmarks.run import HISTORY_ARCHIVE
    from benchmarks.whole_history import measure

    if not HISTORY_ARCHIVE.exists():
        pytest.skip(f"the shared lock history is absent ({HISTORY_ARCHIVE}): run in CI")
    import tempfile

    with tempfile.TemporaryDirectory() as scratch:
        data = measure(Path(scratch))
    assert data is not None and len(data["pairs"]) >= 20
    for pair in data["pairs"]:
        assert pair["today"] <= pair["previous"], pair
        if not pair["closure_changed"]:
            assert pair["slices"] == pair["today"] == pair["previous"] == 0, pair
    assert data["summary"]["today_bytes"] < data["summary"]["previous_bytes"]
