"""The cluster job's attestation step (stdlib only: the job runs it from its zipapp as
`job.pyz attest job`, with the image's python3: this module and the modules it imports, their
own files).

After the final push the job has the image's digest, its dpkg status (the filesystem kaniko
leaves is the image's last stage), the prebuilt wheels' MANIFEST and the skeleton `invoke build`
staged in the bundle. `job` reads the pushed manifest and config and the base image's digest
through crane (writer/crane.py: its retry rules, its redaction), makes both documents with
attest/documents.py and their artifacts with writer/ocispec.py, pushes each as a one-artifact
OCI layout, and rewrites the `sha256-<hex>` tag's index when the registry has no referrers API
(crane then lists the artifacts under the config's media type, which names neither document:
this index lists them by their artifactType, as the spec asks). Then, given `--inputs-tag`, the
pushed image is tagged by its inputs, so that `invoke build` of the same inputs reuses it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpurl_tasks.attest import documents as docs
from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sbom as cdx
from gpurl_tasks.writer import ocispec
from gpurl_tasks.writer.crane import Crane, CraneFailed
from gpurl_tasks.writer.records import write_layout
from gpurl_tasks.writer.retry import RetryRules

__all__ = ["compiled_wheels", "main", "manifest_key", "manifest_sums", "provenance_commit"]

KINDS = {"sbom": cdx.MEDIA_TYPE, "provenance": slsa.MEDIA_TYPE}
PREBUILT = "prebuilt-wheelhouse"  # the wheel source whose wheels the MANIFEST names


class ToolError(Exception):
    """Bad input: one line on stderr, exit 1."""


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ToolError(f"cannot read {what} {path}: {exc}") from None


def manifest_key(manifest_text: str, abi_prefix: str) -> str:
    """The ABI key a wheel-builder's MANIFEST records on its `abi_prefix` line ("" without)."""
    return next((line[len(abi_prefix):].strip() for line in manifest_text.splitlines()
                 if abi_prefix and line.startswith(abi_prefix)), "")


def manifest_sums(manifest_text: str) -> dict[str, str]:
    """{file: sha256} of a MANIFEST's `<sha256>  <file>` lines (`*file`: sha256sum's binary mode)."""
    sums = {}
    for line in manifest_text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            sums[parts[1].lstrip("*")] = parts[0]
    return sums


def compiled_wheels(manifest_text: str, names: Sequence[str], abi_prefix: str
                    ) -> tuple[cdx.CompiledWheel, ...]:
    """The prebuilt wheels the image installed, with the sha256 and ABI key their MANIFEST
    records."""
    key = manifest_key(manifest_text, abi_prefix)
    sums = manifest_sums(manifest_text)
    missing = [n for n in names if n not in sums]
    if missing:
        raise ToolError(f"the wheels' MANIFEST has no entry for {', '.join(missing)}")
    return tuple(cdx.CompiledWheel(filename=n, sha256=sums[n], abi_key=key) for n in names)


def provenance_commit(commit: str, source_id: str) -> str:
    """The commit the provenance names: the full one `invoke build` passed (else the tag's
    source id), with the source id's `-dirty-<diff>` when the tree had uncommitted edits."""
    _, dirty, diff = source_id.partition("-dirty-")
    commit = commit or source_id
    return f"{commit.partition('-dirty-')[0]}-dirty-{diff}" if dirty else commit


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _read(crane: Crane, document: str, reference: str, what: str) -> bytes:
    try:
        return crane.read(document, reference)
    except CraneFailed as failed:
        raise ToolError(f"cannot read {what}: {failed.answer}") from None


def _base_reference(crane: Crane, configured: str) -> str:
    """The base image by the digest its reference has now; as configured when unknown."""
    try:
        digest = crane.digest(configured)
    except CraneFailed as failed:
        _say(f"    the base image's digest is unknown ({failed.answer}): named as configured")
        return configured
    return f"{configured.rpartition('@')[0] if '@' in configured else configured}@{digest}"


def _documents(args: argparse.Namespace, manifest: bytes, config: bytes, base_image: str
               ) -> dict[str, bytes]:
    """Both documents as artifact layouts under `--out`, each by its kind -> their manifests."""
    skeleton = docs.Skeleton.from_json(_read_json(args.skeleton, "the skeleton"))
    if "sha256:" + hashlib.sha256(manifest).hexdigest() != args.digest:
        raise ToolError(f"the manifest read is not {args.digest}")
    media_type = json.loads(manifest).get("mediaType") or ocispec.OCI_MANIFEST
    labels = (json.loads(config).get("config") or {}).get("Labels") or {}
    status = args.dpkg_status.read_text(errors="replace") if args.dpkg_status.is_file() else ""
    wheels = compiled_wheels(args.wheel_manifest.read_text(), args.wheel, args.abi_prefix) \
        if args.wheel and args.wheel_source == PREBUILT else ()
    build = docs.Build(
        image=args.image, tag=args.tag, digest=args.digest, labels=labels,
        apt=cdx.apt_packages_from_status(status), wheels=wheels, base_image=base_image,
        builder=args.builder, invocation=args.invocation,
        commit=provenance_commit(args.commit, args.source_id))
    subject = {"mediaType": media_type, "digest": args.digest, "size": len(manifest)}
    artifacts = {}
    for kind, document in zip(KINDS, docs.documents(skeleton, build), strict=True):
        artifacts[kind] = ocispec.artifact_manifest(subject, KINDS[kind], document,
                                                    docs.ANNOTATIONS[KINDS[kind]])
        shutil.rmtree(args.out / kind, ignore_errors=True)
        write_layout(args.out / kind, artifacts[kind], ocispec.EMPTY_BLOB, document)
    _say(f"    {len(build.apt)} apt packages, {len(skeleton.python)} lock packages, "
         f"{len(wheels)} compiled wheels, {len(skeleton.post_installs)} post-installs")
    return artifacts


def _listed_by(crane: Crane, image: str, digest: str, artifacts: Sequence[bytes], out: Path
               ) -> str:
    """How a reader finds the artifacts: the registry's referrers API, or (a registry without
    it: crane wrote the tag) the `sha256-<hex>` tag, rewritten to list each by artifactType
    beside whatever it listed before."""
    fallback = f"{image}:{ocispec.fallback_tag(digest)}"
    try:
        existing = crane.read("manifest", fallback)
    except CraneFailed as failed:
        if failed.absent:
            return "the registry's referrers API"
        raise ToolError(f"cannot read {fallback}: {failed.answer}") from None
    try:
        listed = json.loads(existing)
    except ValueError:
        raise ToolError(f"cannot write the referrers tag's index: {fallback} is no JSON") from None
    entries = [ocispec.index_entry(artifact) for artifact in artifacts]
    index = ocispec.fallback_index(listed if isinstance(listed, dict) else None, entries)
    shutil.rmtree(out, ignore_errors=True)
    write_layout(out, index, *artifacts)
    ours = {e["digest"] for e in entries}
    for other in (e["digest"] for e in json.loads(index)["manifests"] if e["digest"] not in ours):
        (out / "blobs" / "sha256" / other.removeprefix("sha256:")).write_bytes(
            _read(crane, "manifest", f"{image}@{other}", f"{other}, listed under {fallback}"))
    try:
        crane.push_layout(out, fallback, f"push of {fallback}")
    except CraneFailed as failed:
        raise ToolError(f"cannot write {fallback}: {failed.answer}") from None
    return f"the tag {fallback}"


def _job(args: argparse.Namespace) -> None:
    """The job's attestation step, its log on stdout (each retry on stderr)."""
    crane = Crane(binary=args.crane, repository=args.image, scratch=args.out,
                  rules=RetryRules(attempts=args.retries + 1, max_wait=float(args.retry_max_wait)))
    pushed = f"{args.image}@{args.digest}"
    _say(f"==> SBOM and provenance of {args.image}:{args.tag}@{args.digest}")
    manifest = _read(crane, "manifest", pushed, "the pushed manifest")
    config = _read(crane, "config", pushed, "the pushed image's config")
    base_image = _base_reference(crane, args.base_image)
    try:
        artifacts = _documents(args, manifest, config, base_image)
    except (ToolError, OSError, KeyError, ValueError, AttributeError) as exc:
        raise ToolError(f"cannot write the SBOM and provenance: {exc}") from None
    for kind, artifact in artifacts.items():
        digest = ocispec.index_entry(artifact)["digest"]
        try:
            crane.push_layout(args.out / kind, f"{args.image}@{digest}", f"push of the {kind}")
        except CraneFailed as failed:
            raise ToolError(f"cannot attach the {kind} to {args.digest}: {failed.answer}") from None
        _say(f"    {kind}: {digest}")
    via = _listed_by(crane, args.image, args.digest, list(artifacts.values()), args.out / "fallback")
    _say(f"attested {pushed}: SBOM and provenance, listed by {via}")
    if args.inputs_tag:
        _record(crane, pushed, args.inputs_tag)


def _record(crane: Crane, pushed: str, tag: str) -> None:
    """The pushed image under its inputs tag (release/reuse.py), once it is attested: the next
    `invoke build` of the same inputs tags it instead of building. Not written, the image
    stands and the next build builds: said, not failed."""
    try:
        crane.tag(pushed, tag)
    except CraneFailed as failed:
        _say(f"    the inputs tag {tag} was not written ({failed.answer}): the next build of "
             "these inputs builds")
        return
    _say(f"recorded {pushed} as {tag}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpurl-attest", description="the pushed image's SBOM and provenance, attached")
    sub = parser.add_subparsers(dest="command", required=True)
    job = sub.add_parser("job", help=(
        "the cluster job's step: both documents written and attached to --digest with crane "
        "(--crane), listed under the referrers tag where the registry has no referrers API"))
    for flag in ("--skeleton", "--crane", "--dpkg-status", "--wheel-manifest", "--out"):
        job.add_argument(flag, type=Path, required=flag != "--wheel-manifest",
                         default=Path("/nonexistent"))
    for flag in ("--image", "--tag", "--digest", "--base-image", "--builder", "--invocation",
                 "--commit", "--source-id"):
        job.add_argument(flag, required=True)
    for flag in ("--retries", "--retry-max-wait"):
        job.add_argument(flag, type=int, required=True)
    job.add_argument("--wheel-source", default="",
                     help=f"the wheels' MANIFEST names the --wheel files for {PREBUILT} only")
    job.add_argument("--abi-prefix", default="")
    job.add_argument("--inputs-tag", default="",
                     help="also put the pushed image under this tag (its inputs tag; empty: none)")
    job.add_argument("--wheel", action="append", default=[])
    args = parser.parse_args(argv)
    try:
        _job(args)
    except ToolError as exc:
        print(f"gpurl-attest: error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # crane, the skeleton or --out: the job script provides them
        print(f"gpurl-attest: error: {exc} (the job script runs this step after it fetched "
              "crane and staged the bundle)", file=sys.stderr)
        return 1
    return 0
