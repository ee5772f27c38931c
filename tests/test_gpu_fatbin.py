"""The fatbin reader (gpurl_tasks/gpu/fatbin.py): on the one-arch kernels nvcc built on the
H200 (tests/data/fatbin, README there; the same archs cuobjdump listed and the launches there
bore out), on fatbins a tiny writer here makes (round trip), on broken files (a GpurlError,
never a crash), and the rule `runnable` applies."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.errors import GpurlError
from gpurl_tasks.gpu import fatbin
from gpurl_tasks.gpu.fatbin import Entry, Holds

DATA = Path(__file__).parent / "data" / "fatbin"
H200 = (9, 0)


@pytest.mark.parametrize(("name", "sass", "ptx", "on_h200"), [
    ("add_one_sm80.so", ("sm_80",), (), False),  # nvcc -gencode arch=compute_80,code=sm_80
    ("add_one_sm90.so", ("sm_90",), (), True),
    ("add_one_ptx80.so", (), ("compute_80",), True),  # code=compute_80: PTX, JIT-compiled
    ("add_one_sm100.so", ("sm_100",), (), False),
])
def test_the_kernels_built_on_the_h200_hold_exactly_their_arch(
        name: str, sass: tuple[str, ...], ptx: tuple[str, ...], on_h200: bool) -> None:
    holds = fatbin.read(DATA / name)
    assert holds is not None
    assert (holds.sass, holds.ptx) == (sass, ptx)
    assert fatbin.runnable(holds, H200).runs is on_h200  # as the launches there went


def test_the_compute_80_ptx_is_compressed_and_needs_ptx_isa_9() -> None:
    holds = fatbin.read(DATA / "add_one_ptx80.so")
    assert holds is not None
    [entry] = holds.runtime_entries
    assert entry.compressed and entry.ptx_isa == "9.0"  # nvcc 13.0 writes PTX ISA 9.0, zstd
    assert "JIT" in fatbin.runnable(holds, H200).by


def test_a_file_without_device_code_or_not_elf_is_none(tmp_path: Path) -> None:
    (tmp_path / "script.so").write_bytes(b"#!/bin/sh\n")
    (tmp_path / "plain.so").write_bytes(_elf({".text": b"\x90" * 16})[0])
    assert fatbin.read(tmp_path / "script.so") is None
    assert fatbin.read(tmp_path / "plain.so") is None


# A tiny writer of the format the reader reads: ELF64 with named sections; fatbin containers.

_KIND_CODE = {"ptx": 1, "sass": 2}
_VARIANT_FLAG = {"": 0, "a": 0x100000, "f": 0x200000}


def _entry(entry: Entry, payload: bytes, extra: int) -> bytes:
    major, minor = (int(x) for x in entry.ptx_isa.split(".")) if entry.ptx_isa else (1, 8)
    flags = 0x11 | (0x8000 if entry.compressed else 0) | _VARIANT_FLAG[entry.variant]
    kind = _KIND_CODE.get(entry.kind) or int(entry.kind.removeprefix("kind-"))
    return struct.pack("<HHIQIIHHIIIQQQ", kind, 0x101, 64 + extra, len(payload), 0, 0, minor,
                       major, entry.sm, 0, 0, flags, 0, 0) + b"\x01" * extra + payload


def _container(entries: list[tuple[Entry, bytes, int]]) -> bytes:
    body = b"".join(_entry(*e) for e in entries)
    return struct.pack("<IHHQ", fatbin.FATBIN_MAGIC, 1, 16, len(body)) + body


def _elf(sections: dict[str, bytes]) -> tuple[bytes, dict[str, int]]:
    """An ELF64 file holding `sections`, and where each one's bytes start."""
    names = b"\0" + b"".join(n.encode() + b"\0" for n in (*sections, ".shstrtab"))
    body, placed = bytearray(64), []
    for data in sections.values():
        body += bytes(-len(body) % 8)
        placed.append((len(body), len(data)))
        body += data
    strtab_at = len(body)
    body += names + bytes(-(len(body) + len(names)) % 8)
    shoff, headers, name_at = len(body), [bytes(64)], 1
    for name, (offset, size) in zip(sections, placed, strict=True):
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, 1, 2, 0, offset, size, 0, 0, 8, 0))
        name_at += len(name) + 1
    headers.append(struct.pack("<IIQQQQIIQQ", name_at, 3, 0, 0, strtab_at, len(names), 0, 0, 1, 0))
    body += b"".join(headers)
    body[:64] = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), 3, 62, 1, 0,
                            0, shoff, 0, 64, 0, 0, 64, len(headers), len(headers) - 1)
    return bytes(body), {name: offset for name, (offset, _) in zip(sections, placed, strict=True)}


_entries = st.builds(
    lambda kind, sm, variant, compressed, isa: Entry(
        kind=kind, sm=sm, variant=variant if kind in ("sass", "ptx") else "",
        compressed=compressed, ptx_isa=isa if kind == "ptx" else ""),
    st.sampled_from(["sass", "ptx", "kind-4"]), st.sampled_from([70, 75, 80, 86, 89, 90, 100, 120]),
    st.sampled_from(["", "a", "f"]), st.booleans(), st.sampled_from(["8.0", "9.0"]))
_placed = st.tuples(_entries, st.binary(max_size=40), st.integers(0, 48))
_containers = st.lists(st.lists(_placed, max_size=4), max_size=4)


def _fatbin(containers: list[list[Any]], padding: list[int]) -> bytes:
    return b"".join(_container(c) + bytes(pad) for c, pad in zip(containers, padding, strict=False))


@settings(max_examples=60)
@given(_containers, _containers, st.lists(st.integers(0, 24), min_size=4, max_size=4))
def test_what_the_writer_wrote_the_reader_reads_back(
        runtime: list[list[Any]], relocatable: list[list[Any]], padding: list[int]) -> None:
    sections = {".nv_fatbin": _fatbin(runtime, padding),
                "__nv_relfatbin": _fatbin(relocatable, padding), ".text": b"\xc3"}
    data, offsets = _elf(sections)
    stream = io.BytesIO(data)
    for name, written in ((".nv_fatbin", runtime), ("__nv_relfatbin", relocatable)):
        read = tuple(fatbin.entries(stream, offsets[name], len(sections[name])))
        assert read == tuple(tuple(e for e, _, _ in c) for c in written)


@settings(max_examples=40)
@given(_containers, st.lists(st.integers(0, 24), min_size=4, max_size=4))
def test_a_file_on_disk_reads_as_its_sections(containers: list[list[Any]], padding: list[int]
                                              ) -> None:
    data, _ = _elf({".nv_fatbin": _fatbin(containers, padding)})
    holds = _read_bytes(data)
    assert holds is not None
    expected = {e.name for c in containers for e, _, _ in c if e.kind == "sass"}
    assert set(holds.sass) == expected


def _read_bytes(data: bytes) -> Holds | None:
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".so") as handle:
        handle.write(data)
        handle.flush()
        return fatbin.read(Path(handle.name))


class _Counting(io.BytesIO):
    """Counts the bytes read: the reader must seek over payloads, not read them."""

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.read_bytes = 0

    def read(self, size: int | None = -1) -> bytes:
        out = super().read(size)
        self.read_bytes += len(out)
        return out


def test_payloads_are_seeked_over_not_read() -> None:
    big = [(Entry(kind="sass", sm=90), bytes(4 << 20), 0), (Entry(kind="ptx", sm=80,
                                                                  ptx_isa="9.0"), bytes(1 << 20), 16)]
    data = _fatbin([big, big], [0, 0])
    stream = _Counting(data)
    assert len(list(fatbin.entries(stream, 0, len(data)))) == 2
    assert stream.read_bytes < 512  # two container and four entry headers, of ~10 MB


@settings(max_examples=100)
@given(_containers, st.data())
def test_a_truncated_or_damaged_file_is_a_clear_error_never_a_crash(
        containers: list[list[Any]], data: Any) -> None:
    whole, _ = _elf({".nv_fatbin": _fatbin(containers, [8, 0, 3, 0])})
    cut = data.draw(st.integers(0, len(whole)))
    damaged = bytearray(whole[:cut])
    for _ in range(data.draw(st.integers(0, 3))):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    try:
        _read_bytes(bytes(damaged))
    except GpurlError as exc:
        assert str(exc) and "\n" not in str(exc)


@given(st.binary(max_size=300))
def test_garbage_after_an_elf_magic_is_a_clear_error_never_a_crash(tail: bytes) -> None:
    try:
        _read_bytes(b"\x7fELF" + tail)
    except GpurlError as exc:
        assert str(exc)


def test_a_section_holding_no_container_is_refused_naming_the_offset() -> None:
    data, _ = _elf({".nv_fatbin": b"\x01\x02\x03\x04" + bytes(28)})
    with pytest.raises(GpurlError, match=r"\.nv_fatbin: no fatbin container at offset \d+"):
        _read_bytes(data)


def test_a_container_longer_than_its_section_is_refused() -> None:
    container = _container([(Entry(kind="sass", sm=90), bytes(64), 0)])
    with pytest.raises(GpurlError, match="runs past its section"):
        _read_bytes(_elf({".nv_fatbin": container[:-8]})[0])


# The rule: SASS runs on its own major at its minor or later; PTX on anything at or above it.

_sm = st.tuples(st.sampled_from([7, 8, 9, 10, 11, 12]), st.integers(0, 9))


def _holds(*entries: Entry) -> Holds:
    return Holds(sections={".nv_fatbin": (tuple(entries),)})


@given(_sm, _sm)
def test_sass_runs_on_its_major_at_its_minor_or_later_only(built: tuple[int, int],
                                                           node: tuple[int, int]) -> None:
    holds = _holds(Entry(kind="sass", sm=built[0] * 10 + built[1]))
    assert fatbin.runnable(holds, node).runs == (built[0] == node[0] and built[1] <= node[1])


@given(_sm, _sm)
def test_ptx_is_jit_compiled_on_any_sm_at_or_above_it(built: tuple[int, int],
                                                       node: tuple[int, int]) -> None:
    holds = _holds(Entry(kind="ptx", sm=built[0] * 10 + built[1], ptx_isa="9.0"))
    assert fatbin.runnable(holds, node).runs == (built <= node)


@given(_sm, _sm)
def test_arch_specific_code_runs_on_exactly_its_sm(built: tuple[int, int],
                                                   node: tuple[int, int]) -> None:
    for kind in ("sass", "ptx"):
        holds = _holds(Entry(kind=kind, sm=built[0] * 10 + built[1], variant="a"))
        assert fatbin.runnable(holds, node).runs == (built == node)


@given(st.lists(_entries, max_size=5), st.lists(_entries, max_size=5), _sm)
def test_more_device_code_never_makes_a_file_unrunnable(some: list[Entry], more: list[Entry],
                                                        node: tuple[int, int]) -> None:
    if fatbin.runnable(_holds(*some), node).runs and some:
        assert fatbin.runnable(_holds(*some, *more), node).runs


@pytest.mark.parametrize(("entries", "sm", "runs"), [
    ([Entry(kind="sass", sm=80)], (9, 0), False),  # the A100 wheel on an H200
    ([Entry(kind="sass", sm=100)], (9, 0), False),  # the GB200 wheel on an H200
    ([Entry(kind="sass", sm=90)], (10, 0), False),  # the H200 wheel on a GB200
    ([Entry(kind="sass", sm=80)], (8, 6), True),  # sm_80 SASS on an A10/3090
    ([Entry(kind="sass", sm=86)], (8, 0), False),
    ([Entry(kind="sass", sm=80), Entry(kind="ptx", sm=80, ptx_isa="8.0")], (10, 0), True),
    ([Entry(kind="sass", sm=100, variant="f")], (10, 3), True),
    ([Entry(kind="sass", sm=90, variant="a")], (9, 0), True),
])
def test_the_cases_the_issue_names(entries: list[Entry], sm: tuple[int, int], runs: bool) -> None:
    verdict = fatbin.runnable(_holds(*entries), sm)
    assert verdict.runs is runs
    if not runs:
        assert entries[0].name in verdict.by and f"sm_{sm[0]}{sm[1]}" in verdict.by


@pytest.mark.parametrize(("text", "sm"), [("9.0", (9, 0)), ("10.0", (10, 0)), (" 12.1", (12, 1))])
def test_parse_sm(text: str, sm: tuple[int, int]) -> None:
    assert fatbin.parse_sm(text) == sm


@pytest.mark.parametrize("text", ["sm_90", "9", "9.10", "", "a.b"])
def test_parse_sm_refuses_what_is_not_a_capability(text: str) -> None:
    with pytest.raises(GpurlError, match="compute capability"):
        fatbin.parse_sm(text)


def test_the_device_link_stub_cubin_defines_no_kernel_and_the_other_one_does() -> None:
    """nvcc's .so holds two containers: the device-link stub (no .text.<kernel>) and the
    module with gpurl_add_one; libcufftw's one sm_75 cubin is such a stub."""
    holds = fatbin.read(DATA / "add_one_sm80.so")
    assert holds is not None
    assert [[e.kernels for e in c] for c in holds.sections[".nv_fatbin"]] == [[0], [1]]


def _cubin(*sections: str) -> bytes:
    return _elf({name: b"\0" * 8 for name in sections})[0]


def test_a_file_whose_cubins_define_no_kernel_runs_anywhere() -> None:
    stub = _container([(Entry(kind="sass", sm=75), _cubin(".nv.callgraph"), 0)])
    holds = _read_bytes(_elf({".nv_fatbin": stub})[0])
    assert holds is not None and holds.runtime_entries[0].kernels == 0
    assert fatbin.runnable(holds, H200) == fatbin.Verdict(runs=True, by="no kernels")
    real = _container([(Entry(kind="sass", sm=75), _cubin(".text.fft_kernel", ".nv.info"), 0)])
    holds = _read_bytes(_elf({".nv_fatbin": real})[0])
    assert holds is not None and holds.runtime_entries[0].kernels == 1
    assert not fatbin.runnable(holds, H200).runs


def test_fatbins_a_library_keeps_among_its_data_are_read_when_asked() -> None:
    """cuFFT 12.0.0.61 (the H200 image's) keeps one sm_75 container in .nv_fatbin and 23983
    in .data; here a small one of that shape, its containers among data that holds the magic
    by chance (unaligned, and aligned with a header that is no container)."""
    stub = _container([(Entry(kind="sass", sm=75, compressed=True), b"\1" * 8, 0)])
    magic = fatbin.FATBIN_MAGIC.to_bytes(4, "little")
    kept = [_container([(Entry(kind="sass", sm=sm, compressed=True), b"\2" * 24, 0)])
            for sm in (80, 90)]
    not_one = magic + struct.pack("<HHQ", 1, 16, 64) + b"\xee" * 64  # entries that do not parse
    data = b"\5" * 8 + magic + b"\xff" * 12 + not_one + b"\7" * 3 + magic + b"\7" + kept[0] \
        + bytes(8) + kept[1]
    image = _elf({".nv_fatbin": stub, ".data": data})[0]
    assert not fatbin.runnable(_read_bytes(image) or _holds(), H200).runs
    holds = _read_embedded(image)
    assert holds is not None and [[e.name for e in c] for c in holds.sections[fatbin.EMBEDDED]] \
        == [["sm_80"], ["sm_90"]]
    assert fatbin.runnable(holds, H200) == fatbin.Verdict(runs=True, by="sm_90 SASS")
    assert holds.describe() == "SASS sm_75, sm_80, sm_90 (2 containers among its data)"


def _read_embedded(data: bytes) -> Holds | None:
    import tempfile
    with tempfile.NamedTemporaryFile(suffix=".so") as handle:
        handle.write(data)
        handle.flush()
        return fatbin.read(Path(handle.name), embedded=True)
