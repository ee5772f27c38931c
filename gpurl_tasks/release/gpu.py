"""The GPU verification summary at the registry: attached to the image's manifest as its SBOM
and provenance are (oci/referrers.py: the referrers API, else the `sha256-<hex>` tag), read
back, and pin's rule for it under `verify.gpu`.

A summary counts only once the registry lists it for the image: `attach_summary` reads the
listing back and fails when it is not there. Of several summaries (a check run again), the
latest by its time of verification is the image's verdict.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpurl_tasks.attest import verification as vsa
from gpurl_tasks.config import Config
from gpurl_tasks.errors import CheckFailed, GpurlError
from gpurl_tasks.imageref import ImageRef
from gpurl_tasks.oci.image import PulledImage
from gpurl_tasks.oci.referrers import Referrer, attach, fetch, find
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.release.verify import Finding

__all__ = ["GPU_CODES", "GPU_HINT", "attach_summary", "gpu_findings", "latest_verdict", "verify_gpu_hint"]

# the findings gpu_findings makes (pin names them apart from the layer rules)
GPU_CODES = frozenset({"gpu-unreadable", "no-gpu-check", "gpu-check-failed"})
GPU_HINT = "run `invoke verify-gpu{variant}` to check the image on its GPU node"


def verify_gpu_hint(config: Config) -> str:
    """The command that records a verdict for `config`'s variant."""
    return GPU_HINT.format(variant=f" --variant {config.variant.name}"
                           if config.variant.declared else "")


def attach_summary(client: RegistryClient, ref: ImageRef, digest: str, document: bytes
                   ) -> Referrer:
    """Attach the summary to manifest `digest` and check the registry lists it there."""
    attached = attach(client, ref, client.descriptor(ref, digest), vsa.MEDIA_TYPE, document)
    listed = {r.digest for r in find(client, ref, digest, vsa.MEDIA_TYPE)}
    if attached.digest not in listed:
        raise CheckFailed(f"the GPU verification summary {attached.digest[:19]} was pushed, but "
                          f"the registry does not list it for {digest[:19]} ({attached.via})",
                          hint="the verdict is not attached: run `invoke verify-gpu` again, "
                               "or check the registry's referrers support")
    return attached


def latest_verdict(client: RegistryClient, ref: ImageRef, digest: str) -> vsa.Verdict | None:
    """The latest summary attached to manifest `digest` (None: none is); GpurlError when one
    cannot be read or is for another digest."""
    verdicts: Sequence[vsa.Verdict] = [
        vsa.read_summary(fetch(client, ref, r), digest)
        for r in find(client, ref, digest, vsa.MEDIA_TYPE)]
    return max(verdicts, key=lambda v: v.verified_at, default=None)


def gpu_findings(config: Config, image: PulledImage, client: RegistryClient
                 ) -> tuple[list[Finding], list[str]]:
    """(findings, notes) of the image's GPU verdict under verify.gpu: "required" fails without
    a passing one, "if-present" fails a failing one and notes none, "off" reads nothing."""
    mode = config.verify.gpu
    if mode == "off":
        return [], []
    hint = verify_gpu_hint(config)
    digest = image.subject
    try:
        verdict = latest_verdict(client, image.ref, digest)
    except GpurlError as exc:
        return [Finding(code="gpu-unreadable", failing=True, message=(
            f"the GPU verification summary of {digest[:19]} cannot be used ({exc.message}); "
            f"{hint}"))], []
    if verdict is None:
        message = f"no GPU check ran for {digest[:19]} (none is attached)"
        if mode == "required":
            return [Finding(code="no-gpu-check", failing=True,
                            message=f"{message}; verify.gpu = required: {hint}")], []
        return [], [f"{message}; not required (verify.gpu = if-present)"]
    if not verdict.passed:
        return [Finding(code="gpu-check-failed", failing=True,
                        message=f"{verdict.line()}; {hint}")], []
    return [], [verdict.line()]
