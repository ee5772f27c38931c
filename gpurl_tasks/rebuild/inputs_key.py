"""The key of a build's inputs: which pushed image a build would make, named before it runs.

A build whose key equals an image's already pushed runs no executor (`invoke build` tags that
image instead; release/reuse.py). The key is the rebuild fingerprint (fingerprint.py: the
config, the Dockerfile's stages, the plan they carry, the lock's closure, the prebuilt wheels)
with every context file the image's stages copy in its `context` field (the workspace, the
slice files, gpurl's own helpers, the prebuilt wheels by sha256: a source-only edit that
`rebuild-needed` rightly calls `none` still changes the image's bytes), the base image by
digest, and the wheel source the build uses. Nothing else enters: the commit (GITSHA) is a
label, not an input, so a new commit of the same inputs finds the image of the last one.
Pure: callers pass the parts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping

from gpurl_tasks.rebuild.fingerprint import Fingerprint

__all__ = ["INPUTS_TAG_PREFIX", "inputs_key", "inputs_tag"]

INPUTS_TAG_PREFIX = "inputs-"


def inputs_key(fingerprint: Fingerprint, copied: Mapping[str, str], base: str,
               wheel_source: str) -> str:
    """64 hex digits over the fingerprint (its digest, `copied` as its context: {repository
    path: git blob id}), the base image's digest-pinned reference and the wheel source."""
    whole = dataclasses.replace(fingerprint, context=tuple(sorted(copied.items())))
    text = json.dumps({"fingerprint": whole.digest, "base": base, "wheel-source": wheel_source},
                      sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def inputs_tag(key: str) -> str:
    """`inputs-<key>`: the tag in the image's repository that records the image of `key`."""
    return INPUTS_TAG_PREFIX + key
