"""Image label keys that carry provenance from the generator to verify, pin and rebuild-needed.

One place for the names so the writer (the Dockerfile recipe) and the readers (verify-layers,
rebuild-needed) cannot drift apart.
"""

from __future__ import annotations

__all__ = [
    "LABEL_GENERATOR",
    "LABEL_GIT_SHA",
    "LABEL_LOCK_HASH",
    "LABEL_PLAN_FINGERPRINT",
    "LABEL_PLAN_STEPS",
    "LABEL_PREFIX",
]

LABEL_PREFIX = "org.gpurl"
LABEL_GIT_SHA = f"{LABEL_PREFIX}.git-sha"  # the commit the image was built from (build arg GITSHA)
LABEL_LOCK_HASH = f"{LABEL_PREFIX}.lock-sha256"  # sha256 of the workspace uv.lock bytes
LABEL_PLAN_FINGERPRINT = f"{LABEL_PREFIX}.plan-fingerprint"  # Plan.fingerprint
LABEL_PLAN_STEPS = f"{LABEL_PREFIX}.plan-steps"  # number of slice layers in the plan
LABEL_GENERATOR = f"{LABEL_PREFIX}.generator"  # "gpurl <version>"
