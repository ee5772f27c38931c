"""Render a profile's Dockerfile and its slice files and write them atomically, or check the
committed ones are current: the one writer of generated build files.

The edge around the pure recipe: it reads the lock (for its hash), asks the planner for the
plan (which keeps the committed slices' assignment), checks the compiled wheels against what
the lock's dependents require, lints the model, and either replaces each file via temp file +
rename (removing slice files the plan no longer has) or compares bytes.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from pathlib import Path

from gpurl_tasks.config import Config, load_committed_config, load_profile_names
from gpurl_tasks.dockerfile.context import ensure_launcher_ignored
from gpurl_tasks.dockerfile.lint import lint
from gpurl_tasks.dockerfile.model import DockerfileError, render
from gpurl_tasks.dockerfile.recipe import render_recipe
from gpurl_tasks.dockerfile.wheels import check_provided, pins_from_args
from gpurl_tasks.errors import GpurlError, LockError
from gpurl_tasks.files import write_atomic
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.planner import (
    plan_for_config,
    plan_profile,
    shared_slices_dir,
    slice_path,
    slices_dir,
)
from gpurl_tasks.plan.slices import SliceLine, render_slice

__all__ = [
    "GenerateResult",
    "Planner",
    "StaleFileError",
    "generate",
    "lock_sha256",
    "profiles_with_dockerfile",
    "render_dockerfile",
]

Planner = Callable[[Config], Plan]


class StaleFileError(GpurlError):
    """A committed generated file differs from what the generator writes now."""

    exit_code = 1


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GenerateResult:
    """What one profile's generation did."""

    profile: str
    path: Path
    changed: bool  # the Dockerfile was (or, with check, would be) rewritten
    steps: int  # slice layers in the plan
    slices: tuple[Path, ...] = ()  # slice files written (or, with check, that would change)
    notes: tuple[str, ...] = ()  # provided packages: lock vs compiled version
    variant: str = ""

    def to_json(self) -> dict[str, object]:
        return {"profile": self.profile, "variant": self.variant, "path": str(self.path),
                "changed": self.changed,
                "steps": self.steps, "slices_changed": [str(p) for p in self.slices],
                "provided": list(self.notes)}


def lock_sha256(lock: Path) -> str:
    """sha256 of the workspace lock's bytes (the provenance label's value)."""
    try:
        return hashlib.sha256(lock.read_bytes()).hexdigest()
    except FileNotFoundError:
        raise LockError(f"no uv.lock at {lock}", hint="run `uv lock` in the workspace") from None


def render_dockerfile(config: Config, plan: Plan) -> str:
    """The Dockerfile text for `config` and `plan`; lint findings are errors."""
    dockerfile = render_recipe(config, plan, lock_sha256=lock_sha256(config.lock))
    findings = lint(dockerfile)
    if findings:
        raise DockerfileError(f"generated Dockerfile fails lint: {findings[0]}",
                              hint=f"{len(findings)} finding(s); fix the recipe or the config")
    return render(dockerfile)


def slice_files(config: Config, plan: Plan) -> dict[Path, str]:
    """Every slice file the plan calls for, with its text."""
    return {slice_path(config, plan, layer):
            render_slice(SliceLine(requirement=p.requirement, index=p.index, hashed=p.hashed)
                         for p in layer.packages)
            for layer in plan.layers}


def _leftover(config: Config, files: dict[Path, str]) -> list[Path]:
    """Slice files in the plan's directories that the plan no longer has (for a profile with
    variants also any left directly under the profile's directory, from before it had them)."""
    dirs = [slices_dir(config)]
    if config.variants:
        dirs += [shared_slices_dir(config), config.build.slices / config.profile]
    return sorted({p for d in dirs if d.is_dir() for p in d.glob("*.txt")} - set(files))


def _check_compiled(config: Config, plan: Plan) -> tuple[str, ...]:
    """The provided packages' lock vs compiled versions; a dependent's unmet specifier fails."""
    if not plan.provided:
        return ()
    pins = pins_from_args({}, config.build, config.target)  # the ARG defaults are the config's
    lines, problems = check_provided(plan.provided, pins, config.build.wheel_globs)
    if problems:
        raise DockerfileError("the compiled wheels break the lock's requirements: "
                              + "; ".join(problems),
                              hint="build the fork at a version the lock allows, or re-lock "
                                   "the workspace against the fork's version")
    return tuple(lines)


def generate(config: Config, *, check: bool = False, planner: Planner | None = None
             ) -> GenerateResult:
    """Write the Dockerfile and the slice files, or with `check` raise StaleFileError when one is
    stale (a slice left over from an older plan counts as stale)."""
    plan = (planner or plan_for_config)(config)
    notes = _check_compiled(config, plan)
    text = render_dockerfile(config, plan)
    path = config.build.dockerfile
    files = slice_files(config, plan)
    leftover = _leftover(config, files)
    stale_slices = tuple(p for p, body in files.items()
                         if not p.exists() or p.read_bytes() != body.encode()) + tuple(leftover)
    current = path.read_bytes() if path.exists() else None
    changed = current != text.encode()
    if check:
        stale = ([path] if changed else []) + list(stale_slices)
        if stale:
            shown = ", ".join(str(p.relative_to(config.root) if p.is_relative_to(config.root)
                                  else p) for p in stale[:4])
            state = "missing or stale" if current is not None else "missing"
            raise StaleFileError(f"{shown} {state} for profile {config.profile!r}"
                                 + (f" variant {config.variant!r}" if config.variant else "")
                                 + (f" (+{len(stale) - 4} more)" if len(stale) > 4 else ""),
                                 hint=f"run `invoke generate --profile {config.profile}` and "
                                      "commit the result")
    else:
        for slice_path, body in files.items():
            write_atomic(slice_path, body)
        for old in leftover:
            old.unlink()
        write_atomic(path, text)
    ensure_launcher_ignored(config, check=check)
    return GenerateResult(profile=config.profile, variant=config.variant, path=path, changed=changed,
                          steps=len(plan.layers), slices=stale_slices, notes=notes)


def profiles_with_dockerfile(root: Path) -> tuple[str, ...]:
    """Every profile in [tool.gpurl.profiles], in file order: each has a generated Dockerfile."""
    return load_profile_names(root)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class GenerateSummary:
    """`invoke generate`'s outcome over one or every profile."""

    root: Path
    check: bool
    results: tuple[GenerateResult, ...]
    exit_code: int = 0

    def human(self) -> str:
        def verb(changed: bool) -> str:
            return "up to date" if not changed else ("would change" if self.check else "written")
        lines = []
        for r in self.results:
            lines.append(f"{r.path.relative_to(self.root)}: {verb(r.changed)} ({r.steps} slice "
                         f"layers; {len(r.slices)} slice file(s) {verb(True)})"
                         if r.slices else
                         f"{r.path.relative_to(self.root)}: {verb(r.changed)} ({r.steps} slice "
                         "layers, slices up to date)")
            lines += [f"  provided: {note}" for note in r.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        return {"check": self.check, "files": [r.to_json() for r in self.results]}


def _planned(plans: dict[str, Plan], config: Config) -> Plan:
    return plans[config.variant]


def generate_profiles(root: Path, profile: str | None, *, check: bool,
                      repack: bool = False) -> GenerateSummary:
    """Generate (or check) `profile`'s Dockerfile and slices, or every profile's, from the
    committed config. `repack` packs the layers afresh instead of keeping the committed slices."""
    names = (profile,) if profile else profiles_with_dockerfile(root)
    results: list[GenerateResult] = []
    for name in names:
        config = load_committed_config(root, name)
        plans = plan_profile(config, repack=repack)  # every variant at once: they share slices
        configs = [load_committed_config(root, name, v.name) for v in config.variants] or [config]
        results += [generate(c, check=check, planner=functools.partial(_planned, plans))
                    for c in configs]
    return GenerateSummary(root=root, check=check, results=tuple(results))
