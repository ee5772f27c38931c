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
import stat
import sys
import tarfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from gpurl_tasks.errors import BuildError
from gpurl_tasks.files import open_atomic

__all__ = ["MTIME", "WRITER_VERSION", "Blob", "compressor", "layer_names", "main",
           "write_layer"]

WRITER_VERSION = "gpurl-layer-1"  # bump whenever the bytes written for one tree change
MTIME = 1  # one second past the epoch: 0 reads as "unset" to some tools
_MEM_LEVEL = 8  # zlib's default, pinned
_GZIP_OS = 255  # "unknown", as Python's gzip and Go's compress/gzip write it
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True, kw_only=True)
class Blob:
    """A written layer: its blob digest, the sha256 of its tar (the config's diff_id), size."""

    digest: str
    diff_id: str
    size: int

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def compressor(level: int) -> str:
    """What the blob's bytes depend on besides the tree: this writer, the zlib, the level."""
    return f"{WRITER_VERSION} zlib {zlib.ZLIB_RUNTIME_VERSION} level {level}"


class _GzipSink:
    """A write-only stream: hashes what tar writes (diff_id), deflates it, hashes and writes
    the gzip member (digest) to `out`."""

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
        raise BuildError(f"layer prefix {prefix!r} must be a plain relative path")
    return parts


def _walk(source: Path, prefix: str) -> list[tuple[str, Path]]:
    """(name in the layer, path on disk) for the prefix's directories and every entry under
    `source`, directories named with a trailing slash, sorted by name."""
    parts = _prefix_parts(prefix)
    found = [("/".join(parts[:i + 1]) + "/", source) for i in range(len(parts) - 1)]
    base = "/".join(parts)
    found.append((base + "/" if base else "", source))
    for top, dirs, files in os.walk(source):
        here = Path(top)
        rel = here.relative_to(source).as_posix()
        stem = base if rel == "." else f"{base}/{rel}" if base else rel
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
        raise BuildError(f"{path} is neither a file, a directory nor a symlink: a layer "
                         "cannot hold it")
    return info


def write_layer(source: Path, output: Path, *, prefix: str, level: int) -> Blob:
    """Write `source`'s tree, placed under `prefix` in the layer, as a gzip blob at `output`
    (atomically: on any error `output` is left as it was)."""
    if not 1 <= level <= 9:
        raise BuildError(f"gzip level {level} is not 1 to 9")
    if not source.is_dir():
        raise BuildError(f"the staging tree {source} is not a directory")
    with open_atomic(output) as handle:
        sink = _GzipSink(handle, level)
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
    return blob


def main(argv: Sequence[str] | None = None) -> int:
    """The in-container entry point: write one layer, print its Blob as one JSON line (an
    error as one line on stderr, exit 2)."""
    parser = argparse.ArgumentParser(prog="python3 -m gpurl_tasks.oci.layer")
    parser.add_argument("source", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--level", type=int, required=True)
    args = parser.parse_args(argv)
    try:
        blob = write_layer(args.source, args.output, prefix=args.prefix, level=args.level)
    except (BuildError, OSError) as exc:
        sys.stderr.write(f"gpurl layer: {exc}\n")
        return 2
    sys.stdout.write(json.dumps({**blob.to_json(), "compressor": compressor(args.level)})
                     + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
