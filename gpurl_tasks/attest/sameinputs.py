"""The statement a build of unchanged inputs attaches when it puts a new commit's tag on an
image built from another commit (pure): without it, that tag's image carries a provenance
that names the other commit, and verify-layers would refuse the tag as lying about its commit.

An in-toto v1 statement whose subject is the image's digest; its predicate names the tag and
the inputs tag (`inputs-<key>`, rebuild/inputs_key.py) under which the build found the image.
verify-layers accepts a tag whose commit is not the provenance's only when a statement of this
digest names that tag.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpurl_tasks.attest.provenance import STATEMENT_TYPE
from gpurl_tasks.writer.ocispec import canonical_json

__all__ = ["DESCRIPTION", "MEDIA_TYPE", "PREDICATE_TYPE", "statement", "vouched", "vouching"]

MEDIA_TYPE = "application/vnd.gpurl.same-inputs.v1+json"  # the artifactType it is listed under
PREDICATE_TYPE = "urn:gpurl:predicate:same-inputs:v1"
DESCRIPTION = "a tag put on this image by a build of the same inputs"


def statement(*, name: str, digest: str, tag: str, inputs_tag: str) -> bytes:
    """The statement that `tag` was put on image `digest` (of repository `name`) by a build
    whose inputs were the image's, found under `inputs_tag`."""
    return canonical_json({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {"tag": tag, "inputsTag": inputs_tag},
    })


def vouched(documents: Iterable[Mapping[str, Any]], digest: str) -> list[tuple[str, str]]:
    """(tag, inputs tag) of every statement among `documents` whose subject is `digest`, in
    their order (a statement of another subject or type never counts)."""
    hex_digest = digest.removeprefix("sha256:")
    found = []
    for document in documents:
        predicate = document.get("predicate")
        subjects = document.get("subject")
        if (document.get("predicateType") != PREDICATE_TYPE or not isinstance(predicate, Mapping)
                or not isinstance(subjects, list)):
            continue
        names_digest = any(isinstance(s, Mapping) and isinstance(s.get("digest"), Mapping)
                           and s["digest"].get("sha256") == hex_digest for s in subjects)
        tag, inputs_tag = predicate.get("tag"), predicate.get("inputsTag")
        if names_digest and isinstance(tag, str) and isinstance(inputs_tag, str):
            found.append((tag, inputs_tag))
    return found


def vouching(documents: Iterable[Mapping[str, Any]], digest: str, tag: str) -> str | None:
    """The inputs tag of the first statement among `documents` that puts `tag` on `digest`
    (None: none does)."""
    return next((inputs for said, inputs in vouched(documents, digest) if said == tag), None)
