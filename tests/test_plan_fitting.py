"""plan/fitting.py orders the planning and the count: plan, count, plan under the slice budget
the fullest image leaves, count what changed, refuse what still does not fit. The planner
and the count are given functions here (test_layer_budget runs them for real: the lock and
the Dockerfile model); these tests pin the order and what each pass is given."""

from __future__ import annotations

import dataclasses

import pytest

from gpurl_tasks.config import DEFAULT_LAYOUT, Config, Layout, load_config
from gpurl_tasks.plan.fitting import CountLayers, fit
from gpurl_tasks.plan.layerlimit import LayerCount, TooManyLayers
from gpurl_tasks.plan.model import Plan
from tests.conftest import REPO_ROOT

CONFIG = load_config(REPO_ROOT, profile="demo", env={})
OTHERS = {"small": 20, "big": 60}  # each image's layers besides its slices


def _plan(slices: int, layout: Layout = DEFAULT_LAYOUT) -> Plan:
    """A plan that stands for `slices` slices (its lower bound carries the number)."""
    return Plan(cap_bytes=1, basis="compressed", sync_flags=(), layers=(), local=(),
                lower_bound_layers=slices, layout=layout)


def _count(counted: list[tuple[str, int]], budget: int = 100) -> CountLayers:
    def count(config: Config, plan: Plan) -> LayerCount:
        name = config.variant.name
        counted.append((name, plan.lower_bound_layers))
        return LayerCount(variant=name, base=0, instructions=OTHERS[name] + plan.lower_bound_layers,
                          slices=plan.lower_bound_layers, per_slice=1, builder="docker",
                          budget=budget)
    return count


VARIANTS = {name: dataclasses.replace(CONFIG, variant=dataclasses.replace(CONFIG.variant, name=name))
            for name in OTHERS}


def test_the_second_pass_plans_under_the_fullest_images_slice_budget() -> None:
    asked: list[int | None] = []

    def plan(budget: int | None) -> dict[str, Plan]:
        asked.append(budget)
        return {name: _plan(50 if budget is None else budget) for name in OTHERS}

    counted: list[tuple[str, int]] = []
    fitted = fit(VARIANTS, plan, _count(counted))
    assert asked == [None, 40]  # big: 100 - 60 others
    assert {n: c.total for n, c in fitted.counts.items()} == {"small": 60, "big": 100}
    assert {n: p.lower_bound_layers for n, p in fitted.free.items()} == {"small": 50, "big": 50}
    assert {n: c.total for n, c in fitted.free_counts.items()} == {"small": 70, "big": 110}
    assert counted == [("small", 50), ("big", 50), ("small", 40), ("big", 40)]


def test_a_plan_that_differs_only_in_its_layout_keeps_its_first_count() -> None:
    """Re-planned to the same slices under a fitted layout: not counted again."""
    def plan(budget: int | None) -> dict[str, Plan]:
        return {name: _plan(10, Layout(max_slices=budget)) for name in OTHERS}

    counted: list[tuple[str, int]] = []
    fitted = fit(VARIANTS, plan, _count(counted))
    assert counted == [("small", 10), ("big", 10)]
    assert fitted.plans["big"].layout.max_slices == 40


def test_an_image_over_its_budget_after_fitting_is_refused() -> None:
    counted: list[tuple[str, int]] = []
    with pytest.raises(TooManyLayers, match="profile 'demo' variant 'big' would have 110 layers"):
        fit(VARIANTS, lambda budget: {name: _plan(50) for name in OTHERS}, _count(counted))
