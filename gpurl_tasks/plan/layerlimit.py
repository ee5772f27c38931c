"""How many layers an image may have: the limits (defined here once), a counted image, and
what keeping it under the budget cost.

Docker and containerd stop at about 127 layers (each layer is an overlay lower directory; the
mount fails near 122-127, moby#26380), and containerd's erofs snapshotter mounts about 100
(containerd#12662), so an image over the limit builds and pushes fine and then fails on every
node. `invoke plan` and `invoke generate` fit each image under the budget
(`layers.max-image-layers`, 100 by default, at most the planning ceiling: the builders add a
few empty layers the Dockerfile cannot show, such as a cached file-less RUN under kaniko);
`verify-layers` fails a pushed image above the hard limit and warns from the ceiling up.
"""

from __future__ import annotations

import dataclasses

from gpurl_tasks.errors import GpurlError
from gpurl_tasks.values import format_bytes

__all__ = ["CEILING", "HARD_LIMIT", "BudgetCost", "LayerCount", "TooManyLayers"]

HARD_LIMIT = 127  # the most layers Docker and containerd run (moby#26380; apko layering.md)
CEILING = 120  # what a plan may reach: the margin covers the builders' unplanned empty layers


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LayerCount:
    """The layers an image of one variant will have: its base image's own and one per
    layer-making instruction of the target's lineage (for `builder`)."""

    variant: str
    base: int  # the base image's own layers
    instructions: int  # layer-making instructions from the base image up to the target
    slices: int  # slice layers among them (each is `per_slice` instructions)
    per_slice: int
    builder: str  # which builder's rules counted (docker, kaniko, kaniko-fork)
    budget: int = CEILING  # the most layers the image may have (layers.max-image-layers)

    @property
    def total(self) -> int:
        return self.base + self.instructions

    def fits(self) -> bool:
        return self.total <= self.budget

    def slice_budget(self) -> int:
        """The most slices an image with these other layers may have under the budget."""
        others = self.total - self.slices * self.per_slice
        return max(0, (self.budget - others) // max(1, self.per_slice))

    def describe(self) -> str:
        return (f"{self.total} layers (base {self.base} + {self.instructions} instructions, "
                f"{self.slices} slice(s) of {self.per_slice}; {self.builder})")

    def to_json(self) -> dict[str, object]:
        return {"variant": self.variant, "total": self.total, "base": self.base,
                "instructions": self.instructions, "slices": self.slices,
                "per_slice": self.per_slice, "builder": self.builder, "budget": self.budget,
                "slice_budget": self.slice_budget(), "ceiling": CEILING,
                "hard_limit": HARD_LIMIT}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BudgetCost:
    """What the layer budget cost one variant's image, in re-push terms: the bytes a bump of
    one package re-pushes on average (`Plan.repush_per_bump`) as planned (committed slices
    kept), and for a fresh packing under the budget against one without it (the budget's own
    cost: both packed afresh)."""

    budget: int  # layers.max-image-layers
    repush_bytes: int  # per bump, the plan as planned
    fresh_repush_bytes: int  # per bump, packed afresh under the budget
    free_repush_bytes: int  # per bump, packed afresh without the budget
    free_layers: int  # that packing's image layers
    free_slices: int

    @property
    def ratio(self) -> float:
        """Bytes per bump packed afresh with the budget over without (1.0: it costs nothing)."""
        return self.fresh_repush_bytes / self.free_repush_bytes if self.free_repush_bytes else 1.0

    def describe(self) -> str:
        over = "" if self.free_layers <= self.budget else f", over the budget of {self.budget}"
        return (f"a bump of one package re-pushes {format_bytes(self.repush_bytes)} on average "
                f"as planned; packed afresh, {format_bytes(self.fresh_repush_bytes)} under the "
                f"budget and {format_bytes(self.free_repush_bytes)} without it "
                f"({self.free_slices} slices, {self.free_layers} image layers{over}): "
                f"x{self.ratio:.2f}")

    def to_json(self) -> dict[str, object]:
        return {"max_image_layers": self.budget, "repush_bytes_per_bump": self.repush_bytes,
                "fresh": {"repush_bytes_per_bump": self.fresh_repush_bytes},
                "unbudgeted": {"repush_bytes_per_bump": self.free_repush_bytes,
                               "image_layers": self.free_layers, "slices": self.free_slices},
                "ratio": round(self.ratio, 4)}


class TooManyLayers(GpurlError):
    """A plan whose image would have more layers than the planning ceiling."""

    @classmethod
    def of(cls, count: LayerCount, *, profile: str) -> TooManyLayers:
        """The one line that names the image, its count, the budget and the fix (the planner
        has already packed the slices as few as the cap allows)."""
        image = f"profile {profile!r}" + (f" variant {count.variant!r}" if count.variant else "")
        table = f"[tool.gpurl.profiles.{profile}.layers]"
        return cls(f"the image of {image} would have {count.total} layers (base {count.base} + "
                   f"{count.instructions} instructions, {count.builder}), over the layer budget "
                   f"{count.budget} (layers.max-image-layers; Docker and containerd stop at "
                   f"{HARD_LIMIT}): {count.slices} slice(s) as packed under the cap, at most "
                   f"{count.slice_budget()} fit",
                   hint=f"raise the cap or the budget (layers.cap, layers.max-image-layers at "
                        f"most {CEILING}, in {table}), or use a base image with fewer layers "
                        "(build.base-image-layers)")
