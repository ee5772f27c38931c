"""Planning a profile's variants together, so their images share their lowest layers.

A variant is the same workspace with other extras or groups (SkyRL: `vllm` for the standard
image, `mcore` for megatron), so its closure is another set of packages, not necessarily a
superset. Each variant's image is planned under the cap; to share blobs, the packages common
to every variant (same pin, same slice line) and heavy enough to stay out of a light tail are
packed first, into `shared` slices every variant's Dockerfile installs in the same order with
the same RUN: identical instructions over identical files give identical cache keys, so the
builds reuse one another's layers and the registry and the nodes hold those blobs once. Each
variant's own heavy packages come next and its own light tail last, so a small bump still
rebuilds only a tail.

With independent layers (`layers.mode`), a slice's layer is the same blob wherever it sits:
every package common to all variants with the same pin is shared, packed like one profile
(own slices for the large, `group-NN` for the rest), and each variant's own packages follow
(own slices, and `own-NN` groups, a quarter as many: fewer packages). A package new to a
variant's committed slices joins its own slices, so the shared ones stay identical.

Re-planning keeps the committed slices (shared and each variant's) while every variant agrees
on the shared ones; when they disagree (a shared package left one variant's closure), or a
variant is new, the whole profile is packed afresh.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from gpurl_tasks.config import DEFAULT_LAYOUT, Layout, SizeBasis
from gpurl_tasks.plan.buildenv import UvBuildSettings
from gpurl_tasks.plan.model import Plan, ProvidedPackage
from gpurl_tasks.plan.planner import (
    GROUP,
    OWN_GROUP,
    Bucket,
    Learn,
    assemble,
    check_layout,
    check_sizes,
    choose_buckets,
    fit_layout,
    fresh_buckets,
    hashed_in,
    independent_buckets,
    slice_requirement,
    tail_names,
    weight,
)
from gpurl_tasks.plan.sizes import PackageSize
from gpurl_tasks.plan.slices import Assignment, SliceLine, split_unhashed

__all__ = ["VariantInput", "merge_assignments", "own_groups", "plan_images"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class VariantInput:
    """One selection's closure as the planner needs it (a variant's, or the profile's)."""

    name: str
    sizes: tuple[PackageSize, ...]
    sync_flags: tuple[str, ...] = ()
    local: tuple[str, ...] = ()
    provided: tuple[ProvidedPackage, ...] = ()
    lines: Mapping[str, SliceLine] = dataclasses.field(default_factory=dict)
    local_paths: tuple[tuple[str, str], ...] = ()
    outside_lock: tuple[str, ...] = ()
    build_settings: UvBuildSettings = dataclasses.field(default_factory=UvBuildSettings)


def merge_assignments(shared: Assignment, own: Assignment) -> Assignment:
    """A variant's committed layout: the shared slices, then its own."""
    return Assignment(labels=(*shared.labels, *own.labels),
                      member={**own.member, **shared.member},
                      lines={**own.lines, **shared.lines})


def _line(variant: VariantInput, size: PackageSize) -> str:
    return slice_requirement(variant.lines, size)


def own_groups(layout: Layout) -> int:
    """How many groups a variant's own smaller packages form with independent layers."""
    return max(1, layout.tail_groups // 4)


def _common(variants: Sequence[VariantInput], cap: int, basis: SizeBasis,
            layout: Layout) -> list[PackageSize]:
    """Packages every variant installs with the same slice line (stacked layers: none in any
    variant's tail)."""
    first, *rest = variants
    tails = set().union(*(tail_names(v.sizes, cap, basis) for v in variants)) \
        if layout.mode == "stacked" else set()
    lines = [{s.name: _line(v, s) for s in v.sizes} for v in rest]
    return [s for s in first.sizes if s.name not in tails
            and all(other.get(s.name) == _line(first, s) for other in lines)]


def _fresh(variants: Sequence[VariantInput], cap: int, basis: SizeBasis,
           changes: Mapping[str, int], layout: Layout) -> tuple[list[Bucket], dict[str, list[Bucket]]]:
    """Shared buckets over the common packages (stacked: no tail), then each variant's own."""
    common = sorted(_common(variants, cap, basis, layout), key=lambda s: s.name)
    taken: set[str] = set()
    independent = layout.mode == "independent"
    shared = independent_buckets(common, cap, basis, layout, changes, stem=GROUP, taken=taken) \
        if independent else fresh_buckets(common, cap, basis, changes, tail_base=0, taken=taken)
    names = {s.name for s in common}
    own: dict[str, list[Bucket]] = {}
    for variant in variants:
        rest = sorted((s for s in variant.sizes if s.name not in names), key=lambda s: s.name)
        total = sum(weight(s, basis) for s in variant.sizes)
        own[variant.name] = independent_buckets(
            rest, cap, basis, layout, changes, stem=OWN_GROUP, groups=own_groups(layout),
            taken=set(taken)) if independent else \
            fresh_buckets(rest, cap, basis, changes, tail_base=total, taken=set(taken))
    return shared, own


def _kept(variants: Sequence[VariantInput], previous: Mapping[str, Assignment],
          shared: Assignment, cap: int, basis: SizeBasis,
          layout: Layout) -> dict[str, list[Bucket]] | None:
    """Each variant's buckets from the committed slices, or None when they cannot be kept:
    a variant without slices (with independent layers a variant may have none of its own:
    every package it installs is shared), a fresh packing forced, or the shared slices no
    longer agree."""
    chosen: dict[str, list[Bucket]] = {}
    for variant in variants:
        own = previous.get(variant.name)
        if own is None or (not own and layout.mode == "stacked"):  # stacked: each has a tail
            return None
        choice = choose_buckets(variant.sizes, cap=cap, basis=basis,
                                previous=merge_assignments(shared, own), lines=variant.lines,
                                learn=None, layout=layout, stem=OWN_GROUP,
                                groups=own_groups(layout))
        if not choice.kept:
            return None
        chosen[variant.name] = choice.buckets
    width = len(shared.labels)
    lows = [[(label, sorted(_line(v, s) for s in bucket)) for label, bucket in chosen[v.name][:width]]
            for v in variants]
    if any(low != lows[0] for low in lows) or [label for label, _ in lows[0]] != list(shared.labels):
        return None
    return chosen


def _images(variants: Sequence[VariantInput], cap: int, basis: SizeBasis,
            changes: Mapping[str, int], layout: Layout) -> list[list[Bucket]]:
    """Each variant's buckets of a fresh packing: the shared ones, then its own."""
    low, own = _fresh(variants, cap, basis, changes, layout)
    return [split_unhashed([*low, *own[v.name]], hashed_in(v.lines))[0] for v in variants]


def _alone(image: VariantInput, *, cap: int, basis: SizeBasis, previous: Assignment | None,
           learn: Learn | None, layout: Layout) -> Plan:
    """One image's plan: its committed slices kept, or a fresh packing (`choose_buckets`)."""
    check_sizes(image.sizes, cap, basis)
    check_layout(layout, cap)
    choice = choose_buckets(image.sizes, cap=cap, basis=basis, previous=previous or None,
                            lines=image.lines, learn=learn, layout=layout)
    return assemble(choice.buckets, image.sizes, kept=choice.kept, cap=cap, basis=basis,
                    sync_flags=image.sync_flags, local=image.local, provided=image.provided,
                    changes=choice.changes, history=choice.history, lines=image.lines,
                    layout=choice.layout)


def plan_images(variants: Sequence[VariantInput], *, cap: int, basis: SizeBasis,
                shared: Assignment | None = None,
                previous: Mapping[str, Assignment] | None = None,
                learn: Learn | None = None, layout: Layout = DEFAULT_LAYOUT) -> dict[str, Plan]:
    """The one planning entry point: every image's plan by its name; pure, and deterministic
    for equal input whatever its order.

    `previous` holds each image's committed slices and `shared` the ones its images share;
    `learn` gives (changes per package, lock versions read) when a fresh packing needs them
    (read lazily: re-planning never looks at history). Several images share their lowest
    `plan.shared` layers; one image has nothing to share and is packed alone. With
    `layout.max_slices`, independent layers are fitted to it (`fit_layout`) over every
    image; committed slices over it are packed afresh."""
    if len(variants) == 1:
        (one,) = variants
        return {one.name: _alone(one, cap=cap, basis=basis, previous=(previous or {}).get(one.name),
                                 learn=learn, layout=layout)}
    for variant in variants:
        check_sizes(variant.sizes, cap, basis)
    check_layout(layout, cap)
    weights = [weight(s, basis) for v in variants for s in v.sizes]

    def fitted(changes: Mapping[str, int]) -> Layout:
        return fit_layout(lambda trial: _images(variants, cap, basis, changes, trial),
                          layout, weights, basis)

    homes = fitted({}) if shared else layout
    kept = _kept(variants, previous or {}, shared, cap, basis,
                 dataclasses.replace(homes, max_slices=None)) if shared else None
    if kept is not None and layout.max_slices is not None \
            and any(len(b) > layout.max_slices for b in kept.values()):
        kept = None
    changes: Mapping[str, int] = {}
    history = 0
    if kept is not None:
        width = len(shared.labels) if shared else 0
        chosen = kept
        used = homes
    else:
        if learn is not None:
            changes, history = learn()
        used = fitted(changes)
        low, own = _fresh(variants, cap, basis, changes, used)
        width = len(low)
        chosen = {name: [*low, *buckets] for name, buckets in own.items()}
    return {v.name: assemble(chosen[v.name], v.sizes, kept=kept is not None, cap=cap, basis=basis,
                             sync_flags=v.sync_flags, local=v.local, provided=v.provided,
                             changes=changes, history=history, lines=v.lines, shared=width,
                             layout=used)
            for v in variants}
