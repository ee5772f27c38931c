"""Section 5: what the layer budget (`layers.max-image-layers`) costs in re-push terms across
SkyRL's real lock history.

Each version is planned as `invoke generate` plans it: the first packed afresh, each next one
re-planned from the previous version's slices (independent layers, cap 4 GB), first without
the budget to count the image's other layers (the base's and the generated recipe's:
`count_layers`), then with the slice budget those leave (`LayerCount.slice_budget`). A bump
re-pushes every slice whose file is not byte-equal to one of the previous build's
(`rebuild_cost.independent_rebuilt`). Each budget's bytes are divided by the bytes of the same
sequence planned without a budget in the same run (the baseline). Two layouts: the config's
default, and own-layer 5 MB, which packs the real lock freely into more than 100 image layers
(the pressure the team's lock is under: 115 layers with the base).

`python -m benchmarks.layer_budget` prints the figures; it reads the lock history from
`../shared/data/skyrl-train-lock-history.tar.xz` (next to the checkout) and the two shared
locks, and says so when they are absent.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import LockInput
from benchmarks.rebuild_cost import (
    floor_bytes,
    independent_rebuilt,
    lock_digest,
    plan_version,
    recipe_config,
)
from gpurl_tasks.config import DEFAULT_LAYOUT, Config, Layout
from gpurl_tasks.dockerfile.layers import builder_of, composes, count_layers
from gpurl_tasks.dockerfile.recipe import render_recipe
from gpurl_tasks.plan.layerlimit import LayerCount
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.wheelglobs import provided_names

__all__ = ["BUDGETS", "CAP", "LAYOUTS", "BudgetRun", "budget_runs", "image_count", "main",
           "render_section"]

MB = 10**6
CAP = 4 * 10**9
BUDGETS: tuple[int | None, ...] = (None, 100, 70)  # None: the baseline; 100: the default
LAYOUTS = {"default (own-layer 20 MB, 32 groups)": DEFAULT_LAYOUT,
           "own-layer 5 MB (over 100 layers unbudgeted)": Layout(own_layer=5 * MB)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class BudgetRun:
    """One sequence planned under one budget (None: none)."""

    layout: str
    budget: int | None
    bumps: int
    repushed: int  # bytes re-pushed over every bump of the sequence
    floor: int  # bytes of the packages that changed (what any layering must push)
    most_layers: int  # the largest image of the sequence, in layers
    most_slices: int
    mean_repush_per_bump: int  # Plan.repush_per_bump (one package moves), mean over versions

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def image_count(config: Config, plan: Plan, item: LockInput, budget: int | None) -> LayerCount:
    """The image's layers for `plan`, counted from the generated recipe as `generate` counts
    them, against `budget` (None: the count's default ceiling)."""
    count = count_layers(render_recipe(config, plan, lock_sha256=lock_digest(item.lock)),
                         base_layers=config.build.base_image_layers, builder=builder_of(config),
                         composed=composes(config))
    return count if budget is None else dataclasses.replace(count, budget=budget)


def _sequence(versions: Sequence[LockInput], layout: Layout, budget: int | None,
              config: Config, provided: tuple[str, ...]) -> tuple[list[Plan], list[LayerCount]]:
    """Every version planned as generate plans it, each from the previous one's slices."""
    plans: list[Plan] = []
    counts: list[LayerCount] = []
    for item in versions:
        previous = plans[-1] if plans else None
        plan = plan_version(item, CAP, previous=previous, provided=provided, layout=layout)
        if budget is not None:
            slices = image_count(config, plan, item, budget).slice_budget()
            plan = plan_version(item, CAP, previous=previous, provided=provided,
                                layout=dataclasses.replace(layout, max_slices=slices))
        plans.append(plan)
        counts.append(image_count(config, plan, item, budget))
    return plans, counts


def budget_runs(versions: Sequence[LockInput], *, budgets: Sequence[int | None] = BUDGETS,
                layouts: dict[str, Layout] | None = None) -> list[BudgetRun]:
    """Each layout's sequence under each budget."""
    config = recipe_config()
    provided = provided_names(config.build.wheel_globs)
    runs = []
    for label, layout in (layouts or LAYOUTS).items():
        for budget in budgets:
            plans, counts = _sequence(versions, layout, budget, config, provided)
            pairs = list(itertools.pairwise(plans))
            runs.append(BudgetRun(
                layout=label, budget=budget, bumps=len(pairs),
                repushed=sum(independent_rebuilt(old, new)[1] for old, new in pairs),
                floor=sum(floor_bytes(old, new)[1] for old, new in pairs),
                most_layers=max(c.total for c in counts),
                most_slices=max(len(p.layers) for p in plans),
                mean_repush_per_bump=sum(p.repush_per_bump for p in plans) // len(plans)))
    return runs


def _gb(n: int) -> str:
    return f"{n / 10**9:.2f} GB"


def render_section(data: dict[str, Any] | None) -> list[str]:
    """The report's section 5 from `budget_runs`' JSON (None: the inputs were absent)."""
    out = ["## 5. The layer budget's re-push cost", ""]
    if not data:
        return [*out, "Not computed: the lock history or the real locks are absent "
                      "(`../shared/data/`).", ""]
    out += [data["note"], "",
            "| layout | budget | most image layers | most slices | re-pushed over the history "
                "| vs no budget | per bump, one package (mean) | vs no budget | floor |",
            "|---|---|---|---|---|---|---|---|---|"]
    base = {r["layout"]: r for r in data["runs"] if r["budget"] is None}
    for r in data["runs"]:
        free = base[r["layout"]]
        ratio = r["repushed"] / free["repushed"] if free["repushed"] else 1.0
        per = (r["mean_repush_per_bump"] / free["mean_repush_per_bump"]
               if free["mean_repush_per_bump"] else 1.0)
        out.append(f"| {r['layout']} | {r['budget'] or 'none'} | {r['most_layers']} | "
                   f"{r['most_slices']} | {_gb(r['repushed'])} | x{ratio:.2f} | "
                   f"{r['mean_repush_per_bump'] / MB:.1f} MB | x{per:.2f} | {_gb(r['floor'])} |")
    return [*out, ""]


def measure(scratch: Path, *, archive: Path, locks_dir: Path) -> dict[str, Any] | None:
    """The section's data: the lock history in `archive`, then the two shared locks of
    `locks_dir`, or None (and a line on stderr) when they are absent."""
    from benchmarks.common import SKYRL_SIZES, real_lock_paths
    from benchmarks.run import EXTRA, history_versions
    from gpurl_tasks.plan.lock import load_lock
    from gpurl_tasks.plan.sizes import load_size_sources

    sources = load_size_sources(SKYRL_SIZES, None)
    history, _ = history_versions(scratch, sources, archive)
    real = real_lock_paths(locks_dir)
    if not history or not real:
        print(f"layer budget: skipped, {archive} or the shared locks in {locks_dir} are absent",
              file=sys.stderr)
        return None
    versions = [*history, *(LockInput(label=c, lock=load_lock(p), sources=history[0].sources,
                                      extras=(EXTRA,)) for c, p in real.items())]
    runs = budget_runs(versions)
    note = (f"{len(versions)} versions of SkyRL's lock ({versions[0].label} .. "
            f"{versions[-1].label}, extra `{EXTRA}`), {len(versions) - 1} bumps; the recipe of "
            "the gpu-rl profile (base 20 layers, composed environment). Ratios: against the "
            "same sequence without a budget, measured in this run.")
    return {"note": note, "runs": [r.to_json() for r in runs]}


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks.common import SHARED_LOCKS
    from benchmarks.run import HISTORY_ARCHIVE

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--history", type=Path, default=HISTORY_ARCHIVE,
                        help="the lock history archive")
    parser.add_argument("--locks", type=Path, default=SHARED_LOCKS,
                        help="directory of the real locks")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        data = measure(Path(scratch), archive=args.history, locks_dir=args.locks)
    print(json.dumps(data, indent=2))
    print("\n".join(render_section(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
