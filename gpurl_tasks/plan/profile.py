"""The planner's edge: read what the config names (the lock, the size tables, the committed
slice files, the lock's git history) and plan every variant of a profile together.

The packing itself is pure (`variants.plan_images`, the one entry point); this module turns a
config into its inputs: each variant's install closure, sizes, slice lines, final-sync flags, the packages the
compiled wheels provide, the path sources and what is installed outside the lock, read from
where each variant's committed slice files live (`Variant.slices`).
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gpurl_tasks.config import BuildSettings, Config, Variant, platform_groups
from gpurl_tasks.errors import ExitCode, LockError, PlanError
from gpurl_tasks.files import write_atomic
from gpurl_tasks.plan.buildenv import load_build_settings, slice_builds
from gpurl_tasks.plan.history import version_changes
from gpurl_tasks.plan.lock import Closure, Lock, install_closure, load_lock, requirements_on
from gpurl_tasks.plan.model import Plan, ProvidedPackage, sync_selection_flags
from gpurl_tasks.plan.postinstall import (
    PostInstallInputs,
    compile_command,
    compile_environment,
    inputs_for,
    parse_compiled,
    pins_path,
    read_pins,
    render_pins,
    stale_reason,
    with_pins,
    without_pinned,
)
from gpurl_tasks.plan.report import PlanViews
from gpurl_tasks.plan.sizes import SizeSources, load_size_sources, package_sizes
from gpurl_tasks.plan.slices import SliceLine, read_assignment, slice_line
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.variants import VariantInput, plan_images
from gpurl_tasks.plan.wheelglobs import provided_names
from gpurl_tasks.proc import run_quiet

__all__ = [
    "PinsOutcome",
    "local_install_flags",
    "local_paths",
    "lock_post_install",
    "outside_lock",
    "plan_for_config",
    "plan_profile",
    "plan_views",
    "profile_inputs",
    "resolve",
]


def local_install_flags(lock: Lock, closure: Closure) -> tuple[str, ...]:
    """Flags that keep local sources out of the slices' environment until the source is copied."""
    flags = ["--no-install-project"]
    if lock.members:
        flags.append("--no-install-workspace")
    if any(p.source.get(p.source_kind) != "." for p in closure.local):
        flags.append("--no-install-local")
    return tuple(flags)


def _variant_input(parsed: Lock, variant: Variant,
                   sources: SizeSources) -> VariantInput:
    """One variant's closure, sizes, slice lines and flags."""
    selection, build, target = variant.python, variant.build, variant.target
    closure = install_closure(parsed, target, selection)
    wanted = set(provided_names(build.wheel_globs))
    provided = tuple(
        ProvidedPackage(name=p.name, version=p.version or "",
                        requirements=requirements_on(parsed, closure, target,
                                                     selection, p.name))
        for p in closure.packages if p.name in wanted)
    installed = [p for p in closure.packages if p.name not in wanted]
    lines = {p.name: slice_line(p) for p in installed}
    outside = outside_lock(build, closure)
    return VariantInput(
        name=variant.name, sizes=tuple(package_sizes(installed, target_tags(target), sources)),
        sync_flags=sync_selection_flags(selection, local_flags=local_install_flags(parsed, closure)),
        local=tuple(p.name for p in closure.local), provided=provided,
        lines=lines, local_paths=local_paths(closure), outside_lock=outside,
        post_install=inputs_for(variant, outside, [
            *(line.requirement for line in lines.values()),
            *(f"{p.name}=={p.version}" for p in provided)]) if outside else None)


def outside_lock(build: BuildSettings, closure: Closure) -> tuple[str, ...]:
    """What the image installs after the lock, its dependencies resolved at build time: every
    `build.post-install` requirement, in config order. One the closure already holds must
    pin the lock's version (its install is a no-op, its asserts still run): the lock rules,
    and another version would break the final sync's proof."""
    locked = {p.name: p.version for p in closure.packages}
    for entry in build.post_installs:
        if entry.name in locked and entry.requirement.split("==", 1)[-1] != locked[entry.name]:
            raise LockError(f"build.post-install {entry.requirement!r}: the lock already pins "
                            f"{entry.name} {locked[entry.name]}",
                            hint="drop it from post-install (the lock installs it), or re-lock "
                                 "the workspace at the version you want")
    return tuple(e.requirement for e in build.post_installs)


def local_paths(closure: Closure) -> tuple[tuple[str, str], ...]:
    """(name, path) of every local package whose source is a path other than the workspace's
    own directory, as the lock records it (relative to the workspace)."""
    return tuple(sorted((p.name, p.source[p.source_kind]) for p in closure.local
                        if p.source.get(p.source_kind, ".") not in (".", "")))


def profile_inputs(config: Config) -> tuple[VariantInput, ...]:
    """What the planner needs of every variant of the profile: closures, sizes, slice lines
    (the lock parsed once). `config` is the one of any of the profile's variants."""
    parsed = load_lock(config.planned().lock)
    sources = load_size_sources(config.layers.size_overrides, config.layers.size_cache)
    settings = load_build_settings(config.workspace)
    return tuple(dataclasses.replace(_variant_input(parsed, v, sources),
                                     build_settings=settings) for v in config.variants)


def plan_profile(config: Config, *, repack: bool = False, max_slices: int | None = None,
                 inputs: Sequence[VariantInput] | None = None) -> dict[str, Plan]:
    """Every variant's plan, by variant name, planned together; `max_slices`: the most slices
    an image may have (the generator derives it from layers.max-image-layers; see
    planner.fit_layout); `inputs`: profile_inputs(config), when the caller plans more than
    once. `config` is the one of any of the profile's variants."""
    layout = dataclasses.replace(config.layers.layout, max_slices=max_slices)

    def learn() -> tuple[Mapping[str, int], int]:
        return version_changes(config.lock)

    inputs = profile_inputs(config) if inputs is None else inputs
    plans: dict[str, Plan] = {}
    for group in platform_groups(config.variants):  # another platform's bytes differ: no sharing
        names = {v.name for v in group}
        plans.update(plan_images(
            [v for v in inputs if v.name in names], cap=config.layers.cap,
            basis=config.layers.basis,
            shared=None if repack else read_assignment(group[0].shared_slices) or None,
            previous={} if repack else {v.name: without_pinned(read_assignment(v.slices))
                                        for v in group},
            learn=learn, layout=layout))
    variants = {v.name: v for v in config.variants}
    every = sorted({v.target.platform for v in config.variants})
    return {v.name: with_pins(dataclasses.replace(
        plans[v.name], local_paths=v.local_paths, outside_lock=v.outside_lock,
        builds=slice_builds(plans[v.name], v.build_settings),
        platform=variants[v.name].target.platform,
        apart_from=tuple(p for p in every if p != variants[v.name].target.platform)),
        v.post_install, variants[v.name]) for v in inputs}


def plan_for_config(config: Config, *, repack: bool = False) -> Plan:
    """Load the lock, sizes and committed slices the config names and plan the layers (of the
    config's variant, planned together with the profile's other variants)."""
    return plan_profile(config, repack=repack)[config.variant.name]


def plan_views(plans: Mapping[str, Plan], config: Config, *, only: str | None = None,
               selection_given: bool = False) -> PlanViews:
    """The views of a profile's plans (every variant planned together): `only` one, or all
    (a selection given on the command line replaces every variant's: one plan shows)."""
    only = only or (config.variant.name if selection_given else None)
    return PlanViews(tuple((name, plan) for name, plan in plans.items()
                           if only is None or name == only))


@dataclasses.dataclass(frozen=True, kw_only=True)
class PinsOutcome:
    """`invoke lock-post-install`'s outcome: each variant's pins file and what became of it."""

    variants: tuple[tuple[str, Path, str, int], ...]  # (variant, pins file, state, packages)
    check: bool
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        return "\n".join(f"post-install pins{f' of {name}' if name else ''}: {state}"
                         + (f" ({count} package(s))" if count else "") + f": {path}"
                         for name, path, state, count in self.variants)

    def to_json(self) -> dict[str, object]:
        return {"check": self.check, "variants": [
            {"variant": name, "path": str(path), "state": state, "packages": count}
            for name, path, state, count in self.variants]}


def resolve(inputs: PostInstallInputs) -> tuple[SliceLine, ...]:
    """Resolve the post-installs with uv (the network: the index, each git source)."""
    with tempfile.TemporaryDirectory(prefix="gpurl-post-install-") as scratch:
        requirements, constraints = Path(scratch, "post-install.in"), Path(scratch, "lock.txt")
        requirements.write_text("".join(f"{r}\n" for r in inputs.requirements))
        constraints.write_text("".join(f"{c}\n" for c in inputs.constraints))
        done = run_quiet(compile_command(inputs, requirements, constraints),
                         env=compile_environment(os.environ), check=False)
    if done.returncode != 0:
        said = " ".join(line.strip(" ×╰─▶│") for line in done.stderr.splitlines()
                        if line.strip(" ×╰─▶│"))
        raise PlanError(f"resolving build.post-install failed: {said[:400] or 'uv said nothing'}",
                        hint="check the requirements and that the index (and each git "
                             "source) is reachable from here")
    return parse_compiled(done.stdout, inputs)


def lock_post_install(configs: Sequence[Config], *, check: bool, dry_run: bool,
                      say: Callable[[str], None], upgrade: bool = False) -> PinsOutcome:
    """Resolve each variant's build.post-install into its pins file, where it is missing or
    stale (`upgrade`: every one; `--check`: resolve nothing, fail when a pins file is missing
    or stale; `--dry-run`: resolve, write nothing). A variant with no post-install loses its
    pins file."""
    done: list[tuple[str, Path, str, int]] = []
    every = {v.name: v.post_install for v in profile_inputs(configs[0])} if configs else {}
    for config in configs:
        variant = config.variant
        inputs = every[variant.name]
        path = pins_path(variant)
        found = read_pins(path, variant.build.index_url)
        if inputs is None:
            state = ("none" if found is None else "stale" if check else
                     "would be removed" if dry_run else "removed")
            if state == "removed":
                path.unlink()
            done.append((variant.shown, path, state, 0))
            continue
        if found is not None and stale_reason(found, inputs) is None and not (upgrade and
                                                                             not check):
            done.append((variant.shown, path, "up to date", len(found[1])))
            continue
        if check:
            done.append((variant.shown, path, "missing" if found is None else "stale", 0))
            continue
        say(f"resolving build.post-install{variant.note} with uv "
            f"({len(inputs.requirements)} requirement(s), {inputs.platform})")
        lines = resolve(inputs)
        if not dry_run:
            write_atomic(path, render_pins(inputs, lines, profile=config.profile,
                                           variant=variant.shown))
        same = found is not None and found[1] == lines
        done.append((variant.shown, path, ("unchanged" if same else "would be written")
                     if dry_run else ("unchanged" if same else "written"), len(lines)))
    failed = check and any(state in ("missing", "stale") for _, _, state, _ in done)
    return PinsOutcome(variants=tuple(done), check=check,
                       exit_code=ExitCode.CHECK_FAILED if failed else ExitCode.OK)
