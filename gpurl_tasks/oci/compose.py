"""Compose the environment image at the registry from slice images (pure).

Each slice is built alone on `env-base` (the runtime's apt set and an empty venv), as a small
image whose layers are env-base's, then the COPY of its slice file, then its install. Because
its parent is always env-base, a slice's install layer is the same blob wherever the plan puts
the slice: a lock bump rebuilds and pushes only the slices whose file changed.

The environment image is then written, never built: env-base's layers and each slice's install
layer (not its COPY layer, which the runtime does not need), in plan order, referenced by blob
digest (no layer is downloaded or copied), with a config whose `rootfs.diff_ids` and `history`
follow the layers, so verify-layers still maps each layer to its instruction. Overlapping
files are resolved as in any layer stack: a later slice's file wins, and directories merge
(a slice layer holds no whiteouts: it only adds files). The final build's `uv sync` and
asserts, run FROM the composed image, prove the composed environment is the lock.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.oci.image import Manifest, parse_config, parse_diff_ids, parse_manifest

__all__ = ["SLICE_LAYERS", "Composed", "ComposedEnv", "SliceImage", "SliceOutcome", "compose",
           "composed_tag"]

SLICE_LAYERS = 2  # what a slice image adds to env-base: the COPY of its file, its install
def composed_tag(slice_digests: Sequence[str]) -> str:
    """The tag of the composed environment: a hash of its slice images, in order."""
    return "env-" + hashlib.sha256("\n".join(slice_digests).encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceImage:
    """One slice image as the registry holds it: its manifest and config (checked types)."""

    name: str  # the plan's NN-label, for messages
    manifest: Manifest
    config: Mapping[str, Any]  # the config document, kept whole (env, workdir, ...)
    diff_ids: tuple[str, ...]

    @staticmethod
    def from_documents(name: str, manifest: Mapping[str, Any],
                       config: Mapping[str, Any]) -> SliceImage:
        where = f"slice image {name}"
        parsed = parse_manifest(manifest, f"manifest of {where}")
        parse_config(config, f"config of {where}")  # history and labels are well formed
        diff_ids = parse_diff_ids(config, f"config of {where}")
        if len(diff_ids) != len(parsed.layers) or len(parsed.layers) <= SLICE_LAYERS:
            raise RegistryError(f"{where} has {len(parsed.layers)} layers and "
                                f"{len(diff_ids)} diff_ids: not env-base plus a COPY and an "
                                "install")
        return SliceImage(name=name, manifest=parsed, config=config, diff_ids=diff_ids)

    @property
    def base_count(self) -> int:
        return len(self.manifest.layers) - SLICE_LAYERS

    def history(self) -> list[dict[str, Any]]:
        raw = self.config.get("history") or []
        return [dict(entry) for entry in raw]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Composed:
    """The environment image to write: its manifest and config documents."""

    manifest: Manifest
    config: bytes  # the config blob, serialised once (its digest is in the manifest)

    @property
    def manifest_bytes(self) -> bytes:
        return _canonical(self.manifest.to_json())


def _canonical(document: Mapping[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _split_history(image: SliceImage) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(env-base's history entries, the install layer's entry) of one slice image."""
    entries = image.history()
    made = [i for i, e in enumerate(entries) if not e.get("empty_layer", False)]
    if len(made) != len(image.manifest.layers):
        raise RegistryError(f"slice image {image.name}: its history names {len(made)} "
                            f"layers for {len(image.manifest.layers)}; cannot tell its install "
                            "layer's instruction")
    copy_at = made[image.base_count]  # the first entry above env-base: the COPY of the file
    return entries[:copy_at], entries[made[-1]]


def compose(slices: Sequence[SliceImage]) -> Composed:
    """env-base's layers, then each slice's install layer in order, with a config to match.

    Every slice image must sit on the same env-base (same layer digests and diff_ids); the
    config (environment, workdir, platform) is the first slice's, which is env-base's."""
    if not slices:
        raise RegistryError("no slice images to compose")
    first = slices[0]
    count = first.base_count
    base_layers, base_ids = first.manifest.layers[:count], first.diff_ids[:count]
    base_history, _ = _split_history(first)
    for image in slices:
        if (image.base_count != count
                or [d.digest for d in image.manifest.layers[:count]]
                != [d.digest for d in base_layers]
                or image.diff_ids[:count] != base_ids):
            raise RegistryError(f"slice image {image.name} is not built on the same env-base as "
                                f"{first.name}", hint="rebuild the slices (their tags name "
                                                       "env-base's image id)")
    config: dict[str, Any] = copy.deepcopy(dict(first.config))
    config["rootfs"] = {"type": "layers",
                        "diff_ids": [*base_ids, *(s.diff_ids[-1] for s in slices)]}
    config["history"] = [*base_history, *(_split_history(s)[1] for s in slices)]
    blob = _canonical(config)
    if first.manifest.config is None:
        raise RegistryError(f"slice image {first.name}: its manifest names no config")
    descriptor = dataclasses.replace(first.manifest.config,
                                     digest="sha256:" + hashlib.sha256(blob).hexdigest(),
                                     size=len(blob))
    manifest = Manifest(layers=(*base_layers, *(s.manifest.layers[-1] for s in slices)),
                        config_digest=descriptor.digest, config=descriptor,
                        media_type=first.manifest.media_type)
    return Composed(manifest=manifest, config=blob)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SliceOutcome:
    """One slice image: where it is cached, whether this run built it, its install layer."""

    name: str  # the plan's NN-label
    reference: str  # host/cache-repository:slice-<label>-<hash>
    built: bool  # False: the registry already held this tag (nothing built or pushed)
    blob: str  # the install layer's digest
    size: int  # the install layer's compressed size
    seconds: float = 0.0  # staging and writing it (0 when reused)


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
        return (f"environment composed from {len(self.slices)} slice image(s), "
                f"{len(fresh)} built ({sum(s.size for s in fresh):,} bytes), "
                f"{len(self.slices) - len(fresh)} reused, in {self.seconds:.1f}s")

    def to_json(self) -> dict[str, object]:
        return {"reference": self.reference, "tag": self.tag, "base_id": self.base_id,
                "seconds": round(self.seconds, 1),
                "slices": [dataclasses.asdict(s) for s in self.slices]}
