"""The lock's build settings, and which slices must be staged with them.

uv records how sdists are built in the workspace's `pyproject.toml` `[tool.uv]` (or a
`uv.toml` beside it, which uv then reads instead), not in uv.lock: its `[manifest]` holds
members, overrides and constraints only (checked with uv 0.13.9). `no-build-isolation-package
= [...]` builds the named packages in the environment they install into, and
`extra-build-dependencies = { pkg = [...] }` adds build requirements, where `{ requirement =
"torch", match-runtime = true }` means "the torch the environment holds". A slice is staged
alone on env-base, so such a package would build with neither: its slice is staged on a
build environment of every slice below it (their files installed into a scratch prefix on
the interpreter's path, never into the layer), with isolation off for the packages the
settings name. The slice file records this (`BUILD_NOTE`, with a hash of the slices below),
so its cache tag changes when the torch it built against does.
"""

from __future__ import annotations

import dataclasses
import hashlib
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from gpurl_tasks import values
from gpurl_tasks.errors import ConfigError, PlanError, shown
from gpurl_tasks.files import read_text
from gpurl_tasks.plan.model import Plan, SliceBuild

__all__ = ["BUILD_NOTE", "UvBuildSettings", "build_note", "load_build_settings",
           "parse_build_settings", "slice_builds"]

BUILD_NOTE = "# gpurl-build: on the slices below"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UvBuildSettings:
    """`[tool.uv]`'s sdist build settings, names canonical."""

    no_isolation: frozenset[str] = frozenset()
    # package -> the build requirements it names (match-runtime ones: the lock's version)
    extra: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    match_runtime: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def builds_on_lower(self, name: str) -> bool:
        """uv would build it with more than its own build requirements: staged alone, the
        staging install sees no pyproject, so the slices below provide them."""
        return name in self.no_isolation or bool(self.extra.get(name))


def _names(value: Any, where: str) -> list[str]:
    if not isinstance(value, list):
        raise ConfigError(f"{where} must be a list of package names, not {shown(value)}",
                          hint="write it as a list of strings: [\"torch\"]")
    return [str(canonicalize_name(values.package_name(v, where))) for v in value]


def _requirement(entry: Any, where: str) -> tuple[str, bool]:
    """(name, match-runtime) of one extra build dependency (a string or a table)."""
    text, runtime = entry, False
    if isinstance(entry, dict):
        text, runtime = entry.get("requirement"), entry.get("match-runtime", False)
    if not isinstance(text, str) or not isinstance(runtime, bool):
        raise ConfigError(f"{where}: {shown(entry)} is not a requirement or "
                          "{ requirement = ..., match-runtime = true }",
                          hint="write \"name>=1.0\" or { requirement = \"name>=1.0\", match-runtime = true }")
    try:
        return str(canonicalize_name(Requirement(text).name)), runtime
    except InvalidRequirement:
        raise ConfigError(f"{where}: {shown(text)} is not a requirement",
                          hint="write a PEP 508 requirement, e.g. \"setuptools>=70\"") from None


def parse_build_settings(text: str, *, where: str = "pyproject.toml",
                         uv_toml: bool = False) -> UvBuildSettings:
    """The settings of a workspace pyproject's `[tool.uv]`, or of a `uv.toml` (its top
    level) (pure)."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where} is not valid TOML: {exc}",
                          hint="fix the TOML the message points at") from None
    uv = document if uv_toml else document.get("tool", {}).get("uv", {})
    if uv.get("no-build-isolation") is True:
        raise ConfigError(f"{where}: [tool.uv] no-build-isolation = true is not supported: "
                          "each slice is staged alone",
                          hint="name the packages in no-build-isolation-package instead")
    no_isolation = frozenset(_names(uv.get("no-build-isolation-package", []),
                                    f"{where}: [tool.uv] no-build-isolation-package"))
    raw = uv.get("extra-build-dependencies", {})
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: [tool.uv] extra-build-dependencies must be a table",
                          hint="write it as a table: [tool.uv.extra-build-dependencies] NAME = [...]")
    extra: dict[str, tuple[str, ...]] = {}
    runtime: dict[str, tuple[str, ...]] = {}
    for package, entries in raw.items():
        at = f"{where}: [tool.uv.extra-build-dependencies] {package}"
        if not isinstance(entries, list):
            raise ConfigError(f"{at} must be a list", hint="write it as a list, e.g. [\"torch\"]")
        found = [_requirement(e, at) for e in entries]
        name = str(canonicalize_name(values.package_name(package, at)))
        extra[name] = tuple(n for n, _ in found)
        runtime[name] = tuple(n for n, matched in found if matched)
    return UvBuildSettings(no_isolation=no_isolation, extra=extra, match_runtime=runtime)


def load_build_settings(workspace: Path) -> UvBuildSettings:
    """The workspace's settings: its uv.toml's when it has one (uv then ignores
    pyproject's `[tool.uv]`), else its pyproject.toml's (none without either)."""
    for name, uv_toml in (("uv.toml", True), ("pyproject.toml", False)):
        path = workspace / name
        if path.is_file():
            return parse_build_settings(read_text(path, what=name, error=ConfigError),
                                        where=str(path), uv_toml=uv_toml)
    return UvBuildSettings()


def slice_builds(plan: Plan, settings: UvBuildSettings) -> tuple[SliceBuild, ...]:
    """The slices that hold a package uv builds (no wheel for the target) and the settings
    name (by NN-label), each with what it is staged on; a match-runtime requirement must sit
    in a slice below its package's."""
    home = {p.name: i for i, layer in enumerate(plan.layers) for p in layer.packages}
    out: list[SliceBuild] = []
    for i, layer in enumerate(plan.layers):
        named = [p.name for p in layer.packages if p.built and settings.builds_on_lower(p.name)]
        if not named:
            continue
        for name in named:
            for needed in settings.match_runtime.get(name, ()):
                if needed in home and home[needed] >= i:
                    raise PlanError(
                        f"{name} (slice {layer.name}) builds against {needed} at its runtime "
                        f"version, but {needed} is in slice {plan.layers[home[needed]].name}, "
                        "not below it", hint="run `invoke generate --repack`")
        out.append(SliceBuild(
            name=layer.name, lower=tuple(lower.name for lower in plan.layers[:i]),
            no_isolation=tuple(sorted(n for n in named if n in settings.no_isolation))))
    return tuple(out)


def build_note(build: SliceBuild, lower_texts: Sequence[str]) -> str:
    """The slice file's line recording how it is staged: what it is built on (a hash of the
    lower slices' files) and the packages built without isolation."""
    digest = hashlib.sha256("".join(lower_texts).encode()).hexdigest()
    names = ",".join(build.no_isolation) or "-"
    return f"{BUILD_NOTE} sha256:{digest}; no build isolation: {names}\n"
