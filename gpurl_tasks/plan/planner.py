"""The layer planner: split one image's install closure into slices no larger than the cap,
and keep the committed assignment when re-planning. Its entry point is
`variants.plan_images`, which plans every image of a profile (one image: the case N = 1).

**Independent layers** (`Layout.mode == "independent"`, the one mode): each slice is its own
layer wherever it sits (each slice image is built alone on
env-base, and the local build composes the environment from them: writer/composition.py), so a bump
costs only the slices holding a changed package.

- **Fresh packing** (no committed slices, or `generate --repack`; `independent_buckets`): a
  slice of its own for every package of at least `own_layer`, heaviest first; the rest in
  `tail_groups` stable groups `group-NN` by a hash of the name (`group_of`), with history the
  churning and the never-changed packages in separate halves; a group over the cap is split.
  With a slice budget (`Layout.max_slices`, from `layers.max-image-layers`), `fit_layout`
  lowers the groups first and raises the threshold only when one group is not enough, so the
  largest packages keep their own slices.
- **Re-planning** (committed slices present): every package still in the closure keeps its
  slice (a version bump edits one line); removed ones drop; a new package goes to its own
  slice or its group (`_home`); only a slice the change pushes over the cap is split. The
  planner never packs afresh by itself.

Packages the compiled wheels provide are in no slice; the final sync excludes them.

Pure: sizes, the committed layout and the history come in as data (`plan/profile.py` reads
them from the config, the lock and the committed files).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import re
from collections.abc import Callable, Mapping, Sequence

from gpurl_tasks.config import DEFAULT_LAYOUT, Layout, SizeBasis
from gpurl_tasks.errors import PlanError
from gpurl_tasks.plan.model import Layer, Plan, PlannedPackage, ProvidedPackage, Slice
from gpurl_tasks.plan.sizes import PackageSize
from gpurl_tasks.plan.slices import Assignment, SliceLine, split_unhashed
from gpurl_tasks.values import format_bytes

__all__ = [
    "GROUP",
    "MAX_GROUPS",
    "OWN_GROUP",
    "Bucket",
    "Learn",
    "assemble",
    "assignment_of",
    "check_layout",
    "check_sizes",
    "fit_layout",
    "group_label",
    "group_of",
    "hashed_in",
    "independent_buckets",
    "keep",
    "slice_requirement",
    "weight",
]

GROUP = "group"  # independent layers: the label stem of the groups of smaller packages
OWN_GROUP = "own"  # ... of a variant's own smaller packages (its shared ones are `group-NN`)
MAX_GROUPS = 99  # a group's label has two digits; Docker allows 127 layers in all

Bucket = tuple[str, list[PackageSize]]  # (label, members)
Learn = Callable[[], tuple[Mapping[str, int], int]]
Home = Callable[[PackageSize, set[str]], str]  # a new package's slice label, given the taken ones
Pack = Callable[[Layout], Sequence[Sequence[Bucket]]]  # every image's buckets packed by a layout


def weight(size: PackageSize, basis: SizeBasis) -> int:
    """The bytes the cap applies to: compressed (what is pushed and pulled) or installed."""
    return size.installed_estimate if basis == "installed" else size.compressed_bytes


def _load(members: Sequence[PackageSize], basis: SizeBasis) -> int:
    return sum(weight(s, basis) for s in members)


def _pack(sizes: Sequence[PackageSize], k: int, cap: int, basis: SizeBasis) -> list[list[PackageSize]] | None:
    """LPT into k buckets; None when some package does not fit the lightest bucket."""
    buckets: list[list[PackageSize]] = [[] for _ in range(k)]
    loads = [0] * k
    for size in sorted(sizes, key=lambda s: (-weight(s, basis), s.name)):
        lightest = min(range(k), key=lambda i: (loads[i], i))
        if loads[lightest] + weight(size, basis) > cap:
            return None
        buckets[lightest].append(size)
        loads[lightest] += weight(size, basis)
    return buckets


def _fewest_buckets(sizes: Sequence[PackageSize], cap: int, basis: SizeBasis) -> list[list[PackageSize]]:
    """LPT with the fewest buckets it manages, heaviest bucket first; [] for no packages."""
    if not sizes:
        return []
    lower = max(1, math.ceil(_load(sizes, basis) / cap))
    for k in range(lower, len(sizes) + 1):
        buckets = _pack(sizes, k, cap, basis)
        if buckets is not None:
            kept = [b for b in buckets if b]
            return sorted(kept, key=lambda b: (-_load(b, basis), min(s.name for s in b)))
    raise AssertionError("one package per bucket always fits")  # sizes were checked against cap


def _label(members: Sequence[PackageSize], basis: SizeBasis, taken: set[str]) -> str:
    """A stable name for a new slice: its heaviest package (unique among the slices)."""
    anchor = max(members, key=lambda s: (weight(s, basis), s.name)).name
    label = re.sub(r"[^a-z0-9._-]", "-", anchor.lower())
    while label in taken:
        label += "-2"
    taken.add(label)
    return label


def slice_requirement(lines: Mapping[str, SliceLine], size: PackageSize) -> str:
    """A package's slice line as the lock records it (`name==version` when none was given)."""
    line = lines.get(size.name)
    return line.requirement if line else f"{size.name}=={size.version}"


def _replan(sizes: Sequence[PackageSize], previous: Assignment, cap: int,
            basis: SizeBasis, home: Callable[[PackageSize, set[str]], str] | None = None) -> list[Bucket]:
    """The committed assignment kept; a new package joins the slice `home` names (default: the
    last slice; a label not committed yet opens a slice after the committed ones); only a slice
    over the cap is split (its first part keeps the slice's name)."""
    members: dict[str, list[PackageSize]] = {label: [] for label in previous.labels}
    last = previous.labels[-1]
    taken = set(previous.labels)
    for size in sizes:
        label = previous.member.get(size.name)
        if label is None:
            label = home(size, taken) if home is not None else last
            taken.add(label)
        members.setdefault(label, []).append(size)
    buckets: list[Bucket] = []
    for label, bucket in members.items():
        if _load(bucket, basis) <= cap:
            buckets.append((label, bucket))
            continue
        first, *rest = _fewest_buckets(bucket, cap, basis)
        buckets += [(label, first), *((_label(b, basis, taken), b) for b in rest)]
    return [(label, bucket) for label, bucket in buckets if bucket]


def group_of(name: str, groups: int) -> int:
    """A package's stable group among `groups`: from a hash of its name alone, so a new
    package's group never depends on the closure, the history or who plans."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % groups


def group_label(index: int, stem: str = GROUP) -> str:
    """`group-07`: the label of a group of smaller packages."""
    return f"{stem}-{index:02d}"


def _group_indexes(names: Sequence[str], groups: int, changes: Mapping[str, int]) -> dict[str, int]:
    """Each smaller package's group. With history, the packages that changed version and the
    ones that never did hash into separate halves of the groups: a bump of a churning package
    then re-pushes a group of churning packages, and the stable groups stay put. Without
    history (or with one kind only) every package hashes over all the groups."""
    moved = {n for n in names if changes.get(n, 0) > 0}
    if groups < 2 or not moved or len(moved) == len(names):
        return {n: group_of(n, groups) for n in names}
    churn = (groups + 1) // 2
    return {n: group_of(n, churn) if n in moved else churn + group_of(n, groups - churn)
            for n in names}


def independent_buckets(sizes: Sequence[PackageSize], cap: int, basis: SizeBasis, layout: Layout,
                        changes: Mapping[str, int], *, stem: str = GROUP,
                        groups: int | None = None, taken: set[str] | None = None) -> list[Bucket]:
    """The fresh packing for independent layers: each package of at least `own-layer` in a
    slice of its own (heaviest first, labelled by its name), the rest in `groups` (default
    `tail-groups`) stable groups `<stem>-NN`, in group order; a group over the cap is split.
    `taken` (the labels already used; it grows) keeps the labels unique."""
    taken = taken if taken is not None else set()
    ordered = sorted(sizes, key=lambda s: (-weight(s, basis), s.name))
    own = [s for s in ordered if weight(s, basis) >= layout.own_layer]
    rest = [s for s in ordered if weight(s, basis) < layout.own_layer]
    buckets: list[Bucket] = [(_label([s], basis, taken), [s]) for s in own]
    index = _group_indexes([s.name for s in rest], groups or layout.tail_groups, changes)
    members: dict[int, list[PackageSize]] = {}
    for size in rest:
        members.setdefault(index[size.name], []).append(size)
    for number in sorted(members):
        label = group_label(number, stem)
        taken.add(label)
        first, *more = _fewest_buckets(members[number], cap, basis)
        buckets += [(label, first), *((_label(b, basis, taken), b) for b in more)]
    return buckets


def hashed_in(lines: Mapping[str, SliceLine]) -> Callable[[PackageSize], bool]:
    """Whether a package's slice line carries a hash: a bucket mixing both kinds is split
    in two (`split_unhashed`), so an unhashed line (a git source, a wheel its index serves
    unhashed) does not cost its layer --require-hashes."""
    return lambda s: lines[s.name].hashed if s.name in lines else True


def fit_layout(pack: Pack, layout: Layout, weights: Sequence[int]) -> Layout:
    """The independent layout whose packing (`pack`: every image's buckets) has at most
    `layout.max_slices` slices in each image, changed as little as the budget asks: fewer,
    larger groups first; only when one group is not enough, the smallest own-layer threshold
    above the configured one that fits (so the largest packages keep their own slices), with
    as many groups as then fit. The layout itself when it fits or has no budget; when nothing
    fits, the one of the fewest slices (every package in one group; the generator then refuses
    the image, naming the keys)."""
    budget = layout.max_slices
    if budget is None:
        return layout

    def fits(candidate: Layout) -> bool:
        return max((len(i) for i in pack(candidate)), default=0) <= budget

    if fits(layout):
        return layout
    # a threshold just above a package's weight moves it (and every lighter one) into a group
    thresholds = [layout.own_layer, *sorted({w + 1 for w in weights if w + 1 > layout.own_layer})]

    def one_group(index: int) -> Layout:
        return dataclasses.replace(layout, tail_groups=1, own_layer=thresholds[index])

    low, high = 0, len(thresholds) - 1
    if not fits(one_group(high)):
        return one_group(high)
    while low < high:  # the slice count falls as the threshold rises
        middle = (low + high) // 2
        if fits(one_group(middle)):
            high = middle
        else:
            low = middle + 1
    for groups in range(layout.tail_groups, 1, -1):  # the groups fall only as far as they must
        trial = dataclasses.replace(layout, tail_groups=groups, own_layer=thresholds[low])
        if fits(trial):
            return trial
    return one_group(low)


def check_sizes(sizes: Sequence[PackageSize], cap: int, basis: SizeBasis) -> None:
    """A positive cap, each package once, none above the cap."""
    if cap <= 0:
        raise PlanError(f"layer cap must be positive, got {cap}",
                        hint="pass a positive --cap (e.g. --cap 4GB), or set layers.cap")
    names = [s.name for s in sizes]
    if len(set(names)) != len(names):
        raise PlanError("the closure lists a package twice: " +
                        ", ".join(sorted({n for n in names if names.count(n) > 1})),
                        hint="the lock is inconsistent: run `uv lock` to resolve it again")
    too_big = [s for s in sizes if weight(s, basis) > cap]
    if too_big:
        biggest_first = sorted(too_big, key=lambda s: (-weight(s, basis), s.name))
        listed = ", ".join(f"{s.name}=={s.version} ({format_bytes(weight(s, basis))})"
                           for s in biggest_first[:10])
        if len(too_big) > 10:
            listed += f" and {len(too_big) - 10} more"
        raise PlanError(f"{len(too_big)} package(s) larger than the {format_bytes(cap)} layer cap: {listed}",
                        hint="raise the cap (--cap) or split the package out of the image")


def check_layout(layout: Layout) -> None:
    """At least one group and at most MAX_GROUPS (an own-layer threshold above the cap is no
    error: then every package goes into the groups)."""
    if not 1 <= layout.tail_groups <= MAX_GROUPS:
        raise PlanError(f"layers.tail-groups must be between 1 and {MAX_GROUPS}, not "
                        f"{layout.tail_groups}", hint="32 groups measure well (docs/plan.md)")


def _home(layout: Layout, basis: SizeBasis, stem: str) -> Home:
    """Where a package new to the committed slices goes: a slice of its own when at least
    `own-layer`, else its group by the hash of its name."""
    def home(size: PackageSize, taken: set[str]) -> str:
        if weight(size, basis) >= layout.own_layer:
            return _label([size], basis, taken)
        return group_label(group_of(size.name, layout.tail_groups), stem)
    return home


def keep(sizes: Sequence[PackageSize], previous: Assignment, *, cap: int, basis: SizeBasis,
         layout: Layout, stem: str) -> list[Bucket] | None:
    """The committed slices re-planned over `sizes` (a new package goes to its `_home`, by
    `layout`'s groups labelled `stem`), or None when there are none: the committed slices are
    always kept, since a bump costs only the slices it touches."""
    buckets = _replan(sorted(sizes, key=lambda s: s.name), previous, cap, basis,
                      _home(layout, basis, stem))
    return buckets or None


def _reason(label: str, bucket: Sequence[PackageSize], *, kept: bool, history: int,
            layout: Layout, basis: SizeBasis) -> str:
    """Why the slice sits where it does (the plan's text)."""
    origin = "kept from the committed slices; " if kept else ""
    if len(bucket) == 1 and weight(bucket[0], basis) >= layout.own_layer:
        return (f"{origin}its own layer ({format_bytes(weight(bucket[0], basis))}, at least "
                f"own-layer {format_bytes(layout.own_layer)}): a bump of it re-pushes this slice alone")
    if re.fullmatch(rf"({GROUP}|{OWN_GROUP})-\d\d(-git)?", label):
        how = "the hash of the name" + (f", and whether it changed in {history} lock versions"
                                        if history and not kept else "")
        return (f"{origin}a stable group of {len({s.name for s in bucket})} package(s) under "
                f"own-layer (by {how}): a bump re-pushes only the groups holding a changed package")
    return f"{origin}an independent layer: a bump re-pushes it only when one of its packages changes"


def assemble(buckets: Sequence[Bucket], sizes: Sequence[PackageSize], *, kept: bool,
             cap: int, basis: SizeBasis, sync_flags: tuple[str, ...], local: tuple[str, ...],
             provided: tuple[ProvidedPackage, ...], history: int, lines: Mapping[str, SliceLine],
             shared: int = 0, layout: Layout = DEFAULT_LAYOUT) -> Plan:
    """The Plan for chosen buckets (the lowest `shared` of them common to every variant)."""
    buckets, shared = split_unhashed(buckets, hashed_in(lines), shared=shared)

    def planned(s: PackageSize) -> PlannedPackage:
        line = lines.get(s.name)
        return PlannedPackage(name=s.name, version=s.version, compressed_bytes=s.compressed_bytes,
                              installed_bytes=s.installed_bytes,
                              requirement=slice_requirement(lines, s),
                              index=line.index if line else None,
                              hashed=line.hashed if line else True,
                              built=not (s.artifact or "").endswith(".whl"))

    labels = [label for label, _ in buckets]
    layers = tuple(
        Layer(slice=Slice(position=i, label=label, shared=i < shared,
                          unique=labels.count(label) == 1),
              reason=("shared by every variant; " if i < shared else "")
              + _reason(label, bucket, kept=kept, history=history, layout=layout, basis=basis),
              packages=tuple(planned(s) for s in sorted(bucket, key=lambda s: s.name)))
        for i, (label, bucket) in enumerate(buckets)
    )
    return Plan(cap_bytes=cap, basis=basis, sync_flags=sync_flags, layers=layers, local=local,
                lower_bound_layers=max(1, math.ceil(_load(sizes, basis) / cap)),
                provided=provided, history=history, mode=layout.mode,
                layout=layout)


def assignment_of(plan: Plan) -> Assignment:
    """The layout a plan's slice files record (what `read_assignment` reads back)."""
    labels = tuple(layer.label for layer in plan.layers)
    return Assignment(labels=labels, member={p.name: label for layer, label
                                             in zip(plan.layers, labels, strict=True)
                                             for p in layer.packages},
                      lines={label: frozenset(p.requirement for p in layer.packages)
                             for layer, label in zip(plan.layers, labels, strict=True)})
