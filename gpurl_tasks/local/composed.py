"""What a local build reports of its composed environment: each slice's outcome and the image
(the composition itself is writer/composition.py's, shared with the cluster job)."""

from __future__ import annotations

import dataclasses

from gpurl_tasks.writer.compiled import COMPILED_SLOT

__all__ = ["ComposedEnv", "SliceOutcome"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceOutcome:
    """One slice image: where it is cached, whether this run built it, its install layer."""

    name: str  # the plan's NN-label, or the compiled wheels' COMPILED_SLOT
    reference: str  # host/cache-repository:slice-<label>-<hash>
    built: bool  # False: the registry already held this tag (nothing built or pushed)
    blob: str  # the install layer's digest
    size: int  # the install layer's compressed size
    seconds: float = 0.0  # staging and writing it (0 when reused)
    rewritten: bool = False  # built because the tag was there and its blob was not


@dataclasses.dataclass(frozen=True, kw_only=True)
class ComposedEnv:
    """The composed environment image, and how it came about."""

    reference: str  # host/repository@sha256:...: the final build's ENV_SOURCE
    tag: str  # env-<hash of its config's digest>
    base_id: str  # env-base's image id
    slices: tuple[SliceOutcome, ...]
    seconds: float

    @property
    def holds_compiled(self) -> bool:
        """Whether the compiled wheels' layer is in it (the final build is then FROM it)."""
        return any(s.name == COMPILED_SLOT for s in self.slices)

    @property
    def built(self) -> tuple[SliceOutcome, ...]:
        return tuple(s for s in self.slices if s.built)

    def summary(self) -> str:
        fresh = self.built
        lost = [s.name for s in fresh if s.rewritten]
        return (f"environment composed from {len(self.slices)} slice image(s), "
                f"{len(fresh)} built ({sum(s.size for s in fresh):,} bytes), "
                f"{len(self.slices) - len(fresh)} reused, in {self.seconds:.1f}s"
                + (f"; rewritten, their record's blob gone from the registry: {', '.join(lost)}"
                   if lost else ""))

    def to_json(self) -> dict[str, object]:
        return {"reference": self.reference, "tag": self.tag, "base_id": self.base_id,
                "seconds": round(self.seconds, 1),
                "slices": [dataclasses.asdict(s) for s in self.slices]}
