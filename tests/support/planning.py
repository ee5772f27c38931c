"""One image planned through the one planning entry point, for the planner's tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from gpurl_tasks.config import DEFAULT_LAYOUT, Layout, SizeBasis
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.planner import Learn
from gpurl_tasks.plan.sizes import PackageSize
from gpurl_tasks.plan.slices import Assignment, SliceLine
from gpurl_tasks.plan.variants import VariantInput, plan_images

__all__ = ["plan_one"]


def plan_one(sizes: Sequence[PackageSize], *, cap: int, basis: SizeBasis = "compressed",
             sync_flags: tuple[str, ...] = (), local: tuple[str, ...] = (),
             previous: Assignment | None = None, lines: Mapping[str, SliceLine] | None = None,
             learn: Learn | None = None, layout: Layout = DEFAULT_LAYOUT) -> Plan:
    """`plan_images` over one image with these sizes (and its committed slices `previous`)."""
    image = VariantInput(name="image", sizes=tuple(sizes), sync_flags=sync_flags, local=local,
                         lines=lines or {})
    return plan_images([image], cap=cap, basis=basis, learn=learn, layout=layout,
                       previous={image.name: previous} if previous else None)[image.name]
