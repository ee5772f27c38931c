"""The bucket planner: split the install closure into layers no larger than the cap.

Algorithm: for k = ceil(total / cap), k + 1, ... try longest-processing-time packing (largest
package first, always into the currently lightest bucket) and keep the first k that fits.
Bin packing is NP-hard; LPT is simple, deterministic and balanced (its largest bucket is within
4/3 of the best possible), and on real locks it reaches the lower bound because a few CUDA
wheels dominate and hundreds of small packages fill the gaps. The bucket holding the most
packages (the light remainder) becomes the first sync; heavier buckets follow.

The chain: step k runs `uv sync` with the shared selection flags and `--no-install-package`
for every package of the buckets after k. Exclusions only shrink and the last step has none,
so the final sync installs exactly the lock and nothing is uninstalled on the way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpurl_tasks.config import Config
from gpurl_tasks.errors import PlanError
from gpurl_tasks.plan.lock import Closure, Lock, install_closure, load_lock
from gpurl_tasks.plan.model import Layer, Plan, PlannedPackage, SyncStep, sync_selection_flags
from gpurl_tasks.plan.sizes import PackageSize, load_size_sources, package_sizes
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.units import format_bytes

__all__ = ["local_install_flags", "plan_for_config", "plan_layers"]


def _weight(size: PackageSize, basis: str) -> int:
    return size.installed_estimate if basis == "installed" else size.compressed_bytes


def _pack(sizes: Sequence[PackageSize], k: int, cap: int, basis: str) -> list[list[PackageSize]] | None:
    """LPT into k buckets; None when some package does not fit the lightest bucket."""
    buckets: list[list[PackageSize]] = [[] for _ in range(k)]
    loads = [0] * k
    for size in sorted(sizes, key=lambda s: (-_weight(s, basis), s.name)):
        lightest = min(range(k), key=lambda i: (loads[i], i))
        if loads[lightest] + _weight(size, basis) > cap:
            return None
        buckets[lightest].append(size)
        loads[lightest] += _weight(size, basis)
    return buckets


def plan_layers(
    sizes: Sequence[PackageSize],
    *,
    cap: int,
    basis: str,
    sync_flags: tuple[str, ...],
    local: tuple[str, ...] = (),
) -> Plan:
    """Pure planner: sizes of the closure -> the chain of syncs. Deterministic for equal input."""
    if cap <= 0:
        raise PlanError(f"layer cap must be positive, got {cap}")
    names = [s.name for s in sizes]
    if len(set(names)) != len(names):
        raise PlanError("the closure lists a package twice: " +
                        ", ".join(sorted({n for n in names if names.count(n) > 1})))
    too_big = [s for s in sizes if _weight(s, basis) > cap]
    if too_big:
        biggest_first = sorted(too_big, key=lambda s: (-_weight(s, basis), s.name))
        listed = ", ".join(f"{s.name}=={s.version} ({format_bytes(_weight(s, basis))})"
                           for s in biggest_first[:10])
        if len(too_big) > 10:
            listed += f" and {len(too_big) - 10} more"
        raise PlanError(f"{len(too_big)} package(s) larger than the {format_bytes(cap)} layer cap: {listed}",
                        hint="raise the cap (--cap) or split the package out of the image")
    total = sum(_weight(s, basis) for s in sizes)
    lower_bound = max(1, math.ceil(total / cap))
    buckets: list[list[PackageSize]] | None = None
    for k in range(lower_bound, max(lower_bound, len(sizes)) + 1):
        buckets = _pack(sizes, k, cap, basis)
        if buckets is not None:
            break
    assert buckets is not None  # k == len(sizes) always fits: one package per bucket
    buckets = [b for b in buckets if b] or [[]]
    first = max(buckets, key=lambda b: (len(b), -sum(_weight(s, basis) for s in b),
                                        min((s.name for s in b), default="")))
    rest = sorted((b for b in buckets if b is not first),
                  key=lambda b: (-sum(_weight(s, basis) for s in b), min(s.name for s in b)))
    layers = tuple(
        Layer(index=i, packages=tuple(
            PlannedPackage(name=s.name, version=s.version, compressed_bytes=s.compressed_bytes,
                           installed_bytes=s.installed_bytes)
            for s in sorted(bucket, key=lambda s: s.name)))
        for i, bucket in enumerate([first, *rest])
    )
    steps = tuple(
        SyncStep(no_install_package=tuple(sorted(n for later in layers[i + 1:] for n in later.names)))
        for i in range(len(layers))
    )
    return Plan(cap_bytes=cap, basis=basis, sync_flags=sync_flags, layers=layers, steps=steps,
                local=local, lower_bound_layers=lower_bound)


def local_install_flags(lock: Lock, closure: Closure) -> tuple[str, ...]:
    """Flags that keep local sources out of the chain; they are installed with the source."""
    flags = ["--no-install-project"]
    if lock.members:
        flags.append("--no-install-workspace")
    if any(p.source.get(p.source_kind) != "." for p in closure.local):
        flags.append("--no-install-local")
    return tuple(flags)


def plan_for_config(config: Config) -> Plan:
    """Load the lock and sizes the config names and plan the chain."""
    parsed = load_lock(config.lock)
    closure = install_closure(parsed, config.target, config.python)
    sources = load_size_sources(config.layers.size_overrides, config.layers.size_cache)
    sizes = package_sizes(closure.packages, target_tags(config.target), sources)
    flags = sync_selection_flags(config.python, local_flags=local_install_flags(parsed, closure))
    return plan_layers(sizes, cap=config.layers.cap, basis=config.layers.basis, sync_flags=flags,
                       local=tuple(p.name for p in closure.local))
