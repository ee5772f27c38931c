"""How many layers an image may have: the limits (defined here once) and a counted image.

Docker and containerd stop at about 127 layers (each layer is an overlay lower directory; the
mount fails near 122-127, moby#26380), so an image over the limit builds and pushes fine and
then fails on every node. `invoke plan` and `invoke generate` keep a margin under it (the
planning ceiling: the builders add a few empty layers the Dockerfile cannot show, such as a
cached file-less RUN under kaniko); `verify-layers` fails a pushed image above the hard limit
and warns from the ceiling up.
"""

from __future__ import annotations

import dataclasses

from gpurl_tasks.errors import GpurlError

__all__ = ["CEILING", "HARD_LIMIT", "LayerCount", "TooManyLayers"]

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

    @property
    def total(self) -> int:
        return self.base + self.instructions

    def fits(self, ceiling: int = CEILING) -> bool:
        return self.total <= ceiling

    def slice_budget(self, ceiling: int = CEILING) -> int:
        """The most slices an image with these other layers may have under `ceiling`."""
        others = self.total - self.slices * self.per_slice
        return max(0, (ceiling - others) // max(1, self.per_slice))

    def describe(self) -> str:
        return (f"{self.total} layers (base {self.base} + {self.instructions} instructions, "
                f"{self.slices} slice(s) of {self.per_slice}; {self.builder})")

    def to_json(self) -> dict[str, object]:
        return {"variant": self.variant, "total": self.total, "base": self.base,
                "instructions": self.instructions, "slices": self.slices,
                "per_slice": self.per_slice, "builder": self.builder, "ceiling": CEILING,
                "hard_limit": HARD_LIMIT}


class TooManyLayers(GpurlError):
    """A plan whose image would have more layers than the planning ceiling."""

    @classmethod
    def of(cls, count: LayerCount, *, profile: str, mode: str) -> TooManyLayers:
        """The one line that names the image, its count, the ceiling and the fix."""
        image = f"profile {profile!r}" + (f" variant {count.variant!r}" if count.variant else "")
        table = f"[tool.gpurl.profiles.{profile}.layers]"
        fix = (f"a larger own-layer or fewer tail-groups in {table} (or a larger cap)"
               if mode == "independent" else f"a larger cap in {table}")
        return cls(f"the image of {image} would have {count.total} layers (base {count.base} + "
                   f"{count.instructions} instructions, {count.builder}), over the planning "
                   f"ceiling {CEILING} (Docker and containerd stop at {HARD_LIMIT}): use fewer "
                   f"slices ({count.slices} now, at most {count.slice_budget()} fit): {fix}, "
                   "or a base image with fewer layers (build.base-image-layers)")
