"""Filling the local package index's directory: `pip download` of exact pins for the image's
target platform (pip is the ordinary client that can download wheels for another platform),
and what a lock or a workspace's build needs that the directory does not hold yet. A lock
resolved for several linux machines (uv's `environments`, e.g. x86_64 and aarch64) needs each
machine's wheels served: `missing_platform_pins` says which are absent, per machine.

The lock is read by `plan/lock.py` (the one reader); a file in the directory is named by
`pyindex.release_of`, as the index serves it.
"""

from __future__ import annotations

import re
import shutil
import sys
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from gpurl_tasks import proc
from gpurl_tasks.config import Arch, TargetSpec
from gpurl_tasks.errors import BuildError, ConfigError
from gpurl_tasks.local.pyindex import project_of, release_of
from gpurl_tasks.plan.lock import Lock
from gpurl_tasks.plan.target import platform_tags

__all__ = [
    "DownloadTarget",
    "build_requires",
    "download",
    "download_pins",
    "lock_files",
    "missing_pins",
    "missing_platform_pins",
    "pin_indexes",
    "pins_from_lock",
    "unmatched_lock_files",
    "unsatisfied",
    "wheel_machines",
]


@dataclass(frozen=True, kw_only=True)
class DownloadTarget:
    """The platform the files are for: pip's --python-version/--platform/--implementation/--abi."""

    python_version: str = "3.11"
    platforms: tuple[str, ...] = ("manylinux_2_36_x86_64",)
    implementation: str = "cp"

    @classmethod
    def for_target(cls, *, python: str, glibc: str, arch: Arch) -> DownloadTarget:
        """Every manylinux tag a glibc `glibc` machine of `arch` accepts (pip does not expand
        `manylinux_2_X` platforms itself), newest first."""
        spec = TargetSpec(python=python, os="linux", arch=arch, glibc=glibc)
        tags = [t for t in platform_tags(spec) if t.startswith("manylinux")]
        return cls(python_version=python, platforms=tuple(tags))

    def pip_args(self) -> list[str]:
        nodot = self.python_version.replace(".", "")
        args = ["--python-version", self.python_version, "--implementation", self.implementation,
                "--abi", f"cp{nodot}", "--abi", "abi3", "--abi", "none"]
        for platform in self.platforms:
            args += ["--platform", platform]
        return args


def _pip() -> list[str]:
    """A pip that can run: this interpreter's, else python3's on PATH."""
    for python in (sys.executable, shutil.which("python3")):
        if python and proc.run_quiet([python, "-m", "pip", "--version"], check=False).returncode == 0:
            return [python, "-m", "pip"]
    raise BuildError("no pip available to download wheels", hint="apt-get install python3-pip")


def download(pins: Sequence[str], dest: Path, *, target: DownloadTarget,
             index_url: str | None = None, with_deps: bool = False,
             exact: bool = True) -> list[Path]:
    """`pip download` exact `name==version` pins as binary wheels for `target` into `dest`.

    `with_deps` also fetches their dependencies (to seed an index a new lock resolves
    against). Files already in `dest` are reused by pip. Returns the files now in `dest`.
    """
    bad = [p for p in pins if "==" not in p] if exact else []
    if bad:
        raise ConfigError(f"pins must be exact name==version, got {bad[0]!r}",
                          hint="pass comma-separated pins, e.g. 'rich==13.9.4,attrs==25.3.0'")
    dest.mkdir(parents=True, exist_ok=True)
    for batch in _rounds(pins):  # pip refuses two pins of one name in a call (seed vs lock)
        args = [*_pip(), "download", *([] if with_deps else ["--no-deps"]),
                "--only-binary=:all:", "--dest", str(dest), *target.pip_args(), *batch]
        if index_url:
            args += ["--index-url", index_url]
        proc.run_quiet(args, timeout=1800)
    return sorted(p for p in dest.iterdir() if project_of(p.name))


def _rounds(pins: Sequence[str]) -> list[list[str]]:
    """Pins split into calls that each name a project at most once, in order."""
    rounds: list[tuple[set[str], list[str]]] = []
    for pin in dict.fromkeys(pins):
        name = canonicalize_name(re.split(r"[=<>!~ \[;]", pin, maxsplit=1)[0])
        home = next((r for r in rounds if name not in r[0]), None)
        if home is None:
            rounds.append(home := (set(), []))
        home[0].add(name)
        home[1].append(pin)
    return [batch for _, batch in rounds]


def pins_from_lock(lock: Lock) -> list[str]:
    """`name==version` of every package in a uv.lock that comes from a registry (an index)."""
    return sorted({f"{pkg.name}=={pkg.version}" for pkg in lock.packages
                   if pkg.source_kind == "registry"})


_PYPI = "https://pypi.org/simple"


def pin_indexes(lock: Lock, *, filling: str) -> dict[str, str | None]:
    """`name==version` of each registry package -> the index `pip download` fetches it from:
    the one the lock resolved it from, or None (pip's own, PyPI) where that is PyPI or
    `filling`, the loopback index being filled (it serves nothing yet). A pin from a private
    index (a PyTorch build, the team's own index) is on no other."""
    skipped = {"", _PYPI, filling.rstrip("/")}
    return {f"{pkg.name}=={pkg.version}": None if where in skipped else where
            for pkg in lock.packages if pkg.source_kind == "registry"
            for where in [pkg.source.get("registry", "").rstrip("/")]}


def download_pins(pins: Sequence[str], dest: Path, *, target: DownloadTarget,
                  indexes: Mapping[str, str | None]) -> None:
    """`download` of exact pins, each from its index in `indexes` (`pin_indexes`; absent or
    None: pip's own)."""
    groups: dict[str | None, list[str]] = {}
    for pin in pins:
        groups.setdefault(indexes.get(pin), []).append(pin)
    for index_url, group in groups.items():
        download(group, dest, target=target, index_url=index_url)


def lock_files(lock: Lock) -> dict[str, set[str]]:
    """`name==version` -> the file names uv.lock records for it (wheels and sdist), as the
    lock reader spells them (URL-unquoted: the names the files have on disk)."""
    files: dict[str, set[str]] = {}
    for pkg in lock.packages:
        if pkg.source_kind == "registry":
            artifacts = [*pkg.wheels, *([pkg.sdist] if pkg.sdist else [])]
            files.setdefault(f"{pkg.name}=={pkg.version}", set()).update(
                a.filename for a in artifacts)
    return files


def unmatched_lock_files(lock: Lock, directory: Path) -> list[str]:
    """Pins of the lock none of whose recorded files is in `directory`.

    `uv sync --frozen` fetches a file name the lock records; a wheel pip chose for the same
    version under another name (another platform tag) would not be found at build time.
    """
    present = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    return sorted(pin for pin, names in lock_files(lock).items()
                  if names and not names & present)


# manylinux_2_17_aarch64, manylinux2014_aarch64, manylinux1_x86_64, linux_aarch64 -> the machine
_LINUX_PLATFORM = re.compile(r"(?:manylinux_\d+_\d+|manylinux\d+|linux)_(\w+)")


def wheel_machines(filename: str) -> frozenset[str]:
    """The linux machines (`platform_machine`) a wheel file is built for; empty for a pure
    wheel, another OS's, or a name that is not a wheel's."""
    try:
        _, _, _, wheel_tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return frozenset()
    return frozenset(m.group(1) for t in wheel_tags
                     if (m := _LINUX_PLATFORM.fullmatch(t.platform)))


def missing_platform_pins(lock: Lock, directory: Path) -> dict[Arch, list[str]]:
    """machine -> the lock's registry pins that record linux wheels for that machine of which
    `directory` holds none: what `pip download` must still fetch for that platform.

    Checked per machine, not per name and version: an x86_64 wheel does not serve an aarch64
    sync. Only the machines gpurl builds images for (target.arch's values) are counted; the
    lock's `environments` bound the rest (every gpurl lock sets them).
    """
    present = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    missing: dict[str, set[str]] = {}
    for pkg in lock.packages:
        if pkg.source_kind != "registry":
            continue
        by_machine: dict[str, set[str]] = {}
        for wheel in pkg.wheels:
            for machine in wheel_machines(wheel.filename):
                by_machine.setdefault(machine, set()).add(wheel.filename)
        for machine, names in by_machine.items():
            if not names & present:
                missing.setdefault(machine, set()).add(f"{pkg.name}=={pkg.version}")
    return {machine: sorted(missing[machine]) for machine in get_args(Arch) if machine in missing}


def _present(directory: Path) -> set[tuple[str, Version]]:
    """(project, version) of every wheel or sdist in `directory` (pyindex.release_of)."""
    if not directory.is_dir():
        return set()
    return {release for path in directory.iterdir() if (release := release_of(path.name))}


def unsatisfied(requirements: Iterable[str], directory: Path) -> list[str]:
    """Requirement specs (`setuptools>=77`, `wheel`) no file in `directory` satisfies."""
    have = _present(directory)
    missing = []
    for text in requirements:
        req = Requirement(text)
        name = str(canonicalize_name(req.name))
        if not any(n == name and req.specifier.contains(v, prereleases=True) for n, v in have):
            missing.append(text)
    return missing


def build_requires(pyproject_text: str) -> list[str]:
    """`[build-system].requires` of a workspace: what building its own package needs."""
    table = tomllib.loads(pyproject_text).get("build-system", {})
    return [str(r) for r in table.get("requires", [])]


def missing_pins(pins: Iterable[str], directory: Path) -> list[str]:
    """The pins with no wheel or sdist of that name and version in `directory`."""
    have = _present(directory)
    return [pin for pin in pins
            if (str(canonicalize_name(pin.partition("==")[0])), Version(pin.partition("==")[2]))
            not in have]
