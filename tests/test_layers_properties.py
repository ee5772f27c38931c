"""Invariants of the layer plan over generated locks (markers, extras, forks, sizes): slices
partition the closure under the cap, re-planning is stable, a bump edits one line."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.config import Layout, PythonSelection, TargetSpec
from gpurl_tasks.errors import PlanError
from gpurl_tasks.plan.lock import install_closure, parse_lock
from gpurl_tasks.plan.model import Layer, Plan, sync_selection_flags
from gpurl_tasks.plan.planner import (
    GROUP,
    assemble,
    assignment_of,
    group_label,
    group_of,
    independent_buckets,
)
from gpurl_tasks.plan.sizes import PackageSize, SizeSources, package_sizes
from gpurl_tasks.plan.slices import Assignment, SliceLine, render_slice
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.variants import VariantInput, plan_images
from tests.support.locks import lock_texts
from tests.support.planning import plan_one

TARGET = TargetSpec()
LAYOUT = Layout(mode="independent", own_layer=3000, tail_groups=4)
selections = st.builds(
    PythonSelection,
    extras=st.lists(st.sampled_from(["x", "y"]), unique=True).map(tuple),
    no_dev=st.booleans(),
)


def _plan(text: str, selection: PythonSelection, cap: int,
          layout: Layout) -> tuple[Plan, list[PackageSize]]:
    closure = install_closure(parse_lock(text), TARGET, selection)
    sizes = package_sizes(closure.packages, target_tags(TARGET), SizeSources())
    flags = sync_selection_flags(selection, local_flags=("--no-install-project",))
    return plan_one(sizes, cap=cap, basis="compressed", sync_flags=flags, layout=layout), sizes


def _slices(plan: Plan) -> dict[str, str]:
    """The slice files the generator would write for the plan."""
    return {layer.name: render_slice(SliceLine(requirement=p.requirement, index=p.index,
                                               hashed=p.hashed) for p in layer.packages)
            for layer in plan.layers}


def _sizes(weights: list[int]) -> list[PackageSize]:
    return [PackageSize(name=f"p{i:03d}", version="1", compressed_bytes=w, installed_bytes=None,
                        source="lock", artifact=None) for i, w in enumerate(weights)]


@settings(max_examples=100, deadline=None)
@given(lock_texts(), selections, st.integers(1000, 5000))
def test_slices_partition_the_closure_under_the_cap(text: str, selection: PythonSelection,
                                                    cap: int) -> None:
    plan, sizes = _plan(text, selection, cap, LAYOUT)
    installed_by: dict[str, int] = {}
    for layer in plan.layers:
        for name in layer.names:
            assert name not in installed_by, f"{name} in two slices"
            installed_by[name] = layer.index
    assert set(installed_by) == {s.name for s in sizes}  # union = closure: the sync adds nothing
    assert all(layer.compressed_bytes <= cap for layer in plan.layers)
    assert len(plan.layers) >= plan.lower_bound_layers or not sizes
    assert len({layer.name for layer in plan.layers}) == len(plan.layers)


@settings(max_examples=60, deadline=None)
@given(lock_texts(), selections, st.integers(1000, 5000))
def test_one_image_is_the_packing_of_the_whole_closure(text: str, selection: PythonSelection,
                                                       cap: int) -> None:
    """One image is the variants path with nothing shared: no shared slices, and its whole
    closure packed as a profile's (`group-NN`, every group), not split into a common and an
    own part."""
    plan, sizes = _plan(text, selection, cap, LAYOUT)
    buckets = independent_buckets(sorted(sizes, key=lambda s: s.name), cap, "compressed", LAYOUT,
                                  {}, stem=GROUP, groups=LAYOUT.tail_groups, taken=set())
    assert plan.shared == 0
    assert plan == assemble(buckets, sizes, kept=False, cap=cap, basis="compressed",
                            sync_flags=plan.sync_flags, local=(), provided=(), history=0,
                            lines={}, layout=LAYOUT)


@settings(max_examples=50, deadline=None)
@given(lock_texts(), selections, st.integers(1000, 5000), st.randoms())
def test_plan_is_deterministic_and_order_independent(text: str, selection: PythonSelection,
                                                     cap: int, rng: random.Random) -> None:
    layout = LAYOUT
    plan, sizes = _plan(text, selection, cap, layout)
    again, _ = _plan(text, selection, cap, layout)
    assert again == plan and again.fingerprint == plan.fingerprint
    shuffled = list(sizes)
    rng.shuffle(shuffled)
    assert plan_one(shuffled, cap=cap, basis="compressed", sync_flags=plan.sync_flags,
                    layout=layout) == plan


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=60), st.integers(10_000, 40_000))
def test_replanning_an_unchanged_closure_gives_identical_slices(weights: list[int],
                                                                cap: int) -> None:
    layout = LAYOUT
    sizes = _sizes(weights)
    first = plan_one(sizes, cap=cap, basis="compressed", sync_flags=(), layout=layout)
    again = plan_one(sizes, cap=cap, basis="compressed", sync_flags=(),
                     previous=assignment_of(first), layout=layout)
    assert _slices(again) == _slices(first)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=2, max_size=60), st.integers(10_000, 40_000),
       st.data())
def test_a_version_bump_edits_one_line_of_one_slice(weights: list[int], cap: int,
                                                    data: st.DataObject) -> None:
    """Unless the cap forces a split, one line of one slice changes: the planner never
    repacks by itself."""
    layout = LAYOUT
    sizes = _sizes(weights)
    first = plan_one(sizes, cap=cap, basis="compressed", sync_flags=(), layout=layout)
    i = data.draw(st.integers(0, len(sizes) - 1))
    grown = data.draw(st.integers(1, 10_000))
    bumped = [s if k != i else PackageSize(name=s.name, version="2", compressed_bytes=grown,
                                           installed_bytes=None, source="lock", artifact=None)
              for k, s in enumerate(sizes)]
    second = plan_one(bumped, cap=cap, basis="compressed", sync_flags=(),
                      previous=assignment_of(first), layout=layout)
    assert all(layer.compressed_bytes <= cap for layer in second.layers)
    before, after = _slices(first), _slices(second)
    home = next(layer for layer in first.layers if sizes[i].name in layer.names)
    if home.compressed_bytes - sizes[i].compressed_bytes + grown <= cap:
        changed = [name for name in after if before.get(name) != after[name]]
        assert changed == [home.name] and set(before) == set(after)
        diff = set(before[home.name].splitlines()) ^ set(after[home.name].splitlines())
        assert diff == {f"{sizes[i].name}==1", f"{sizes[i].name}==2"}


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=80), st.integers(10_000, 40_000),
       st.integers(1, 12))
def test_independent_layers_own_slices_groups_and_count_bound(weights: list[int], cap: int,
                                                              groups: int) -> None:
    """A package of at least own-layer alone in its slice, each other in its hash group (or a
    split of it); no more slices than own packages + groups + the splits the cap forces."""
    own_layer = cap // 4
    layout = Layout(mode="independent", own_layer=own_layer, tail_groups=groups)
    plan = plan_one(_sizes(weights), cap=cap, basis="compressed", sync_flags=(), layout=layout)
    own = [w for w in weights if w >= own_layer]
    rest = sum(w for w in weights if w < own_layer)
    assert len(plan.layers) <= len(own) + groups + math.ceil(2 * rest / cap)
    grouped: dict[int, set[str]] = {}
    for layer in plan.layers:
        assert layer.compressed_bytes <= cap
        label = layer.label
        for p in layer.packages:
            if p.compressed_bytes >= own_layer:
                assert layer.names == (p.name,) and label == p.name
            else:
                grouped.setdefault(group_of(p.name, groups), set()).add(label)
    for number, labels in grouped.items():  # a group's first part keeps the group's label
        assert group_label(number) in labels


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=2, max_size=60), st.integers(10_000, 40_000),
       st.data())
def test_independent_replan_keeps_every_package_and_places_new_ones_by_rule(
        weights: list[int], cap: int, data: st.DataObject) -> None:
    """A bump that removes some packages, adds some and re-versions some: every package still
    in the closure keeps its slice label, and a new one goes to its own slice or its group."""
    layout = Layout(mode="independent", own_layer=cap // 4, tail_groups=data.draw(st.integers(1, 8)))
    sizes = _sizes(weights)
    first = plan_one(sizes, cap=cap, basis="compressed", sync_flags=(), layout=layout)
    removed = set(data.draw(st.lists(st.sampled_from([s.name for s in sizes]), unique=True,
                                     max_size=len(sizes) - 1)))
    added = [PackageSize(name=f"new{i:02d}", version="1", compressed_bytes=w, installed_bytes=None,
                         source="lock", artifact=None)
             for i, w in enumerate(data.draw(st.lists(st.integers(1, 10_000), max_size=10)))]
    kept = [s for s in sizes if s.name not in removed]
    second = plan_one([*kept, *added], cap=cap, basis="compressed", sync_flags=(),
                      previous=assignment_of(first), layout=layout)
    before = {p.name: layer.label for layer in first.layers for p in layer.packages}
    after = {p.name: layer.label for layer in second.layers for p in layer.packages}
    assert set(after) == {s.name for s in [*kept, *added]}
    assert all(layer.compressed_bytes <= cap for layer in second.layers)
    labels = [layer.label for layer in second.layers]
    assert len(set(labels)) == len(labels)
    rule = {s.name: s.name if s.compressed_bytes >= layout.own_layer
            else group_label(group_of(s.name, layout.tail_groups)) for s in added}
    split_off = set(labels) - set(before.values()) - set(rule.values())  # parts of a split slice
    for s in kept:
        assert after[s.name] == before[s.name] or after[s.name] in split_off
    for s in added:
        assert after[s.name] == rule[s.name] or after[s.name] in split_off


@pytest.mark.parametrize("groups", [0, 100])
def test_independent_groups_out_of_range_are_a_plan_error(groups: int) -> None:
    with pytest.raises(PlanError, match="tail-groups"):
        plan_one(_sizes([1, 2]), cap=10, basis="compressed", sync_flags=(),
                 layout=Layout(mode="independent", tail_groups=groups))


def _variant(name: str, sizes: list[PackageSize]) -> VariantInput:
    return VariantInput(name=name, sizes=tuple(sizes), sync_flags=(), local=(), provided=(),
                        lines={})


def _assignments(plans: dict[str, Plan]) -> tuple[Assignment, dict[str, Assignment]]:
    """What the committed shared and per-variant slice directories would hold."""
    def part(plan: Plan, layers: tuple[Layer, ...]) -> Assignment:
        return assignment_of(dataclasses.replace(plan, layers=layers))
    first = next(iter(plans.values()))
    shared = part(first, first.layers[:first.shared])
    return shared, {name: part(p, p.layers[p.shared:]) for name, p in plans.items()}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=2, max_size=40), st.integers(10_000, 40_000),
       st.data())
def test_independent_variants_share_the_common_packages_and_replan_stably(
        weights: list[int], cap: int, data: st.DataObject) -> None:
    layout = Layout(mode="independent", own_layer=cap // 4, tail_groups=data.draw(st.integers(1, 8)))
    sizes = _sizes(weights)
    only_b = set(data.draw(st.lists(st.sampled_from([s.name for s in sizes]), unique=True,
                                    max_size=len(sizes) - 1)))
    a = [s for s in sizes if s.name not in only_b]  # a's packages are all shared: none of its own
    plans = plan_images([_variant("a", a), _variant("b", sizes)], cap=cap, basis="compressed",
                        layout=layout)
    common = {s.name for s in a}
    low = [[(layer.name, layer.names) for layer in p.layers[:p.shared]] for p in plans.values()]
    assert low[0] == low[1]
    assert {n for _, names in low[0] for n in names} == common
    assert len(plans["a"].layers) == plans["a"].shared
    # bump a common package: every package keeps its slice, no fresh packing
    i = data.draw(st.sampled_from(sorted(common)))
    bumped = [PackageSize(name=s.name, version="2" if s.name == i else "1",
                          compressed_bytes=s.compressed_bytes, installed_bytes=None,
                          source="lock", artifact=None) for s in sizes]
    shared, own = _assignments(plans)
    again = plan_images([_variant("a", [s for s in bumped if s.name in common]),
                         _variant("b", bumped)], cap=cap, basis="compressed", layout=layout,
                        shared=shared, previous=own)
    for name in ("a", "b"):
        where = {p: layer.name for layer in plans[name].layers for p in layer.names}
        assert {p: layer.name for layer in again[name].layers for p in layer.names} == where
        assert all("kept from the committed slices" in layer.reason for layer in again[name].layers)
