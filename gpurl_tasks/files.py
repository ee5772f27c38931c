"""The one way gpurl writes a file (temp file in the same directory, fsync, rename) and the one
way it reads a text file (a clear error for a missing, unreadable or non-UTF-8 file).

A crash or a kill at any moment leaves either the old file or the new one, never half of
either, which matters for the launcher pin, generated files and the size cache alike.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from gpurl_tasks.errors import GpurlError

__all__ = ["decode_text", "open_atomic", "read_text", "sha256_of", "write_atomic"]


def write_atomic(path: Path, text: str | bytes, *, mode: int | None = None) -> bool:
    """Replace `path` with `text` (str is written as UTF-8, bytes as they are); False (and no
    write) when the content is already identical.

    `mode` sets the permission bits; by default an existing file keeps its own and a new
    one gets 0o644.
    """
    target = path.resolve()
    data = text.encode() if isinstance(text, str) else text
    if target.exists() and target.read_bytes() == data and mode in (None, target.stat().st_mode & 0o7777):
        return False
    with open_atomic(target, mode=mode) as handle:
        handle.write(data)
    return True


@contextlib.contextmanager
def open_atomic(path: Path, *, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary handle whose bytes replace `path` when the block ends without an error (for
    output streamed in pieces, such as a layer blob); on an error `path` is left as it was."""
    target = path.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".gpurl-tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file's bytes, read in chunks (wheels are hundreds of MB)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def read_text(path: Path, *, what: str, error: type[GpurlError] = GpurlError,
              missing_hint: str | None = None) -> str:
    """The UTF-8 text of a file gpurl reads (config, lock, Dockerfile, launcher, MANIFEST, slice
    files), or one `error` naming the file: missing, unreadable, or not UTF-8 (with the byte
    and its offset, so the user can find it)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise error(f"the {what} {path} does not exist",
                    hint=missing_hint or f"check the {what}'s path") from None
    except OSError as exc:
        raise error(f"cannot read the {what} {path}: {exc.strerror}",
                    hint=f"check that {path} is a file this user may read") from None
    return decode_text(data, what=f"{what} {path}", error=error)


def decode_text(data: bytes, *, what: str, error: type[GpurlError] = GpurlError) -> str:
    """`data` as UTF-8, or one `error` naming `what` and the first bad byte with its offset."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"the {what} is not UTF-8 text: byte 0x{data[exc.start]:02x} at "
                    f"offset {exc.start}", hint="save it as UTF-8") from None
