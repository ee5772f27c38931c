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
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
import tarfile
import zlib
from pathlib import Path
from typing import BinaryIO

__all__ = ["MTIME", "STAGING_LEFTOVERS", "WRITER_VERSION", "Blob", "GzipSink", "LayerError",
           "compressor", "write_layer"]

WRITER_VERSION = "gpurl-layer-2"  # bump whenever the bytes written for one tree change
MTIME = 1  # one second past the epoch: 0 reads as "unset" to some tools
_MEM_LEVEL = 8  # zlib's default, pinned
_GZIP_OS = 255  # "unknown", as Python's gzip and Go's compress/gzip write it


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
