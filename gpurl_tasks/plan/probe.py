"""Probe wheel sizes over HTTP: Content-Length for the compressed size, and the zip central
directory (read with range requests, never the whole wheel) for the exact installed size.

Results go into a JSON cache keyed by URL (`layers.size-cache`), written atomically, which
`sizes.load_size_sources` reads. Only wheels the target would install are probed.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from pathlib import Path

import httpx

from gpurl_tasks.errors import SizeError
from gpurl_tasks.files import write_atomic

__all__ = ["central_directory_installed_size", "probe_url", "probe_urls", "write_cache"]

_EOCD = b"PK\x05\x06"
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"
_CD_ENTRY = b"PK\x01\x02"
_TAIL = 65536 + 22  # the largest end-of-central-directory record with a comment


def _range(client: httpx.Client, url: str, start: int, end: int) -> bytes | None:
    response = client.get(url, headers={"Range": f"bytes={start}-{end}"})
    if response.status_code != 206:
        return None
    return response.content


def central_directory_installed_size(directory: bytes) -> int:
    """Sum of uncompressed sizes over a zip central directory (zip64 extras understood)."""
    total, pos = 0, 0
    while directory.startswith(_CD_ENTRY, pos):
        size = struct.unpack_from("<I", directory, pos + 24)[0]
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", directory, pos + 28)
        if size == 0xFFFFFFFF:
            extra = directory[pos + 46 + name_len: pos + 46 + name_len + extra_len]
            offset = 0
            while offset + 4 <= len(extra):
                tag, length = struct.unpack_from("<HH", extra, offset)
                if tag == 0x0001:
                    size = struct.unpack_from("<Q", extra, offset + 4)[0]
                    break
                offset += 4 + length
        total += size
        pos += 46 + name_len + extra_len + comment_len
    return total


def probe_url(client: httpx.Client, url: str) -> dict[str, int]:
    """{"compressed": bytes, "installed": bytes?} for one wheel URL; SizeError on failure."""
    try:
        head = client.head(url, follow_redirects=True)
        head.raise_for_status()
        length = int(head.headers["content-length"])
        result = {"compressed": length}
        tail_start = max(0, length - _TAIL)
        tail = _range(client, url, tail_start, length - 1)
        if tail is None:
            return result  # the server ignores ranges: compressed size only
        eocd = tail.rfind(_EOCD)
        if eocd < 0:
            raise SizeError(f"{url} is not a zip file (no end-of-central-directory record)")
        cd_size, cd_offset = struct.unpack_from("<II", tail, eocd + 12)
        locator = tail.rfind(_ZIP64_LOCATOR, 0, eocd)
        if cd_offset == 0xFFFFFFFF and locator >= 0:
            z64 = struct.unpack_from("<Q", tail, locator + 8)[0]
            record = tail[z64 - tail_start:] if z64 >= tail_start else _range(client, url, z64, z64 + 55)
            if record is None or not record.startswith(_ZIP64_EOCD):
                return result
            cd_size, cd_offset = struct.unpack_from("<QQ", record, 40)
        if cd_offset >= tail_start:
            directory = tail[cd_offset - tail_start: cd_offset - tail_start + cd_size]
        else:
            fetched = _range(client, url, cd_offset, cd_offset + cd_size - 1)
            if fetched is None:
                return result
            directory = fetched
        result["installed"] = central_directory_installed_size(directory)
        return result
    except (httpx.HTTPError, KeyError, ValueError, struct.error) as exc:
        raise SizeError(f"could not probe {url}: {exc.__class__.__name__}: {exc}",
                        hint="check the URL is reachable, or add the size to the override file") from None


def probe_urls(urls: Iterable[str], *, timeout: float = 30.0,
               progress: Callable[[str], None] = lambda _: None) -> dict[str, dict[str, int]]:
    with httpx.Client(timeout=timeout, follow_redirects=True) as client:
        found = {}
        for url in urls:
            progress(url)
            found[url] = probe_url(client, url)
        return found


def write_cache(path: Path, entries: dict[str, dict[str, int]]) -> None:
    """Merge entries into the JSON cache; temp file + rename so a crash leaves the old file."""
    current: dict[str, object] = {}
    if path.exists():
        try:
            current = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SizeError(f"size cache {path} is not valid JSON: {exc}") from None
    current.update(entries)
    write_atomic(path, json.dumps(current, indent=2, sort_keys=True) + "\n")
