"""What every section shares: the target, the real locks, and plan-from-lock in one call."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpurl_tasks.config import PythonSelection, SizeBasis, TargetSpec
from gpurl_tasks.plan.lock import Lock, install_closure
from gpurl_tasks.plan.model import Plan, sync_selection_flags
from gpurl_tasks.plan.profile import local_install_flags
from gpurl_tasks.plan.sizes import PackageSize, SizeSources, package_sizes
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.variants import VariantInput, plan_images

__all__ = [
    "REAL_COMMITS",
    "REPO_ROOT",
    "SHARED_LOCKS",
    "SKYRL_SIZES",
    "TARGET",
    "LockInput",
    "closure_sizes",
    "plan_lock",
    "real_lock_paths",
    "with_overrides",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_LOCKS = REPO_ROOT.parent / "shared" / "data" / "locks"
SKYRL_SIZES = REPO_ROOT / "sizes" / "skyrl-train.json"
# Oldest first: 021b9d65b's newest upload-time is 2025-11-07 (vllm 0.11.0, torch 2.8.0),
# 0b8acf049's is 2026-02-27 (vllm 0.16.0, torch 2.9.1). See rebuild_cost.lock_age.
REAL_COMMITS = ("021b9d65b", "0b8acf049")
TARGET = TargetSpec(python="3.12", arch="x86_64", glibc="2.35")


@dataclasses.dataclass(frozen=True, kw_only=True)
class LockInput:
    """A lock to plan and how: the extra selected and where missing sizes come from."""

    label: str
    lock: Lock
    sources: SizeSources
    extras: tuple[str, ...]


def real_lock_paths(locks_dir: Path = SHARED_LOCKS) -> dict[str, Path]:
    """The real SkyRL locks present on this machine, by commit, oldest first."""
    paths = {c: locks_dir / f"skyrl-train.{c}.uv.lock" for c in REAL_COMMITS}
    return {c: p for c, p in paths.items() if p.exists()}


def closure_sizes(lock: Lock, extras: Sequence[str], sources: SizeSources,
                  target: TargetSpec = TARGET) -> tuple[list[PackageSize], tuple[str, ...], tuple[str, ...]]:
    """Sizes of the install closure, the shared sync flags, and the local package names."""
    selection = PythonSelection(extras=tuple(extras))
    closure = install_closure(lock, target, selection)
    sizes = package_sizes(closure.packages, target_tags(target), sources)
    flags = sync_selection_flags(selection, local_flags=local_install_flags(lock, closure))
    return sizes, flags, tuple(p.name for p in closure.local)


def plan_lock(item: LockInput, cap: int, basis: SizeBasis = "compressed") -> Plan:
    """The planner's plan for one lock, exactly as `plan_for_config` would compute it."""
    sizes, flags, local = closure_sizes(item.lock, item.extras, item.sources)
    one = VariantInput(name="image", sizes=tuple(sizes), sync_flags=flags, local=local)
    return plan_images([one], cap=cap, basis=basis)[one.name]


def with_overrides(sources: SizeSources, extra: Mapping[str, int]) -> SizeSources:
    """The same sources with more overrides (for synthetic version bumps of index-less wheels)."""
    return dataclasses.replace(sources, overrides={**sources.overrides, **extra})
