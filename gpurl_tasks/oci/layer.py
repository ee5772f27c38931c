"""One deterministic layer blob from a staging tree (stdlib only: it runs in env-base's python3).

The same tree gives the same bytes, wherever and whenever it is written, so a slice rebuilt
after a cache loss is the same blob and no node pulls it again:
- the tar: entries sorted by name (a parent always before its children), every parent
  directory present (those of `prefix` too), one fixed mtime, uid and gid 0, empty
  uname/gname, modes normalised (0755 directories and executables, 0644 other files, 0777
  symlinks), symlinks kept as links; no atime or ctime, and a PAX header only where a name or
  a size does not fit ustar;
- the gzip: zlib's raw deflate at one level (memLevel 8, default strategy) in a header of our
  own (mtime 0, no name, OS byte 255), so the bytes depend only on the zlib that compresses.
  The cache key of a slice names that zlib's version (`compressor()`).

`python3 -m gpurl_tasks.oci.layer SOURCE OUTPUT --prefix opt/venv --level N` writes the blob
atomically and prints one JSON line {digest, diff_id, size}.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["MEDIA_TYPES", "MTIME", "STAGING_LEFTOVERS", "WRITER_VERSION", "Blob", "GzipSink",
           "LayerError",
           "Probe", "canonical_json", "compressor", "layer_names", "main", "platform_of", "probe",
           "record_of", "recorded_history", "slice_image", "slice_key", "slice_keys",
           "write_layer", "write_layout"]

WRITER_VERSION = "gpurl-layer-2"  # bump whenever the bytes written for one tree change
MTIME = 1  # one second past the epoch: 0 reads as "unset" to some tools
_MEM_LEVEL = 8  # zlib's default, pinned
_GZIP_OS = 255  # "unknown", as Python's gzip and Go's compress/gzip write it
_CHUNK = 1 << 20


class LayerError(ValueError):
    """A layer or image cannot be written from what was given (one line, for the user)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Blob:
    """A written layer: its blob digest, the sha256 of its tar (the config's diff_id), size."""

    digest: str
    diff_id: str
    size: int

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def compressor(level: int, zlib_version: str = zlib.ZLIB_RUNTIME_VERSION) -> str:
    """What the blob's bytes depend on besides the tree: this writer, the zlib (this
    interpreter's, or the one env-base reported), the level."""
    return f"{WRITER_VERSION} zlib {zlib_version} level {level}"


class GzipSink:
    """A write-only stream: hashes what tar writes (diff_id), deflates it, hashes and writes
    the gzip member (digest) to `out` (write_layer's; bench-compression recompresses a tar
    through it into gpurl's own bytes)."""

    def __init__(self, out: BinaryIO, level: int) -> None:
        self._out = out
        self._deflate = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS, _MEM_LEVEL,
                                         zlib.Z_DEFAULT_STRATEGY)
        self._tar = hashlib.sha256()
        self._blob = hashlib.sha256()
        self._crc = 0
        self._length = 0
        self.size = 0
        extra = 2 if level == 9 else 4 if level == 1 else 0  # RFC 1952 XFL
        self._emit(b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + bytes([extra, _GZIP_OS]))

    def _emit(self, data: bytes) -> None:
        if data:
            self._blob.update(data)
            self._out.write(data)
            self.size += len(data)

    def write(self, data: bytes) -> int:
        self._tar.update(data)
        self._crc = zlib.crc32(data, self._crc)
        self._length += len(data)
        self._emit(self._deflate.compress(data))
        return len(data)

    def finish(self) -> Blob:
        self._emit(self._deflate.flush())
        self._emit(self._crc.to_bytes(4, "little") + (self._length & 0xFFFFFFFF).to_bytes(
            4, "little"))
        return Blob(digest="sha256:" + self._blob.hexdigest(),
                    diff_id="sha256:" + self._tar.hexdigest(), size=self.size)


def _prefix_parts(prefix: str) -> list[str]:
    parts = [p for p in prefix.strip("/").split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise LayerError(f"layer prefix {prefix!r} must be a plain relative path")
    return parts


# What an installer leaves at the root of a staging prefix that is bookkeeping, not content:
# uv's `.lock` (uv pip install --prefix writes it). The one place it is dropped, on every path.
STAGING_LEFTOVERS = frozenset({".lock"})


def _walk(source: Path, prefix: str) -> list[tuple[str, Path]]:
    """(name in the layer, path on disk) for the prefix's directories and every entry under
    `source` but STAGING_LEFTOVERS at its root, directories named with a trailing slash,
    sorted by name."""
    parts = _prefix_parts(prefix)
    found = [("/".join(parts[:i + 1]) + "/", source) for i in range(len(parts) - 1)]
    base = "/".join(parts)
    found.append((base + "/" if base else "", source))
    for top, dirs, files in os.walk(source):
        here = Path(top)
        rel = here.relative_to(source).as_posix()
        stem = base if rel == "." else f"{base}/{rel}" if base else rel
        if rel == ".":
            dirs[:] = [d for d in dirs if d not in STAGING_LEFTOVERS]
            files = [f for f in files if f not in STAGING_LEFTOVERS]
        for name in dirs + files:
            path = here / name
            entry = f"{stem}/{name}" if stem else name
            is_dir = path.is_dir() and not path.is_symlink()
            found.append((entry + "/" if is_dir else entry, path))
    return sorted((e for e in found if e[0]), key=lambda e: os.fsencode(e[0]))


def layer_names(source: Path, prefix: str) -> list[str]:
    """The tar entry names `write_layer` writes for `source`, in order (for tests and logs)."""
    return [name for name, _ in _walk(source, prefix)]


def _info(name: str, path: Path) -> tarfile.TarInfo:
    st = path.lstat()
    info = tarfile.TarInfo(name.rstrip("/"))
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if stat.S_ISDIR(st.st_mode):
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, os.readlink(path)
    elif stat.S_ISREG(st.st_mode):
        info.type, info.size = tarfile.REGTYPE, st.st_size
        info.mode = 0o755 if st.st_mode & 0o111 else 0o644
    else:
        raise LayerError(f"{path} is neither a file, a directory nor a symlink: a layer "
                         "cannot hold it")
    return info


def write_layer(source: Path, output: Path, *, prefix: str, level: int) -> Blob:
    """Write `source`'s tree, placed under `prefix` in the layer, as a gzip blob at `output`
    (atomically: on any error `output` is left as it was)."""
    if not 1 <= level <= 9:
        raise LayerError(f"gzip level {level} is not 1 to 9")
    if not source.is_dir():
        raise LayerError(f"the staging tree {source} is not a directory")
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.partial")
    try:
        with partial.open("wb") as handle:
            sink = GzipSink(handle, level)
            with tarfile.open(fileobj=sink, mode="w|", format=tarfile.PAX_FORMAT,  # type: ignore[call-overload]
                              encoding="utf-8", errors="surrogateescape") as tar:
                for name, path in _walk(source, prefix):
                    info = _info(name, path)
                    if info.type == tarfile.REGTYPE:
                        with path.open("rb") as data:
                            tar.addfile(info, data)
                    else:
                        tar.addfile(info)
            blob = sink.finish()
        partial.replace(output)  # only a finished blob ever has the output's name
    finally:
        partial.unlink(missing_ok=True)
    return blob


# --- the slice's cache tag and its one-layer image ----------------------------------------

_KEY_VERSION = "gpurl-written-slice-1"  # bump when what a cached slice image means changes
# An image manifest's media type -> (its config's, its gzip layers'): Docker's or OCI's.
MEDIA_TYPES = {"application/vnd.docker.distribution.manifest.v2+json":
                    ("application/vnd.docker.container.image.v1+json",
                     "application/vnd.docker.image.rootfs.diff.tar.gzip"),
                "application/vnd.oci.image.manifest.v1+json":
                    ("application/vnd.oci.image.config.v1+json",
                     "application/vnd.oci.image.layer.v1.tar+gzip")}


def slice_key(*, label: str, slice_text: bytes, python: str, venv: str, uv: str,
              compressor: str) -> str:
    """The cache tag of one written slice: a hash of all its blob's bytes depend on (the
    slice file's bytes, env-base's Python version and venv path, the uv version, the writer
    with its zlib and level) and nothing that depends on its position or on env-base's id."""
    key = json.dumps({"version": _KEY_VERSION, "slice": hashlib.sha256(slice_text).hexdigest(),
                      "python": python, "venv": venv, "uv": uv, "compressor": compressor},
                     sort_keys=True)
    return f"slice-{label[:40]}-{hashlib.sha256(key.encode()).hexdigest()[:32]}"


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

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)


def _said(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise LayerError(f"cannot run {argv[0]}: {exc.strerror}") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise LayerError(f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def probe(venv: str) -> Probe:
    """Ask the image this runs in (env-base) what a slice's bytes depend on: the one probe,
    for both the local path's staging containers and the cluster job."""
    python = _said([f"{venv.rstrip('/')}/bin/python", "-c",
                    "import sys; print(sys.version.split()[0])"])
    return Probe(python=python, zlib=zlib.ZLIB_RUNTIME_VERSION, uv=_said(["uv", "--version"]))


def slice_keys(index: Path, context: Path, *, venv: str, level: int,
               found: Probe | None = None) -> list[tuple[str, str]]:
    """(NN-label, cache tag) for each `NN-label<TAB>slice file<TAB>...` line of a slice
    index, the file read relative to `context`, with one probe of this image."""
    try:
        lines = index.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise LayerError(f"slice index {index} is not UTF-8 ({exc.reason} at byte "
                         f"{exc.start})") from None
    found = found or probe(venv)
    keys = []
    for line in lines:
        if not line.strip():
            continue
        name, _, rest = line.partition("\t")
        label, file = name.partition("-")[2], rest.partition("\t")[0]
        if not label or not file:
            raise LayerError(f"slice index {index}: {line[:80]!r} is not NN-label<TAB>file")
        keys.append((name, slice_key(label=label, slice_text=(context / file).read_bytes(),
                                     python=found.python, venv=venv, uv=found.uv,
                                     compressor=compressor(level, found.zlib))))
    return keys


def canonical_json(document: object) -> bytes:
    """A JSON document as the registry receives it: sorted keys, no spaces (one spelling, so
    the same document is the same digest)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def _descriptor(media_type: str, data_or_blob: bytes | Blob) -> dict[str, object]:
    if isinstance(data_or_blob, Blob):
        return {"mediaType": media_type, "digest": data_or_blob.digest, "size": data_or_blob.size}
    return {"mediaType": media_type, "size": len(data_or_blob),
            "digest": "sha256:" + hashlib.sha256(data_or_blob).hexdigest()}


def slice_image(blob: Blob | None, *, created_by: str, media_type: str,
                platform: dict[str, str]) -> tuple[bytes, bytes]:
    """(manifest, config) of the image that records one slice in the cache repository: its
    one layer (none for the root the cluster's composition rebases from), deterministic, so
    the same slice gives the same manifest digest on every builder."""
    if media_type not in MEDIA_TYPES:
        raise LayerError(f"{media_type} is not a Docker or OCI image manifest")
    config_type, layer_type = MEDIA_TYPES[media_type]
    config = canonical_json({**platform, "config": {},
                         "rootfs": {"type": "layers",
                                    "diff_ids": [blob.diff_id] if blob else []},
                         "history": [{"created_by": created_by}] if blob else []})
    manifest = canonical_json({"schemaVersion": 2, "mediaType": media_type,
                           "config": _descriptor(config_type, config),
                           "layers": [_descriptor(layer_type, blob)] if blob else []})
    return manifest, config


def write_layout(directory: Path, manifest: bytes, config: bytes,
                 blob: tuple[Blob, Path] | None = None) -> None:
    """An OCI image layout of one image (what `crane push DIR REF` pushes)."""
    media_type = json.loads(manifest)["mediaType"]
    blobs = directory / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    for data in (manifest, config):
        (blobs / hashlib.sha256(data).hexdigest()).write_bytes(data)
    if blob is not None:
        blob[1].replace(blobs / blob[0].digest.removeprefix("sha256:"))
    (directory / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    (directory / "index.json").write_bytes(canonical_json(
        {"schemaVersion": 2, "manifests": [_descriptor(media_type, manifest)]}))


def _read_json(path: Path, what: str) -> dict[str, Any]:
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


def _base_config(path: Path) -> tuple[dict[str, str], list[str]]:
    """(platform, Env) of env-base, from its image config."""
    document = _read_json(path, "env-base's config")
    inner = document.get("config")
    env = inner.get("Env") if isinstance(inner, dict) else None
    return (platform_of(document),
            [str(e) for e in env] if isinstance(env, list) else [])


def main(argv: Sequence[str] | None = None) -> int:
    """The in-container entry point (env-base's python3 runs it, from the package or from the
    copy `invoke generate` writes for the cluster job). Subcommands:
      write SOURCE OUTPUT --prefix P --level N   one layer; prints its Blob as JSON
      probe --venv V   what a slice's bytes depend on here (Python, zlib, uv), as JSON
      keys --index F --context DIR --venv V --level N   each slice's cache tag, one
          `NN-label tag` line per index line, in its order (one probe for all)
      image SOURCE LAYOUT --prefix P --level N --created-by TEXT --record TAG
          --base-manifest F --base-config F   the slice's one-layer image (its history entry
          names TAG, the cache tag it is pushed under) as an OCI layout; prints its Blob
      root LAYOUT --base-manifest F --base-config F   the zero-layer image slices rebase from
      env --base-config F   env-base's environment, one VAR=value a line
      blobs MANIFEST   the blobs an image manifest names (config, then layers), one a line
    An error is one line on stderr and exit 2."""
    parser = argparse.ArgumentParser(prog="gpurl-layer")
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write")
    image = sub.add_parser("image")
    for each in (write, image):
        each.add_argument("source", type=Path)
        each.add_argument("output", type=Path)
        each.add_argument("--prefix", required=True)
        each.add_argument("--level", type=int, required=True)
    image.add_argument("--created-by", required=True)
    image.add_argument("--record", required=True)
    root = sub.add_parser("root")
    root.add_argument("output", type=Path)
    for each in (image, root):
        each.add_argument("--base-manifest", type=Path, required=True)
        each.add_argument("--base-config", type=Path, required=True)
    probing = sub.add_parser("probe")
    keys = sub.add_parser("keys")
    for each in (probing, keys):
        each.add_argument("--venv", required=True)
    keys.add_argument("--index", type=Path, required=True)
    keys.add_argument("--context", type=Path, required=True)
    keys.add_argument("--level", type=int, required=True)
    env = sub.add_parser("env")
    env.add_argument("--base-config", type=Path, required=True)
    sub.add_parser("blobs").add_argument("manifest", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "write":
            blob = write_layer(args.source, args.output, prefix=args.prefix, level=args.level)
            said = json.dumps({**blob.to_json(), "compressor": compressor(args.level)})
        elif args.command == "probe":
            said = json.dumps(probe(args.venv).to_json())
        elif args.command == "keys":
            said = "\n".join(f"{name} {tag}" for name, tag in slice_keys(
                args.index, args.context, venv=args.venv, level=args.level))
        elif args.command == "env":
            said = "\n".join(_base_config(args.base_config)[1])
        elif args.command == "blobs":
            said = "\n".join(manifest_blobs(_read_json(args.manifest, "the manifest")))
        else:
            kind = str(_read_json(args.base_manifest, "env-base's manifest").get("mediaType"))
            platform = _base_config(args.base_config)[0]
            found, created_by = None, ""
            if args.command == "image":
                created_by = recorded_history(args.created_by, args.record)
                args.output.mkdir(parents=True, exist_ok=True)
                written = args.output / "layer.tar.gz"
                found = (write_layer(args.source, written, prefix=args.prefix,
                                     level=args.level), written)
            manifest, config = slice_image(found[0] if found else None, media_type=kind,
                                           created_by=created_by, platform=platform)
            write_layout(args.output, manifest, config, found)
            said = json.dumps(found[0].to_json() if found else {})
    except (LayerError, OSError) as exc:
        sys.stderr.write(f"gpurl-layer: {exc}\n")
        return 2
    sys.stdout.write(said + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
