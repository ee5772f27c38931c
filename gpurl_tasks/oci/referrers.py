"""Attach a document to an image at the registry, and find it again: OCI 1.1 artifacts.

An attached document is an artifact manifest (an image manifest with `artifactType`, the empty
config and the document as its one layer) whose `subject` is the image's manifest, pushed by
digest. A registry with the referrers API lists it there by itself; one without it (ghcr.io,
the distribution registry 2.x of the loopback tests) gets the fallback the spec defines: an
index tagged `sha256-<subject hex>` listing the artifacts, updated on every attach. Reading
asks the API first, then the tag. Pushing is idempotent: the same document is the same digest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.imageref import ImageRef
from gpurl_tasks.oci.image import Descriptor, parse_manifest
from gpurl_tasks.oci.registry import ManifestUnknown, RegistryClient
from gpurl_tasks.writer.ocispec import (
    EMPTY_BLOB,
    EMPTY_CONFIG,
    EMPTY_MEDIA_TYPE,
    OCI_INDEX,
    OCI_MANIFEST,
    artifact_manifest,
    fallback_index,
    fallback_tag,
    index_entry,
)

__all__ = ["Referrer", "attach", "fallback_tag", "fetch", "find"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Referrer:
    """One artifact whose subject is the image: its manifest's digest and what it holds."""

    digest: str
    size: int
    artifact_type: str
    annotations: Mapping[str, str]
    via: str  # "referrers API" or the fallback tag it was listed under


def attach(client: RegistryClient, ref: ImageRef, subject: Descriptor, artifact_type: str,
           document: bytes, description: str = "") -> Referrer:
    """Push `document` as an artifact whose subject is `subject` (in `ref`'s repository),
    described by `description` when given, and list it under the fallback tag when the
    registry has no referrers API."""
    client.push_blob(ref, EMPTY_BLOB, str(EMPTY_CONFIG["digest"]))
    client.push_blob(ref, document)
    body = artifact_manifest(subject.to_json(), artifact_type, document, description)
    entry = index_entry(body)
    client.put_manifest(ref, entry["digest"], body, OCI_MANIFEST)
    found = Referrer(digest=entry["digest"], size=len(body), artifact_type=artifact_type,
                     annotations=dict(entry.get("annotations", {})), via="referrers API")
    if client.referrers(ref, subject.digest) is None:
        tag = fallback_tag(subject.digest)
        try:
            _, _, index = client.manifest(ref, tag)
        except ManifestUnknown:
            index = None
        client.put_manifest(ref, tag, fallback_index(index, [entry]), OCI_INDEX)
        found = dataclasses.replace(found, via=tag)
    return found


def _entries(index: Mapping[str, Any], via: str, where: str) -> list[Referrer]:
    found = []
    for i, raw in enumerate(index.get("manifests", []) or []):
        descriptor = Descriptor.from_json(raw, f"{where}: manifests[{i}]")
        kind = raw.get("artifactType") or ""
        notes = raw.get("annotations") or {}
        if isinstance(kind, str) and isinstance(notes, Mapping):
            found.append(Referrer(digest=descriptor.digest, size=descriptor.size,
                                  artifact_type=kind, via=via,
                                  annotations={str(k): str(v) for k, v in notes.items()}))
    return found


def find(client: RegistryClient, ref: ImageRef, subject_digest: str,
         artifact_type: str | None = None) -> list[Referrer]:
    """The artifacts attached to `subject_digest` (of `artifact_type` when given): from the
    referrers API, else from the fallback tag; empty when neither lists any."""
    index = client.referrers(ref, subject_digest)
    via = "referrers API"
    if index is None:
        via = fallback_tag(subject_digest)
        try:
            _, _, index = client.manifest(ref, via)
        except ManifestUnknown:
            return []
    found = [_typed(client, ref, r)
             for r in _entries(index, via, f"referrers of {ref}@{subject_digest[:19]}")]
    return [r for r in found if artifact_type is None or r.artifact_type == artifact_type]


def _typed(client: RegistryClient, ref: ImageRef, entry: Referrer) -> Referrer:
    """An entry listed under its config's media type (go-containerregistry's referrers API and
    the tag crane writes do so), by the manifest's own artifactType, as the spec lists it."""
    if entry.artifact_type not in ("", EMPTY_MEDIA_TYPE):
        return entry
    _, _, manifest = client.manifest(ref, entry.digest)
    kind = manifest.get("artifactType")
    return dataclasses.replace(entry, artifact_type=kind) if isinstance(kind, str) else entry


def fetch(client: RegistryClient, ref: ImageRef, referrer: Referrer) -> dict[str, Any]:
    """The JSON document an artifact holds (its one layer), each digest checked on the way."""
    _, _, manifest = client.manifest(ref, referrer.digest)
    parsed = parse_manifest(manifest, f"artifact {referrer.digest[:19]} of {ref}")
    if len(parsed.layers) != 1:
        raise RegistryError(f"artifact {referrer.digest[:19]} of {ref} holds "
                            f"{len(parsed.layers)} layers, not one document",
                            hint="an artifact not written by gpurl is attached: "
                                 "run the task that attaches it again")
    return client.blob_json(ref, parsed.layers[0].digest)
