"""uv.lock as data, and the install closure `uv sync --frozen` would produce for a target.

Parsing is pure (text -> frozen values) and rejects malformed input with the key path of the
problem. Every field that is later written as syntax (a slice line, a Dockerfile word) is
checked here against its grammar (gpurl_tasks.values): names (PEP 508), versions (PEP 440),
URLs (known schemes, URL characters only), hashes (`algo:hex` of the right length), extra and
group names; a bad one is one LockError naming the entry (`package[12].version`) and the value.

The closure walks the lock's dependency graph from the root project with marker
evaluation for the *target* environment. uv records which optional extras are active with
encoded conflict markers (`extra == 'extra-11-skyrl-train-vllm'`); they are evaluated with
set semantics: an extra is "equal" when it is among the activated ones.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement
from packaging.requirements import Requirement as PackagingRequirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from gpurl_tasks import values
from gpurl_tasks.config import PythonSelection, TargetSpec
from gpurl_tasks.errors import LockError, shown
from gpurl_tasks.files import read_text
from gpurl_tasks.plan.target import marker_environment

__all__ = [
    "LOCAL_SOURCE_KINDS",
    "Artifact",
    "Closure",
    "ConflictItem",
    "Dependency",
    "Lock",
    "LockedPackage",
    "Requirement",
    "check_conflicts",
    "install_closure",
    "load_lock",
    "lock_staleness",
    "parse_lock",
    "requirements_on",
]

_KW = {"frozen": True, "kw_only": True, "slots": True}
SOURCE_KINDS = ("registry", "git", "url", "path", "directory", "editable", "virtual")
# Installed from the workspace source by the final sync, never from a slice.
LOCAL_SOURCE_KINDS = frozenset({"path", "directory", "editable", "virtual"})
SUPPORTED_REVISIONS = range(1, 6)  # 1-3 seen in the wild, 4-5 written by uv 0.13


# the hint of a lock whose tables are not what uv writes
_RELOCK_HINT = "uv.lock is not what uv writes: run `uv lock` to write it again"


@dataclasses.dataclass(**_KW)
class Artifact:
    """A wheel or sdist entry: the file uv would download."""

    url: str | None
    filename: str
    hash: str | None
    size: int | None


@dataclasses.dataclass(**_KW)
class Dependency:
    """An edge of the graph; version/source disambiguate forked packages."""

    name: str
    extras: tuple[str, ...] = ()
    marker: str | None = None
    version: str | None = None
    source: tuple[tuple[str, str], ...] = ()


@dataclasses.dataclass(**_KW)
class Requirement:
    """A `[package.metadata] requires-dist` entry: what a workspace package asks of a dependency
    (uv records the specifiers only there, for the project and its local members)."""

    name: str
    specifier: str = ""
    marker: str | None = None
    # (kind, location) when [tool.uv.sources] gave it a direct source (`url`, `git`, a path):
    # uv then records the location in place of the specifier
    direct: tuple[str, str] | None = None


DIRECT_REQUIREMENT_KINDS = ("url", "git", "path", "directory", "editable")


@dataclasses.dataclass(**_KW)
class LockedPackage:
    name: str
    version: str | None
    source_kind: str
    source: Mapping[str, str]
    dependencies: tuple[Dependency, ...]
    optional_dependencies: Mapping[str, tuple[Dependency, ...]]
    dev_dependencies: Mapping[str, tuple[Dependency, ...]]
    wheels: tuple[Artifact, ...]
    sdist: Artifact | None
    resolution_markers: tuple[str, ...] = ()
    requires_dist: tuple[Requirement, ...] = ()
    # (name, version, sorted source): the package's identity, computed once (the closure
    # walk looks it up on every edge)
    key: tuple[str, str | None, tuple[tuple[str, str], ...]] = dataclasses.field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key",
                           (self.name, self.version, tuple(sorted(self.source.items()))))

    @property
    def is_local(self) -> bool:
        return self.source_kind in LOCAL_SOURCE_KINDS


@dataclasses.dataclass(**_KW)
class ConflictItem:
    """One entry of a `conflicts` set in uv.lock: `{ package = "p", extra = "x" }` (or group)."""

    package: str
    kind: str  # "extra" | "group"
    name: str

    def render(self) -> str:
        """The entry in the lock's own words."""
        return f'{{ package = "{self.package}", {self.kind} = "{self.name}" }}'


@dataclasses.dataclass(**_KW)
class Lock:
    version: int
    revision: int
    requires_python: str | None
    packages: tuple[LockedPackage, ...]
    members: tuple[str, ...]  # workspace members listed in [manifest]
    source: str  # where the text came from, for messages
    conflicts: tuple[tuple[ConflictItem, ...], ...] = ()  # uv's `conflicts`: sets never selected together
    # uv's `supported-markers` ([tool.uv] environments): the platforms the lock was resolved for
    supported_markers: tuple[str, ...] = ()
    _by_name: dict[str, tuple[LockedPackage, ...]] = dataclasses.field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, list[LockedPackage]] = {}
        for pkg in self.packages:
            index.setdefault(pkg.name, []).append(pkg)
        object.__setattr__(self, "_by_name", {k: tuple(v) for k, v in index.items()})

    def by_name(self, name: str) -> tuple[LockedPackage, ...]:
        return self._by_name.get(canonicalize_name(name), ())

    @property
    def versions(self) -> dict[str, frozenset[str]]:
        """name -> the versions the lock pins (a forked package has several)."""
        return {name: frozenset(p.version for p in pkgs if p.version)
                for name, pkgs in self._by_name.items() if any(p.version for p in pkgs)}


@dataclasses.dataclass(**_KW)
class Closure:
    """What a sync installs: packages from indexes/git/URLs, and local ones installed later."""

    packages: tuple[LockedPackage, ...]  # sorted by name
    local: tuple[LockedPackage, ...]  # sorted by name


# --- parsing ------------------------------------------------------------------------------


def _expect(value: Any, kind: type | tuple[type, ...], where: str, source: str) -> Any:
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise LockError(f"{source}: {where} must be a {names}, got {type(value).__name__}",
                        hint=_RELOCK_HINT)
    return value


def _check(check: values.Check, value: Any, where: str, source: str) -> Any:
    """One lock field against its grammar; a LockError names the entry and the value."""
    return check(value, f"{source}: {where}", error=LockError)


_NAMES: dict[str, str] = {}  # a checked name -> its normalised form (names repeat on every edge)


def _name(value: Any, where: str, source: str) -> str:
    if isinstance(value, str) and value in _NAMES:
        return _NAMES[value]
    name = str(canonicalize_name(_check(values.package_name, value, where, source)))
    _NAMES[value] = name
    return name


# What each source kind records: a URL of known scheme, or a path (local sources).
_SOURCE_CHECKS: dict[str, values.Check] = {
    "registry": values.index_url,
    "git": values.git_url,
    "url": values.url,
    **{kind: values.one_line for kind in ("path", "directory", "editable", "virtual")},
}


_SOURCES: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}  # checked tables (they repeat)


def _source(raw: Mapping[Any, Any], where: str, source: str) -> dict[str, str]:
    """A `source = { kind = value, subdirectory = ... }` table, every value checked."""
    if not raw:
        return {}
    items = tuple(raw.items())
    hit = _SOURCES.get(items) if all(isinstance(v, str) for _, v in items) else None
    if hit is not None:
        return dict(hit)
    checked: dict[str, str] = {}
    for key, value in raw.items():
        check = _SOURCE_CHECKS.get(str(key), values.one_line)
        checked[str(key)] = _check(check, value, f"{where}.{key}", source)
    git = checked.get("git")
    if git is not None and not re.fullmatch(r"[0-9a-f]{7,40}", urlsplit(git).fragment):
        raise LockError(f"{source}: {where}.git must end in #<commit id>, not {shown(git)}",
                        hint="uv records a git source pinned to its commit; re-lock")
    _SOURCES[items] = checked  # every value is a checked string: the items hash
    return dict(checked)


def _artifact(raw: Any, where: str, source: str) -> Artifact:
    _expect(raw, dict, where, source)
    url = raw.get("url")
    path = raw.get("path") or raw.get("filename")
    if url is None and path is None:
        raise LockError(f"{source}: {where} has neither 'url' nor 'path'",
                        hint=_RELOCK_HINT)
    if url is not None:
        _check(values.url, url, f"{where}.url", source)
    if path is not None:
        _check(values.one_line, path, f"{where}.{'path' if 'path' in raw else 'filename'}", source)
    if raw.get("hash") is not None:
        _check(values.hash_digest, raw["hash"], f"{where}.hash", source)
    filename = unquote(str(url or path).rsplit("/", 1)[-1].split("#", 1)[0])
    size = raw.get("size")
    if size is not None and (not isinstance(size, int) or size < 0):
        raise LockError(f"{source}: {where}.size must be a non-negative integer, got {size!r}",
                        hint=_RELOCK_HINT)
    return Artifact(url=url, filename=filename, hash=raw.get("hash"), size=size)


def _dependencies(raw: Any, where: str, source: str) -> tuple[Dependency, ...]:
    deps = []
    for i, entry in enumerate(_expect(raw or [], list, where, source)):
        here = f"{where}[{i}]"
        _expect(entry, dict, here, source)
        if "name" not in entry:
            raise LockError(f"{source}: {here} has no 'name'",
                            hint=_RELOCK_HINT)
        # edges are most of a lock: the fields an edge leaves out cost nothing
        marker = entry.get("marker")
        if marker is not None:
            marker = _marker(marker, f"{here}.marker", source)
        extras = _expect(entry["extra"], list, f"{here}.extra", source) if "extra" in entry else ()
        version = entry.get("version")
        if version is not None:
            _check(values.version, version, f"{here}.version", source)
        name = _name(entry["name"], f"{here}.name", source)
        pinned = entry.get("source")
        deps.append(Dependency(
            name=name,
            extras=tuple(sorted(_name(e, f"{here}.extra[{j}]", source)
                                for j, e in enumerate(extras))) if extras else (),
            marker=marker,
            version=version,
            source=tuple(sorted(_source(_expect(pinned, dict, f"{here}.source", source),
                                        f"{here}.source", source).items())) if pinned else (),
        ))
    return tuple(deps)


def _marker(marker: Any, where: str, source: str) -> str | None:
    if marker is None:
        return None
    text = str(_expect(marker, str, where, source))
    try:
        _compiled(text)  # parsed once per distinct marker: the closure walk reuses it
    except InvalidMarker:
        try:  # the message in the lock's own words
            Marker(text)
        except InvalidMarker as exc:
            raise LockError(f"{source}: {where} is invalid: {exc}",
                            hint="fix the marker in pyproject.toml, then run `uv lock`") from None
        raise LockError(f"{source}: {where} is invalid",
                        hint="fix the marker in pyproject.toml, then run `uv lock`") from None
    return text


def _requirements(raw: Any, where: str, source: str) -> tuple[Requirement, ...]:
    entries = _expect(_expect(raw, dict, where, source).get("requires-dist", []), list,
                      f"{where}.requires-dist", source)
    found = []
    for i, entry in enumerate(entries):
        here = f"{where}.requires-dist[{i}]"
        _expect(entry, dict, here, source)
        name, specifier = entry.get("name"), entry.get("specifier", "")
        if not isinstance(name, str) or not isinstance(specifier, str):
            raise LockError(f"{source}: {here} needs a string 'name' (and 'specifier')",
                            hint=_RELOCK_HINT)
        try:
            SpecifierSet(specifier)
        except InvalidSpecifier:
            raise LockError(f"{source}: {here}.specifier must be a version specifier such as "
                            f"'>=1.0', not {shown(specifier)}",
                            hint="fix the specifier in pyproject.toml, then run `uv lock`") from None
        direct = next(((kind, entry[kind]) for kind in DIRECT_REQUIREMENT_KINDS
                       if isinstance(entry.get(kind), str)), None)
        found.append(Requirement(name=_name(name, f"{here}.name", source), specifier=specifier,
                                 marker=_marker(entry.get("marker"), f"{here}.marker", source),
                                 direct=direct))
    return tuple(found)


def _package(raw: Any, index: int, source: str) -> LockedPackage:
    where = f"package[{index}]"
    _expect(raw, dict, where, source)
    if "name" not in raw:
        raise LockError(f"{source}: {where} has no 'name'",
                        hint=_RELOCK_HINT)
    name = _name(raw["name"], f"{where}.name", source)
    version = raw.get("version")
    if version is not None:
        _check(values.version, version, f"{where}.version", source)
    where = f"package[{index}] ({name})"
    src = _source(_expect(raw.get("source", {}), dict, f"{where}.source", source),
                  f"{where}.source", source)
    kinds = [k for k in SOURCE_KINDS if k in src]
    if len(kinds) != 1:
        raise LockError(f"{source}: {where}.source must name exactly one of {', '.join(SOURCE_KINDS)}",
                        hint=_RELOCK_HINT)
    optional: dict[str, tuple[Dependency, ...]] = {
        _name(extra, f"{where}.optional-dependencies.{extra}", source):
            _dependencies(deps, f"{where}.optional-dependencies.{extra}", source)
        for extra, deps in _expect(raw.get("optional-dependencies", {}), dict, where, source).items()
    }
    dev: dict[str, tuple[Dependency, ...]] = {
        _name(group, f"{where}.dev-dependencies.{group}", source):
            _dependencies(deps, f"{where}.dev-dependencies.{group}", source)
        for group, deps in _expect(raw.get("dev-dependencies", {}), dict, where, source).items()
    }
    wheels = tuple(
        _artifact(w, f"{where}.wheels[{i}]", source)
        for i, w in enumerate(_expect(raw.get("wheels", []), list, f"{where}.wheels", source))
    )
    sdist = _artifact(raw["sdist"], f"{where}.sdist", source) if "sdist" in raw else None
    return LockedPackage(
        name=name,
        version=version,
        source_kind=kinds[0],
        source=src,
        dependencies=_dependencies(raw.get("dependencies"), f"{where}.dependencies", source),
        optional_dependencies=optional,
        dev_dependencies=dev,
        wheels=wheels,
        sdist=sdist,
        resolution_markers=tuple(raw.get("resolution-markers", [])),
        requires_dist=_requirements(raw.get("metadata", {}), f"{where}.metadata", source),
    )


@functools.lru_cache(maxsize=8)
def parse_lock(text: str, *, source: str = "uv.lock") -> Lock:
    """Parse uv.lock text; raise LockError with the key path of anything malformed.

    Memoized: a task reads the same lock for several variants and steps (plan, generate,
    rebuild-needed), and parsing is most of a plan's time; the Lock is immutable."""
    with _no_cycle_collection():
        return _parse_lock(text, source)


@contextlib.contextmanager
def _no_cycle_collection() -> Iterator[None]:
    """The cycle collector paused: parsing builds hundreds of thousands of containers (the
    TOML tree, then the typed values), none of them in a cycle, and the collector's passes
    over them while they pile up cost a plan as much as the typed values themselves."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_lock(text: str, source: str) -> Lock:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{source} is not valid TOML: {exc}",
                        hint="fix the file (a merge conflict?) or run `uv lock` to write it again") from None
    version = data.get("version")
    if version != 1:
        raise LockError(f"{source}: lock version {version!r} is not supported (expected 1)",
                        hint="regenerate it with a uv release that writes version = 1")
    revision = data.get("revision", 1)
    if revision not in SUPPORTED_REVISIONS:
        raise LockError(f"{source}: lock revision {revision!r} is not supported (1 to 5)",
                        hint="upgrade gpurl, or lock with the uv release pinned in pyproject")
    raw_packages = _expect(data.get("package", []), list, "package", source)
    packages = tuple(_package(raw, i, source) for i, raw in enumerate(raw_packages))
    manifest = _expect(data.get("manifest", {}), dict, "manifest", source)
    members = tuple(_name(m, f"manifest.members[{i}]", source)
                    for i, m in enumerate(_expect(manifest.get("members", []), list,
                                                  "manifest.members", source)))
    return Lock(version=1, revision=revision, requires_python=data.get("requires-python"),
                packages=packages, members=members, source=source,
                conflicts=_conflicts(data.get("conflicts", []), source),
                supported_markers=tuple(
                    m for i, raw in enumerate(_expect(data.get("supported-markers", []), list,
                                                      "supported-markers", source))
                    if (m := _marker(raw, f"supported-markers[{i}]", source))))


def _conflicts(raw: Any, source: str) -> tuple[tuple[ConflictItem, ...], ...]:
    """The lock's top-level `conflicts` (what `[tool.uv] conflicts` in pyproject declared)."""
    sets = []
    for i, entry in enumerate(_expect(raw, list, "conflicts", source)):
        items = []
        for j, item in enumerate(_expect(entry, list, f"conflicts[{i}]", source)):
            item = _expect(item, dict, f"conflicts[{i}][{j}]", source)
            kinds = [k for k in ("extra", "group") if isinstance(item.get(k), str)]
            if len(kinds) != 1 or not isinstance(item.get("package"), str):
                raise LockError(f"{source}: conflicts[{i}][{j}] must name a package and one "
                                f"extra or group, not {item!r}",
                                hint="fix [tool.uv] conflicts in pyproject.toml, then run `uv lock`")
            here = f"conflicts[{i}][{j}]"
            items.append(ConflictItem(package=_name(item["package"], f"{here}.package", source),
                                      kind=kinds[0],
                                      name=_name(item[kinds[0]], f"{here}.{kinds[0]}", source)))
        sets.append(tuple(items))
    return tuple(sets)


def check_conflicts(lock: Lock, root: str, selection: PythonSelection) -> None:
    """Refuse a selection that activates two members of one of the lock's conflict sets: uv
    resolved them apart, so no single environment holds both (`uv sync` would refuse too)."""
    chosen: set[tuple[str, str]] = {("extra", canonicalize_name(e)) for e in selection.extras}
    chosen |= {("group", canonicalize_name(g)) for g in selection.groups}
    if not selection.no_dev:
        chosen.add(("group", "dev"))
    for entry in lock.conflicts:
        hit = [item for item in entry if item.package == root and (item.kind, item.name) in chosen]
        if len(hit) > 1:
            named = " and ".join(f"{item.kind} {item.name!r}" for item in hit)
            raise LockError(
                f"{lock.source} declares {named} as conflicting: conflicts = [["
                + ", ".join(item.render() for item in entry) + "]]",
                hint=_conflict_hint({item.kind for item in hit},
                                    dev=any((i.kind, i.name) == ("group", "dev") for i in hit)))


def _conflict_hint(kinds: set[str], *, dev: bool) -> str:
    """Where the selection is configured, in the config's own keys (uv resolved them apart)."""
    keys = [key for kind, key in (("extra", "extras"), ("group", "groups")) if kind in kinds]
    listed = " / ".join(f"{key} = [...]" for key in keys)
    hint = (f"select at most one of them per variant: [tool.gpurl.profiles.PROFILE.variants."
            f"VARIANT] {listed}, or for every variant [tool.gpurl.python] "
            + " / ".join(keys))
    if dev:
        hint += "; the dev group is selected unless [tool.gpurl.python] no-dev = true"
    return hint + "; uv resolved each apart"


def load_lock(path: Path) -> Lock:
    text = read_text(path, what="lock file", error=LockError,
                     missing_hint="run `uv lock` in the workspace or pass --lock PATH")
    return parse_lock(text, source=str(path))


# --- closure ------------------------------------------------------------------------------

_EXTRA_ATOM = re.compile(r"""\bextra\s*(==|!=)\s*(['"])([^'"]*)\2""")


@functools.lru_cache(maxsize=8192)
def _compiled(marker: str) -> Marker:
    """Rewrite `extra == 'x'` into the set form `'x' in extras` that packaging evaluates."""
    def repl(match: re.Match[str]) -> str:
        op = "in" if match.group(1) == "==" else "not in"
        return f"'{canonicalize_name(match.group(3))}' {op} extras"

    return Marker(_EXTRA_ATOM.sub(repl, marker))


def _environment(target: TargetSpec, extras: Iterable[str]) -> dict[str, Any]:
    """The one marker environment: the target's PEP 508 variables with `extras` active. A lock
    file's markers name the root's extras and groups in uv's conflict encoding
    (`_conflict_names`); a package's own requires-dist markers name its extras plainly."""
    env = marker_environment(target)
    env["extras"] = frozenset(extras)
    env["dependency_groups"] = frozenset()
    return env


def check_supported(lock: Lock, env: Mapping[str, Any], target: TargetSpec) -> None:
    """A lock resolved for other platforms only ([tool.uv] environments) holds no wheels for
    this target: one line saying so, and how to re-lock, before any size is looked for."""
    if lock.supported_markers and not any(
            _compiled(m).evaluate(dict(env), context="lock_file") for m in lock.supported_markers):
        wanted = f"sys_platform == 'linux' and platform_machine == '{target.arch}'"
        raise LockError(f"{lock.source} is resolved for {' or '.join(lock.supported_markers)} "
                        f"only, not {target.platform}",
                        hint=f'add "{wanted}" to [tool.uv] environments (and '
                             "required-environments) in the workspace's pyproject.toml, then "
                             "`uv lock`")


def _conflict_names(root: str, extras: Iterable[str], groups: Iterable[str]) -> frozenset[str]:
    """uv's encoded names for activated root extras and groups (`extra-<len>-<pkg>-<name>`)."""
    names: set[str] = {canonicalize_name(e) for e in extras} | {canonicalize_name(g) for g in groups}
    names |= {f"extra-{len(root)}-{root}-{canonicalize_name(e)}" for e in extras}
    names |= {f"group-{len(root)}-{root}-{canonicalize_name(g)}" for g in groups}
    return frozenset(names)


def _roots(lock: Lock) -> tuple[LockedPackage, ...]:
    roots = tuple(p for p in lock.packages
                  if p.source_kind in ("editable", "virtual") and p.source.get(p.source_kind) == ".")
    if not roots:
        raise LockError(f"{lock.source}: no root project (a package with source editable or "
                        "virtual '.') found", hint="is this the workspace's own uv.lock?")
    return roots


def _resolve(lock: Lock, dep: Dependency, parent: LockedPackage) -> LockedPackage:
    candidates = lock._by_name.get(dep.name, ())  # an edge's name is normalised when parsed
    if len(candidates) == 1 and dep.version in (None, candidates[0].version):
        return candidates[0]
    if dep.version is not None:
        candidates = tuple(p for p in candidates if p.version == dep.version)
    if dep.source and len(candidates) > 1:
        candidates = tuple(p for p in candidates if p.key[2] == dep.source)
    if len(candidates) != 1:
        found = "no package" if not candidates else f"{len(candidates)} packages"
        raise LockError(f"{lock.source}: {parent.name} depends on {dep.name} "
                        f"{dep.version or ''} but the lock has {found} matching it".replace("  ", " "),
                        hint="the lock is inconsistent: run `uv lock` to resolve it again")
    return candidates[0]


def install_closure(lock: Lock, target: TargetSpec, selection: PythonSelection) -> Closure:
    """Packages `uv sync --frozen` installs for the target with the selected extras and groups."""
    roots = _roots(lock)
    root_name = roots[0].name
    groups = set(selection.groups)
    if not selection.no_dev:
        groups.add("dev")
    for extra in selection.extras:
        if not any(canonicalize_name(extra) in r.optional_dependencies for r in roots):
            known = sorted({e for r in roots for e in r.optional_dependencies})
            raise LockError(f"extra {extra!r} is not defined by {root_name}",
                            hint=f"known extras: {', '.join(known) or 'none'}")
    for group in selection.groups:
        if not any(canonicalize_name(group) in r.dev_dependencies for r in roots):
            known = sorted({g for r in roots for g in r.dev_dependencies})
            raise LockError(f"dependency group {group!r} is not defined by {root_name}",
                            hint=f"known groups: {', '.join(known) or 'none'}")
    check_conflicts(lock, root_name, selection)
    env = _environment(target, _conflict_names(root_name, selection.extras, groups))
    check_supported(lock, env, target)

    verdicts: dict[str, bool] = {}  # a marker repeats on many edges; the environment is fixed

    def applies(dep: Dependency) -> bool:
        if dep.marker is None:
            return True
        if dep.marker not in verdicts:
            verdicts[dep.marker] = _compiled(dep.marker).evaluate(env, context="lock_file")
        return verdicts[dep.marker]

    seen: dict[tuple[Any, ...], set[str]] = {}
    chosen: dict[tuple[Any, ...], LockedPackage] = {}
    queue: list[tuple[LockedPackage, frozenset[str]]] = []
    for root in roots:
        queue.append((root, frozenset(str(canonicalize_name(e)) for e in selection.extras)))
        for group in sorted(groups):
            for dep in root.dev_dependencies.get(canonicalize_name(group), ()):
                if applies(dep):
                    queue.append((_resolve(lock, dep, root), frozenset(dep.extras)))
    while queue:
        pkg, extras = queue.pop()
        done = seen.setdefault(pkg.key, set())
        new_extras = set(extras) - done
        if pkg.key in chosen and not new_extras:
            continue
        first_visit = pkg.key not in chosen
        chosen[pkg.key] = pkg
        done |= new_extras
        edges = list(pkg.dependencies) if first_visit else []
        for extra in sorted(new_extras):
            edges += pkg.optional_dependencies.get(extra, ())
        for dep in edges:
            if applies(dep):
                queue.append((_resolve(lock, dep, pkg), frozenset(dep.extras)))

    by_name: dict[str, LockedPackage] = {}
    for pkg in chosen.values():
        other = by_name.setdefault(pkg.name, pkg)
        if other is not pkg:
            raise LockError(f"{lock.source}: two versions of {pkg.name} ({other.version}, "
                            f"{pkg.version}) both apply to the target",
                            hint="the extras selected may be declared as conflicting in pyproject")
    ordered = sorted(by_name.values(), key=lambda p: p.name)
    return Closure(packages=tuple(p for p in ordered if not p.is_local),
                   local=tuple(p for p in ordered if p.is_local))


def requirements_on(lock: Lock, closure: Closure, target: TargetSpec, selection: PythonSelection,
                    name: str) -> tuple[tuple[str, str], ...]:
    """(dependent, specifier) for each requirement a workspace package of the closure places on
    `name` that applies to the target (the root project with the selected extras)."""
    roots = {p.key for p in _roots(lock)}
    selected = _environment(target, (canonicalize_name(e) for e in selection.extras))
    plain = _environment(target, ())
    found = []
    for pkg in closure.local:
        env = selected if pkg.key in roots else plain
        for req in pkg.requires_dist:
            if req.name != canonicalize_name(name) or not req.specifier:
                continue
            if req.marker is None or _compiled(req.marker).evaluate(env, context="lock_file"):
                found.append((pkg.name, req.specifier))
    return tuple(sorted(set(found)))


def _asked(name: str, specifier: str) -> tuple[str, str]:
    """One requirement, normalised so that pyproject's and the lock's spellings compare."""
    return (str(canonicalize_name(name)), ",".join(sorted(str(s) for s in SpecifierSet(specifier))))


def _pyproject_requirements(project: Mapping[str, Any],
                            where: str) -> tuple[set[tuple[str, str]], dict[str, set[tuple[str, str]]]]:
    """(name, specifier) of each requirement of the project and its extras, and name ->
    {(kind, location)} of those that are direct references (`name @ URL`, PEP 508)."""
    asked: set[tuple[str, str]] = set()
    referenced: dict[str, set[tuple[str, str]]] = {}
    entries = [*project.get("dependencies", []),
               *(t for texts in project.get("optional-dependencies", {}).values() for t in texts)]
    try:
        for text in entries:
            req = PackagingRequirement(text)
            if not req.url:  # a direct reference is recorded, and compared, by its location
                asked.add(_asked(req.name, str(req.specifier)))
            if req.url:
                kind = "git" if req.url.startswith("git+") else "url"
                at = _git_location(req.url) if kind == "git" else _url_location(req.url)
                referenced.setdefault(canonicalize_name(req.name), set()).add((kind, at))
    except (InvalidRequirement, InvalidMarker, InvalidSpecifier) as exc:
        raise LockError(f"{where}: a requirement is invalid: {exc}",
                        hint="fix that requirement in pyproject.toml, then run `uv lock`") from None
    return asked, referenced


_GIT_REFS = ("rev", "tag", "branch", "subdirectory")


def _git_location(url: str, refs: Mapping[str, Any] | None = None) -> str:
    """A git source as uv records it in requires-dist (`url?rev=x`, the commit the lock pins
    after `#` dropped), from the lock's URL or from pyproject's `git = url` with its `rev`,
    `tag`, `branch` and `subdirectory` beside it (`refs`)."""
    base = url.split("#", 1)[0].removeprefix("git+")
    if refs is None:
        return base
    query = "&".join(f"{k}={refs[k]}" for k in _GIT_REFS if isinstance(refs.get(k), str))
    return f"{base}?{query}" if query else base


def _url_location(url: str) -> str:
    """A URL source as uv records it in requires-dist: its `#sha256=...` fragment dropped (the
    hash is the lock's, beside the file)."""
    return url.split("#", 1)[0]


def _direct_sources(sources: Any) -> dict[str, set[tuple[str, str]]]:
    """name -> {(kind, location)} of the `url` and `git` entries of `[tool.uv.sources]`."""
    found: dict[str, set[tuple[str, str]]] = {}
    for name, entries in (sources if isinstance(sources, dict) else {}).items():
        for entry in entries if isinstance(entries, list) else [entries]:
            if isinstance(entry, dict) and isinstance(entry.get("url"), str):
                found.setdefault(canonicalize_name(name), set()).add(
                    ("url", _url_location(entry["url"])))
            elif isinstance(entry, dict) and isinstance(entry.get("git"), str):
                found.setdefault(canonicalize_name(name), set()).add(
                    ("git", _git_location(entry["git"], entry)))
    return found


def _declared_conflicts(tool_uv: Mapping[str, Any], project: str) -> set[frozenset[tuple[str, str, str]]]:
    """`[tool.uv] conflicts` as sets of (package, extra|group, name); an item without a
    package is the project's own."""
    found = set()
    for entry in tool_uv.get("conflicts", []) if isinstance(tool_uv.get("conflicts"), list) else []:
        items = set()
        for item in entry if isinstance(entry, list) else []:
            kind = next((k for k in ("extra", "group") if isinstance(item, dict)
                         and isinstance(item.get(k), str)), None)
            if kind is not None:
                items.add((str(canonicalize_name(item.get("package", project))), kind,
                           str(canonicalize_name(item[kind]))))
        found.add(frozenset(items))
    return found


def lock_staleness(pyproject_text: str, lock: Lock, *, where: str = "pyproject.toml") -> list[str]:
    """What `uv lock --check` would find stale, offline (gpurl's own answer, for when uv
    cannot give one: plan/lockcheck.py asks uv first): each package the workspace project's
    pyproject.toml (dependencies, optional-dependencies) and the lock's record of it
    (`[package.metadata] requires-dist`) disagree on, and a changed requires-python.

    A package asked for is compared by its specifiers, except where `[tool.uv.sources]` gives
    it a URL or git source: uv records the location in place of the specifier there, so the
    locations are compared instead (the specifier of a marker the sources leave uncovered is
    still recorded, and compared). The `[tool.uv] conflicts` are compared as sets. Markers
    and dependency groups are not compared (uv
    rewrites the markers of conflicting extras); a project the lock does not hold is no
    finding (a virtual workspace root)."""
    try:
        data = tomllib.loads(pyproject_text)
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{where} is not valid TOML: {exc}",
                        hint="fix the TOML the message points at in pyproject.toml") from None
    project = data.get("project", {})
    name = project.get("name")
    locked = next((p for p in lock.by_name(name) if p.is_local), None) if isinstance(name, str) \
        else None
    if locked is None:
        return []
    wants, referenced = _pyproject_requirements(project, where)
    has = {_asked(r.name, r.specifier) for r in locked.requires_dist if not r.direct}
    direct = {r.name for r in locked.requires_dist if r.direct}
    problems = []
    for pkg in sorted({n for n, _ in wants} | {n for n, _ in has} | direct):
        mine = sorted(spec or "*" for n, spec in wants if n == pkg)
        theirs = sorted(spec or "*" for n, spec in has if n == pkg)
        if pkg in direct and mine and (not theirs or mine == theirs):
            continue  # asked for, and recorded by its source: its locations are compared below
        if mine != theirs:
            problems.append(f"{pkg}: {where} asks for {', '.join(mine) or 'nothing'}, the lock "
                            f"was resolved for {', '.join(theirs) or 'nothing'}")
    asked_names = {n for n, _ in wants}
    tool_uv = data.get("tool", {}).get("uv", {})
    sources = _direct_sources(tool_uv.get("sources", {}))
    for pkg in sorted(asked_names & (set(sources) | direct)):
        # [tool.uv.sources], and the requirements' own `name @ URL`
        if any(kind == "git" for kind, _ in referenced.get(pkg, ())):
            continue  # a PEP 508 git reference: uv's spelling of its refs is not reproduced
        named = sources.get(pkg, set()) | referenced.get(pkg, set())
        recorded = {(kind, _git_location(at) if kind == "git" else _url_location(at))
                    for r in locked.requires_dist if r.name == pkg and r.direct
                    for kind, at in [r.direct] if kind in ("url", "git")}
        if named != recorded:
            problems.append(f"{pkg}: {where} names "
                            f"{', '.join(sorted(at for _, at in named)) or 'no URL or git source'}"
                            f", the lock was resolved for "
                            f"{', '.join(sorted(at for _, at in recorded)) or 'none'}")
    declared = _declared_conflicts(tool_uv, str(canonicalize_name(name)))
    if declared != {frozenset((i.package, i.kind, i.name) for i in entry) for entry in lock.conflicts}:
        problems.append(f"conflicts: {where}'s [tool.uv] conflicts are not those the lock was "
                        f"resolved with ({len(declared)} set(s) declared, {len(lock.conflicts)} "
                        "in the lock)")
    wanted_python = project.get("requires-python")
    if isinstance(wanted_python, str) and lock.requires_python is not None and \
            SpecifierSet(wanted_python) != SpecifierSet(lock.requires_python):
        problems.append(f"requires-python: {where} asks for {wanted_python}, the lock was "
                        f"resolved for {lock.requires_python}")
    return problems
