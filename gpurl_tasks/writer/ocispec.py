"""The OCI and Docker vocabulary every layer shares, each spelling once (stdlib only: the job's
zipapp carries this module's file for both of its tools, the layer tool and `attest`).

The media types of images, indexes, configs and layers; and the OCI 1.1 artifact an attached
document travels in: its manifest around the empty config, the entry a referrers list names it
by, and the `sha256-<hex>` tag's index a registry without the referrers API is given. The slice
writer, the attestation tool, and the registry client (oci/) read them from here, so a pushed
document is the same bytes on the local path and in the cluster job.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "DOCKER_CONFIG",
    "DOCKER_LAYER_GZIP",
    "DOCKER_LIST",
    "DOCKER_MANIFEST",
    "EMPTY_BLOB",
    "EMPTY_CONFIG",
    "EMPTY_MEDIA_TYPE",
    "OCI_CONFIG",
    "OCI_INDEX",
    "OCI_LAYER_GZIP",
    "OCI_MANIFEST",
    "artifact_manifest",
    "canonical_json",
    "fallback_index",
    "fallback_tag",
    "index_entry",
]

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
EMPTY_CONFIG = {"mediaType": EMPTY_MEDIA_TYPE, "size": 2,
                "digest": "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()}
_DESCRIPTION = "org.opencontainers.image.description"


def canonical_json(document: object) -> bytes:
    """A JSON document as the registry receives it: sorted keys, no spaces (one spelling, so
    the same document is the same digest)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def fallback_tag(subject_digest: str) -> str:
    """The referrers tag schema: `sha256-<hex>` (a tag cannot hold ':')."""
    algorithm, _, hexdigest = subject_digest.partition(":")
    return f"{algorithm}-{hexdigest}"


def artifact_manifest(subject: Mapping[str, Any], artifact_type: str, document: bytes,
                      description: str = "") -> bytes:
    """The OCI 1.1 artifact manifest holding `document` as its one layer, its subject the
    image's manifest descriptor (mediaType, digest, size); `description`, when given, is the
    annotation a registry UI shows for it."""
    manifest: dict[str, Any] = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
        "config": dict(EMPTY_CONFIG),
        "layers": [{"mediaType": artifact_type, "size": len(document),
                    "digest": "sha256:" + hashlib.sha256(document).hexdigest()}],
        "subject": {k: subject[k] for k in ("mediaType", "digest", "size")}}
    if description:
        manifest["annotations"] = {_DESCRIPTION: description}
    return canonical_json(manifest)


def index_entry(manifest: bytes) -> dict[str, Any]:
    """An artifact manifest as a referrers list names it: its artifactType and annotations."""
    parsed = json.loads(manifest)
    return {"mediaType": OCI_MANIFEST, "size": len(manifest),
            "digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
            "artifactType": parsed.get("artifactType")
            or parsed.get("config", {}).get("mediaType", ""),
            **({"annotations": parsed["annotations"]} if parsed.get("annotations") else {})}


def fallback_index(existing: Mapping[str, Any] | None,
                   entries: Sequence[Mapping[str, Any]]) -> bytes:
    """The `sha256-<hex>` tag's index: what it listed, each of `entries` (index_entry) in place
    of any listing of the same digest, sorted (the same set, the same bytes)."""
    ours = {str(e["digest"]) for e in entries}
    kept = [dict(m) for m in (existing or {}).get("manifests", []) or []
            if isinstance(m, Mapping) and m.get("digest") not in ours]
    listed = sorted([*kept, *(dict(e) for e in entries)],
                    key=lambda m: (str(m.get("artifactType")), str(m.get("digest"))))
    return canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": listed})
