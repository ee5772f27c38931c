"""The cluster job's writer of the image's SBOM and provenance (stdlib only: the job runs it from
its zipapp as `job.pyz attest`: this module and the modules it imports, their own files).

After the final push the job has the image's manifest and config (crane), its dpkg status
(the filesystem kaniko leaves is the image's last stage), the prebuilt wheels' MANIFEST and the
skeleton `invoke build` staged in the bundle. `documents` makes both documents with
attest/documents.py and their artifacts with writer/ocispec.py, and writes each as a
one-artifact OCI layout that `crane push` attaches; `fallback` writes the `sha256-<hex>` tag's
index as a layout, when the registry has no referrers API (crane then lists the artifacts under
the config's media type, which names neither document: this index lists them by their
artifactType, as the spec asks).
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

__all__ = ["compiled_wheels", "main"]

KINDS = {"sbom": cdx.MEDIA_TYPE, "provenance": slsa.MEDIA_TYPE}


class ToolError(Exception):
    """Bad input: one line on stderr, exit 1."""


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise ToolError(f"cannot read {what} {path}: {exc}") from None


def compiled_wheels(manifest_text: str, names: Sequence[str], abi_prefix: str
                    ) -> tuple[cdx.CompiledWheel, ...]:
    """The prebuilt wheels the image installed, with the sha256 and ABI key their MANIFEST
    records (`<sha256>  <file>` lines, the key on its `abi_prefix` line)."""
    key = next((line[len(abi_prefix):].strip() for line in manifest_text.splitlines()
                if abi_prefix and line.startswith(abi_prefix)), "")
    sums = {}
    for line in manifest_text.splitlines():
        parts = line.split()
        if len(parts) == 2 and not line.startswith("#"):
            sums[parts[1].lstrip("*")] = parts[0]
    missing = [n for n in names if n not in sums]
    if missing:
        raise ToolError(f"the wheels' MANIFEST has no entry for {', '.join(missing)}")
    return tuple(cdx.CompiledWheel(filename=n, sha256=sums[n], abi_key=key) for n in names)


def _layout(directory: Path, top: bytes, media_type: str, blobs: Sequence[bytes]) -> None:
    """An OCI image layout whose index.json names `top` (what `crane push DIR REF` pushes)."""
    shutil.rmtree(directory, ignore_errors=True)
    store = directory / "blobs" / "sha256"
    store.mkdir(parents=True)
    for data in (top, *blobs):
        (store / hashlib.sha256(data).hexdigest()).write_bytes(data)
    (directory / "oci-layout").write_bytes(ocispec.canonical_json({"imageLayoutVersion": "1.0.0"}))
    (directory / "index.json").write_bytes(ocispec.canonical_json({"schemaVersion": 2, "manifests": [{
        "mediaType": media_type, "size": len(top),
        "digest": "sha256:" + hashlib.sha256(top).hexdigest()}]}))


def _documents(args: argparse.Namespace) -> None:
    skeleton = docs.Skeleton.from_json(_read_json(args.skeleton, "the skeleton"))
    manifest = args.image_manifest.read_bytes()
    if "sha256:" + hashlib.sha256(manifest).hexdigest() != args.digest:
        raise ToolError(f"the manifest read ({args.image_manifest}) is not {args.digest}")
    media_type = json.loads(manifest).get("mediaType") or ocispec.OCI_MANIFEST
    labels = (_read_json(args.image_config, "the image config").get("config") or {}) \
        .get("Labels") or {}
    status = args.dpkg_status.read_text(errors="replace") if args.dpkg_status.is_file() else ""
    wheels = compiled_wheels(args.wheel_manifest.read_text(), args.wheel, args.abi_prefix) \
        if args.wheel else ()
    build = docs.Build(
        image=args.image, tag=args.tag, digest=args.digest, labels=labels,
        apt=cdx.apt_packages_from_status(status), wheels=wheels, base_image=args.base_image,
        builder=args.builder, invocation=args.invocation, commit=args.commit)
    subject = {"mediaType": media_type, "digest": args.digest, "size": len(manifest)}
    for kind, document in zip(KINDS, docs.documents(skeleton, build), strict=True):
        artifact = ocispec.artifact_manifest(subject, KINDS[kind], document,
                                            docs.ANNOTATIONS[KINDS[kind]])
        _layout(args.out / kind, artifact, ocispec.OCI_MANIFEST, [ocispec.EMPTY_BLOB, document])
        print(kind, ocispec.index_entry(artifact)["digest"])
    print(f"{len(build.apt)} apt packages, {len(skeleton.python)} lock packages, "
          f"{len(wheels)} compiled wheels, {len(skeleton.post_installs)} post-installs",
          file=sys.stderr)


def _fallback(args: argparse.Namespace) -> None:
    entries, blobs = [], []
    for kind in KINDS:
        index = _read_json(args.attached / kind / "index.json", f"the {kind} layout")
        digest = index["manifests"][0]["digest"].removeprefix("sha256:")
        artifact = (args.attached / kind / "blobs" / "sha256" / digest).read_bytes()
        entries.append(ocispec.index_entry(artifact))
        blobs.append(artifact)
    existing = _read_json(args.existing, "the fallback index") if args.existing else None
    index = ocispec.fallback_index(existing, entries)
    _layout(args.out, index, ocispec.OCI_INDEX, blobs)
    ours = {e["digest"] for e in entries}
    for entry in json.loads(index)["manifests"]:
        if entry["digest"] not in ours:
            print(entry["digest"])  # listed before: the job adds its manifest to the layout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpurl-attest", description="the pushed image's SBOM and provenance as OCI artifact layouts")
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("documents", help="write the SBOM and provenance artifact layouts")
    for flag in ("--skeleton", "--image-manifest", "--image-config", "--dpkg-status",
                 "--wheel-manifest", "--out"):
        make.add_argument(flag, type=Path, required=flag != "--wheel-manifest",
                          default=Path("/nonexistent"))
    for flag in ("--image", "--tag", "--digest", "--base-image", "--builder", "--invocation",
                 "--commit"):
        make.add_argument(flag, required=True)
    make.add_argument("--abi-prefix", default="")
    make.add_argument("--wheel", action="append", default=[])
    index = sub.add_parser("fallback", help="write the referrers tag's index as a layout")
    index.add_argument("--existing", type=Path)
    index.add_argument("--attached", type=Path, required=True)
    index.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        (_documents if args.command == "documents" else _fallback)(args)
    except (ToolError, OSError, KeyError, ValueError) as exc:
        print(f"gpurl-attest: error: {exc}", file=sys.stderr)
        return 1
    return 0
