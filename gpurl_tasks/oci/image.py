"""An image as the registry describes it, parsed into typed values once, at the edge.

Pure: the registry client (`oci.registry`) fetches documents and hands their JSON here; verify
and pin read only these types. A document of another shape (a `layers` entry that is not an
object, a negative size, an index whose `manifests` is not a list) is rejected with one line
naming the document and the field, never accepted or turned into a traceback.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from gpurl_tasks.errors import BUG_HINT, RegistryError, shown
from gpurl_tasks.imageref import DIGEST_RE, ImageRef
from gpurl_tasks.writer.ocispec import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST

__all__ = [
    "ACCEPT_MANIFESTS",
    "IMAGE_TYPES",
    "INDEX_TYPES",
    "MALFORMED_HINT",
    "Descriptor",
    "HistoryEntry",
    "ImageConfig",
    "ImageIndex",
    "Manifest",
    "PulledImage",
    "parse_config",
    "parse_diff_ids",
    "parse_index",
    "parse_manifest",
    "platform_name",
    "same_platform",
]

INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
IMAGE_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ACCEPT_MANIFESTS = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))


# the hint of an image whose documents are not what a registry and a builder write
MALFORMED_HINT = "the image's documents are malformed: build and push it again (`invoke build`)"


def _field(doc: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = doc.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise RegistryError(f"{where}: field {shown(key)} is {shown(value)}, not the expected "
                            f"{getattr(kind, '__name__', 'value')}",
                            hint=MALFORMED_HINT)
    return value


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Descriptor:
    """A content descriptor from a manifest or index."""

    media_type: str
    digest: str
    size: int
    platform: str | None = None  # "os/arch[/variant]" for index entries

    @staticmethod
    def from_json(obj: Any, where: str) -> Descriptor:
        if not isinstance(obj, Mapping):
            raise RegistryError(f"{where} is {shown(obj)}, not an object",
                                hint=MALFORMED_HINT)
        digest = _field(obj, "digest", str, where)
        if not DIGEST_RE.match(digest):
            raise RegistryError(f"{where}: digest {shown(digest)} is not sha256:<64 hex>",
                                hint=MALFORMED_HINT)
        size = _field(obj, "size", int, where)
        if size < 0:
            raise RegistryError(f"{where}: size {size} is negative",
                                hint=MALFORMED_HINT)
        media_type = obj.get("mediaType", "")
        if not isinstance(media_type, str):
            raise RegistryError(f"{where}: mediaType is {shown(media_type)}, not a string",
                                hint=MALFORMED_HINT)
        plat = obj.get("platform")
        platform = None
        if isinstance(plat, Mapping):
            platform = platform_name(plat.get("os"), plat.get("architecture"), plat.get("variant"))
        return Descriptor(media_type=media_type, digest=digest, size=size, platform=platform)

    def to_json(self) -> dict[str, Any]:
        """The descriptor as a manifest lists a layer or config (no platform)."""
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}

    def to_index_json(self) -> dict[str, Any]:
        """The descriptor as an index lists a manifest: with its platform object."""
        if not self.platform or self.platform.count("/") not in (1, 2):
            raise RegistryError(f"index entry {self.digest[:19]} has platform "
                                f"{shown(self.platform)}, not os/architecture[/variant]",
                                hint="each image's config must name its os and "
                                     "architecture: build and push it again")
        os_, arch, *variant = self.platform.split("/")
        platform = {"os": os_, "architecture": arch, **({"variant": variant[0]} if variant else {})}
        return {**self.to_json(), "platform": platform}


def platform_name(os_: object, architecture: object, variant: object = None) -> str:
    """"os/architecture[/variant]" (linux/arm64, linux/arm/v7): the one spelling of a
    platform, from an index entry's or an image config's fields."""
    return "/".join(str(p) for p in (os_, architecture, variant) if p)


def same_platform(a: str, b: str) -> bool:
    """`a` and `b` name one os/architecture (a variant such as arm64's v8 may be stated or not)."""
    return bool(a) and a.split("/")[:2] == b.split("/")[:2]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImageIndex:
    """An image index (OCI) or manifest list (Docker): one manifest per platform, in order.

    `to_bytes` is the one serialisation gpurl writes: sorted keys, no whitespace, entries in
    the order given, so the same members give byte-identical JSON and so the same digest (a
    second compose finds the index it put, and never moves its tag)."""

    manifests: tuple[Descriptor, ...]
    media_type: str = OCI_INDEX

    @staticmethod
    def from_json(doc: Mapping[str, Any], where: str, media_type: str = OCI_INDEX) -> ImageIndex:
        return ImageIndex(manifests=parse_index(doc, where),
                          media_type=media_type if media_type in INDEX_TYPES else OCI_INDEX)

    def to_bytes(self) -> bytes:
        document = {"schemaVersion": 2, "mediaType": self.media_type,
                    "manifests": [m.to_index_json() for m in self.manifests]}
        return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()

    @property
    def platforms(self) -> tuple[str, ...]:
        return tuple(m.platform or "?" for m in self.manifests)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Manifest:
    """An image manifest: its layers in order and its config blob."""

    layers: tuple[Descriptor, ...]
    config_digest: str
    config: Descriptor | None = None  # the config's descriptor as the manifest lists it
    media_type: str = ""  # the manifest's own mediaType, when it states one

    def to_json(self) -> dict[str, Any]:
        """The manifest document (schema 2) for these layers and config."""
        if self.config is None:
            raise RegistryError("a manifest without its config descriptor cannot be written",
                                hint=BUG_HINT)
        return {"schemaVersion": 2, "mediaType": self.media_type or OCI_MANIFEST,
                "config": self.config.to_json(), "layers": [d.to_json() for d in self.layers]}


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class HistoryEntry:
    """One entry of the image config's `history`: the instruction that made a layer (or not)."""

    created_by: str
    empty_layer: bool


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImageConfig:
    """What gpurl reads from an image config: its labels and its build history."""

    labels: Mapping[str, str]
    history: tuple[HistoryEntry, ...]
    platform: str = ""  # its `os`/`architecture`[/`variant`]: what the image runs on


def parse_manifest(doc: Mapping[str, Any], where: str) -> Manifest:
    layers = _field(doc, "layers", list, where)
    config = Descriptor.from_json(doc.get("config"), f"{where}: config")
    media_type = doc.get("mediaType", "")
    return Manifest(layers=tuple(Descriptor.from_json(layer, f"{where}: layers[{i}]")
                                 for i, layer in enumerate(layers)),
                    config_digest=config.digest, config=config,
                    media_type=media_type if isinstance(media_type, str) else "")


def parse_diff_ids(doc: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The config's `rootfs.diff_ids`: one uncompressed-layer digest per manifest layer."""
    rootfs = doc.get("rootfs")
    if not isinstance(rootfs, Mapping):
        raise RegistryError(f"{where}: field 'rootfs' is {shown(rootfs)}, not an object",
                            hint=MALFORMED_HINT)
    ids = _field(rootfs, "diff_ids", list, f"{where}: rootfs")
    if not all(isinstance(i, str) and DIGEST_RE.match(i) for i in ids):
        raise RegistryError(f"{where}: rootfs.diff_ids holds {shown(ids)}, not sha256 digests",
                            hint=MALFORMED_HINT)
    return tuple(ids)


def parse_index(doc: Mapping[str, Any], where: str) -> tuple[Descriptor, ...]:
    entries = _field(doc, "manifests", list, where)
    return tuple(Descriptor.from_json(e, f"{where}: manifests[{i}]") for i, e in enumerate(entries))


def parse_config(doc: Mapping[str, Any], where: str) -> ImageConfig:
    inner = doc.get("config") or {}
    if not isinstance(inner, Mapping):
        raise RegistryError(f"{where}: field 'config' is {shown(inner)}, not an object",
                            hint=MALFORMED_HINT)
    labels = inner.get("Labels") or {}
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise RegistryError(f"{where}: config.Labels is {shown(labels)}, not an object of strings",
                            hint=MALFORMED_HINT)
    raw_history = doc.get("history") or []
    if not isinstance(raw_history, list):
        raise RegistryError(f"{where}: field 'history' is {shown(raw_history)}, not a list",
                            hint=MALFORMED_HINT)
    history = []
    for i, entry in enumerate(raw_history):
        if not isinstance(entry, Mapping):
            raise RegistryError(f"{where}: history[{i}] is {shown(entry)}, not an object",
                                hint=MALFORMED_HINT)
        created_by, empty = entry.get("created_by", ""), entry.get("empty_layer", False)
        if not isinstance(created_by, str) or not isinstance(empty, bool):
            raise RegistryError(f"{where}: history[{i}] has created_by {shown(created_by)} and "
                                f"empty_layer {shown(empty)}; expected a string and a boolean",
                                hint=MALFORMED_HINT)
        history.append(HistoryEntry(created_by=created_by, empty_layer=empty))
    fields = [doc.get(k) for k in ("os", "architecture", "variant")]
    if not all(f is None or isinstance(f, str) for f in fields):
        raise RegistryError(f"{where}: os/architecture/variant are {shown(fields)}, not strings",
                            hint=MALFORMED_HINT)
    return ImageConfig(labels={str(k): v for k, v in labels.items()}, history=tuple(history),
                       platform=platform_name(*fields))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PulledImage:
    """What verify and pin need from a pushed image, all from the registry."""

    ref: ImageRef
    top_digest: str  # what the tag resolves to: an index or a manifest
    top_media_type: str
    manifest_digest: str  # the image manifest (of an index: the platform pulled)
    layers: tuple[Descriptor, ...]
    config_digest: str
    labels: Mapping[str, str]
    history: tuple[HistoryEntry, ...]
    platforms: tuple[str, ...] = ()  # platforms listed by the index, empty for a single image
    platform: str = ""  # the image's own, from its config's os/architecture
    manifest_media_type: str = ""  # the image manifest's media type and size in bytes: what an
    manifest_size: int = 0  # index entry naming it records

    @property
    def is_index(self) -> bool:
        return self.top_media_type in INDEX_TYPES

    @property
    def subject(self) -> str:
        """The digest its SBOM and provenance are attached to: its own image manifest (gpurl
        attaches them to the manifest it pushed, which an index composed later lists)."""
        return self.manifest_digest if self.is_index else self.top_digest
