"""Human rendering of a plan: a fixed-width table with a bar against the cap."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpurl_tasks.plan.model import Plan
from gpurl_tasks.units import format_bytes

__all__ = ["PlanView", "bar", "render_plan", "render_steps"]

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
        f"{len(plan.layers)} sync layer(s) for {len(plan.closure)} packages, "
        f"{format_bytes(plan.total_compressed_bytes)} compressed; lower bound "
        f"{plan.lower_bound_layers}; largest {format_bytes(largest)}; cap "
        f"{format_bytes(plan.cap_bytes)} ({plan.basis})",
        f"local (installed with the source after the chain): {', '.join(plan.local) or 'none'}",
        f"fingerprint {plan.fingerprint}",
    ]
    return "\n".join(lines)


def render_steps(plan: Plan) -> str:
    """The sync chain in words: the flags every step shares, and what each step defers."""
    lines = [f"every step: uv sync {' '.join(plan.sync_flags)}"]
    for i, step in enumerate(plan.steps):
        deferred = len(step.no_install_package)
        count = len(plan.layers[i].packages) if i < len(plan.layers) else 0
        lines.append(f"  step {i}: installs layer {i} ({count} package{'s' * (count != 1)}); "
                     + (f"defers {deferred} package{'s' * (deferred != 1)} of later layers "
                        "(--no-install-package)" if deferred else "excludes nothing"))
    return "\n".join(lines)


@dataclasses.dataclass(frozen=True)
class PlanView:
    """`invoke plan`'s outcome: the table and the chain, or the plan's JSON contract."""

    plan: Plan
    exit_code: int = 0

    def human(self) -> str:
        return f"{render_plan(self.plan)}\n{render_steps(self.plan)}"

    def to_json(self) -> dict[str, Any]:
        return self.plan.to_json()
