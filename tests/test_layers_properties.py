"""Invariants of the layer plan over generated locks (markers, extras, forks, sizes): slices
partition the closure under the cap, re-planning is stable, a bump edits one line."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.config import PythonSelection, TargetSpec
from gpurl_tasks.plan.lock import install_closure, parse_lock
from gpurl_tasks.plan.model import Plan, sync_selection_flags
from gpurl_tasks.plan.planner import assignment_of, plan_layers
from gpurl_tasks.plan.sizes import PackageSize, SizeSources, package_sizes
from gpurl_tasks.plan.slices import SliceLine, render_slice
from gpurl_tasks.plan.target import target_tags
from tests.support.locks import lock_texts

TARGET = TargetSpec()
selections = st.builds(
    PythonSelection,
    extras=st.lists(st.sampled_from(["x", "y"]), unique=True).map(tuple),
    no_dev=st.booleans(),
)


def _plan(text: str, selection: PythonSelection, cap: int) -> tuple[Plan, list[PackageSize]]:
    closure = install_closure(parse_lock(text), TARGET, selection)
    sizes = package_sizes(closure.packages, target_tags(TARGET), SizeSources())
    flags = sync_selection_flags(selection, local_flags=("--no-install-project",))
    return plan_layers(sizes, cap=cap, basis="compressed", sync_flags=flags), sizes


def _slices(plan: Plan) -> dict[str, str]:
    """The slice files the generator would write for the plan."""
    return {layer.name: render_slice(SliceLine(requirement=p.requirement, index=p.index,
                                               hashed=p.hashed) for p in layer.packages)
            for layer in plan.layers}


def _sizes(weights: list[int]) -> list[PackageSize]:
    return [PackageSize(name=f"p{i:03d}", version="1", compressed_bytes=w, installed_bytes=None,
                        source="lock", artifact=None) for i, w in enumerate(weights)]


@settings(max_examples=150, deadline=None)
@given(lock_texts(), selections, st.integers(1000, 5000))
def test_slices_partition_the_closure_under_the_cap(text: str, selection: PythonSelection,
                                                    cap: int) -> None:
    plan, sizes = _plan(text, selection, cap)
    installed_by: dict[str, int] = {}
    for layer in plan.layers:
        for name in layer.names:
            assert name not in installed_by, f"{name} in two slices"
            installed_by[name] = layer.index
    assert set(installed_by) == {s.name for s in sizes}  # union = closure: the sync adds nothing
    assert all(layer.compressed_bytes <= cap for layer in plan.layers)
    assert len(plan.layers) >= plan.lower_bound_layers or not sizes
    assert len({layer.name for layer in plan.layers}) == len(plan.layers)


@settings(max_examples=75, deadline=None)
@given(lock_texts(), selections, st.integers(1000, 5000), st.randoms())
def test_plan_is_deterministic_and_order_independent(text: str, selection: PythonSelection,
                                                     cap: int, rng: random.Random) -> None:
    plan, sizes = _plan(text, selection, cap)
    again, _ = _plan(text, selection, cap)
    assert again == plan and again.fingerprint == plan.fingerprint
    shuffled = list(sizes)
    rng.shuffle(shuffled)
    assert plan_layers(shuffled, cap=cap, basis="compressed", sync_flags=plan.sync_flags) == plan


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=60), st.integers(10_000, 40_000))
def test_replanning_an_unchanged_closure_gives_identical_slices(weights: list[int],
                                                                cap: int) -> None:
    sizes = _sizes(weights)
    first = plan_layers(sizes, cap=cap, basis="compressed", sync_flags=())
    again = plan_layers(sizes, cap=cap, basis="compressed", sync_flags=(),
                        previous=assignment_of(first))
    assert _slices(again) == _slices(first)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=2, max_size=60), st.integers(10_000, 40_000),
       st.data())
def test_a_version_bump_edits_one_line_of_one_slice(weights: list[int], cap: int,
                                                    data: st.DataObject) -> None:
    """Unless the cap forces a split, or the bump is in the lowest slice (then every layer is
    rebuilt anyway and a fresh packing costs nothing), one line of one slice changes."""
    sizes = _sizes(weights)
    first = plan_layers(sizes, cap=cap, basis="compressed", sync_flags=())
    i = data.draw(st.integers(0, len(sizes) - 1))
    grown = data.draw(st.integers(1, 10_000))
    bumped = [s if k != i else PackageSize(name=s.name, version="2", compressed_bytes=grown,
                                           installed_bytes=None, source="lock", artifact=None)
              for k, s in enumerate(sizes)]
    second = plan_layers(bumped, cap=cap, basis="compressed", sync_flags=(),
                         previous=assignment_of(first))
    assert all(layer.compressed_bytes <= cap for layer in second.layers)
    before, after = _slices(first), _slices(second)
    home = next(layer for layer in first.layers if sizes[i].name in layer.names)
    lowest = home.index == 0  # every layer is rebuilt anyway: the planner may pack afresh
    if home.compressed_bytes - sizes[i].compressed_bytes + grown <= cap and not lowest:
        changed = [name for name in after if before.get(name) != after[name]]
        assert changed == [home.name] and set(before) == set(after)
        diff = set(before[home.name].splitlines()) ^ set(after[home.name].splitlines())
        assert diff == {f"{sizes[i].name}==1", f"{sizes[i].name}==2"}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=60), st.integers(10_000, 40_000))
def test_layer_count_bound(weights: list[int], cap: int) -> None:
    """LPT opens bucket k+1 only when all k hold more than cap - largest; the light tail adds one
    layer at most: never more than floor(total / (cap - largest)) + 2 layers."""
    plan = plan_layers(_sizes(weights), cap=cap, basis="compressed", sync_flags=())
    largest = max(weights)
    if largest < cap:
        assert len(plan.layers) <= sum(weights) // (cap - largest) + 2
    assert len(plan.layers) >= plan.lower_bound_layers
