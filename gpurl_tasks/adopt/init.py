"""`gpurl init`: adopt a repository in one command, from its lock and its pyproject.

It writes `[tool.gpurl]` into the repository's pyproject.toml (and the two shim files of
`shims.SHIMS`), taking what the files say and refusing to guess the rest. What the files say:
the workspace (where the uv.lock is), the extras (the lock's root package), which extras
conflict (the lock's `conflicts`), the platforms (its `supported-markers`), the image's Python
(`requires-python`), and, in a pin table module like the team's `cloud/iris/gpu_rl_images.py`,
the image repository and the cluster of each architecture. What it cannot know it names, all
at once: the registry when no table says it, and the CUDA arch list when the image builds a
package from source (the lock has no wheel for the platform).

A (variant, platform) pair is one gpurl variant: the first platform keeps the variant's own
name, another gets `NAME-<oci arch>` (`standard-arm64`) with its `target.arch`, as the
multiarch profile's gb200 variant does.

The edit is byte-preserving: the user's text stays as it is; only `[tool.gpurl...]` tables
are appended (or, with --force, replaced), in one atomic write.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from gpurl_tasks import values
from gpurl_tasks.adopt.shims import SHIMS
from gpurl_tasks.config import (
    OCI_ARCH,
    Arch,
    LauncherSettings,
    PythonSelection,
    TargetSpec,
    load_config,
)
from gpurl_tasks.errors import ConfigError, GpurlError, LockError, shown
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.imageref import InvalidReference, parse_reference
from gpurl_tasks.plan.lock import Lock, check_conflicts, check_supported, install_closure, load_lock
from gpurl_tasks.plan.sizes import select_wheel
from gpurl_tasks.plan.target import marker_environment, target_tags

__all__ = [
    "Adoption",
    "InitRequest",
    "PinTable",
    "PlannedVariant",
    "adopt",
    "find_pin_table",
    "find_workspace",
    "lock_platforms",
    "parse_variant",
    "plan_adoption",
    "python_of",
    "render_block",
    "with_tool_tables",
]

SIZE_CACHE = "sizes/probed.json"  # where `sizes --probe` writes, beside the pyproject
DEFAULT_PROFILE = "default"  # the config's own default-profile: no key needed to select it
_SKIPPED_DIRS = {".git", ".venv", "venv", "node_modules", "__pycache__", "site-packages", "build",
                 "dist", ".tox", ".nox"}
_HEADER = re.compile(r"^[ \t]*\[\[?[ \t]*([A-Za-z0-9_.\"' -]+?)[ \t]*\]\]?[ \t]*(#.*)?$")


@dataclasses.dataclass(frozen=True, kw_only=True)
class InitRequest:
    """What the user said: the flags of `gpurl init`."""

    root: Path  # the repository: its pyproject.toml gets [tool.gpurl]
    workspace: str | None = None  # the directory of the uv.lock, relative to root
    variants: tuple[str, ...] = ()  # "NAME=EXTRA,EXTRA"
    platforms: tuple[str, ...] = ()  # x86_64 / aarch64 (amd64 / arm64 accepted)
    registry: str | None = None  # HOST/REPOSITORY
    pin_table: str | None = None  # a pin table module, relative to root
    clusters: tuple[str, ...] = ()  # "ARCH=CLUSTER"
    cuda_arch_list: str | None = None
    python: str | None = None
    profile: str = DEFAULT_PROFILE
    force: bool = False
    dry_run: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class PinTable:
    """A module of pinned images shaped like the team's: its repository and clusters."""

    path: Path  # relative to the repository root
    table: str  # the dict of entries (GPU_RL_IMAGES)
    repository: str | None  # IMAGE_REPOSITORY, e.g. ghcr.io/org/image
    commits: tuple[str, ...]  # module-level *_COMMIT variables
    clusters: Mapping[str, str]  # cluster name -> oci arch (amd64/arm64), in file order


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlannedVariant:
    name: str
    extras: tuple[str, ...]
    arch: Arch


@dataclasses.dataclass(frozen=True, kw_only=True)
class Adoption:
    """What init wrote (or, dry, would write): the outcome `gpurl init` prints."""

    pyproject: Path
    block: str  # the [tool.gpurl] tables
    workspace: str
    profile: str
    variants: tuple[PlannedVariant, ...]
    registry: str
    registry_from: str
    pin_table: PinTable | None
    files: Mapping[str, str]  # relative path -> written / unchanged / kept (differs) / would write
    dry_run: bool
    exit_code: int = 0

    def human(self) -> str:
        names = ", ".join(f"{v.name} ({v.arch}: {', '.join(v.extras) or 'no extras'})"
                          for v in self.variants)
        lines = [f"{'would write' if self.dry_run else 'wrote'} [tool.gpurl] into "
                 f"{self.pyproject.name}: profile {self.profile!r}, workspace {self.workspace!r}",
                 f"  variants: {names}",
                 f"  registry: {self.registry} (from {self.registry_from})"]
        if self.pin_table:
            lines.append(f"  pin table: {self.pin_table.path} ({self.pin_table.table})")
        for path, state in self.files.items():
            lines.append(f"  {path}: {state}")
            if state.startswith("kept"):
                lines.append(f"    hint: merge by hand: {_shim_line(path)!r}, or --force to "
                             "replace it")
        if self.dry_run:
            lines += ["", self.block.rstrip("\n"), "", "dry run: nothing written"]
        else:
            lines.append("next: gpurl plan, then gpurl generate")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"pyproject": str(self.pyproject), "dry_run": self.dry_run,
                "profile": self.profile, "workspace": self.workspace,
                "variants": [{"name": v.name, "extras": list(v.extras), "arch": v.arch}
                             for v in self.variants],
                "registry": self.registry, "registry_from": self.registry_from,
                "pin_table": str(self.pin_table.path) if self.pin_table else None,
                "files": dict(self.files), "config": self.block}


def _shim_line(path: str) -> str:
    """The one line of a shim that does the work (what a user merges into their own file)."""
    return next(line for line in SHIMS[path].splitlines() if line.startswith(("from ", "import ")))


# --- what the files say -------------------------------------------------------------------


def find_workspace(root: Path, given: str | None) -> Path:
    """The directory of the uv.lock: `given`, else the root's, else the one lock below it."""
    if given is not None:
        workspace = (root / values.inside_repository(Path(given), root, "--workspace")).resolve()
        if not (workspace / "uv.lock").is_file():
            raise ConfigError(f"--workspace {given}: no uv.lock there",
                              hint="run `uv lock` in it first, or name the directory that "
                                   "holds the lock")
        return workspace
    if (root / "uv.lock").is_file():
        return root
    found = sorted(p.parent for p in _below(root, "uv.lock", depth=3))
    if not found:
        raise ConfigError(f"no uv.lock in {root} or below it",
                          hint="gpurl builds what a lock pins: run `uv lock` in the project "
                               "first (then gpurl init)")
    if len(found) > 1:
        named = ", ".join(str(p.relative_to(root)) for p in found)
        raise ConfigError(f"several locks below {root}: {named}",
                          hint="name the image's with --workspace DIR")
    return found[0]


def _below(root: Path, name: str, *, depth: int, pattern: str = "") -> Iterable[Path]:
    """Files called `name` (or matching `pattern`) in the directories 1 to `depth` levels
    below `root`, skipping environments and build output (a venv's site-packages holds other
    projects' files)."""
    level = [root]
    for _ in range(depth):
        level = [c for d in level for c in sorted(d.iterdir()) if c.is_dir() and not c.is_symlink()
                 and c.name not in _SKIPPED_DIRS and not c.name.startswith(".")]
        for directory in level:
            if pattern:
                yield from sorted(p for p in directory.glob(pattern) if p.is_file())
            elif (directory / name).is_file():
                yield directory / name


def lock_platforms(lock: Lock, python: str) -> tuple[Arch, ...]:
    """The linux machines the lock was resolved for (a lock without `environments` is
    universal: every machine gpurl builds)."""
    machines: list[Arch] = []
    for arch in get_args(Arch):
        target = TargetSpec(python=python, arch=arch)
        env = {**marker_environment(target), "extras": frozenset(), "dependency_groups": frozenset()}
        try:
            check_supported(lock, env, target)
        except LockError:
            continue
        machines.append(arch)
    return tuple(machines)


def python_of(requires_python: str | None) -> str | None:
    """The one Python minor `requires-python` allows (`==3.12.*` -> 3.12); None when it allows
    several or none: the image's Python is then the user's to say."""
    try:
        spec = SpecifierSet(requires_python or "")
    except InvalidSpecifier:
        return None
    allowed = [f"3.{minor}" for minor in range(8, 20) if spec.contains(f"3.{minor}.0") or
               spec.contains(f"3.{minor}.99")]
    return allowed[0] if len(allowed) == 1 else None


def parse_variant(text: str) -> tuple[str, tuple[str, ...]]:
    """`NAME=EXTRA,EXTRA` -> (name, extras); `NAME=` selects no extra."""
    name, sep, extras = text.partition("=")
    if not sep:
        raise ConfigError(f"--variant {shown(text)} names no extras",
                          hint="write --variant NAME=EXTRA,EXTRA (e.g. standard=vllm,fsdp)")
    values.profile_name(name.strip(), "the variant name in --variant")
    picked = tuple(canonicalize_name(e.strip()) for e in extras.split(",") if e.strip())
    return name.strip(), picked


def find_pin_table(root: Path, given: str | None) -> PinTable | None:
    """The pin table module: `given`, else the one module below the root that holds a dict of
    images beside a module-level IMAGE_REPOSITORY (the team's cloud/iris/gpu_rl_images.py)."""
    if given is not None:
        path = root / values.inside_repository(Path(given), root, "--pin-table")
        table = _pin_table(path, root)
        if table is None:
            raise ConfigError(f"--pin-table {given}: no dict of images (NAME_IMAGES = {{...}}) "
                              "in it", hint="name the module that holds the pinned images")
        return table
    found = [t for p in _below_py(root) if (t := _pin_table(p, root)) is not None]
    if len(found) > 1:
        raise ConfigError("several pin table modules: " + ", ".join(str(t.path) for t in found),
                          hint="name the image's with --pin-table PATH")
    return found[0] if found else None


def _below_py(root: Path) -> Iterable[Path]:
    """Candidate pin table modules: `*images.py` in the root and up to 4 directories below."""
    yield from sorted(root.glob("*images.py"))
    yield from _below(root, "", depth=4, pattern="*images.py")


def _pin_table(path: Path, root: Path) -> PinTable | None:
    try:
        tree = ast.parse(read_text(path, what="pin table module"))
    except (SyntaxError, GpurlError):
        return None
    assigned: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            assigned[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            assigned[node.target.id] = node.value
    tables = [n for n, v in assigned.items() if n.endswith("_IMAGES") and isinstance(v, ast.Dict)]
    repository = assigned.get("IMAGE_REPOSITORY")
    if len(tables) != 1 or not (isinstance(repository, ast.Constant)
                                and isinstance(repository.value, str)):
        return None
    clusters: dict[str, str] = {}
    for name, value in assigned.items():
        if name.startswith("CLUSTER") and isinstance(value, ast.Dict):
            for key, arch in zip(value.keys, value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) \
                        and isinstance(arch, ast.Attribute):
                    clusters[key.value] = arch.attr.lower()
    return PinTable(path=path.relative_to(root), table=tables[0], repository=repository.value,
                    commits=tuple(n for n in assigned if n.endswith("_COMMIT")),
                    clusters=clusters)


def _arch(text: str, flag: str) -> Arch:
    by_oci = {oci: arch for arch, oci in OCI_ARCH.items()}
    name = by_oci.get(text.strip(), text.strip())
    if name not in get_args(Arch):
        raise ConfigError(f"{flag} {shown(text)} is not a platform gpurl builds",
                          hint="x86_64 (amd64) or aarch64 (arm64)")
    return name  # type: ignore[return-value]


# --- the plan -----------------------------------------------------------------------------


def _root_name(lock: Lock, workspace: Path) -> str:
    data = _toml_file(workspace / "pyproject.toml")
    name = data.get("project", {}).get("name")
    if not isinstance(name, str) or not lock.by_name(name):
        raise ConfigError(f"{workspace / 'pyproject.toml'} names no project its uv.lock holds",
                          hint="gpurl builds a project's lock: [project] name, then `uv lock`")
    return str(canonicalize_name(name))


def _toml_file(path: Path) -> dict[str, Any]:
    """A pyproject.toml's tables, or one error naming the file and the line it breaks at."""
    try:
        return tomllib.loads(read_text(path, what="pyproject.toml", error=ConfigError))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}",
                          hint="fix it (uv and pip refuse it too), then gpurl init") from None


def _check_extras(lock: Lock, root_name: str, name: str, extras: Sequence[str]) -> None:
    """An unknown extra, or extras the lock declares as conflicting, in init's own words."""
    known = sorted({e for p in lock.by_name(root_name) for e in p.optional_dependencies})
    for extra in extras:
        if extra not in known:
            close = difflib.get_close_matches(extra, known, n=1)
            raise ConfigError(f"--variant {name}: extra {extra!r} is not one of {root_name}'s",
                              hint=(f"did you mean {close[0]!r}? " if close else "")
                              + f"its extras: {', '.join(known) or 'none'}")
    try:
        check_conflicts(lock, root_name, PythonSelection(extras=tuple(extras)))
    except LockError as exc:
        raise ConfigError(f"--variant {name}: {exc.message}",
                          hint="uv resolved them apart, so no one image holds both: put them in "
                               "two variants") from None


def _variants(request: InitRequest, lock: Lock, root_name: str,
              platforms: Sequence[Arch]) -> tuple[PlannedVariant, ...]:
    """Each --variant on each platform (no --variant: one image of the project alone)."""
    chosen = [parse_variant(v) for v in request.variants] or [("standard", ())]
    names = [n for n, _ in chosen]
    if len(set(names)) != len(names):
        raise ConfigError(f"--variant names {shown(names)} twice", hint="give each its own name")
    for name, extras in chosen:
        _check_extras(lock, root_name, name, extras)
    planned = []
    for arch in platforms:
        suffix = "" if arch == platforms[0] else f"-{OCI_ARCH[arch]}"
        planned += [PlannedVariant(name=f"{n}{suffix}", extras=e, arch=arch) for n, e in chosen]
    taken = [v.name for v in planned]
    clash = next((n for n in names if taken.count(n) > 1), None)
    if clash is not None:
        raise ConfigError(f"--variant {clash} is also the name of another variant's "
                          f"{clash.rsplit('-', 1)[-1]} image",
                          hint="the second platform's images are named NAME-<arch>: choose "
                               "another name")
    return tuple(planned)


def _builds_from_source(lock: Lock, variants: Sequence[PlannedVariant], python: str) -> list[str]:
    """Packages a variant installs with no wheel for its platform: the image compiles them."""
    compiled: set[str] = set()
    for variant in variants:
        target = TargetSpec(python=python, arch=variant.arch)
        closure = install_closure(lock, target, PythonSelection(extras=variant.extras))
        supported = target_tags(target)
        compiled |= {p.name for p in closure.packages if select_wheel(p, supported) is None}
    return sorted(compiled)


def plan_adoption(request: InitRequest) -> Adoption:
    """Everything init would write, checked; raises one ConfigError naming what is wrong (every
    missing input at once) before any file is touched."""
    root = request.root.resolve()
    pyproject = root / "pyproject.toml"
    text = read_text(pyproject, what="pyproject.toml", error=ConfigError,
                     missing_hint="run gpurl init at the repository's root, where its "
                                  "pyproject.toml is")
    if "gpurl" in _toml_file(pyproject).get("tool", {}) and not request.force:
        raise ConfigError(f"{pyproject} already has [tool.gpurl]: init writes no profile "
                          f"{request.profile!r} into it, and changes nothing",
                          hint="edit it by hand, or gpurl init --force to replace the whole "
                               "of [tool.gpurl]")
    values.profile_name(request.profile, "--profile")
    workspace = find_workspace(root, request.workspace)
    lock = load_lock(workspace / "uv.lock")
    root_name = _root_name(lock, workspace)
    missing: list[str] = []
    python = request.python or python_of(lock.requires_python)
    if python is None:
        missing.append(f"the image's Python (--python 3.X: requires-python "
                       f"{lock.requires_python or 'is unset'} allows several)")
        python = "3.12"  # only to go on finding what else is missing
    else:
        values.version(python, "--python")
    resolved = lock_platforms(lock, python)
    platforms = tuple(dict.fromkeys(_arch(p, "--platform") for p in request.platforms)) or resolved
    for arch in platforms:
        if arch not in resolved:
            raise ConfigError(f"--platform {arch}: {workspace / 'uv.lock'} was not resolved for "
                              f"linux {arch} (it was for {', '.join(resolved) or 'no linux machine'})",
                              hint=f"add \"sys_platform == 'linux' and platform_machine == "
                                   f"'{arch}'\" to [tool.uv] environments, `uv lock`, then init")
    variants = _variants(request, lock, root_name, platforms)
    table = find_pin_table(root, request.pin_table)
    registry, registry_from = _registry(request.registry, table, missing)
    clusters = _clusters(request.clusters, table, platforms, missing)
    arch_list = request.cuda_arch_list
    if arch_list is not None:
        values.cuda_arch_list(arch_list, "--cuda-arch-list")
    else:
        compiled = _builds_from_source(lock, variants, python)
        if compiled:
            missing.append(f"the CUDA arch list (--cuda-arch-list, e.g. \"8.0;9.0;10.0\": the "
                           f"image builds {', '.join(compiled)} from source)")
    if missing:
        raise ConfigError(f"init cannot tell {len(missing)} thing(s): " + "; ".join(missing),
                          hint="pass each (gpurl init guesses none of them), then run it again")
    block = render_block(profile=request.profile, workspace=workspace.relative_to(root),
                         python=python, registry=registry, variants=variants,
                         clusters=clusters, arch_list=arch_list, table=table)
    # the edit as it would be written, loaded by the one config cascade: init never writes a
    # config gpurl refuses (nor an edit it cannot make cleanly)
    load_config(root, profile=request.profile, env={},
                pyproject_text=with_tool_tables(text, block))
    return Adoption(pyproject=pyproject, block=block, workspace=str(workspace.relative_to(root)),
                    profile=request.profile, variants=variants, registry=registry,
                    registry_from=registry_from, pin_table=table,
                    files=_shim_states(root, force=request.force, dry_run=request.dry_run),
                    dry_run=request.dry_run)


def _registry(given: str | None, table: PinTable | None, missing: list[str]) -> tuple[str, str]:
    text, where = (given, "--registry") if given else (
        (table.repository, str(table.path)) if table and table.repository else (None, ""))
    if text is None:
        missing.append("the registry (--registry HOST/REPOSITORY, e.g. ghcr.io/org/image)")
        return "", ""
    try:
        ref = parse_reference(text, bare=True)
    except InvalidReference as exc:
        raise ConfigError(f"{where} {shown(text)}: {exc.message}",
                          hint="write HOST/REPOSITORY, e.g. ghcr.io/org/image") from None
    if not ref.host or ref.tag or ref.digest:
        raise ConfigError(f"{where} {shown(text)} is not HOST/REPOSITORY",
                          hint="write the registry host and the repository only, e.g. "
                               "ghcr.io/org/image")
    return ref.name, where


def _clusters(given: Sequence[str], table: PinTable | None, platforms: Sequence[Arch],
              missing: list[str]) -> dict[Arch, str]:
    """The iris cluster that builds each platform: --cluster ARCH=NAME, else the table's
    first cluster of that architecture. The first platform may keep the configured default;
    another has no default (an amd64 cluster cannot build an arm64 image's native steps)."""
    clusters: dict[Arch, str] = {}
    if table:
        for name, oci in table.clusters.items():
            arch = next((a for a, o in OCI_ARCH.items() if o == oci), None)
            if arch is not None:
                clusters.setdefault(arch, name)  # type: ignore[arg-type]
    for item in given:
        arch, sep, name = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--cluster {shown(item)} is not ARCH=CLUSTER",
                              hint="e.g. --cluster aarch64=cw-us-east-08a")
        clusters[_arch(arch, "--cluster")] = values.plain_name(name.strip(), "--cluster")
    for arch in platforms[1:]:
        if arch not in clusters:
            missing.append(f"the iris cluster of {arch} builds (--cluster {arch}=NAME)")
    return {a: c for a, c in clusters.items() if a in platforms}


def _shim_states(root: Path, *, force: bool, dry_run: bool) -> dict[str, str]:
    states = {}
    for path, text in SHIMS.items():
        target = root / path
        if target.exists() and target.read_text(errors="replace") == text:
            states[path] = "unchanged"
        elif target.exists() and not force:
            states[path] = "kept (differs from gpurl's)"
        else:
            states[path] = ("would write" if dry_run else "written") + (
                " (replacing yours: --force)" if target.exists() else "")
    return states


# --- the text -----------------------------------------------------------------------------


def _toml(value: str | Sequence[str]) -> str:
    """A TOML basic string or array of them: JSON's escapes are TOML's, except that TOML has no
    surrogate pairs (so non-ASCII stays as it is) and allows no raw DEL."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    return "[" + ", ".join(_toml(v) for v in value) + "]"


def render_block(*, profile: str, workspace: Path, python: str, registry: str,
                 variants: Sequence[PlannedVariant], clusters: Mapping[Arch, str],
                 arch_list: str | None, table: PinTable | None) -> str:
    """The [tool.gpurl] tables init writes (pure: the same inputs give the same bytes)."""
    host, repository = registry.split("/", 1)
    base = f"tool.gpurl.profiles.{profile}"
    lines = ["# gpurl's configuration, written by `gpurl init` (docs/config.md names every key).",
             "[tool.gpurl]", f"default-profile = {_toml(profile)}", "",
             f"[{base}]", f"workspace = {_toml(workspace.as_posix() or '.')}", "",
             f"[{base}.target]", f"python = {_toml(python)}", f"arch = {_toml(variants[0].arch)}"]
    lines += ["", f"[{base}.registry]", f"host = {_toml(host)}",
              f"repository = {_toml(repository)}"]
    # where `sizes --probe` keeps the sizes a lock lacks (URL wheels, hashless indexes)
    lines += ["", f"[{base}.layers]", f"size-cache = {_toml(SIZE_CACHE)}"]
    if variants[0].arch in clusters:
        lines += ["", f"[{base}.cluster]", f"name = {_toml(clusters[variants[0].arch])}"]
    if arch_list:
        lines += ["", f"[{base}.build]", f"cuda-arch-list = {_toml(arch_list)}"]
    defaults = LauncherSettings()
    if table:  # `pin` writes each variant's entry of the table (docs/verify-and-pin.md)
        lines += ["", f"[{base}.launcher]", f"path = {_toml(table.path.as_posix())}",
                  f"table = {_toml(table.table)}"]
        if defaults.commit_variable not in table.commits:
            lines.append('commit-variable = ""  # no module-level source commit to move')
    first = variants[0]
    for variant in variants:
        own = variant.name if variant.arch == first.arch else variant.name.rsplit("-", 1)[0]
        lines += ["", f"[{base}.variants.{variant.name}]", f"extras = {_toml(variant.extras)}"]
        if table and own != variant.name:  # the entry of its own image, on its platform
            lines.append("table-key = " + _toml(defaults.table_key.replace(
                "{VARIANT}", re.sub(r"[^A-Z0-9]", "_", own.upper()))))
        elif variant is not first and not table:
            variable = defaults.variable if own == first.name else \
                f"{re.sub(r'[^A-Z0-9]', '_', own.upper())}_DOCKER_IMAGE"
            lines.append(f"launcher-variable = {_toml(variable)}")
        if variant.arch != first.arch:
            lines += ["", f"[{base}.variants.{variant.name}.target]",
                      f"arch = {_toml(variant.arch)}"]
            if variant.arch in clusters:
                lines += ["", f"[{base}.variants.{variant.name}.cluster]",
                          f"name = {_toml(clusters[variant.arch])}"]
    return "\n".join(lines) + "\n"


def _header(line: str) -> str | None:
    """The dotted name of a table header line (`[tool.gpurl.x]` -> tool.gpurl.x), else None."""
    match = _HEADER.match(line)
    return re.sub(r"[ \t\"']", "", match.group(1)) if match else None


def with_tool_tables(text: str, block: str) -> str:
    """`text` with its [tool.gpurl...] tables removed and `block` appended: every other byte
    as it was. A comment right above a [tool.gpurl...] header goes with that table; a trailing
    comment or blank line just above another table stays with the other table.
    Refuses a [tool.gpurl] it cannot find as tables (an inline table, say)."""
    lines = text.splitlines(keepends=True)
    kept: list[str] = []
    pending: list[str] = []  # comments and blank lines that may belong to the next table
    inside = False
    for line in lines:
        name = _header(line)
        if name is not None:
            mine = name == "tool.gpurl" or name.startswith("tool.gpurl.")
            if inside and not mine:
                kept += pending
            while mine and not inside and kept and kept[-1].lstrip().startswith("#"):
                kept.pop()  # the comment right above [tool.gpurl] is its own
            inside, pending = mine, []
        if not inside:
            kept.append(line)
        elif name is None and (not line.strip() or line.lstrip().startswith("#")):
            pending.append(line)
        else:
            pending = []
    body = "".join(kept).rstrip("\n")
    result = (body + "\n\n" if body else "") + block
    before, after = tomllib.loads(text), _parsed(result)
    before.get("tool", {}).pop("gpurl", None)
    after.get("tool", {}).pop("gpurl", None)
    if not before.get("tool"):
        before.pop("tool", None)
    if not after.get("tool"):
        after.pop("tool", None)
    if before != after or _parsed(result).get("tool", {}).get("gpurl") != _parsed(block)["tool"]["gpurl"]:
        raise ConfigError("pyproject.toml spells [tool.gpurl] in a way init cannot edit in place "
                          "(an inline table, or keys under [tool])",
                          hint="remove the [tool.gpurl] keys by hand, then gpurl init")
    return result


def _parsed(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"pyproject.toml spells [tool.gpurl] in a way init cannot edit in "
                          f"place: the edit would not parse ({exc})",
                          hint="remove the [tool.gpurl] keys by hand, then gpurl init") from None


# --- the edge -----------------------------------------------------------------------------


def adopt(request: InitRequest) -> Adoption:
    """Plan, then (unless dry) write the pyproject and the shims, each atomically."""
    adoption = plan_adoption(request)
    if request.dry_run:
        return adoption
    text = read_text(adoption.pyproject, what="pyproject.toml", error=ConfigError)
    write_atomic(adoption.pyproject, with_tool_tables(text, adoption.block))
    for path, state in adoption.files.items():
        if state.startswith("written"):
            write_atomic(request.root.resolve() / path, SHIMS[path])
    return adoption
