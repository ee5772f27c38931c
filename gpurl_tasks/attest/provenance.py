"""The image's build provenance: an in-toto v1 statement with a SLSA v1 provenance predicate
(pure). It says how the pushed digest was built: by which builder (the kaniko executor's
digest, or BuildKit's version), from which commit, lock and config (config.config_fingerprint),
on which base image, in which run (the iris job's name, or the local build's id)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

__all__ = [
    "BUILD_TYPE",
    "MEDIA_TYPE",
    "PREDICATE_TYPE",
    "STATEMENT_TYPE",
    "BuildFacts",
    "commit_of",
    "statement",
]

MEDIA_TYPE = "application/vnd.in-toto+json"  # the artifactType the referrers list it under
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
# What the external parameters mean: gpurl's build of one profile variant (a URI, as SLSA asks;
# a URN because it names the build and is not fetched).
BUILD_TYPE = "urn:gpurl:buildtype:variant-image:v1"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuildFacts:
    image: str  # host/repository
    digest: str  # the pushed image's sha256:...
    profile: str
    variant: str
    commit: str  # the full git commit, or a source id for a dirty tree
    repository_url: str  # where the commit lives (empty: unknown)
    lock_sha256: str
    config_fingerprint: str
    base_image: str  # by digest where known
    builder: str  # the kaniko executor reference, or "buildkit <version>"
    invocation: str  # the iris job name, or the local build's id


def statement(facts: BuildFacts) -> dict[str, Any]:
    """The in-toto statement whose subject is the pushed image."""
    dependencies: list[dict[str, Any]] = [{
        "uri": f"git+{facts.repository_url}" if facts.repository_url else "git",
        "digest": {"gitCommit": facts.commit}}]
    if facts.base_image:
        digest = facts.base_image.partition("@")[2]
        dependencies.append({"uri": facts.base_image.split("@")[0],
                             **({"digest": {digest.split(":")[0]: digest.split(":", 1)[1]}}
                                if ":" in digest else {})})
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": facts.image, "digest": {"sha256": facts.digest.split(":", 1)[1]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": {"profile": facts.profile, "variant": facts.variant,
                                       "commit": facts.commit},
                "internalParameters": {"lockSha256": facts.lock_sha256,
                                       "configFingerprint": facts.config_fingerprint},
                "resolvedDependencies": dependencies,
            },
            "runDetails": {"builder": {"id": facts.builder},
                           "metadata": {"invocationId": facts.invocation}},
        },
    }


def commit_of(document: Mapping[str, Any]) -> str | None:
    """The commit a provenance statement says the image was built from (None: none said)."""
    predicate = document.get("predicate")
    if not isinstance(predicate, Mapping):
        return None
    params = (predicate.get("buildDefinition") or {}).get("externalParameters") or {}
    commit = params.get("commit") if isinstance(params, Mapping) else None
    return commit if isinstance(commit, str) and commit else None
