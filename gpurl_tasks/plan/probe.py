"""Probe wheel sizes over HTTP: Content-Length for the compressed size, and the zip central
directory (read with range requests, never the whole wheel) for the exact installed size.

Results go into a JSON cache keyed by URL (`layers.size-cache`), written atomically, which
`sizes.load_size_sources` reads. Only wheels the target would install are probed.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from gpurl_tasks.config import Config
from gpurl_tasks.errors import ConfigError, SizeError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.plan.lock import install_closure, load_lock
from gpurl_tasks.plan.sizes import load_size_sources, urls_to_probe
from gpurl_tasks.plan.target import target_tags

__all__ = ["ProbeFailure", "SizeSurvey", "central_directory_installed_size", "probe_url",
           "probe_urls", "survey_sizes", "write_cache"]

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
            raise SizeError(f"{url} is not a zip file (no end-of-central-directory record)",
                            hint="record its size in the layers.size-overrides file")
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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ProbeFailure:
    """One URL the probe could not read, and why."""

    url: str
    error: str

    @property
    def host(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.hostname}:{parts.port}" if parts.port else parts.hostname or self.url


def probe_urls(urls: Iterable[str], *, timeout: float = 30.0,
               progress: Callable[[str], None] = lambda _: None
               ) -> tuple[dict[str, dict[str, int]], tuple[ProbeFailure, ...]]:
    """Probe every URL: (what was found, what failed); one unreachable URL stops nothing."""
    found: dict[str, dict[str, int]] = {}
    failed: list[ProbeFailure] = []
    with httpx.Client(timeout=timeout, follow_redirects=True) as client:
        for url in urls:
            progress(url)
            try:
                found[url] = probe_url(client, url)
            except SizeError as exc:
                failed.append(ProbeFailure(url=url, error=exc.message))
    return found, tuple(failed)


def write_cache(path: Path, entries: dict[str, dict[str, int]]) -> None:
    """Merge entries into the JSON cache; temp file + rename so a crash leaves the old file."""
    current: dict[str, object] = {}
    if path.exists():
        try:
            current = json.loads(read_text(path, what="size cache", error=SizeError))
        except json.JSONDecodeError as exc:
            raise SizeError(f"size cache {path} is not valid JSON: {exc}",
                            hint="delete the cache file; `invoke sizes --probe` writes it again") from None
    current.update(entries)
    write_atomic(path, json.dumps(current, indent=2, sort_keys=True) + "\n")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SizeSurvey:
    """`invoke sizes`: the wheel URLs whose installed size nothing records (and which of them
    have no compressed size either), and what a probe found and could not read."""

    to_probe: tuple[str, ...]
    no_compressed: tuple[str, ...] = ()  # no compressed size in the lock, overrides or cache
    probed: dict[str, dict[str, int]] | None = None  # None: nothing was fetched
    failed: tuple[ProbeFailure, ...] = ()
    cache: Path | None = None

    @property
    def exit_code(self) -> int:
        return SizeError.exit_code if self.failed else 0

    @property
    def failure(self) -> str | None:
        if not self.failed:
            return None
        worked = len(self.probed or {})
        return (f"{len(self.failed)} of {len(self.to_probe)} probe(s) failed; " + (
            f"the {worked} that worked are cached in {self.cache}" if worked
            else "nothing was cached"))

    @property
    def hint(self) -> str | None:
        """What to do when a probe failed: each failure names its host."""
        return ("check that this machine reaches the hosts named above (or record the sizes "
                "in layers.size-overrides), then run `invoke sizes --probe` again"
                if self.failed else None)

    def human(self) -> str:
        if self.probed is not None:
            lines = [f"probed {len(self.probed)} of {len(self.to_probe)} wheel(s)"
                     + (f" into {self.cache}" if self.probed else "")]
            lines += [f"  failed  {f.host}: {f.error}" for f in self.failed]
            return "\n".join(lines)
        if not self.to_probe:
            return ("every wheel the target installs has its compressed size (lock, overrides "
                    "or probe cache) and its installed size (probe cache)")
        head = (f"{len(self.to_probe)} wheel(s) the target installs have no installed size in "
                f"the probe cache (the plan estimates it from the compressed size)")
        if self.no_compressed:
            head += (f", {len(self.no_compressed)} of them no compressed size either (not in "
                     "the lock, the overrides or the probe cache)")
        head += "; `invoke sizes --probe` fetches them:"
        return "\n".join([head, *(f"  {url}" + ("  (no compressed size)" if url in
                                                 self.no_compressed else "")
                                  for url in self.to_probe)])

    def to_json(self) -> dict[str, Any]:
        if self.probed is None:
            return {"to_probe": list(self.to_probe), "no_compressed_size": list(self.no_compressed)}
        return {"probed": self.probed, "cache": str(self.cache),
                "failed": [{"url": f.url, "host": f.host, "error": f.error} for f in self.failed]}


def survey_sizes(configs: Sequence[Config], *, probe: bool, dry_run: bool,
                 progress: Callable[[str], None] = lambda _: None) -> SizeSurvey:
    """The wheels of every variant's closure (each on its own platform) without a known
    installed size; with `probe` (not `dry_run`), fetch every one and cache what was found in
    layers.size-cache, even when some fail."""
    known: dict[str, bool] = {}
    for config in configs:
        closure = install_closure(load_lock(config.planned().lock), config.target,
                                  config.python)
        sources = load_size_sources(config.layers.size_overrides, config.layers.size_cache)
        for url, compressed in urls_to_probe(closure.packages, target_tags(config.target),
                                             sources).items():
            known.setdefault(url, compressed)
    urls = tuple(known)
    no_compressed = tuple(url for url, compressed in known.items() if not compressed)
    if not probe or dry_run:
        return SizeSurvey(to_probe=urls, no_compressed=no_compressed)
    cache = configs[0].layers.size_cache
    if cache is None:
        raise ConfigError("layers.size-cache is not set; nowhere to store probed sizes",
                          hint="set layers.size-cache to a JSON file path, e.g. \"sizes.json\"")
    found, failed = probe_urls(urls, progress=lambda url: progress(f"probing {url}"))
    if found:
        write_cache(cache, found)
    return SizeSurvey(to_probe=urls, no_compressed=no_compressed, probed=found, failed=failed,
                      cache=cache)
