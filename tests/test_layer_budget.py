"""The layer budget (`layers.max-image-layers`): the planner fits every variant's slices under
it, fewer and larger groups first and the largest packages keeping their own slices, reports
what that cost in re-push terms, and refuses in one line when even the fewest slices do not
fit. Properties over the planner (the budget disabled is the oracle), then `invoke plan` on
SkyRL's real lock (the skyrl profile), whose fresh megatron packing needs over 100 layers."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpurl_tasks.config import Layout, SizeBasis, load_config
from gpurl_tasks.dockerfile.generate import fitted_plans, layer_count
from gpurl_tasks.plan.layerlimit import TooManyLayers
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.planner import GROUP, OWN_GROUP, assignment_of, group_label, group_of
from gpurl_tasks.plan.profile import plan_profile
from gpurl_tasks.plan.sizes import PackageSize
from gpurl_tasks.plan.variants import VariantInput, plan_images
from tests.conftest import REPO_ROOT
from tests.support.planning import plan_one
from tests.support.tasks_runner import run_task

MB = 10**6
BASIS: SizeBasis = "compressed"
_GROUPED = re.compile(rf"({GROUP}|{OWN_GROUP})-\d\d")


def _size(name: str, weight: int) -> PackageSize:
    return PackageSize(name=name, version="1", compressed_bytes=weight, installed_bytes=None,
                       source="lock", artifact=None)


@st.composite
def _profiles(draw: st.DrawFn) -> tuple[list[VariantInput], int]:
    """One or two variants (common packages shared, each with its own) and a cap no package
    exceeds."""
    cap = draw(st.integers(60 * MB, 400 * MB))
    weight = st.integers(1, 60 * MB)
    common = draw(st.lists(weight, min_size=1, max_size=50))
    owns = draw(st.lists(st.lists(weight, max_size=25), min_size=1, max_size=2))
    variants = [VariantInput(name=f"v{v}", sizes=(
        *(_size(f"c{i:03d}", w) for i, w in enumerate(common)),
        *(_size(f"v{v}-{i:03d}", w) for i, w in enumerate(own))))
        for v, own in enumerate(owns)]
    return variants, cap


def _plan(variants: list[VariantInput], cap: int, layout: Layout) -> dict[str, Plan]:
    return plan_images(variants, cap=cap, basis=BASIS, layout=layout)


def _most_slices(plans: dict[str, Plan]) -> int:
    return max(len(p.layers) for p in plans.values())


def _own(plan: Plan) -> set[str]:
    """The packages in a slice of their own (not a group)."""
    return {layer.packages[0].name for layer in plan.layers
            if len(layer.packages) == 1 and not _GROUPED.fullmatch(layer.label)}


def _layers(plans: dict[str, Plan]) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    return {name: [(layer.label, layer.names) for layer in plan.layers]
            for name, plan in plans.items()}


_LAYOUT = st.builds(Layout, own_layer=st.integers(5 * MB, 40 * MB), tail_groups=st.integers(1, 32))


@settings(max_examples=80, deadline=None)
@given(profile=_profiles(), layout=_LAYOUT, budget=st.integers(1, 60))
def test_every_image_keeps_the_budget_whenever_the_fewest_slices_fit(
        profile: tuple[list[VariantInput], int], layout: Layout, budget: int) -> None:
    """Each variant's slices stay within the budget whenever its fewest packing (every package
    in one group) fits; every layer under the cap; every package in exactly one slice."""
    variants, cap = profile
    fitted = _plan(variants, cap, dataclasses.replace(layout, max_slices=budget))
    fewest = _plan(variants, cap, dataclasses.replace(layout, own_layer=cap + 1, tail_groups=1))
    for variant in variants:
        plan = fitted[variant.name]
        assert sorted(n for layer in plan.layers for n in layer.names) == \
            sorted(s.name for s in variant.sizes)
        assert all(layer.compressed_bytes <= cap for layer in plan.layers)
    if _most_slices(fewest) <= budget:
        assert _most_slices(fitted) <= budget


@settings(max_examples=80, deadline=None)
@given(profile=_profiles(), layout=_LAYOUT, budget=st.integers(1, 60))
def test_the_largest_packages_keep_their_own_slices_while_the_budget_allows(
        profile: tuple[list[VariantInput], int], layout: Layout, budget: int) -> None:
    """A package loses its own slice only when keeping it (and every heavier one) does not fit
    even with one group; while none has to, the groups fall only as far as they must."""
    variants, cap = profile
    fitted = _plan(variants, cap, dataclasses.replace(layout, max_slices=budget))
    if _most_slices(fitted) > budget:
        return  # nothing fits: the generator refuses the image (tested below)
    free = _plan(variants, cap, layout)
    for variant in variants:
        plan = fitted[variant.name]
        owned = _own(free[variant.name])
        lost = owned - _own(plan)
        weights = {s.name: s.compressed_bytes for s in variant.sizes}
        if not lost:
            continue
        heaviest_lost = max(weights[n] for n in lost)
        # the ones kept are the heaviest: every package heavier than one that lost its slice kept its own
        assert all(n in _own(plan) for n in owned if weights[n] > heaviest_lost)
        # ... and keeping that one as well does not fit, not even with a single group
        keeping = dataclasses.replace(layout, own_layer=heaviest_lost, tail_groups=1)
        assert _most_slices(_plan(variants, cap, keeping)) > budget
    if fitted[variants[0].name].layout.own_layer == layout.own_layer \
            and fitted[variants[0].name].layout.tail_groups < layout.tail_groups:
        more = dataclasses.replace(fitted[variants[0].name].layout, max_slices=None,
                                   tail_groups=fitted[variants[0].name].layout.tail_groups + 1)
        assert _most_slices(_plan(variants, cap, more)) > budget


@settings(max_examples=60, deadline=None)
@given(profile=_profiles(), layout=_LAYOUT, extra=st.integers(0, 20))
def test_a_budget_the_free_packing_meets_changes_nothing(
        profile: tuple[list[VariantInput], int], layout: Layout, extra: int) -> None:
    variants, cap = profile
    free = _plan(variants, cap, layout)
    fitted = _plan(variants, cap, dataclasses.replace(layout, max_slices=_most_slices(free) + extra))
    assert _layers(fitted) == _layers(free)


def test_committed_slices_within_the_budget_keep_the_configured_homes() -> None:
    """Slices committed from a coarser packing (4 groups) fit the budget though a fresh packing
    by the configured 32 groups would not: they are kept, and a new small package goes to its
    group by the configured count, as without a budget."""
    sizes = [*(_size(f"heavy-{i}", 50 * MB) for i in range(5)),
             *(_size(f"small-{i:02d}", MB + i) for i in range(60))]
    layout = Layout(own_layer=20 * MB, tail_groups=32)
    committed = plan_one(sizes, cap=4 * 10**9, layout=dataclasses.replace(layout, tail_groups=4))
    budget = len(committed.layers) + 1
    grown = [*sizes, _size("zz-new", MB)]
    assert len(plan_one(grown, cap=4 * 10**9, layout=layout).layers) > budget  # fresh: over
    kept = plan_one(grown, cap=4 * 10**9, previous=assignment_of(committed),
                    layout=dataclasses.replace(layout, max_slices=budget))
    free = plan_one(grown, cap=4 * 10**9, previous=assignment_of(committed), layout=layout)
    assert [(la.label, la.names) for la in kept.layers] == [(la.label, la.names) for la in free.layers]
    assert next(la.label for la in kept.layers if "zz-new" in la.names) == \
        group_label(group_of("zz-new", 32))
    assert len(kept.layers) <= budget


@settings(max_examples=10, deadline=None)
@given(budget=st.integers(25, 120), own_layer=st.sampled_from([5 * MB, 20 * MB]),
       groups=st.sampled_from([8, 32]))
@example(budget=25, own_layer=5 * MB, groups=32)  # refused: the fewest slices do not fit
@example(budget=100, own_layer=5 * MB, groups=32)  # the team's pressure: over 100 unbudgeted
def test_each_variant_image_keeps_the_budget_whenever_a_plan_is_returned(
        budget: int, own_layer: int, groups: int) -> None:
    """SkyRL's real lock planned afresh as generate plans it: every variant's image, counted
    from its Dockerfile model with the base's layers, is within the budget; a refusal comes
    only when the fewest slices (every package in one group) do not fit either."""
    config = load_config(REPO_ROOT, profile="skyrl", env={}, overrides={
        "layers.max-image-layers": budget, "layers.own-layer": own_layer,
        "layers.tail-groups": groups})
    try:
        plans = fitted_plans(config, repack=True)
    except TooManyLayers:
        fewest = load_config(REPO_ROOT, profile="skyrl", env={}, overrides={
            "layers.max-image-layers": budget, "layers.own-layer": config.layers.cap + 1,
            "layers.tail-groups": 1})
        free = plan_profile(fewest, repack=True)
        assert any(layer_count(fewest.for_variant(v), free[v.name]).total > budget
                   for v in fewest.variants)
        return
    for variant in config.variants:
        count = layer_count(config.for_variant(variant), plans[variant.name])
        assert count.total <= budget and count.budget == budget


def _plan_json(*flags: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = run_task("plan", "--profile", "skyrl", "--repack", "--json", *flags, env=env or {})
    assert done.returncode == 0, done.stderr
    variants: dict[str, Any] = json.loads(done.stdout)["variants"]
    return variants


def _total(plan: Any) -> int:
    return int(plan["image_layers"]["total"])


def _repush(plan: Any) -> int:
    """The bytes a one-package bump re-pushes on average, recomputed from the plan's layers."""
    layers = plan["layers"]
    members = sum(len(layer["packages"]) for layer in layers)
    return sum(len(layer["packages"]) * int(layer["compressed_bytes"]) for layer in layers) // members


def test_the_real_lock_stress_case_keeps_the_budget_and_reports_its_cost() -> None:
    """SkyRL's real lock with own-layer 10 MB: packed freely its megatron image needs over 100
    layers (the team's count: 115 with the base); planned with the default budget, neither
    goes over, and the cost is the one the same plan without the budget would have."""
    env = {"GPURL_LAYERS_OWN_LAYER": "10MB"}
    budgeted = _plan_json(env=env)
    free = _plan_json("--max-image-layers", "120", env=env)  # room for the free packing
    assert max(_total(p) for p in free.values()) > 100
    for name, plan in budgeted.items():
        assert _total(plan) <= 100
        cost = plan["layer_budget"]
        assert cost["max_image_layers"] == 100
        # planned afresh (--repack): as planned is the fresh packing under the budget
        assert cost["repush_bytes_per_bump"] == cost["fresh"]["repush_bytes_per_bump"] == _repush(plan)
        assert cost["unbudgeted"] == {"repush_bytes_per_bump": _repush(free[name]),
                                      "image_layers": _total(free[name]),
                                      "slices": len(free[name]["layers"])}
        assert cost["repush_bytes_per_bump"] >= cost["unbudgeted"]["repush_bytes_per_bump"]


def test_the_flag_and_the_variable_set_the_same_budget() -> None:
    by_flag = _plan_json("--max-image-layers", "70")
    by_env = _plan_json(env={"GPURL_LAYERS_MAX_IMAGE_LAYERS": "70"})
    assert by_flag == by_env
    assert all(_total(p) <= 70 for p in by_flag.values())
    shown = run_task("plan", "--profile", "skyrl", "--repack", "--max-image-layers", "70")
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"budget 70 \(layers.max-image-layers\)", shown.stdout)
    assert re.search(r"layer budget's cost: a bump of one package re-pushes [\d.]+ [kMG]?B on "
                     r"average as planned; packed afresh, [\d.]+ [kMG]?B under the budget and "
                     r"[\d.]+ [kMG]?B without it \(\d+ slices, \d+ image layers", shown.stdout)


def test_a_budget_the_fewest_slices_cannot_meet_is_refused_in_one_line() -> None:
    done = run_task("plan", "--profile", "skyrl", "--max-image-layers", "30")
    assert done.returncode == 2 and not done.stdout
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1
    assert re.search(r"would have \d+ layers .*over the layer budget 30 "
                     r"\(layers.max-image-layers", errors[0]), errors[0]
    assert "raise the cap or the budget" in done.stderr
    as_json = run_task("plan", "--profile", "skyrl", "--max-image-layers", "30", "--json")
    assert as_json.returncode == 2
    assert "raise the cap or the budget" in json.loads(as_json.stdout)["hint"]


def test_a_budget_above_the_ceiling_is_refused() -> None:
    done = run_task("plan", "--profile", "skyrl", env={"GPURL_LAYERS_MAX_IMAGE_LAYERS": "121"})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "layers.max-image-layers" in done.stderr and "from 1 to 120" in done.stderr
