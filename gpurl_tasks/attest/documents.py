"""The two documents of a pushed image and the OCI 1.1 artifacts that carry them (pure, stdlib
only: the cluster job runs this module's own text, in the job's zipapp).

What is known before the build (the lock's closure, the declared post-installs, the base image
as configured) is a `Skeleton`, rendered by `invoke build` into the bundle for the cluster
job and computed in place by the local build; what only the builder knows after its push (the
digest, the image's labels, the apt set in the image, the builder, the run) is a `Build`. Both
paths make their documents with `documents`, and their artifacts and referrers-tag index with
`artifact_manifest` and `fallback_index`: one writer on either path.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sbom as cdx

__all__ = [
    "ANNOTATIONS",
    "EMPTY_BLOB",
    "EMPTY_CONFIG",
    "EMPTY_MEDIA_TYPE",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "Build",
    "Skeleton",
    "artifact_manifest",
    "canonical",
    "documents",
    "fallback_index",
    "fallback_tag",
    "index_entry",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BLOB = b"{}"
EMPTY_CONFIG = {"mediaType": EMPTY_MEDIA_TYPE, "size": 2,
                "digest": "sha256:" + hashlib.sha256(EMPTY_BLOB).hexdigest()}
# What each artifact says it holds (an OCI annotation a registry UI shows).
ANNOTATIONS = {cdx.MEDIA_TYPE: "SBOM (CycloneDX 1.6)", slsa.MEDIA_TYPE: "provenance (SLSA v1)"}
_DESCRIPTION = "org.opencontainers.image.description"


def canonical(document: object) -> bytes:
    """A JSON document as it is pushed: sorted keys, no spaces (the same document, the same
    digest)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Skeleton:
    """What the documents say that is known before the build."""

    profile: str
    variant: str
    python: tuple[cdx.PythonPackage, ...]
    post_installs: tuple[str, ...]
    base_image: str  # as configured (the builder resolves it to a digest where it can)
    lock_label: str  # the image labels that carry the lock's hash and the config fingerprint
    config_label: str

    def to_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "variant": self.variant,
                "python": [dataclasses.asdict(p) for p in self.python],
                "post_installs": list(self.post_installs), "base_image": self.base_image,
                "labels": {"lock": self.lock_label, "config": self.config_label}}

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> Skeleton:
        return Skeleton(profile=str(raw["profile"]), variant=str(raw["variant"]),
                        python=tuple(cdx.PythonPackage(**p) for p in raw["python"]),
                        post_installs=tuple(str(x) for x in raw["post_installs"]),
                        base_image=str(raw["base_image"]),
                        lock_label=str(raw["labels"]["lock"]),
                        config_label=str(raw["labels"]["config"]))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Build:
    """What only the builder knows, after its push."""

    image: str  # host/repository
    tag: str
    digest: str  # the pushed manifest's sha256:...
    labels: Mapping[str, str]  # the image config's labels
    apt: tuple[cdx.AptPackage, ...]  # dpkg's packages in the built image
    wheels: tuple[cdx.CompiledWheel, ...]  # the compiled wheels the image installed
    base_image: str  # by digest (or image id) where known
    builder: str  # the kaniko executor by digest, or the BuildKit client's version
    invocation: str  # the iris job name, or the local build's id
    commit: str  # the full commit (or source id) the image was built from
    repository_url: str = ""


def documents(skeleton: Skeleton, build: Build) -> tuple[bytes, bytes]:
    """The SBOM and the provenance statement of the pushed image, as the bytes attached."""
    sbom = cdx.cyclonedx(cdx.SbomInputs(
        image=build.image, tag=build.tag, python=skeleton.python, wheels=build.wheels,
        post_installs=skeleton.post_installs, apt=build.apt,
        base_image=build.base_image or skeleton.base_image))
    statement = slsa.statement(slsa.BuildFacts(
        image=build.image, digest=build.digest, profile=skeleton.profile,
        variant=skeleton.variant, commit=build.commit, repository_url=build.repository_url,
        lock_sha256=build.labels.get(skeleton.lock_label, ""),
        config_fingerprint=build.labels.get(skeleton.config_label, ""),
        base_image=build.base_image or skeleton.base_image, builder=build.builder,
        invocation=build.invocation))
    return canonical(sbom), canonical(statement)


def fallback_tag(subject_digest: str) -> str:
    """The referrers tag schema: `sha256-<hex>` (a tag cannot hold ':')."""
    algorithm, _, hexdigest = subject_digest.partition(":")
    return f"{algorithm}-{hexdigest}"


def artifact_manifest(subject: Mapping[str, Any], artifact_type: str, document: bytes) -> bytes:
    """The OCI 1.1 artifact manifest holding `document` as its one layer, its subject the
    image's manifest descriptor (mediaType, digest, size), described by ANNOTATIONS."""
    manifest: dict[str, Any] = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": artifact_type,
        "config": dict(EMPTY_CONFIG),
        "layers": [{"mediaType": artifact_type, "size": len(document),
                    "digest": "sha256:" + hashlib.sha256(document).hexdigest()}],
        "subject": {k: subject[k] for k in ("mediaType", "digest", "size")}}
    if artifact_type in ANNOTATIONS:
        manifest["annotations"] = {_DESCRIPTION: ANNOTATIONS[artifact_type]}
    return canonical(manifest)


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
    return canonical({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": listed})
