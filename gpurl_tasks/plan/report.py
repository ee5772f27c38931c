"""Human rendering of a plan: a fixed-width table with a bar against the cap."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpurl_tasks.plan.layerlimit import HARD_LIMIT, BudgetCost, LayerCount
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.values import format_bytes

__all__ = ["PlanView", "PlanViews", "bar", "render_cost", "render_count", "render_plan", "render_steps"]

_BAR_WIDTH = 20


def bar(value: int, cap: int, width: int = _BAR_WIDTH) -> str:
    """`█████░░░` filled in proportion to value/cap; over the cap ends with `!`."""
    filled = min(width, round(width * value / cap)) if cap else width
    return "█" * filled + "░" * (width - filled) + ("!" if value > cap else " ")


def render_plan(plan: Plan, *, biggest: int = 3) -> str:
    head = f"{'layer':>5}  {'pkgs':>4}  {'compressed':>11}  {'installed~':>11}  " \
           f"{'vs cap':<{_BAR_WIDTH + 1}}  biggest packages"
    lines = [head, "-" * len(head)]
    for layer in plan.layers:
        measured = layer.compressed_bytes if plan.basis == "compressed" else layer.installed_bytes
        top = sorted(layer.packages, key=lambda p: (-p.compressed_bytes, p.name))[:biggest]
        names = ", ".join(f"{p.name} {format_bytes(p.compressed_bytes)}" for p in top)
        lines.append(
            f"{layer.index:>5}  {len(layer.packages):>4}  {format_bytes(layer.compressed_bytes):>11}"
            f"  {format_bytes(layer.installed_bytes):>11}  "
            f"{bar(measured, plan.cap_bytes)}"
            f"  {names}"
        )
    largest = max((layer.compressed_bytes for layer in plan.layers), default=0)
    lines += [
        "-" * len(head),
        f"{len(plan.layers)} slice layer(s) for {len(plan.closure)} packages, "
        f"{format_bytes(plan.total_compressed_bytes)} compressed; lower bound "
        f"{plan.lower_bound_layers}; largest {format_bytes(largest)}; cap "
        f"{format_bytes(plan.cap_bytes)} ({plan.basis})",
        f"local (installed with the source by the final sync): {', '.join(plan.local) or 'none'}",
        *([f"shared with every variant: the lowest {plan.shared} slice layer(s) "
           f"({format_bytes(sum(la.compressed_bytes for la in plan.layers[:plan.shared]))})"]
          if plan.shared else []),
        *([f"platform {plan.platform}: shares no slice with the profile's "
           f"{', '.join(plan.apart_from)} image(s) (its slices are its platform's wheels)"]
          if plan.apart_from else []),
        *([f"written on a {plan.platform} builder only (uv builds a package): "
           f"{', '.join(plan.native_slices)}"] if plan.apart_from and plan.native_slices else []),
        *([f"the layer budget's slices: at most {plan.layout.max_slices}; planned with own-layer "
           f"{format_bytes(plan.layout.own_layer)}, {plan.layout.tail_groups} group(s)"]
          if plan.mode == "independent" and plan.layout.max_slices is not None else []),
        f"fingerprint {plan.fingerprint}",
    ]
    return "\n".join(lines)


def render_steps(plan: Plan) -> str:
    """Why each slice sits where it does, and the final sync that checks them."""
    lines = [f"  {layer.name}: {layer.reason}" for layer in plan.layers]
    lines.append(f"then: uv sync {' '.join(plan.final_sync_flags)} (installs the local "
                 "packages; finds every slice's package in place)")
    for p in plan.provided:
        wanted = "; ".join(f"{d} requires {s}" for d, s in p.requirements) or "no specifier"
        lines.append(f"provided by the compiled wheels, never installed from the lock: "
                     f"{p.name} (lock {p.version}; {wanted})")
    lines += plan.outside_lock_notes
    lines += [f"installed without a hash, the lock records none (its index serves none): "
              f"{p.requirement}" + (f" from {p.index}" if p.index else "") for p in plan.unhashed]
    return "\n".join(lines)


def render_count(count: LayerCount) -> str:
    """The image's layer count against the budget and the limit."""
    return (f"image layers: {count.describe()}; budget {count.budget} "
            f"(layers.max-image-layers), Docker/containerd limit {HARD_LIMIT}")


def render_cost(cost: BudgetCost) -> str:
    """What the layer budget cost the image, in re-push terms."""
    return f"layer budget's cost: {cost.describe()}"


@dataclasses.dataclass(frozen=True)
class PlanView:
    """`invoke plan`'s outcome: the table and the slices, or the plan's JSON contract."""

    plan: Plan
    count: LayerCount | None = None
    cost: BudgetCost | None = None
    exit_code: int = 0

    def human(self) -> str:
        tail = "".join(f"\n{line}" for line in (
            render_count(self.count) if self.count else "",
            render_cost(self.cost) if self.cost else "") if line)
        return f"{render_plan(self.plan)}\n{render_steps(self.plan)}{tail}"

    def to_json(self) -> dict[str, Any]:
        body = self.plan.to_json()
        if self.count:
            body["image_layers"] = self.count.to_json()
        if self.cost:
            body["layer_budget"] = self.cost.to_json()
        return body


@dataclasses.dataclass(frozen=True)
class PlanViews:
    """`invoke plan` over a profile's variants: each variant's table, planned together, and
    (when counted) each image's layers."""

    plans: tuple[tuple[str, Plan], ...]
    counts: tuple[LayerCount, ...] = ()
    costs: tuple[BudgetCost, ...] = ()

    def views(self) -> tuple[tuple[str, PlanView], ...]:
        """Each variant's outcome by its name (the task prints them as every per-variant task
        does: `cli.EachVariant`)."""
        names = [name for name, _ in self.plans]
        counts = dict(zip(names, self.counts, strict=False))
        costs = dict(zip(names, self.costs, strict=False))
        return tuple((name, PlanView(plan, counts.get(name), costs.get(name)))
                     for name, plan in self.plans)
