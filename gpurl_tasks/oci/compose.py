"""The composed environment image's records (pure): the manifest and config to write, the tag
it is written under, and what a run reports of it.

The composition itself is oci/layered.py's `compose_written` (env-base's layers and each
written slice layer, by blob digest); this module holds what it returns (`Composed`), the tag
(`composed_tag`) and what a local build reports of it (`SliceOutcome`, `ComposedEnv`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence

from gpurl_tasks.oci.image import Manifest
from gpurl_tasks.oci.layer import canonical_json

__all__ = ["Composed", "ComposedEnv", "SliceOutcome", "composed_tag"]


def composed_tag(slice_digests: Sequence[str]) -> str:
    """The tag of the composed environment: a hash of the digests that make it, in order
    (local/compose_env.py passes the composed config's, which names every layer)."""
    return "env-" + hashlib.sha256("\n".join(slice_digests).encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Composed:
    """The environment image to write: its manifest and config documents."""

    manifest: Manifest
    config: bytes  # the config blob, serialised once (its digest is in the manifest)

    @property
    def manifest_bytes(self) -> bytes:
        return canonical_json(self.manifest.to_json())



@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceOutcome:
    """One slice image: where it is cached, whether this run built it, its install layer."""

    name: str  # the plan's NN-label
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
    tag: str  # env-<hash of the slice images>
    base_id: str  # env-base's image id
    slices: tuple[SliceOutcome, ...]
    seconds: float

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
