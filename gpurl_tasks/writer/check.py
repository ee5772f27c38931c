"""What a written slice layer must hold, read from its tar.gz blob (stdlib only: the
write-slices task, its tests and the benchmarks read a layer through it): every ELF object
built for the image's machine, every entry-point script naming the image's Python.

A slice written on another machine than the image's (uv's `--python-platform`) can go wrong
in only these two ways without failing uv: a wheel of the staging machine's platform, or a
script whose shebang names the staging interpreter.
"""

from __future__ import annotations

import dataclasses
import tarfile
from pathlib import Path

from gpurl_tasks.writer.blob import LayerError

__all__ = ["ELF_MACHINES", "LayerCheck", "check_layer", "elf_machine"]

# ELF e_machine of each target.arch (the System V ABI's EM_X86_64 and EM_AARCH64)
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}
_MACHINE_NAMES = {number: arch for arch, number in ELF_MACHINES.items()}
_ELF_MAGIC = b"\x7fELF"
_HEAD = 20  # e_ident (16 bytes), e_type (2), e_machine (2)


def elf_machine(head: bytes) -> int | None:
    """The e_machine of an ELF file from its first 20 bytes, None when it is not ELF; the
    field's byte order is the one e_ident[EI_DATA] names (1 little, 2 big)."""
    if len(head) < _HEAD or not head.startswith(_ELF_MAGIC):
        return None
    order = {1: "little", 2: "big"}.get(head[5])
    if order is None:
        raise LayerError(f"ELF byte order {head[5]} is neither little (1) nor big (2)")
    return int.from_bytes(head[18:20], order)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerCheck:
    """What one layer holds, as the checks counted it."""

    files: int  # regular files
    elf: int  # of them ELF objects, each of the target's machine
    scripts: int  # files in <venv>/bin; its entry points and Python scripts name <venv>/bin/python

    def to_json(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def _names_python(text: bytes, python: str) -> bool:
    """A script's first lines name `python`: `#!PYTHON`, or for a path longer than a shebang
    line may hold, uv's `#!/bin/sh` + `'''exec' PYTHON "$0" "$@"` trampoline."""
    lines = text.split(b"\n", 2)
    if lines[0].rstrip(b"\r") == b"#!" + python.encode():
        return True
    return (lines[0].strip() == b"#!/bin/sh" and len(lines) > 1
            and lines[1].split(b" ", 2)[1:2] in ([python.encode()], [b"'" + python.encode() + b"'"])
            and lines[1].startswith(b"'''exec' "))


def _entry_points(text: bytes) -> set[str]:
    """The script names a dist-info's entry_points.txt declares (console and gui scripts)."""
    names, section = set(), ""
    for raw in text.decode(errors="replace").splitlines():
        line = raw.strip()
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif section in ("console_scripts", "gui_scripts") and "=" in line:
            names.add(line.split("=", 1)[0].strip())
    return names


def check_layer(blob: Path, *, arch: str, venv: str) -> LayerCheck:
    """Check one written slice layer (a tar.gz whose paths are relative to /): every ELF file
    is an `arch` object; every entry point its dist-infos declare is a script in `venv`/bin,
    and every script there whose shebang names a Python names `venv`/bin/python (a shell
    script a wheel ships is left alone). The first file that is not fails it (LayerError
    naming the file and what it is)."""
    if arch not in ELF_MACHINES:
        raise LayerError(f"no ELF machine is known for arch {arch!r}")
    want = ELF_MACHINES[arch]
    bin_dir = venv.strip("/") + "/bin/"
    python = f"/{venv.strip('/')}/bin/python"
    files = elf = 0
    declared: set[str] = set()
    scripts: dict[str, bytes] = {}  # name in bin -> its first bytes
    try:
        with tarfile.open(blob, "r|gz") as layer:
            for member in layer:
                if not member.isfile():
                    continue
                files += 1
                data = layer.extractfile(member)
                assert data is not None  # a regular file
                head = data.read(4096)
                machine = elf_machine(head[:_HEAD])
                if machine is not None:
                    if machine != want:
                        found = _MACHINE_NAMES.get(machine, f"e_machine {machine}")
                        raise LayerError(f"{blob.name}: /{member.name} is an {found} ELF object, "
                                         f"not {arch} (e_machine {machine}, want {want})")
                    elf += 1
                elif member.name.startswith(bin_dir) and "/" not in member.name[len(bin_dir):]:
                    scripts[member.name[len(bin_dir):]] = head
                elif member.name.endswith(".dist-info/entry_points.txt"):
                    declared |= _entry_points(head + data.read())
    except (OSError, EOFError, tarfile.TarError) as exc:
        raise LayerError(f"{blob} is not a readable tar.gz layer: {exc}") from None
    missing = sorted(declared - scripts.keys())
    if missing:
        raise LayerError(f"{blob.name}: entry point {missing[0]!r} has no script in /{bin_dir}")
    for name, head in sorted(scripts.items()):
        first, _, rest = head.partition(b"\n")
        pythonic = (first.startswith(b"#!") and b"python" in first) or (
            first.strip() == b"#!/bin/sh" and rest.startswith(b"'''exec' "))  # uv's trampoline
        if (name in declared or pythonic) and not _names_python(head, python):
            shown = first.decode(errors="replace")[:120]
            raise LayerError(f"{blob.name}: /{bin_dir}{name} starts {shown!r}, not #!{python}")
    return LayerCheck(files=files, elf=elf, scripts=len(scripts))
