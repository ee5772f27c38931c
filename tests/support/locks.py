"""Hypothesis strategies for uv.lock texts: markers, extras, groups, forks and sizes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from hypothesis import strategies as st

MARKERS = [
    None,
    "sys_platform == 'linux'",
    "sys_platform == 'win32'",
    "sys_platform == 'darwin'",
    "python_full_version >= '3.12'",
    "python_full_version < '3.10'",
    "platform_machine == 'aarch64'",
    "platform_machine == 'x86_64' and sys_platform == 'linux'",
]


@dataclass
class GenPackage:
    name: str
    version: str
    size: int | None
    deps: list[tuple[str, str | None, str | None]] = field(default_factory=list)  # name, ver, marker
    fork_marker: str | None = None


def _dep(name: str, version: str | None, marker: str | None, extras: tuple[str, ...] = ()) -> str:
    parts = [f"name = {json.dumps(name)}"]
    if version:
        parts.append(f"version = {json.dumps(version)}")
        parts.append('source = { registry = "https://pypi.org/simple" }')
    if extras:
        parts.append(f"extra = {json.dumps(list(extras))}")
    if marker:
        parts.append(f"marker = {json.dumps(marker)}")
    return "{ " + ", ".join(parts) + " }"


def render_lock(packages: list[GenPackage], root_deps: list[tuple[str, str | None, str | None]],
                extras: dict[str, list[tuple[str, str | None, str | None]]],
                dev: list[tuple[str, str | None, str | None]]) -> str:
    out = ['version = 1', 'revision = 3', 'requires-python = ">=3.11"', ""]
    for pkg in packages:
        out += ["[[package]]", f'name = "{pkg.name}"', f'version = "{pkg.version}"',
                'source = { registry = "https://pypi.org/simple" }']
        if pkg.fork_marker:
            out.append(f"resolution-markers = [{json.dumps(pkg.fork_marker)}]")
        if pkg.deps:
            out.append("dependencies = [")
            out += [f"    {_dep(*d)}," for d in pkg.deps]
            out.append("]")
        fname = f"{pkg.name.replace('-', '_')}-{pkg.version}-py3-none-any.whl"
        size = f", size = {pkg.size}" if pkg.size is not None else ""
        out.append(f'wheels = [{{ url = "https://files.example/{fname}", '
                   f'hash = "sha256:{"0" * 64}"{size} }}]')
        out.append("")
    out += ["[[package]]", 'name = "root"', 'version = "0.1.0"', 'source = { editable = "." }']
    out.append("dependencies = [")
    out += [f"    {_dep(*d)}," for d in root_deps]
    out.append("]")
    if extras:
        out.append("[package.optional-dependencies]")
        for extra, deps in extras.items():
            out.append(f"{extra} = [" + ", ".join(_dep(*d) for d in deps) + "]")
    if dev:
        out.append("[package.dev-dependencies]")
        out.append("dev = [" + ", ".join(_dep(*d) for d in dev) + "]")
    return "\n".join(out) + "\n"


@st.composite
def lock_texts(draw: st.DrawFn, *, max_packages: int = 25, max_size: int = 1000) -> str:
    """A valid uv.lock with a root project, optional extras `x`/`y`, a dev group and forks."""
    n = draw(st.integers(1, max_packages))
    names = [f"pkg-{i}" for i in range(n)]
    forked = set(draw(st.lists(st.sampled_from(names), max_size=3, unique=True)))
    packages: list[GenPackage] = []
    refs: list[tuple[str, str | None, str | None]] = []  # a way to reach each name
    for name in names:
        size = draw(st.one_of(st.integers(0, max_size), st.just(max_size)))
        if name in forked:
            packages.append(GenPackage(name, "1.0", size, fork_marker="sys_platform == 'linux'"))
            packages.append(GenPackage(name, "2.0", draw(st.integers(0, max_size)),
                                       fork_marker="sys_platform != 'linux'"))
            refs.append((name, "1.0", "sys_platform == 'linux'"))
            refs.append((name, "2.0", "sys_platform != 'linux'"))
        else:
            packages.append(GenPackage(name, "1.0", size))
            refs.append((name, None, draw(st.sampled_from(MARKERS))))
    for pkg in packages:
        for ref in draw(st.lists(st.sampled_from(refs), max_size=3)):
            if ref[0] != pkg.name:
                pkg.deps.append(ref)
    root = draw(st.lists(st.sampled_from(refs), max_size=8))
    extras = {e: draw(st.lists(st.sampled_from(refs), min_size=1, max_size=4)) for e in ("x", "y")}
    dev = draw(st.lists(st.sampled_from(refs), max_size=3))
    draw(st.randoms()).shuffle(packages)
    return render_lock(packages, root, extras, dev)
