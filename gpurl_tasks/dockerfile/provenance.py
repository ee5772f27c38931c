"""Image label keys that carry provenance from the generator to verify, pin and rebuild-needed.

One place for the names so the writer (the Dockerfile recipe) and the readers (verify-layers,
rebuild-needed) cannot drift apart.
"""

from __future__ import annotations

import re

__all__ = [
    "LABEL_CONFIG_HASH",
    "LABEL_GENERATOR",
    "LABEL_GIT_SHA",
    "LABEL_LOCK_HASH",
    "LABEL_PLAN_FINGERPRINT",
    "LABEL_PLAN_STEPS",
    "LABEL_PREFIX",
    "label_value",
]

LABEL_PREFIX = "org.gpurl"
LABEL_GIT_SHA = f"{LABEL_PREFIX}.git-sha"  # the commit the image was built from (build arg GITSHA)
LABEL_LOCK_HASH = f"{LABEL_PREFIX}.lock-sha256"  # sha256 of the workspace uv.lock bytes
# config.config_fingerprint of the committed config the file was generated from
LABEL_CONFIG_HASH = f"{LABEL_PREFIX}.config-sha256"
LABEL_PLAN_FINGERPRINT = f"{LABEL_PREFIX}.plan-fingerprint"  # Plan.fingerprint
LABEL_PLAN_STEPS = f"{LABEL_PREFIX}.plan-steps"  # number of slice layers in the plan
LABEL_GENERATOR = f"{LABEL_PREFIX}.generator"  # "gpurl <version>"


def label_value(dockerfile: str, key: str) -> str | None:
    """The value a generated Dockerfile's LABEL gives `key` (None: the file has no such label,
    e.g. it predates the label)."""
    match = re.search(re.escape(key) + r'="([^"]*)"', dockerfile)
    return match.group(1) if match else None
