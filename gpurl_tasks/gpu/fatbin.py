"""Which CUDA architectures an ELF shared object carries, read in pure Python (stdlib only: the
check runs it in the image on the GPU node, where cuobjdump is not installed).

A library's device code sits in its `.nv_fatbin` section (and, built with relocatable device
code, the pre-link objects in `__nv_relfatbin`): a run of fatbin containers, each a 16-byte
header (magic 0xBA55ED50, version, header size, payload size) then entries, each an entry
header (kind: 1 PTX, 2 ELF/SASS; header size; payload size; the SM as major*10+minor; flags:
compressed, arch-specific `a`, family `f`) and its payload. Only the section table and those
headers are read: the payloads, 298 MB in libtorch_cuda.so, are seeked over.

`runnable` is the rule the driver applies when it loads a module: SASS runs on the SM it was
built for and the later minors of the same major (sm_80 SASS on 8.6, never on 9.0); `a` SASS
only on its exact SM; PTX is JIT-compiled for any SM at or above its own. A file runs when any
entry it holds does (a library compiles each kernel for every arch it targets; a container
with one arch only, such as an sm_90a-only Hopper kernel, is dispatched only there). Two
things seen in real libraries on the H200 count too: an uncompressed cubin that defines no
kernel (nvcc's device-link stub; libcufftw's only cubin) is nothing to launch, and a library
may keep fatbins among its own data and load them itself (cuFFT: 23983 containers in .data,
one stub in .nv_fatbin), which `read(embedded=True)` finds by their magic.
"""

from __future__ import annotations

import dataclasses
import mmap
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from gpurl_tasks.errors import GpurlError

__all__ = [
    "DATA_SECTIONS",
    "EMBEDDED",
    "ENTRY_HEADER",
    "FATBIN_MAGIC",
    "SECTIONS",
    "Entry",
    "FatbinError",
    "Holds",
    "Verdict",
    "entries",
    "parse_sm",
    "read",
    "runnable",
]


class FatbinError(GpurlError):
    """A library's device code that cannot be read as fatbin containers."""


# the hint of a library whose device code cannot be read as fatbin containers
_DAMAGED_HINT = "the file may be truncated: reinstall its package; if it persists, report the file"

FATBIN_MAGIC = 0xBA55ED50
SECTIONS = (".nv_fatbin", "__nv_relfatbin")  # the runtime's modules; the pre-link objects
DATA_SECTIONS = (".data", ".ldata", ".rodata", ".lrodata", ".data.rel.ro")
EMBEDDED = "embedded"  # Holds' name for the containers found in DATA_SECTIONS
ENTRY_HEADER = 64  # the part of an entry header read; later CUDA appends more (header size says)
_CONTAINER = struct.Struct("<IHHQ")  # magic, version, header size, payload size
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # kind, -, header size, size, compressed size, -,
# minor, major (the PTX ISA), sm, name offset, name size, flags, -, uncompressed size
_KINDS = {1: "ptx", 2: "sass"}
_COMPRESSED = 0x2000 | 0x8000  # the older compression and zstd (CUDA 12.8+)
_ARCH_SPECIFIC, _FAMILY = 0x100000, 0x200000  # sm_90a, sm_100f
_PAD_SCAN = 4096  # zero bytes skipped looking for the next container before giving up
_MAGIC = struct.pack("<I", FATBIN_MAGIC)
_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Entry:
    kind: str  # "sass", "ptx", or "kind-N" for one this reader does not know (LTO IR, ...)
    sm: int  # major*10 + minor: 80, 90, 100, 120
    variant: str = ""  # "a" (arch-specific), "f" (family) or ""
    compressed: bool = False
    ptx_isa: str = ""  # the PTX ISA version a PTX entry needs the driver to know ("9.0")
    kernels: int | None = None  # an uncompressed cubin's kernels (.text.* sections); None: unknown

    @property
    def name(self) -> str:
        """As nvcc spells it: sm_90a for SASS, compute_80 for PTX."""
        return f"{'compute' if self.kind == 'ptx' else 'sm'}_{self.sm}{self.variant}" \
            if self.kind in ("sass", "ptx") else f"{self.kind}:{self.sm}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Holds:
    """What one file carries: each section's containers, each a tuple of its entries."""

    sections: dict[str, tuple[tuple[Entry, ...], ...]]

    def _names(self, kind: str) -> tuple[str, ...]:
        found = {e.name: (e.sm, e.variant) for e in self.runtime_entries if e.kind == kind}
        return tuple(sorted(found, key=found.__getitem__))

    @property
    def sass(self) -> tuple[str, ...]:
        return self._names("sass")

    @property
    def ptx(self) -> tuple[str, ...]:
        return self._names("ptx")

    @property
    def runtime_entries(self) -> tuple[Entry, ...]:
        """What the driver may load: .nv_fatbin's entries and any EMBEDDED ones (the
        pre-link objects of __nv_relfatbin are not loaded)."""
        return tuple(e for name in (".nv_fatbin", EMBEDDED) for c in self.sections.get(name, ())
                     for e in c)

    def describe(self) -> str:
        """"SASS sm_80, sm_86; PTX compute_80" (what a finding names)."""
        others = sorted({e.name for e in self.runtime_entries if e.kind not in ("sass", "ptx")})
        parts = [f"{label} {', '.join(names)}" for label, names
                 in (("SASS", self.sass), ("PTX", self.ptx), ("other", others)) if names]
        embedded = f" ({len(self.sections[EMBEDDED])} containers among its data)" \
            if self.sections.get(EMBEDDED) else ""
        return "; ".join(parts) + embedded if parts else "no device code"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    runs: bool
    by: str  # what runs ("sm_90 SASS", "compute_80 PTX, JIT-compiled") or why nothing does


def parse_sm(text: str) -> tuple[int, int]:
    """"9.0" or "10.0" (a capability as torch names it) -> (9, 0)."""
    major, dot, minor = text.strip().partition(".")
    if not (dot and major.isdigit() and minor.isdigit() and len(minor) == 1):
        raise FatbinError(f"not a compute capability like 9.0: {text!r}",
                          hint="write it as MAJOR.MINOR, e.g. 9.0 or 10.0")
    return int(major), int(minor)


def _runs(entry: Entry, sm: tuple[int, int]) -> bool:
    own = divmod(entry.sm, 10)
    if entry.kind not in ("sass", "ptx"):
        return False
    if entry.variant == "a":
        return own == sm
    if entry.kind == "sass" or entry.variant == "f":
        return own[0] == sm[0] and own[1] <= sm[1]
    return own <= sm


def runnable(holds: Holds, sm: tuple[int, int]) -> Verdict:
    """Whether the file's device code can run on a GPU of compute capability `sm`: SASS for
    its major (a minor at or below it), else PTX at or below it, which the driver JITs."""
    entries_ = [e for e in holds.runtime_entries if e.kernels != 0]
    if not entries_:
        return Verdict(runs=True, by="no kernels" if holds.runtime_entries else "no device code")
    sass = [e for e in entries_ if e.kind == "sass" and _runs(e, sm)]
    if sass:
        return Verdict(runs=True, by=f"{max(sass, key=lambda e: e.sm).name} SASS")
    ptx = [e for e in entries_ if e.kind == "ptx" and _runs(e, sm)]
    if ptx:
        return Verdict(runs=True, by=f"{max(ptx, key=lambda e: e.sm).name} PTX, JIT-compiled")
    return Verdict(runs=False, by=f"holds {holds.describe()}: none runs on sm_{sm[0]}{sm[1]}")


def _exact(stream: BinaryIO, offset: int, size: int, what: str) -> bytes:
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:
        raise FatbinError(f"truncated {what} at offset {offset}: {len(data)} of {size} bytes",
                          hint=_DAMAGED_HINT)
    return data


def _entry(header: bytes, where: int) -> tuple[Entry, int, int]:
    (kind, _, header_size, size, _, _, minor, major, sm, _, _, flags, _, _) = _ENTRY.unpack(header)
    if header_size < ENTRY_HEADER:
        raise FatbinError(f"fatbin entry at offset {where} has a {header_size}-byte header",
                          hint=_DAMAGED_HINT)
    variant = "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY else ""
    entry = Entry(kind=_KINDS.get(kind, f"kind-{kind}"), sm=sm, variant=variant,
                  compressed=bool(flags & _COMPRESSED),
                  ptx_isa=f"{major}.{minor}" if kind == 1 else "")
    return entry, header_size, size


def entries(stream: BinaryIO, start: int, size: int) -> Iterator[tuple[Entry, ...]]:
    """Each container's entries in the region [start, start+size) of `stream`, reading only
    headers. Containers are padded to 8 bytes; zero padding between them is skipped."""
    end, pos = start + size, start
    while pos < end:
        if end - pos < _CONTAINER.size:
            tail = _exact(stream, pos, end - pos, "fatbin padding")
            if tail.strip(b"\0"):
                raise FatbinError(f"trailing bytes after the last fatbin container at offset {pos}",
                                  hint=_DAMAGED_HINT)
            return
        magic, _, header_size, payload = _CONTAINER.unpack(
            _exact(stream, pos, _CONTAINER.size, "fatbin container header"))
        if magic != FATBIN_MAGIC:
            pos = _skip_padding(stream, pos, end)
            continue
        body, body_end = pos + header_size, pos + header_size + payload
        if header_size < _CONTAINER.size or body_end > end:
            raise FatbinError(f"fatbin container at offset {pos} runs past its section "
                             f"({payload} bytes from {body}, the section ends at {end})",
                              hint=_DAMAGED_HINT)
        found = []
        while body < body_end:
            entry, entry_header, entry_size = _entry(
                _exact(stream, body, ENTRY_HEADER, "fatbin entry header"), body)
            if entry.kind == "sass" and not entry.compressed:
                entry = dataclasses.replace(entry, kernels=_kernels(stream, body + entry_header,
                                                                    entry_size))
            body += entry_header + entry_size
            if body > body_end:
                raise FatbinError(f"fatbin entry {entry.name} runs past its container at offset {pos}",
                                  hint=_DAMAGED_HINT)
            found.append(entry)
        yield tuple(found)
        pos = body_end


def _skip_padding(stream: BinaryIO, pos: int, end: int) -> int:
    """Where the zero bytes from `pos` end (a container's magic starts with a non-zero byte);
    an error when `pos` holds neither zeros nor a container."""
    window = _exact(stream, pos, min(_PAD_SCAN, end - pos), "fatbin padding")
    zeros = len(window) - len(window.lstrip(b"\0"))
    if not zeros:
        raise FatbinError(f"no fatbin container at offset {pos} "
                         f"(magic {window[:4][::-1].hex()}, not {FATBIN_MAGIC:08x})",
                          hint=_DAMAGED_HINT)
    return pos + zeros


def _section_table(stream: BinaryIO, base: int, what: str) -> list[tuple[str, int, int, int]]:
    """(name, type, offset, size) of each section of the ELF64 little-endian file that starts
    at `base` in `stream` (0 for a file; an entry's payload for a cubin)."""
    head = _exact(stream, base, _ELF_HEADER.size, f"ELF header of {what}")
    ident, *_, shoff, _, _, _, _, shentsize, shnum, shstrndx = _ELF_HEADER.unpack(head)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
        raise FatbinError(f"{what} is not a 64-bit little-endian ELF file",
                          hint=_DAMAGED_HINT)
    if shoff == 0:
        return []
    if shentsize != _SECTION.size:
        raise FatbinError(f"{what} has {shentsize}-byte section headers, not {_SECTION.size}",
                          hint=_DAMAGED_HINT)
    first = _SECTION.unpack(_exact(stream, base + shoff, _SECTION.size, f"section table of {what}"))
    shnum = shnum or first[5]  # extended numbering: section 0 holds the count and the index
    shstrndx = first[6] if shstrndx == 0xFFFF else shstrndx
    if not shnum or shnum > 1 << 20 or shstrndx >= shnum:
        raise FatbinError(f"{what} has a bad section table ({shnum} sections, names in {shstrndx})",
                          hint=_DAMAGED_HINT)
    table = _exact(stream, base + shoff, shnum * _SECTION.size, f"section table of {what}")
    headers = [_SECTION.unpack_from(table, i * _SECTION.size) for i in range(shnum)]
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    if names_size > 1 << 24:
        raise FatbinError(f"{what} has a {names_size}-byte section name table",
                          hint=_DAMAGED_HINT)
    names = _exact(stream, base + names_at, names_size, f"section names of {what}")
    return [(names[at:names.find(b"\0", at)].decode(errors="replace"), kind, offset, size)
            for at, kind, _, _, offset, size, *_ in headers]


def _sections(stream: BinaryIO, path: Path, wanted: tuple[str, ...] = SECTIONS
              ) -> dict[str, tuple[int, int]]:
    """{name: (offset, size)} of the `wanted` sections of a file (SHT_NOBITS holds no bytes)."""
    return {name: (offset, size) for name, kind, offset, size
            in _section_table(stream, 0, str(path)) if name in wanted and kind != 8}


def _kernels(stream: BinaryIO, start: int, size: int) -> int | None:
    """The kernels an uncompressed cubin defines (its `.text.<kernel>` sections); None when
    the payload is not a cubin this can read. A device-link stub, such as the one sm_75 cubin
    in libcufftw's .nv_fatbin, defines none."""
    if size < _ELF_HEADER.size:
        return None
    try:
        return sum(name.startswith(".text.") for name, *_ in _section_table(stream, start, "cubin"))
    except (GpurlError, struct.error, OverflowError, ValueError):
        return None


def _embedded(stream: BinaryIO, regions: dict[str, tuple[int, int]]
              ) -> tuple[tuple[Entry, ...], ...]:
    """The containers a library keeps among its own data, found by their magic at 8-byte
    aligned offsets; a match that does not parse as a container is data, and skipped."""
    found: list[tuple[Entry, ...]] = []
    with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as view:
        for start, size in regions.values():
            end, at = min(start + size, len(view)), start
            while (at := view.find(_MAGIC, at, end)) >= 0:
                length = 16 + struct.unpack_from("<Q", view, at + 8)[0] if at + 16 <= end else 0
                if at % 8 or not 16 <= length <= end - at:
                    at += 4
                    continue
                try:
                    found += list(entries(stream, at, length))
                except GpurlError:  # data that happens to hold the magic
                    at += 4
                else:
                    at += length
    return tuple(found)


def read(path: Path, *, embedded: bool = False) -> Holds | None:
    """What `path` holds; None when it is not an ELF file or holds no fatbin. A file
    that is off (truncated, a container that is not one) raises GpurlError naming it.

    `embedded` also reads the containers a library keeps in its data sections and loads
    itself (cuFFT: one sm_75 container in .nv_fatbin, thousands in .data), as EMBEDDED: a
    full scan of those sections, so only for a file whose .nv_fatbin falls short."""
    try:
        with path.open("rb") as stream:
            if stream.read(4) != b"\x7fELF":
                return None
            found = _sections(stream, path)
            if not found and not embedded:
                return None
            sections = {}
            for name, (offset, size) in found.items():
                try:
                    sections[name] = tuple(entries(stream, offset, size))
                except GpurlError as exc:
                    raise FatbinError(f"{path} {name}: {exc.message}", hint=exc.hint) from None
            if embedded:
                sections[EMBEDDED] = _embedded(stream, _sections(stream, path, DATA_SECTIONS))
            return Holds(sections=sections) if any(sections.values()) or found else None
    except OSError as exc:
        raise FatbinError(f"cannot read {path}: {exc.strerror or exc}",
                          hint="check the file's permissions in the image, "
                               "then run the check again") from None
    except (struct.error, OverflowError, ValueError) as exc:  # an offset past what seek takes
        raise FatbinError(f"{path} is not a well-formed ELF file: {exc}",
                          hint=_DAMAGED_HINT) from None
