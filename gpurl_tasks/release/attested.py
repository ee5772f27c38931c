"""The SBOM and provenance attached to a pushed image: written after a push (`attach`), read
back and checked (verify-layers).

Reads the artifacts whose subject is the image (oci/referrers.py), and applies attest/check.py's
rules against what this checkout says the image holds (attest/collect.py). The SBOM is compared
with the lock only when the image was built from this lock (its lock-hash label): another
commit's image is checked against its provenance and its SBOM's shape alone.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from gpurl_tasks import values
from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sameinputs
from gpurl_tasks.attest import sbom as cdx
from gpurl_tasks.attest import verification as vsa
from gpurl_tasks.attest.check import check_attestations
from gpurl_tasks.attest.collect import listed
from gpurl_tasks.attest.documents import ANNOTATIONS, Build, Skeleton
from gpurl_tasks.attest.documents import documents as attest_documents
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile import handwritten
from gpurl_tasks.dockerfile.provenance import LABEL_CONFIG_HASH, LABEL_LOCK_HASH
from gpurl_tasks.errors import ExitCode, GpurlError
from gpurl_tasks.files import read_text
from gpurl_tasks.imageref import ImageRef
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import PulledImage
from gpurl_tasks.oci.referrers import Referrer, attach, fetch, find
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.release.configured import client_settings, resolve_reference
from gpurl_tasks.release.gpu import latest_verdict
from gpurl_tasks.release.verify import Finding

__all__ = ["Attestations", "BuildContext", "attach_attestations", "attestation_findings", "base_image",
           "documents", "read_attestations", "sbom_task", "skeleton", "tag_commit"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuildContext:
    """What only the builder knows of a build: read in the built image or from the engine."""

    apt: tuple[cdx.AptPackage, ...]  # dpkg's packages in the built image
    wheels: tuple[cdx.CompiledWheel, ...]  # the compiled wheels the image installed
    base_image: str  # by digest (or image id) where known
    builder: str  # the kaniko executor reference, or the BuildKit client's version
    invocation: str  # the iris job name, or the local build's id
    commit: str  # the full commit (or source id) the image was built from
    repository_url: str = ""


def skeleton(config: Config) -> Skeleton:
    """What the documents of the variant's image say that is known before its build (the
    cluster job reads it from the bundle: `invoke generate` writes it beside the script). A
    hand-written Dockerfile's image has no lock to list: its SBOM holds what the image's dpkg
    records, and no Python package."""
    python, declared = listed(config) if config.build.generate else ((), ())
    return Skeleton(profile=config.profile, variant=config.variant.name, python=python,
                    post_installs=declared, base_image=base_image(config),
                    lock_label=LABEL_LOCK_HASH, config_label=LABEL_CONFIG_HASH)


def base_image(config: Config) -> str:
    """The base image the provenance names: build.base-image for a generated Dockerfile; a
    hand-written one's own, the external image its last stage starts from (its FROM chain,
    ARGs and build.build-args substituted)."""
    if config.build.generate:
        return config.build.base_image
    text = read_text(config.build.dockerfile, what="hand-written Dockerfile")
    return handwritten.base_image(handwritten.image_inputs(
        text, values.build_arg_map(config.build.build_args))) or config.build.base_image


def documents(config: Config, image: PulledImage, context: BuildContext) -> tuple[bytes, bytes]:
    """The SBOM and the provenance statement of `image`, as the bytes that are attached."""
    return attest_documents(skeleton(config), Build(
        image=image.ref.name, tag=image.ref.tag or "", digest=image.subject,
        labels=image.labels, apt=context.apt, wheels=context.wheels,
        base_image=context.base_image, builder=context.builder, invocation=context.invocation,
        commit=context.commit, repository_url=context.repository_url))


def attach_attestations(config: Config, image: PulledImage, client: RegistryClient,
                        context: BuildContext) -> Sequence[Referrer]:
    """Attach the image's SBOM and provenance to it (its top manifest is their subject)."""
    subject = client.descriptor(image.ref, image.subject)
    sbom, statement = documents(config, image, context)
    return (attach(client, image.ref, subject, cdx.MEDIA_TYPE, sbom, ANNOTATIONS[cdx.MEDIA_TYPE]),
            attach(client, image.ref, subject, slsa.MEDIA_TYPE, statement,
                   ANNOTATIONS[slsa.MEDIA_TYPE]))


def tag_commit(config: Config, image: PulledImage) -> str | None:
    """The commit the image's immutable tag names (None: a digest or another tag)."""
    tag = image.ref.tag or ""
    prefix = config.registry.tag_prefix + "-"
    if not config.registry.is_immutable_tag(tag):
        return None
    return values.source_commit(tag[len(prefix):])


def attestation_findings(config: Config, image: PulledImage, client: RegistryClient
                         ) -> tuple[list[Finding], list[str]]:
    """(findings, notes) of the image's attached SBOM and provenance under verify.attestations."""
    mode = config.verify.attestations
    if mode == "off":
        return [], []
    required = mode == "required"
    try:
        attached = read_attestations(client, image.ref, image.subject)
    except GpurlError as exc:
        message = f"the image's attestations cannot be read ({exc.message})"
        return ([Finding(code="attestations-unreadable", message=message, failing=True)]
                if required else [], [] if required else [message])
    where = attached.via
    lock_label = image.labels.get(LABEL_LOCK_HASH)
    ours = (lock_label is not None and config.lock.is_file()
            and lock_label == hashlib.sha256(config.lock.read_bytes()).hexdigest())
    sbom = attached.sbom
    python, declared = listed(config) if ours and sbom else ((), ())
    problems, notes = check_attestations(
        sbom=sbom, provenance=attached.provenance,
        expected={(p.name, p.version) for p in python} if ours and sbom else None,
        post_installs=declared,
        commit=tag_commit(config, image), required=required, where=where,
        same_inputs=sameinputs.vouching(attached.same_inputs, image.subject, image.ref.tag or ""))
    return [Finding(code=p.code, message=p.message, failing=True) for p in problems], notes


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Attestations:
    """An image's attached documents (None: not attached), and where they were listed."""

    reference: str
    digest: str
    sbom: Mapping[str, Any] | None
    provenance: Mapping[str, Any] | None
    via: str
    document: bool = False  # `invoke sbom --document`: show the SBOM itself
    gpu: vsa.Verdict | None = None  # the latest GPU verification summary (`invoke verify-gpu`)
    gpu_problem: str = ""  # why an attached one cannot be used
    same_inputs: tuple[Mapping[str, Any], ...] = ()  # attest/sameinputs.py's statements
    exit_code: int = ExitCode.OK

    def counts(self) -> dict[str, int]:
        """Components of the SBOM by what they are (lock sources, compiled wheels, apt...)."""
        out: dict[str, int] = {}
        for component in (self.sbom or {}).get("components", []):
            props = {p.get("name"): p.get("value") for p in component.get("properties", [])}
            kind = str(props.get("gpurl:source", "other"))
            out[kind] = out.get(kind, 0) + 1
        return dict(sorted(out.items()))

    def human(self) -> str:
        if self.document and self.sbom is not None:
            return json.dumps(self.sbom, indent=2, sort_keys=True)
        lines = [f"{self.reference} ({self.digest})"]
        if self.sbom is None:
            lines.append("SBOM: none attached")
        else:
            parts = ", ".join(f"{n} {k}" for k, n in self.counts().items())
            lines.append(f"SBOM: CycloneDX {self.sbom.get('specVersion')}, {parts} ({self.via})")
        if self.provenance is None:
            lines.append("provenance: none attached")
        else:
            predicate = self.provenance.get("predicate", {})
            run = predicate.get("runDetails", {})
            lines.append(f"provenance: commit {slsa.commit_of(self.provenance)}, builder "
                         f"{run.get('builder', {}).get('id')}, invocation "
                         f"{run.get('metadata', {}).get('invocationId')}")
        lines += [f"same inputs: {tag} put on this image by a build of the same inputs "
                  f"({inputs})" for tag, inputs in sameinputs.vouched(self.same_inputs, self.digest)]
        lines.append(self.gpu.line() if self.gpu else
                     f"GPU check: {self.gpu_problem or 'none attached'}")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        vouched = sameinputs.vouched(self.same_inputs, self.digest)
        return {"reference": self.reference, "digest": self.digest, "via": self.via,
                "sbom": (dict(self.sbom) if self.document else self.counts())
                if self.sbom is not None else None,
                "provenance": dict(self.provenance) if self.provenance is not None else None,
                "gpu": self.gpu.to_json() if self.gpu else None,
                **({"gpu_problem": self.gpu_problem} if self.gpu_problem else {}),
                **({"same_inputs": [{"tag": tag, "inputs_tag": inputs}
                                    for tag, inputs in vouched]} if vouched else {})}


def read_attestations(client: RegistryClient, ref: ImageRef, digest: str) -> Attestations:
    """The SBOM, provenance and same-inputs statements attached to manifest `digest` of
    `ref`'s repository."""
    listed = find(client, ref, digest)
    found = {r.artifact_type: r for r in listed}
    docs = {kind: fetch(client, ref, found[kind]) if kind in found else None
            for kind in (cdx.MEDIA_TYPE, slsa.MEDIA_TYPE)}
    same = tuple(fetch(client, ref, r) for r in listed
                 if r.artifact_type == sameinputs.MEDIA_TYPE)
    return Attestations(reference=str(ref), digest=digest, sbom=docs[cdx.MEDIA_TYPE],
                        provenance=docs[slsa.MEDIA_TYPE], same_inputs=same,
                        via=next((r.via for r in found.values()), "not attached"))


def sbom_task(config: Config, text: str | None, *, document: bool) -> Attestations:
    """`invoke sbom REF`: what is attached to the image (default: this commit's tag), summed
    up (or the SBOM itself), its GPU verdict included; of an image index, its variant's
    platform's image's."""
    ref = resolve_reference(config, text)
    with open_client(client_settings(config), ref) as client:
        image = client.pull(ref, platform=config.target.platform)
        found = read_attestations(client, ref, image.subject)
        try:
            verdict, problem = latest_verdict(client, ref, image.subject), ""
        except GpurlError as exc:
            verdict, problem = None, f"attached but unusable ({exc.message})"
    return dataclasses.replace(found, document=document, gpu=verdict, gpu_problem=problem)
