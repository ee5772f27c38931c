"""Lock versions for the rebuild-cost section: which real lock is older, and realistic bumps.

Bumps edit the parsed lock (never the real files): a package gets the next version with new
artifact names, hashes and (optionally) sizes, and every pinned edge to it follows; or a new
package joins an extra of the root project.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Mapping

from gpurl_tasks.plan.lock import Artifact, Dependency, Lock, LockedPackage

__all__ = ["add_to_extra", "bump_package", "newest_upload", "next_version"]

_UPLOAD = re.compile(r'upload-time = "([^"]+)"')


def newest_upload(lock_text: str) -> str | None:
    """The latest artifact upload time in a lock: a lock cannot predate its newest file."""
    return max(_UPLOAD.findall(lock_text), default=None)


def next_version(version: str) -> str:
    """Increment the last number of the public version: 2.9.1+cu128 -> 2.9.2+cu128."""
    public, plus, local = version.partition("+")
    match = re.search(r"(\d+)(?!.*\d)", public)
    if match is None:
        return f"{public}.1{plus}{local}"
    bumped = public[:match.start()] + str(int(match.group(1)) + 1) + public[match.end():]
    return f"{bumped}{plus}{local}"


def _artifact(old: Artifact, version: str, new: str, size_factor: float) -> Artifact:
    def rename(text: str) -> str:
        return text.replace(version, new).replace(version.replace("+", "%2B"), new.replace("+", "%2B"))

    return Artifact(url=rename(old.url) if old.url else None, filename=rename(old.filename),
                    hash="sha256:" + hashlib.sha256(f"{old.hash}:{new}".encode()).hexdigest(),
                    size=round(old.size * size_factor) if old.size is not None else None)


def _retarget(deps: tuple[Dependency, ...], name: str, old: str, new: str) -> tuple[Dependency, ...]:
    return tuple(dataclasses.replace(d, version=new) if d.name == name and d.version == old else d
                 for d in deps)


def _edges(pkg: LockedPackage, name: str, old: str, new: str) -> LockedPackage:
    return dataclasses.replace(
        pkg,
        dependencies=_retarget(pkg.dependencies, name, old, new),
        optional_dependencies={k: _retarget(v, name, old, new) for k, v in pkg.optional_dependencies.items()},
        dev_dependencies={k: _retarget(v, name, old, new) for k, v in pkg.dev_dependencies.items()},
    )


def bump_package(lock: Lock, name: str, version: str, *, size_factor: float = 1.0,
                 overrides: Mapping[str, int] | None = None) -> tuple[Lock, dict[str, int]]:
    """The lock with `name==version` moved to the next version; also the size overrides it needs.

    A package whose size came from an override (wheels on the PyTorch index carry none) gets an
    override for the new version, scaled like its wheels.
    """
    matches = [p for p in lock.by_name(name) if p.version == version]
    if len(matches) != 1:
        raise ValueError(f"{lock.source} has {len(matches)} packages {name}=={version}")
    new = next_version(version)
    packages = []
    for pkg in lock.packages:
        if pkg is matches[0]:
            pkg = dataclasses.replace(
                pkg, version=new,
                wheels=tuple(_artifact(w, version, new, size_factor) for w in pkg.wheels),
                sdist=_artifact(pkg.sdist, version, new, size_factor) if pkg.sdist else None)
        packages.append(_edges(pkg, name, version, new))
    extra: dict[str, int] = {}
    old = (overrides or {}).get(f"{name}=={version}")
    if old is not None:
        extra[f"{name}=={new}"] = round(old * size_factor)
    return dataclasses.replace(lock, packages=tuple(packages)), extra


def add_to_extra(lock: Lock, extra: str, name: str, version: str, size: int) -> Lock:
    """The lock with a new pure-Python package that the root project's `extra` requires."""
    stem = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    added = LockedPackage(
        name=name, version=version, source_kind="registry",
        source={"registry": "https://pypi.org/simple"}, dependencies=(),
        optional_dependencies={}, dev_dependencies={},
        wheels=(Artifact(url=f"https://files.example/{stem}", filename=stem,
                         hash="sha256:" + hashlib.sha256(stem.encode()).hexdigest(), size=size),),
        sdist=None)
    packages = []
    for pkg in lock.packages:
        if pkg.source_kind in ("editable", "virtual") and pkg.source.get(pkg.source_kind) == ".":
            optional = dict(pkg.optional_dependencies)
            if extra not in optional:
                raise ValueError(f"the root project defines no extra {extra!r}")
            optional[extra] = (*optional[extra], Dependency(name=name))
            pkg = dataclasses.replace(pkg, optional_dependencies=optional)
        packages.append(pkg)
    packages.append(added)
    return dataclasses.replace(lock, packages=tuple(sorted(packages, key=lambda p: p.name)))
