"""Fit a profile's plans under the layer budget (pure): plan, count each image's layers, plan
again with the slices that budget leaves.

An image's other layers (its base image's, every instruction of its Dockerfile) count against
layers.max-image-layers, and only the Dockerfile knows them; so the planning is given twice
(`PlanUnder`: every variant's plans, without a slice limit and then under one) and the count
(`CountLayers`: one variant's image with a plan), and this module only orders them. The
caller binds them to the lock and the Dockerfile model (dockerfile/generate.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from gpurl_tasks.config import Config
from gpurl_tasks.plan.layerlimit import BudgetCost, LayerCount, TooManyLayers
from gpurl_tasks.plan.model import Plan

__all__ = ["CountLayers", "Fitted", "PlanUnder", "budget_costs", "check_fits", "fit"]

# Every variant's plan by name, with at most this many slices an image (None: no limit).
PlanUnder = Callable[[int | None], Mapping[str, Plan]]
# The layers one variant's image has with a plan.
CountLayers = Callable[[Config, Plan], LayerCount]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Fitted:
    """A profile's plans fitted under the layer budget, each image's count, and the plans and
    counts of the same planning without the budget (the first pass)."""

    plans: dict[str, Plan]
    counts: dict[str, LayerCount]
    free: dict[str, Plan]
    free_counts: dict[str, LayerCount]


def check_fits(count: LayerCount, *, profile: str) -> None:
    """TooManyLayers when the counted image is over its budget."""
    if not count.fits():
        raise TooManyLayers.of(count, profile=profile)


def fit(variants: Mapping[str, Config], plan: PlanUnder, count: CountLayers) -> Fitted:
    """Every variant's plan fitted under layers.max-image-layers and its image's layer count:
    planned once to learn what the images' other layers leave for slices, then planned with
    that slice budget (the fullest image's: the shared slices make one budget). A variant whose
    second plan differs from its first only in the layout it records keeps the first's count
    (the Dockerfile does not read the layout; rendering is the cost). TooManyLayers when even
    the fitted plan does not fit. `variants`: each variant's config by name."""
    first = dict(plan(None))
    first_counts = {name: count(config, first[name]) for name, config in variants.items()}
    budget = min(c.slice_budget() for c in first_counts.values())
    plans = dict(plan(budget))
    counts = {name: first_counts[name]
              if dataclasses.replace(plans[name], layout=first[name].layout) == first[name]
              else count(config, plans[name]) for name, config in variants.items()}
    for name, layers in counts.items():
        check_fits(layers, profile=variants[name].profile)
    return Fitted(plans=plans, counts=counts, free=first, free_counts=first_counts)


def budget_costs(fitted: Fitted, afresh: Fitted) -> dict[str, BudgetCost]:
    """What the budget cost each image in re-push terms: its plan as `fitted`, and a fresh
    packing under the budget (`afresh`, which may be `fitted` itself) against one without it."""
    return {name: BudgetCost(budget=count.budget, repush_bytes=fitted.plans[name].repush_per_bump,
                             fresh_repush_bytes=afresh.plans[name].repush_per_bump,
                             free_repush_bytes=afresh.free[name].repush_per_bump,
                             free_layers=afresh.free_counts[name].total,
                             free_slices=len(afresh.free[name].layers))
            for name, count in fitted.counts.items()}
