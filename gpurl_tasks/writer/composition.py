"""The environment image from env-base and the slice records (stdlib only, pure: documents in,
documents out): the one composition, for both paths.

The local path calls it through gpurl's registry client (local/compose_env.py); the cluster job
calls it through its layer tool (`job.pyz compose`) in the composing kaniko build, where
env-base's python3 already runs the writer, and crane moves the documents. Either way the image
is written, never built: env-base's layers, then each slice record's one layer in plan order,
under env-base's config with `rootfs.diff_ids` and `history` extended to match (each slice's
history entry is its record's, which names its cache tag) and no time in it: the builders stamp
env-base's config with the time it was built, and a composed environment that changed with
that time would change every cache key built on it (the final stage's; see
dockerfile/recipe.py), so the same layers under the same settings are the same image whenever
they were built. No layer's bytes are read or moved:
the registry holds every blob already (env-base pushed, each record pushed), so composing
writes one config and one manifest. Its tag is `env-<hash of its config's digest>` on both
paths: the same layers under the same config are the same tag.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpurl_tasks.writer.blob import LayerError
from gpurl_tasks.writer.ocispec import canonical_json
from gpurl_tasks.writer.records import MEDIA_TYPES

__all__ = ["Composition", "Record", "compose", "composed_tag", "image_of", "record_of_image"]

_CACHE_HINT = "delete its tag from the cache repository"


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def composed_tag(config_digest: str) -> str:
    """The tag of a composed environment: a hash of its config's digest (which names every
    layer's diff_id and history entry), the same on both paths."""
    return "env-" + hashlib.sha256(config_digest.encode()).hexdigest()[:32]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Record:
    """One slice's record read back: its one layer (as the manifest lists it), diff_id and
    history entry."""

    name: str  # the plan's NN-label
    layer: Mapping[str, Any]  # {mediaType, digest, size}
    diff_id: str
    created_by: str


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Composition:
    """The environment image to write: its manifest and config, each serialised once."""

    manifest: bytes
    config: bytes

    @property
    def media_type(self) -> str:
        return str(json.loads(self.manifest)["mediaType"])

    @property
    def digest(self) -> str:
        return _sha256(self.manifest)

    @property
    def config_digest(self) -> str:
        return _sha256(self.config)

    @property
    def tag(self) -> str:
        return composed_tag(self.config_digest)

    @property
    def layers(self) -> tuple[str, ...]:
        """Every layer's digest, in order."""
        return tuple(str(d["digest"]) for d in json.loads(self.manifest)["layers"])


def _descriptor(raw: Any, where: str) -> dict[str, Any]:
    if not (isinstance(raw, Mapping) and isinstance(raw.get("mediaType"), str)
            and isinstance(raw.get("digest"), str) and str(raw["digest"]).startswith("sha256:")
            and isinstance(raw.get("size"), int) and raw["size"] >= 0):
        raise LayerError(f"{where} names a blob without a mediaType, sha256 digest and size")
    return {"mediaType": raw["mediaType"], "digest": raw["digest"], "size": raw["size"]}


def _layers(manifest: Mapping[str, Any], config: Mapping[str, Any], where: str,
            ) -> tuple[list[dict[str, Any]], list[str]]:
    layers, rootfs = manifest.get("layers"), config.get("rootfs")
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, Mapping) else None
    if not isinstance(layers, list) or not isinstance(diff_ids, list) \
            or not all(isinstance(d, str) for d in diff_ids):
        raise LayerError(f"{where} has no layers and diff_ids")
    if len(layers) != len(diff_ids):
        raise LayerError(f"{where} has {len(layers)} layers and {len(diff_ids)} diff_ids")
    return [_descriptor(d, where) for d in layers], list(diff_ids)


def record_of_image(name: str, manifest: Mapping[str, Any], config: Mapping[str, Any]) -> Record:
    """A slice's cached one-layer image read back: exactly one layer, one diff_id and one
    history entry that says what made it."""
    where = f"the record of slice {name}"
    layers, diff_ids = _layers(manifest, config, where)
    history = config.get("history")
    entry = history[0] if isinstance(history, list) and len(history) == 1 else None
    created_by = entry.get("created_by") if isinstance(entry, Mapping) else None
    if len(layers) != 1 or not isinstance(created_by, str) or not created_by:
        raise LayerError(f"{where} is not a one-layer image gpurl wrote; {_CACHE_HINT}")
    return Record(name=name, layer=layers[0], diff_id=diff_ids[0], created_by=created_by)


def compose(base_manifest: Mapping[str, Any], base_config: Mapping[str, Any],
            records: Sequence[Record]) -> Composition:
    """env-base's layers, then each record's layer in order, under env-base's config extended
    to match (its environment, workdir and platform are env-base's)."""
    media_type = base_manifest.get("mediaType")
    if media_type not in MEDIA_TYPES:
        raise LayerError(f"env-base's manifest is {media_type}, not a Docker or OCI image manifest")
    layer_type = MEDIA_TYPES[str(media_type)][1]
    config_type = _descriptor(base_manifest.get("config"), "env-base's manifest")["mediaType"]
    layers, diff_ids = _layers(base_manifest, base_config, "env-base")
    if not records:
        raise LayerError("no slice layers to compose")
    gzip_types = {layer for _, layer in MEDIA_TYPES.values()}
    for record in records:
        if record.layer["mediaType"] not in gzip_types:
            raise LayerError(f"slice {record.name} is a {record.layer['mediaType']} layer, "
                             f"not a gzip tar like env-base's; {_CACHE_HINT}")
    # A Docker and an OCI gzip layer are the same bytes: each record's layer is listed under
    # env-base's type, so both paths share one cache whichever manifest family built env-base.
    slices = [{**r.layer, "mediaType": layer_type} for r in records]
    config: dict[str, Any] = copy.deepcopy(dict(base_config))
    config.pop("created", None)
    config["rootfs"] = {"type": "layers", "diff_ids": [*diff_ids, *(r.diff_id for r in records)]}
    history = base_config.get("history")
    base_history = [{k: v for k, v in e.items() if k != "created"} for e in history
                    if isinstance(e, Mapping)] if isinstance(history, list) else []
    config["history"] = [*base_history, *({"created_by": r.created_by} for r in records)]
    return image_of([*layers, *slices], config, media_type=str(media_type),
                    config_type=config_type)


def image_of(layers: Sequence[Mapping[str, Any]], config: Mapping[str, Any], *, media_type: str,
             config_type: str) -> Composition:
    """The manifest of `layers` (descriptors) under `config`, both written canonically, as the
    registry takes them: the one place an image is put together from its parts."""
    config_blob = canonical_json(config)
    manifest = canonical_json({
        "schemaVersion": 2, "mediaType": media_type,
        "config": {"mediaType": config_type, "digest": _sha256(config_blob),
                   "size": len(config_blob)},
        "layers": [_descriptor(d, "a layer") for d in layers]})
    return Composition(manifest=manifest, config=config_blob)
