"""The GPU check's verdict as an in-toto statement with a SLSA Verification Summary predicate
(pure): what `invoke verify-gpu` attaches to the image it ran, and what `pin` reads back.

The predicate is SLSA's VSA v1 (verifier, timeVerified, resourceUri, policy, verificationResult,
verifiedLevels); gpurl's own figures ride under its `gpurl` key: the check's whole
`gpurl.gpu-check/v1` document (gpu/result.py), the job and the policy it ran under. Reading one
back re-parses that document, so a summary whose parts disagree (another digest in the
statement, the resource or the check; PASSED over a failed check) is refused, not trusted.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from gpurl_tasks.attest.provenance import STATEMENT_TYPE
from gpurl_tasks.errors import CheckFailed, GpurlError, shown
from gpurl_tasks.gpu import result as gpu_result
from gpurl_tasks.writer.ocispec import canonical_json

__all__ = [
    "MEDIA_TYPE",
    "PASSED_LEVEL",
    "POLICY_URI",
    "PREDICATE_TYPE",
    "VERIFIER_ID",
    "GpuPolicy",
    "JobFacts",
    "SummaryError",
    "Verdict",
    "read_summary",
    "summary",
]


class SummaryError(GpurlError):
    """A GPU verification summary of a shape gpurl does not write."""


# the hint of a summary that is not what verify-gpu attaches
_REATTACH_HINT = "it is not what `invoke verify-gpu` attaches: run verify-gpu again for this image"

PREDICATE_TYPE = "https://slsa.dev/verification_summary/v1"
# The artifactType it is attached under: its own, not the provenance's generic in-toto type,
# so the referrers list tells the two apart without fetching either.
MEDIA_TYPE = "application/vnd.gpurl.gpu-verification.v1+json"
VERIFIER_ID = "urn:gpurl:verifier:verify-gpu"
POLICY_URI = "urn:gpurl:policy:gpu-check:v1"
# A VSA names the levels it verified; custom ones may not start with SLSA_ (the spec).
PASSED_LEVEL = "GPU_CHECKED"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GpuPolicy:
    """What the check was asked to hold: its digest is the summary's policy digest."""

    gpus: int  # the GPUs of one node the job asked for
    gpu_type: str  # "" : any
    required: tuple[str, ...] = gpu_result.REQUIRED

    def to_json(self) -> dict[str, Any]:
        return {"gpus": self.gpus, "gpu_type": self.gpu_type, "required": list(self.required)}

    @property
    def digest(self) -> str:
        return hashlib.sha256(canonical_json(self.to_json())).hexdigest()


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class JobFacts:
    """Where the check ran: the iris job and its cluster."""

    job_id: str
    cluster: str


def summary(result: gpu_result.Result, *, image: str, digest: str, policy: GpuPolicy,
            job: JobFacts, verified_at: str, version: str) -> bytes:
    """The statement's bytes (canonical JSON) for `result` of manifest `digest` of repository
    `image` (host/repository); a result for another digest is refused."""
    if result.image != digest:
        raise CheckFailed(f"the GPU check ran {result.image}, not {digest}: refusing to record "
                          "it for this image", hint="run `invoke verify-gpu` for the image again")
    passed = result.passed
    return canonical_json({
        "_type": STATEMENT_TYPE,
        "subject": [{"name": image, "digest": {"sha256": digest.split(":", 1)[1]}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "verifier": {"id": VERIFIER_ID, "version": {"gpurl": version}},
            "timeVerified": verified_at,
            "resourceUri": f"{image}@{digest}",
            "policy": {"uri": POLICY_URI, "digest": {"sha256": policy.digest}},
            "inputAttestations": [],
            "verificationResult": "PASSED" if passed else "FAILED",
            "verifiedLevels": [PASSED_LEVEL] if passed else ["FAILED"],
            "dependencyLevels": {},
            "slsaVersion": "1.0",
            "gpurl": {"check": json.loads(gpu_result.to_json(result)),
                      "policy": policy.to_json(),
                      "job": {"id": job.job_id, "cluster": job.cluster}},
        },
    })


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """A summary read back: what pin and `invoke sbom` say of it."""

    digest: str
    passed: bool
    verified_at: str
    result: gpu_result.Result
    job: Mapping[str, str]
    policy: Mapping[str, Any]

    @property
    def failed(self) -> tuple[gpu_result.Check, ...]:
        return tuple(c for c in self.result.checks if c.status == "failed")

    @property
    def not_run(self) -> tuple[gpu_result.Check, ...]:
        return tuple(c for c in self.result.checks if c.status == "not-run")

    def line(self) -> str:
        """One line: the verdict, its time and node, and what failed or did not run."""
        node = self.result.node
        gpus = ", ".join(sorted({g.name for g in node.gpus})) or "no GPU"
        head = (f"GPU check {'PASSED' if self.passed else 'FAILED'} {self.verified_at} on "
                f"{node.hostname} ({len(node.gpus)}x {gpus})")
        parts = [f"{c.name} failed: {c.reason}" for c in self.failed]
        missing = [n for n in gpu_result.REQUIRED if self.result.check(n) is None]
        parts += [f"{n} did not run" for n in missing]
        parts += [f"{c.name} not run: {c.reason}" for c in self.not_run]
        return head + ("; " + "; ".join(parts) if parts else "")

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "passed": self.passed, "verified_at": self.verified_at,
                "job": dict(self.job), "policy": dict(self.policy),
                "check": json.loads(gpu_result.to_json(self.result))}


def _get(raw: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = raw.get(key)
    if not isinstance(value, kind):
        raise SummaryError(f"the GPU verification summary's {where}{key} is not a "
                         f"{kind.__name__}: {shown(value)}",
                           hint=_REATTACH_HINT)
    return value


def read_summary(document: Mapping[str, Any], digest: str) -> Verdict:
    """The verdict of an attached summary of manifest `digest`; GpurlError when it is not a
    gpurl GPU summary, or when it (or the check it carries) is for another digest."""
    if document.get("_type") != STATEMENT_TYPE or document.get("predicateType") != PREDICATE_TYPE:
        raise SummaryError(f"the GPU verification summary is not an in-toto statement of "
                         f"{PREDICATE_TYPE}: {shown(document.get('predicateType'))}",
                           hint=_REATTACH_HINT)
    subjects = _get(document, "subject", list, "")
    said = {f"sha256:{s.get('digest', {}).get('sha256')}" for s in subjects
            if isinstance(s, Mapping) and isinstance(s.get("digest"), Mapping)}
    predicate = _get(document, "predicate", dict, "")
    resource = _get(predicate, "resourceUri", str, "predicate.")
    if said != {digest} or not resource.endswith("@" + digest):
        raise CheckFailed(f"the GPU verification summary is for {', '.join(sorted(said)) or resource}"
                          f", not {digest}", hint="a summary recorded for another image proves "
                                                  "nothing of this one; run `invoke verify-gpu`")
    ours = _get(predicate, "gpurl", dict, "predicate.")
    result = gpu_result.parse(json.dumps(_get(ours, "check", dict, "predicate.gpurl.")))
    if result.image != digest:
        raise CheckFailed(f"the GPU check in the summary ran {result.image}, not {digest}",
                          hint="run `invoke verify-gpu` for this image")
    verdict = _get(predicate, "verificationResult", str, "predicate.")
    if verdict not in ("PASSED", "FAILED") or (verdict == "PASSED") != result.passed:
        raise SummaryError(f"the GPU verification summary says {shown(verdict)} but its checks "
                         f"say {'passed' if result.passed else 'failed'}",
                           hint=_REATTACH_HINT)
    return Verdict(digest=digest, passed=result.passed,
                   verified_at=_get(predicate, "timeVerified", str, "predicate."),
                   result=result, job=_get(ours, "job", dict, "predicate.gpurl."),
                   policy=_get(ours, "policy", dict, "predicate.gpurl."))
