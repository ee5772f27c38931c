"""Planning a profile's variants together, so their images share their lowest layers.

A variant is the same workspace with other extras or groups (SkyRL: `vllm` for the standard
image, `mcore` for megatron), so its closure is another set of packages, not necessarily a
superset. Each variant's image is planned under the cap; to share blobs, the packages common
to every variant (same pin, same slice line) are packed first, into `shared` slices: a slice's
layer is the same blob wherever it sits, so the registry and the nodes hold those blobs once.
The shared slices are packed like one profile (own slices for the large, `group-NN` for the
rest), and each variant's own packages follow (own slices, and `own-NN` groups, a quarter as
many: fewer packages). A package new to a
variant's committed slices joins its own slices, so the shared ones stay identical.

Re-planning keeps the committed slices (shared and each variant's) while every variant agrees
on the shared ones; when they disagree (a shared package left one variant's closure), or a
variant is new, the whole profile is packed afresh.

One image is the same path with nothing shared: its whole closure is its own, grouped as the
profile's (`group-NN`, every group), and its committed slices are kept as they are.
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
    fit_layout,
    hashed_in,
    independent_buckets,
    keep,
    slice_requirement,
    weight,
)
from gpurl_tasks.plan.postinstall import PostInstallInputs
from gpurl_tasks.plan.sizes import PackageSize
from gpurl_tasks.plan.slices import Assignment, SliceLine, split_unhashed

__all__ = ["VariantInput", "merge_assignments", "own_groups", "plan_images"]

NOTHING = Assignment(labels=(), member={})  # one image shares no slices


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
    post_install: PostInstallInputs | None = None  # what its pins resolve from (None: none)
    build_settings: UvBuildSettings = dataclasses.field(default_factory=UvBuildSettings)


def merge_assignments(shared: Assignment, own: Assignment) -> Assignment:
    """A variant's committed layout: the shared slices, then its own."""
    return Assignment(labels=(*shared.labels, *own.labels),
                      member={**own.member, **shared.member},
                      lines={**own.lines, **shared.lines})


def _line(variant: VariantInput, size: PackageSize) -> str:
    return slice_requirement(variant.lines, size)


def own_groups(layout: Layout, images: int) -> tuple[str, int]:
    """The label stem and count of an image's own groups of smaller packages (independent
    layers): among several images `own-NN`, a quarter of `tail-groups` (fewer packages); one
    image's own packages are its whole closure, grouped as the profile's (`group-NN`)."""
    return (OWN_GROUP, max(1, layout.tail_groups // 4)) if images > 1 else (GROUP, layout.tail_groups)


def _common(variants: Sequence[VariantInput]) -> list[PackageSize]:
    """Packages every variant installs with the same slice line; one image shares nothing."""
    if len(variants) < 2:
        return []
    first, *rest = variants
    lines = [{s.name: _line(v, s) for s in v.sizes} for v in rest]
    return [s for s in first.sizes if all(other.get(s.name) == _line(first, s) for other in lines)]


def _fresh(variants: Sequence[VariantInput], cap: int, basis: SizeBasis,
           changes: Mapping[str, int], layout: Layout) -> tuple[list[Bucket], dict[str, list[Bucket]]]:
    """Shared buckets over the common packages, then each variant's own."""
    common = sorted(_common(variants), key=lambda s: s.name)
    taken: set[str] = set()
    shared = independent_buckets(common, cap, basis, layout, changes, stem=GROUP,
                                 groups=layout.tail_groups, taken=taken)
    names = {s.name for s in common}
    stem, groups = own_groups(layout, len(variants))
    own: dict[str, list[Bucket]] = {}
    for variant in variants:
        rest = sorted((s for s in variant.sizes if s.name not in names), key=lambda s: s.name)
        own[variant.name] = independent_buckets(rest, cap, basis, layout, changes, stem=stem,
                                                groups=groups, taken=set(taken))
    return shared, own


def _committed(variants: Sequence[VariantInput], shared: Assignment | None,
               previous: Mapping[str, Assignment]) -> tuple[Assignment, dict[str, Assignment]] | None:
    """The committed slices to re-plan: the shared ones (one image: none) and each variant's
    own, or None when there are none to keep: several images without shared slices, a variant
    without slices, or one image without any."""
    if len(variants) > 1 and not shared:
        return None
    low = shared if shared and len(variants) > 1 else NOTHING
    own: dict[str, Assignment] = {}
    for variant in variants:
        mine = previous.get(variant.name)
        if mine is None or (not mine and not low):
            return None
        own[variant.name] = mine
    return low, own


def _kept(variants: Sequence[VariantInput], shared: Assignment,
          own: Mapping[str, Assignment], cap: int, basis: SizeBasis,
          layout: Layout) -> dict[str, list[Bucket]] | None:
    """Each variant's buckets from the committed slices, or None when they cannot be kept:
    a variant has none, or the shared slices no longer agree. A package new to a
    variant joins its own slices (`own_groups`), so the shared ones stay identical."""
    stem, groups = own_groups(layout, len(variants))
    chosen: dict[str, list[Bucket]] = {}
    for variant in variants:
        buckets = keep(variant.sizes, merge_assignments(shared, own[variant.name]),
                       cap=cap, basis=basis, layout=dataclasses.replace(layout, tail_groups=groups),
                       stem=stem)
        if buckets is None:
            return None
        chosen[variant.name] = buckets
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


def plan_images(variants: Sequence[VariantInput], *, cap: int, basis: SizeBasis,
                shared: Assignment | None = None,
                previous: Mapping[str, Assignment] | None = None,
                learn: Learn | None = None, layout: Layout = DEFAULT_LAYOUT) -> dict[str, Plan]:
    """The one planning entry point: every image's plan by its name; pure, and deterministic
    for equal input whatever its order.

    `previous` holds each image's committed slices and `shared` the ones its images share;
    `learn` gives (changes per package, lock versions read) when a fresh packing needs them
    (read lazily: re-planning never looks at history). Several images share their lowest
    `plan.shared` layers; one image is the case with nothing shared. With
    `layout.max_slices` (from layers.max-image-layers), the layout is fitted to it
    (`fit_layout`) over every image; committed slices are kept while they keep it (a new
    package homed by the configured layout, else by the fitted one), and packed afresh when
    they do not."""
    for variant in variants:
        check_sizes(variant.sizes, cap, basis)
    check_layout(layout)
    weights = [weight(s, basis) for v in variants for s in v.sizes]

    def fitted(changes: Mapping[str, int]) -> Layout:
        return fit_layout(lambda trial: _images(variants, cap, basis, changes, trial),
                          layout, weights)

    committed = _committed(variants, shared, previous or {})

    def keeps(homes: Layout) -> dict[str, list[Bucket]] | None:
        """The committed slices, a new package homed by `homes`; None over the slice budget."""
        kept = _kept(variants, *committed, cap, basis,
                     dataclasses.replace(homes, max_slices=None)) if committed else None
        # counted as the image holds them: a bucket mixing hashed and unhashed lines is two
        over = kept is not None and layout.max_slices is not None \
            and any(len(split_unhashed(kept[v.name], hashed_in(v.lines))[0]) > layout.max_slices
                    for v in variants)
        return None if over else kept

    # the configured homes while the committed slices keep the budget, else the fitted ones
    homes = layout
    kept = keeps(homes)
    if kept is None and committed:
        homes = fitted({})
        kept = keeps(homes) if homes != layout else None
    changes: Mapping[str, int] = {}
    history = 0
    if kept is not None and committed:
        width = len(committed[0].labels)
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
                             history=history, lines=v.lines, shared=width,
                             layout=used)
            for v in variants}
