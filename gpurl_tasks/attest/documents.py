"""The two documents of a pushed image (pure, stdlib only: the cluster job runs this module's own
text, in the job's zipapp).

What is known before the build (the lock's closure, the declared post-installs, the base image
as configured) is a `Skeleton`, rendered by `invoke build` into the bundle for the cluster
job and computed in place by the local build; what only the builder knows after its push (the
digest, the image's labels, the apt set in the image, the builder, the run) is a `Build`. Both
paths make their documents with `documents`, and their artifacts and referrers-tag index with
writer/ocispec.py's `artifact_manifest` and `fallback_index`, each artifact described by
ANNOTATIONS: one writer on either path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sbom as cdx
from gpurl_tasks.writer.ocispec import canonical_json

__all__ = [
    "ANNOTATIONS",
    "Build",
    "Skeleton",
    "documents",
]

# What each artifact says it holds (the description annotation a registry UI shows).
ANNOTATIONS = {cdx.MEDIA_TYPE: "SBOM (CycloneDX 1.6)", slsa.MEDIA_TYPE: "provenance (SLSA v1)"}


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
    return canonical_json(sbom), canonical_json(statement)
