"""Section 4: bytes the builder must rebuild (and every node pull again) when the lock moves.

A build is modelled as its stage's instruction sequence after the base and apt layers. As in
Docker and kaniko, a step's cache key is the hash of its parent's key, its instruction and the
content of the files it copies, so a changed input invalidates that step and every step after
it. A step of the new build is a cache hit when its key is among the old build's keys.

Designs compared, all on the same closure sizes and cap:
- current: the rl stage of the generated Dockerfile (render_recipe): `COPY pyproject.toml uv.lock`,
  then one `uv sync` per layer (the lock is an input of every sync step, so any byte of lock
  change rebuilds all of them);
- slices: per layer `COPY slice-k.txt` + `uv pip install --no-deps --require-hashes -r
  slice-k.txt`, then `COPY pyproject.toml uv.lock` + `uv sync --frozen` (installs nothing new);
  the planner re-packs every version;
- slices + stable buckets: packages keep the layer they had in the previous version; a new
  package joins the layer holding the most packages when it fits, else the lightest that does;
  when a layer outgrows the cap the version is planned afresh (counted as a replan);
- slices + stable buckets + light last: as above, but the first plan packs packages up to
  LIGHT_THRESHOLD (the long tail that changes most often) into layers placed after the heavy ones;
- independent slices (a bound, not a verified design): each slice installed in a stage of its
  own and copied into the final image, so a layer depends on its slice only. It assumes the
  builder writes byte-identical blobs for unchanged layers, which needs reproducible tar
  timestamps and was not verified for kaniko.
What is counted: compressed bytes of the Python environment's layers (the chain); base image,
apt and the workspace source layer are left out (the source layer changes on every commit).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.common import REPO_ROOT, TARGET, LockInput, closure_sizes
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.model import Comment, Copy, Run
from gpurl_tasks.dockerfile.recipe import render_recipe
from gpurl_tasks.plan.lock import Lock
from gpurl_tasks.plan.model import Layer, Plan, PlannedPackage, SyncStep
from gpurl_tasks.plan.planner import plan_layers
from gpurl_tasks.plan.sizes import PackageSize, select_wheel
from gpurl_tasks.plan.target import target_tags

__all__ = [
    "DESIGNS",
    "LIGHT_THRESHOLD",
    "BuildStep",
    "PairCost",
    "cache_keys",
    "current_steps",
    "light_last_plan",
    "lock_digest",
    "moved_packages",
    "plan_from_buckets",
    "rebuild_costs",
    "rebuilt_bytes",
    "recipe_config",
    "slice_steps",
    "slice_text",
    "stable_plan",
]

LIGHT_THRESHOLD = 50 * 10**6
DESIGNS = ("current", "slices", "slices + stable buckets", "slices + stable buckets + light last",
           "independent slices + stable buckets + light last")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildStep:
    instruction: str
    inputs: str  # digest of the files the step copies ("" for RUN)
    layer_bytes: int  # compressed bytes of the layer the step writes (0 for COPY of small files)
    independent: bool = False  # key ignores the parent (a layer built in a stage of its own)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PairCost:
    design: str
    old: str
    new: str
    layers: int
    layers_rebuilt: int
    bytes_rebuilt: int
    image_bytes: int
    replanned: bool
    moved: int  # packages in both versions whose layer changed

    @property
    def fraction(self) -> float:
        return self.bytes_rebuilt / self.image_bytes if self.image_bytes else 0.0

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "fraction": self.fraction}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def lock_digest(lock: Lock) -> str:
    """Stands for the sha256 of uv.lock: equal exactly when the parsed content is equal."""
    return _sha(repr((lock.revision, lock.requires_python, lock.members, lock.packages)))


def cache_keys(steps: Sequence[BuildStep]) -> list[str]:
    keys, parent = [], "base"
    for step in steps:
        parent = _sha(f"{'' if step.independent else parent}\n{step.instruction}\n{step.inputs}")
        keys.append(parent)
    return keys


def rebuilt_bytes(old: Sequence[BuildStep], new: Sequence[BuildStep]) -> tuple[int, int]:
    """(layers with bytes rebuilt, bytes rebuilt) going from the old build to the new one."""
    cached = set(cache_keys(old))
    missed = [s for s, k in zip(new, cache_keys(new), strict=True) if k not in cached and s.layer_bytes]
    return len(missed), sum(s.layer_bytes for s in missed)


def recipe_config() -> Config:
    """The gpu-rl profile with the `vllm` extra: the config the generated Dockerfile comes from."""
    return load_config(REPO_ROOT, profile="gpu-rl", env={}, overrides={"python.extras": ["vllm"]})


def current_steps(plan: Plan, lock: Lock, config: Config | None = None) -> list[BuildStep]:
    """The rl stage of the Dockerfile `invoke generate` writes for this plan, as build steps.

    Both COPYs of the stage carry uv.lock (the second copies the whole workspace), so their
    input is the lock; the chain's sync RUNs carry the plan's layer bytes; the later RUNs (local
    packages, asserts) and the metadata instructions are not counted.
    """
    dockerfile = render_recipe(config or recipe_config(), plan, lock_sha256=lock_digest(lock))
    chain = iter(plan.layers)
    steps = []
    for ins in dockerfile.stage("rl").instructions:
        if isinstance(ins, Comment):
            continue
        text = ins.render()
        inputs = lock_digest(lock) if isinstance(ins, Copy) and ins.from_stage is None else ""
        is_sync = isinstance(ins, Run) and " uv sync " in f" {text} " and "--inexact" not in text
        layer = next(chain, None) if is_sync else None
        steps.append(BuildStep(instruction=text, inputs=inputs,
                               layer_bytes=layer.compressed_bytes if layer else 0))
    if next(chain, None) is not None:
        raise ValueError("the generated Dockerfile has fewer sync RUNs than the plan has layers")
    return steps


def slice_text(layer: Layer, lock: Lock) -> str:
    """requirements lines of one layer: `name==version --hash=...`, or the direct reference."""
    lines = []
    supported = target_tags(TARGET)
    for planned in layer.packages:
        pkg = next(p for p in lock.by_name(planned.name) if (p.version or "?") == planned.version)
        artifact = select_wheel(pkg, supported) or pkg.sdist
        if pkg.source_kind == "registry" and artifact is not None and artifact.hash:
            lines.append(f"{pkg.name}=={pkg.version} --hash={artifact.hash}")
        else:
            lines.append(f"{pkg.name} @ {pkg.source_kind}+{pkg.source[pkg.source_kind]}")
    return "\n".join(sorted(lines)) + "\n"


def slice_steps(plan: Plan, lock: Lock, *, independent: bool = False) -> list[BuildStep]:
    steps = []
    for k, layer in enumerate(plan.layers):
        text = slice_text(layer, lock)
        if independent:  # the stage's COPY --from layer: its key is the slice's content
            steps.append(BuildStep(instruction=f"COPY --from=slice-{k} /opt/slice /", inputs=_sha(text),
                                   layer_bytes=layer.compressed_bytes, independent=True))
            continue
        steps.append(BuildStep(instruction=f"COPY slices/slice-{k}.txt /tmp/",
                               inputs=_sha(text), layer_bytes=0))
        steps.append(BuildStep(instruction=f"RUN uv pip install --no-deps --require-hashes "
                                           f"-r /tmp/slice-{k}.txt", inputs="",
                               layer_bytes=layer.compressed_bytes))
    steps.append(BuildStep(instruction="COPY pyproject.toml uv.lock ./", inputs=lock_digest(lock),
                           layer_bytes=0))
    steps.append(BuildStep(instruction="RUN uv sync " + " ".join(plan.sync_flags), inputs="",
                           layer_bytes=0))  # installs nothing: every package is in place
    return steps


def plan_from_buckets(buckets: Sequence[Sequence[PackageSize]], *, like: Plan) -> Plan:
    """A plan with the given layers in the given order, flags and cap taken from `like`."""
    layers = tuple(
        Layer(index=i, packages=tuple(
            PlannedPackage(name=s.name, version=s.version, compressed_bytes=s.compressed_bytes,
                           installed_bytes=s.installed_bytes) for s in sorted(b, key=lambda s: s.name)))
        for i, b in enumerate(b for b in buckets if b))
    steps = tuple(
        SyncStep(no_install_package=tuple(sorted(n for later in layers[i + 1:] for n in later.names)))
        for i in range(len(layers)))
    return dataclasses.replace(like, layers=layers, steps=steps)


def light_last_plan(sizes: Sequence[PackageSize], *, cap: int, sync_flags: tuple[str, ...],
                    local: tuple[str, ...], threshold: int = LIGHT_THRESHOLD) -> Plan:
    """Heavy packages packed by the planner first, the long tail packed after them."""
    heavy = [s for s in sizes if s.compressed_bytes > threshold]
    light = [s for s in sizes if s.compressed_bytes <= threshold]
    parts = [plan_layers(group, cap=cap, basis="compressed", sync_flags=sync_flags, local=local)
             for group in (heavy, light) if group]
    whole = plan_layers(sizes, cap=cap, basis="compressed", sync_flags=sync_flags, local=local)
    by_name = {s.name: s for s in sizes}
    buckets = [[by_name[n] for n in layer.names] for part in parts for layer in part.layers]
    return plan_from_buckets(buckets, like=whole)


def stable_plan(previous: Plan, sizes: Sequence[PackageSize], *, like: Plan) -> Plan | None:
    """Keep every package in its previous layer; None when a layer would outgrow the cap."""
    where = {name: i for i, layer in enumerate(previous.layers) for name in layer.names}
    buckets: list[list[PackageSize]] = [[] for _ in previous.layers]
    new = []
    for size in sizes:
        if size.name in where:
            buckets[where[size.name]].append(size)
        else:
            new.append(size)
    cap = previous.cap_bytes
    load = [sum(s.compressed_bytes for s in b) for b in buckets]
    for size in sorted(new, key=lambda s: (-s.compressed_bytes, s.name)):
        fits = [i for i in range(len(buckets)) if load[i] + size.compressed_bytes <= cap]
        if not fits:
            buckets.append([size])
            load.append(size.compressed_bytes)
            continue
        most = max(range(len(buckets)), key=lambda i: (len(buckets[i]), -i))
        target = most if most in fits else min(fits, key=lambda i: (load[i], i))
        buckets[target].append(size)
        load[target] += size.compressed_bytes
    if any(x > cap for x in load):
        return None
    return plan_from_buckets(buckets, like=like)


def moved_packages(old: Plan, new: Plan) -> int:
    """Packages present in both plans that sit in a different layer (by index)."""
    before = {n: layer.index for layer in old.layers for n in layer.names}
    return sum(1 for layer in new.layers for n in layer.names if n in before and before[n] != layer.index)


def _plans(design: str, versions: Sequence[LockInput], cap: int) -> list[tuple[Plan, bool]]:
    plans: list[tuple[Plan, bool]] = []
    for item in versions:
        sizes, flags, local = closure_sizes(item.lock, item.extras, item.sources)
        fresh = plan_layers(sizes, cap=cap, basis="compressed", sync_flags=flags, local=local)
        if design in ("current", "slices"):
            plans.append((fresh, False))
            continue
        first = (fresh if design.endswith("slices + stable buckets")
                 else light_last_plan(sizes, cap=cap, sync_flags=flags, local=local))
        if not plans:
            plans.append((first, False))
            continue
        kept = stable_plan(plans[-1][0], sizes, like=fresh)
        plans.append((kept, False) if kept is not None else (first, True))
    return plans


def rebuild_costs(versions: Sequence[LockInput], *, cap: int,
                  designs: Sequence[str] = DESIGNS) -> list[PairCost]:
    """Cost of every consecutive pair of versions under every design."""
    results = []
    for design in designs:
        build: Callable[[Plan, Lock], list[BuildStep]] = (
            current_steps if design == "current"
            else functools.partial(slice_steps, independent=design.startswith("independent")))
        plans = _plans(design, versions, cap)
        for (old_plan, _), (new_plan, replanned), old, new in zip(
                plans, plans[1:], versions, versions[1:], strict=False):
            count, rebuilt = rebuilt_bytes(build(old_plan, old.lock), build(new_plan, new.lock))
            results.append(PairCost(design=design, old=old.label, new=new.label,
                                    layers=len(new_plan.layers), layers_rebuilt=count,
                                    bytes_rebuilt=rebuilt, image_bytes=new_plan.total_compressed_bytes,
                                    replanned=replanned, moved=moved_packages(old_plan, new_plan)))
    return results
