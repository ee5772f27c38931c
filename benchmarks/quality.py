"""Section 2: how good the planner's layers are, against three simple ways to split the closure.

Baselines, computed from the same closure sizes:
- single sync: the whole closure in one layer (what a plain `uv sync` produces);
- per-package: one layer per package above 100 MB, everything else in one layer;
- first-fit: packages in lock order (uv.lock lists them by name) into the first layer with room.
A package larger than the cap cannot be placed by any method; the planner refuses such a plan,
so its row says which package made it infeasible instead of showing numbers. "planner,
independent layers" is the planner with the config's default thresholds (more, smaller slices
than the fewest the cap allows: a bump costs only the slices it touches).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any

from gpurl_tasks.config import DEFAULT_LAYOUT, Layout
from gpurl_tasks.errors import PlanError
from gpurl_tasks.plan.sizes import PackageSize
from gpurl_tasks.plan.variants import VariantInput, plan_images
from gpurl_tasks.values import format_bytes

__all__ = [
    "HEAVY_THRESHOLD",
    "INDEPENDENT",
    "QualityRow",
    "first_fit_lock_order",
    "layer_stats",
    "per_heavy_package",
    "quality_rows",
    "single_sync",
]

HEAVY_THRESHOLD = 100 * 10**6
INDEPENDENT = "planner, independent layers"


@dataclasses.dataclass(frozen=True, kw_only=True)
class QualityRow:
    lock: str
    cap: int
    method: str
    feasible: bool
    note: str
    layers: int
    lower_bound: int
    largest: int
    smallest: int
    over_cap: int  # layers larger than the cap
    spread: float  # largest / smallest layer
    stdev: float  # population standard deviation of layer sizes, bytes

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def single_sync(sizes: Sequence[PackageSize]) -> list[int]:
    return [sum(s.compressed_bytes for s in sizes)]


def per_heavy_package(sizes: Sequence[PackageSize], threshold: int = HEAVY_THRESHOLD) -> list[int]:
    """One layer per package above the threshold, plus one layer with the rest."""
    heavy = [s.compressed_bytes for s in sizes if s.compressed_bytes > threshold]
    rest = sum(s.compressed_bytes for s in sizes if s.compressed_bytes <= threshold)
    return [*heavy, rest] if rest else heavy


def first_fit_lock_order(sizes: Sequence[PackageSize], cap: int) -> list[int]:
    """First fit in lock (name) order; a package over the cap still gets a layer of its own."""
    loads: list[int] = []
    for size in sorted(sizes, key=lambda s: s.name):
        for i, load in enumerate(loads):
            if load + size.compressed_bytes <= cap:
                loads[i] += size.compressed_bytes
                break
        else:
            loads.append(size.compressed_bytes)
    return loads


def layer_stats(loads: Sequence[int], *, lock: str, cap: int, method: str, total: int,
                note: str = "") -> QualityRow:
    """Summary of one split: count vs ceil(total/cap), largest vs cap, spread."""
    over = sum(1 for load in loads if load > cap)
    smallest = min(loads)
    return QualityRow(
        lock=lock, cap=cap, method=method, feasible=over == 0,
        note=note or (f"{over} layer(s) over the cap" if over else ""),
        layers=len(loads), lower_bound=max(1, math.ceil(total / cap)), largest=max(loads),
        smallest=smallest, over_cap=over, spread=max(loads) / smallest if smallest else math.inf,
        stdev=statistics.pstdev(loads) if len(loads) > 1 else 0.0)


def _infeasible(sizes: Sequence[PackageSize], *, lock: str, cap: int, total: int,
                method: str = "planner") -> QualityRow:
    too_big = sorted((s for s in sizes if s.compressed_bytes > cap), key=lambda s: -s.compressed_bytes)
    names = ", ".join(f"{s.name} ({format_bytes(s.compressed_bytes)})" for s in too_big)
    return QualityRow(lock=lock, cap=cap, method=method, feasible=False,
                      note=f"infeasible: package {names} is larger than the cap",
                      layers=0, lower_bound=max(1, math.ceil(total / cap)), largest=0, smallest=0,
                      over_cap=0, spread=0.0, stdev=0.0)


def quality_rows(sizes: Sequence[PackageSize], *, lock: str, cap: int,
                 sync_flags: tuple[str, ...] = ()) -> list[QualityRow]:
    """The planner (the config's default thresholds) and the three baselines for one closure
    and cap."""
    total = sum(s.compressed_bytes for s in sizes)

    def planned(method: str, layout: Layout) -> QualityRow:
        try:
            one = VariantInput(name="image", sizes=tuple(sizes), sync_flags=sync_flags)
            plan = plan_images([one], cap=cap, basis="compressed", layout=layout)[one.name]
        except PlanError:
            return _infeasible(sizes, lock=lock, cap=cap, total=total, method=method)
        return layer_stats([layer.compressed_bytes for layer in plan.layers], lock=lock, cap=cap,
                           method=method, total=total)

    return [
        planned(INDEPENDENT, DEFAULT_LAYOUT),
        layer_stats(single_sync(sizes), lock=lock, cap=cap, method="single sync", total=total),
        layer_stats(per_heavy_package(sizes), lock=lock, cap=cap, method="one per package >100 MB",
                    total=total),
        layer_stats(first_fit_lock_order(sizes, cap), lock=lock, cap=cap,
                    method="first-fit, lock order", total=total),
    ]
