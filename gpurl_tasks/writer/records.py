"""A written slice's records (stdlib only: the cluster job runs them in env-base's python3):
its cache key, the history entry that names it, the one-layer image it is cached as, and the
slice index the job reads.

The history entry is made here (`written_history`, `recorded_history`) and read back here
(`slice_of`, `record_of`): verify, diff and the benchmarks read a slice layer's entry through
`slice_of`, never by matching its text themselves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from gpurl_tasks.writer.blob import WRITER_VERSION, Blob, LayerError, compressor
from gpurl_tasks.writer.ocispec import (
    DOCKER_CONFIG,
    DOCKER_LAYER_GZIP,
    DOCKER_MANIFEST,
    OCI_CONFIG,
    OCI_LAYER_GZIP,
    OCI_MANIFEST,
    canonical_json,
)

__all__ = ["MEDIA_TYPES", "SLICE_DIR", "IndexLine", "Probe", "SliceEntry",
           "manifest_blobs", "platform_of", "read_document",
           "read_index", "record_of", "recorded_history", "slice_image", "slice_key",
           "slice_keys", "slice_of", "uv_on", "write_layout", "written_history"]

_WRITTEN = f"gpurl {WRITER_VERSION.rstrip('0123456789')}"  # every writer version's entry
SLICE_DIR = "/tmp/gpurl-layers"  # where every slice file sits in an image (plan's Slice.IMAGE_DIR)
_SLICE_FILE = re.compile(re.escape(SLICE_DIR) + r"/([^\s'\"]+)\.txt")

_KEY_VERSION = "gpurl-written-slice-1"  # bump when what a cached slice image means changes
# An image manifest's media type -> (its config's, its gzip layers'): Docker's or OCI's.
MEDIA_TYPES = {DOCKER_MANIFEST: (DOCKER_CONFIG, DOCKER_LAYER_GZIP),
               OCI_MANIFEST: (OCI_CONFIG, OCI_LAYER_GZIP)}


def slice_key(*, label: str, slice_text: bytes, created_by: str, python: str, venv: str,
              uv: str, compressor: str, arch: str) -> str:
    """The cache tag of one written slice: a hash of all its record depends on (the slice
    file's bytes, the history entry naming its path in the image, env-base's Python version
    and venv path, the uv version, the writer with its zlib and level, the machine whose
    wheels it holds) and nothing that depends on its position or on env-base's id, nor on
    the machine that staged it.

    `arch` is the image's target.arch: a slice file lists every platform's hashes, so two
    variants of one profile on two machines have the same slice text and cache repository,
    and only `arch` tells their slices apart. An x86_64 key holds no arch, so every slice
    cached before aarch64 images keeps its tag. `uv --version` names the machine uv was
    built for; the key holds it as uv says it on `arch` (`uv_on`), so a slice staged on
    another machine has the key of one staged natively."""
    fields = {"version": _KEY_VERSION, "slice": hashlib.sha256(slice_text).hexdigest(),
              "created_by": created_by, "python": python, "venv": venv, "uv": uv_on(uv, arch),
              "compressor": compressor}
    key = json.dumps(fields if arch == "x86_64" else {**fields, "arch": arch}, sort_keys=True)
    return f"slice-{label[:40]}-{hashlib.sha256(key.encode()).hexdigest()[:32]}"


_UV_TRIPLE = re.compile(r"\((x86_64|aarch64)(-unknown-linux-(?:gnu|musl))\)")


def uv_on(said: str, arch: str) -> str:
    """What `uv --version` (`said`, e.g. `uv 0.13.9 (x86_64-unknown-linux-gnu)`) says on an
    `arch` machine: the same uv release names its build's machine in parentheses."""
    return _UV_TRIPLE.sub(lambda m: f"({arch}{m.group(2)})", said)


_RECORD_MARK = "  # record "
_RECORD_TAG = re.compile(r"slice-[A-Za-z0-9._-]{1,40}-[0-9a-f]{32}")


def recorded_history(created_by: str, tag: str) -> str:
    """A written slice's history entry, naming the cache tag its record is kept under, so a
    check of the pushed image finds the blob gpurl wrote for that layer (`record_of` reads it
    back: the one place this spelling is made and read)."""
    if not _RECORD_TAG.fullmatch(tag):
        raise LayerError(f"{tag!r} is not a slice's cache tag")
    return f"{created_by}{_RECORD_MARK}{tag}"


def record_of(created_by: str) -> str | None:
    """The cache tag a history entry names with `recorded_history`, None when it names none."""
    head, mark, tag = created_by.rpartition(_RECORD_MARK)
    return tag if mark and head and _RECORD_TAG.fullmatch(tag) else None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Probe:
    """What a written slice's bytes depend on in the image it is staged in, besides its file."""

    python: str  # the venv's interpreter version, e.g. 3.11.2
    zlib: str  # the zlib this python3 (the writer's) compresses with
    uv: str  # what `uv --version` says
    machine: str  # platform.machine(): the wheels a native staging install takes (x86_64, aarch64)

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def slice_keys(index: Path, context: Path, *, venv: str, level: int,
               found: Probe) -> list[tuple[str, str]]:
    """(NN-label, cache tag) for each line of a slice index (`read_index`), the file read
    relative to `context`, with one probe of the image (writer/probe.py): the cluster job
    stages natively, so the slices' arch is the machine the probe ran on."""
    try:
        lines = read_index(index.read_text(encoding="utf-8"), str(index))
    except UnicodeDecodeError as exc:
        raise LayerError(f"slice index {index} is not UTF-8 ({exc.reason} at byte "
                         f"{exc.start})") from None
    return [(line.name, slice_key(label=line.label, slice_text=(context / line.file).read_bytes(),
                                  created_by=line.created_by,
                                  python=found.python, venv=venv, uv=found.uv,
                                  compressor=compressor(level, found.zlib),
                                  arch=found.machine))
            for line in lines]


def _descriptor(media_type: str, data_or_blob: bytes | Blob) -> dict[str, object]:
    if isinstance(data_or_blob, Blob):
        return {"mediaType": media_type, "digest": data_or_blob.digest, "size": data_or_blob.size}
    return {"mediaType": media_type, "size": len(data_or_blob),
            "digest": "sha256:" + hashlib.sha256(data_or_blob).hexdigest()}


def slice_image(blob: Blob, *, created_by: str, media_type: str,
                platform: dict[str, str]) -> tuple[bytes, bytes]:
    """(manifest, config) of the image that records one slice in the cache repository: its
    one layer, deterministic, so the same slice gives the same manifest digest on every
    builder and both paths record it as the same image."""
    if media_type not in MEDIA_TYPES:
        raise LayerError(f"{media_type} is not a Docker or OCI image manifest")
    config_type, layer_type = MEDIA_TYPES[media_type]
    config = canonical_json({**platform, "config": {},
                             "rootfs": {"type": "layers", "diff_ids": [blob.diff_id]},
                             "history": [{"created_by": created_by}]})
    manifest = canonical_json({"schemaVersion": 2, "mediaType": media_type,
                               "config": _descriptor(config_type, config),
                               "layers": [_descriptor(layer_type, blob)]})
    return manifest, config


def write_layout(directory: Path, top: bytes, *blobs: bytes,
                 moved: tuple[Blob, Path] | None = None) -> None:
    """An OCI image layout whose index.json names `top` (a manifest or an index, what
    `crane push DIR REF` pushes), with the blobs it names: `blobs` as bytes, `moved` a written
    file moved into the store (a slice's gzip, never read into memory)."""
    media_type = json.loads(top)["mediaType"]
    store = directory / "blobs" / "sha256"
    store.mkdir(parents=True, exist_ok=True)
    for data in (top, *blobs):
        (store / hashlib.sha256(data).hexdigest()).write_bytes(data)
    if moved is not None:
        moved[1].replace(store / moved[0].digest.removeprefix("sha256:"))
    (directory / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    (directory / "index.json").write_bytes(canonical_json(
        {"schemaVersion": 2, "manifests": [_descriptor(media_type, top)]}))


def read_document(path: Path, what: str) -> dict[str, Any]:
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise LayerError(f"{what} {path} cannot be read: {exc}") from None
    if not isinstance(document, dict):
        raise LayerError(f"{what} {path} is not a JSON object")
    return document


def manifest_blobs(manifest: dict[str, Any]) -> list[str]:
    """The blobs an image manifest names: its config's digest, then each layer's in order."""
    config, layers = manifest.get("config"), manifest.get("layers")
    named = [config, *layers] if isinstance(layers, list) else None
    if named is None or not all(isinstance(d, dict) and isinstance(d.get("digest"), str)
                                and d["digest"].startswith("sha256:") for d in named):
        raise LayerError("the manifest names no config and layers by sha256 digest")
    return [str(d["digest"]) for d in named]


def platform_of(config: dict[str, Any]) -> dict[str, str]:
    """The platform fields of an image config, which a slice's one-layer image repeats."""
    return {k: str(config[k]) for k in ("architecture", "os", "variant") if k in config}


def written_history(image_path: str, venv: str, *, hashed: bool = True) -> str:
    """The history entry of a written slice, on every builder: what ran to stage it (the
    slice file at `image_path` installed into `venv`; --require-hashes when every line of
    it is hashed, as writer/staging.py's `install_command` runs it)."""
    check = "--require-hashes " if hashed else ""
    return (f"gpurl {WRITER_VERSION}: uv pip install --no-deps {check}"
            f"--no-installer-metadata --prefix {venv} -r {image_path}")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class SliceEntry:
    """What a layer's history entry says of the slice it installs."""

    stem: str  # the slice file's name in SLICE_DIR, without `.txt`
    written: bool  # gpurl's writer (any version) wrote the layer, no RUN built it
    record: str | None  # the cache tag its record is kept under, when the entry names one


def slice_of(created_by: str | None) -> SliceEntry | None:
    """The slice a history entry installs (a RUN of the Dockerfile's slice install, or a layer
    gpurl wrote), None for any other entry: the one reader of both spellings."""
    if not created_by or "uv pip install" not in created_by:
        return None
    found = _SLICE_FILE.search(created_by)
    if found is None:
        return None
    return SliceEntry(stem=found.group(1), written=created_by.startswith(_WRITTEN),
                      record=record_of(created_by))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IndexLine:
    """One line of the slice index the cluster job reads: `NN-label<TAB>label<TAB>file<TAB>
    created by<TAB>build`, in plan order."""

    name: str  # the plan's NN-label
    label: str
    file: str  # the slice file, relative to the build context
    created_by: str
    build: str  # `lower [uv flags]` when staged on the slices below it, else empty

    def to_line(self) -> str:
        return "\t".join((self.name, self.label, self.file, self.created_by, self.build))


def read_index(text: str, where: str) -> list[IndexLine]:
    """The slice index's lines (blank lines skipped); a line that is not five fields is an
    error naming it."""
    found = []
    for line in text.splitlines():
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 5 or not all(fields[:4]):
            raise LayerError(f"slice index {where}: {line[:80]!r} is not NN-label<TAB>label<TAB>"
                             "file<TAB>created by<TAB>build")
        found.append(IndexLine(name=fields[0], label=fields[1], file=fields[2],
                               created_by=fields[3], build=fields[4]))
    return found
