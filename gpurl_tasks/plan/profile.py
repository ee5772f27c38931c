"""The planner's edge: read what the config names (the lock, the size tables, the committed
slice files, the lock's git history) and plan every variant of a profile together.

The packing itself is pure (`variants.plan_images`, the one entry point); this module turns a
config into its inputs: each variant's install closure, sizes, slice lines, final-sync flags, the packages the
compiled wheels provide, the path sources and what is installed outside the lock, read from
where each variant's committed slice files live (`Variant.slices`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gpurl_tasks.config import BuildSettings, Config, Variant, platform_groups
from gpurl_tasks.errors import LockError
from gpurl_tasks.plan.buildenv import load_build_settings, slice_builds
from gpurl_tasks.plan.history import version_changes
from gpurl_tasks.plan.lock import Closure, Lock, install_closure, load_lock, requirements_on
from gpurl_tasks.plan.model import Plan, ProvidedPackage, sync_selection_flags
from gpurl_tasks.plan.report import PlanViews
from gpurl_tasks.plan.sizes import SizeSources, load_size_sources, package_sizes
from gpurl_tasks.plan.slices import read_assignment, slice_line
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.variants import VariantInput, plan_images
from gpurl_tasks.plan.wheelglobs import provided_names

__all__ = [
    "local_install_flags",
    "local_paths",
    "outside_lock",
    "plan_for_config",
    "plan_profile",
    "plan_views",
    "profile_inputs",
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
    return VariantInput(
        name=variant.name, sizes=tuple(package_sizes(installed, target_tags(target), sources)),
        sync_flags=sync_selection_flags(selection, local_flags=local_install_flags(parsed, closure)),
        local=tuple(p.name for p in closure.local), provided=provided,
        lines={p.name: slice_line(p) for p in installed},
        local_paths=local_paths(closure), outside_lock=outside_lock(build, closure))


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
            previous={} if repack else {v.name: read_assignment(v.slices) for v in group},
            learn=learn, layout=layout))
    platform = {v.name: v.target.platform for v in config.variants}
    every = sorted(set(platform.values()))
    return {v.name: dataclasses.replace(
        plans[v.name], local_paths=v.local_paths, outside_lock=v.outside_lock,
        builds=slice_builds(plans[v.name], v.build_settings), platform=platform[v.name],
        apart_from=tuple(p for p in every if p != platform[v.name])) for v in inputs}


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
