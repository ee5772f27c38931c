"""Section 4: bytes the builder must rebuild (and every node pull again) when the lock moves.

A build is modelled as the rl stage's instruction sequence after the base and apt layers. As in
Docker and kaniko, a step's cache key is the hash of its parent's key, its instruction and the
content of the files it copies, so a changed input invalidates that step and every step after
it. A step of the new build is a cache hit when its key is among the old build's keys.

Designs compared on the same versions, closure sizes and cap:
- **chain (before)**: the previous generated Dockerfile: `COPY pyproject.toml uv.lock`, then
  one `uv sync` per layer; the lock is an input of every sync step, so any byte of lock change
  rebuilds all of them;
- **slices, repacked**: the default slices, but every version packed afresh (what
  `generate --repack` on every bump would do): shows what stable assignment buys;
- **independent, own-layer X, N groups**: the planner's layers, each version re-planned from
  the previous version's slices (as committed slice files make `invoke generate` do; the first
  plan is packed afresh, with the package churn learned from the versions before it when the
  sequence has them); each slice is its own layer wherever it sits, so a bump costs the bytes
  of the slices whose file changed (a slice whose file is byte-equal to one of the old build's
  is the same blob); the thresholds tried are INDEPENDENT_LAYOUTS, the config's default among
  them;
- **independent plan, chain build**: the default plan built as one chain of the env-chain
  stage's steps (`cluster.env-source = "chain"`, `build --chain`), where a changed slice
  rebuilds every slice above it;
- **floor**: the bytes of the packages whose version changed (or that are new): what any
  layering must push.
What is counted: compressed bytes of the Python environment's layers (the slices, or the
chain); the base image, apt, compiled wheels, the workspace source and the final sync (which
installs only local packages, verified with real uv) are left out.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from benchmarks.common import REPO_ROOT, TARGET, LockInput
from gpurl_tasks.config import DEFAULT_LAYOUT, Config, Layout, PythonSelection, load_config
from gpurl_tasks.dockerfile.model import Comment, Copy, Run
from gpurl_tasks.dockerfile.recipe import ENV_BASE_STAGE, ENV_CHAIN, render_recipe
from gpurl_tasks.plan.history import count_changes
from gpurl_tasks.plan.lock import Lock, install_closure
from gpurl_tasks.plan.model import Plan, sync_selection_flags
from gpurl_tasks.plan.planner import assignment_of
from gpurl_tasks.plan.profile import local_install_flags
from gpurl_tasks.plan.sizes import package_sizes
from gpurl_tasks.plan.slices import SliceLine, render_slice, slice_line
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.variants import VariantInput, plan_images
from gpurl_tasks.plan.wheelglobs import provided_names

__all__ = [
    "BEFORE",
    "DESIGNS",
    "FLOOR",
    "INDEPENDENT_LAYOUTS",
    "ON_CHAIN",
    "REPACKED",
    "THIS_DESIGN",
    "BuildStep",
    "PairCost",
    "cache_keys",
    "chain_steps",
    "floor_bytes",
    "independent_design",
    "independent_rebuilt",
    "lock_digest",
    "plan_sequence",
    "plan_version",
    "rebuild_costs",
    "rebuilt_bytes",
    "recipe_config",
    "slice_steps",
    "slice_texts",
    "versions_of",
]

MB = 10**6
# Independent layers: the thresholds compared (the config's default among them).
INDEPENDENT_LAYOUTS = tuple(dict.fromkeys((
    Layout(own_layer=100 * MB, tail_groups=8), Layout(own_layer=50 * MB, tail_groups=16),
    DEFAULT_LAYOUT)))


def independent_design(layout: Layout) -> str:
    """The design's name for independent layers with these thresholds."""
    return f"independent, own-layer {layout.own_layer / MB:g} MB, {layout.tail_groups} groups"


BEFORE = "chain (before)"
REPACKED = "slices, repacked"
THIS_DESIGN = independent_design(DEFAULT_LAYOUT)
FLOOR = "floor (changed packages)"
# the default independent plan built as one chain (`cluster.env-source = "chain"`, or
# `build --chain`); by default both paths compose written slices, which THIS_DESIGN models
ON_CHAIN = "independent plan, chain build (env-source chain)"
DESIGNS = (BEFORE, REPACKED, *map(independent_design, INDEPENDENT_LAYOUTS), ON_CHAIN, FLOOR)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildStep:
    instruction: str
    inputs: str  # digest of the files the step copies ("" for RUN)
    layer_bytes: int  # compressed bytes of the layer the step writes (0: not counted)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PairCost:
    design: str
    old: str
    new: str
    layers: int
    layers_rebuilt: int
    bytes_rebuilt: int
    image_bytes: int
    closure_changed: bool  # some package was added, removed or re-versioned
    moved: int  # packages in both versions whose slice changed

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
        parent = _sha(f"{parent}\n{step.instruction}\n{step.inputs}")
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


def chain_steps(plan: Plan, lock: Lock) -> list[BuildStep]:
    """The previous design: the lock copied first, then one sync per layer."""
    steps = [BuildStep(instruction="COPY pyproject.toml uv.lock /app/", inputs=lock_digest(lock),
                       layer_bytes=0)]
    steps += [BuildStep(instruction=f"RUN uv sync ... step {layer.index}", inputs="",
                        layer_bytes=layer.compressed_bytes) for layer in plan.layers]
    return steps


def slice_steps(plan: Plan, lock: Lock, config: Config | None = None) -> list[BuildStep]:
    """The rl stage `invoke generate` writes for this plan: a slice file's COPY carries the
    file's bytes as its input, its install RUN the layer's bytes; the workspace COPY carries
    the lock (it copies uv.lock); everything after it is not counted."""
    texts = {layer.name: render_slice(SliceLine(requirement=p.requirement, index=p.index,
                                                hashed=p.hashed) for p in layer.packages)
             for layer in plan.layers}
    by_file = {layer.slice.image_path: layer for layer in plan.layers}
    dockerfile = render_recipe(config or recipe_config(), plan, lock_sha256=lock_digest(lock))
    steps = []
    # the chain build: env-base, every slice in env-chain, then the rl stage on top of it
    for stage in (ENV_BASE_STAGE, ENV_CHAIN, "rl"):
        for ins in dockerfile.stage(stage).instructions:
            if isinstance(ins, Comment):
                continue
            text = ins.render()
            inputs, layer_bytes = "", 0
            if isinstance(ins, Copy) and ins.from_stage is None:
                layer = by_file.get(ins.dest)
                inputs = _sha(texts[layer.name]) if layer else lock_digest(lock)
            elif isinstance(ins, Run):
                installed = [layer for path, layer in by_file.items() if path in text.split()]
                layer_bytes = installed[0].compressed_bytes if installed else 0
            steps.append(BuildStep(instruction=text, inputs=inputs, layer_bytes=layer_bytes))
    return steps


def plan_version(item: LockInput, cap: int, *, previous: Plan | None = None,
                 changes: dict[str, int] | None = None, history: int = 0,
                 provided: tuple[str, ...] = ("flash-attn", "vllm"),
                 layout: Layout = DEFAULT_LAYOUT) -> Plan:
    """One version planned as `plan_for_config` plans it: the compiled wheels' packages left
    out, slice lines from the lock, the previous slices kept when given."""
    selection = PythonSelection(extras=item.extras)
    closure = install_closure(item.lock, TARGET, selection)
    installed = [p for p in closure.packages if p.name not in provided]
    sizes = package_sizes(installed, target_tags(TARGET), item.sources)
    flags = sync_selection_flags(selection, local_flags=local_install_flags(item.lock, closure))
    one = VariantInput(name="image", sizes=tuple(sizes), sync_flags=flags,
                       local=tuple(p.name for p in closure.local),
                       lines={p.name: slice_line(p) for p in installed})
    known = (changes or {}), history
    return plan_images([one], cap=cap, basis="compressed",
                       previous={one.name: assignment_of(previous)} if previous else None,
                       learn=lambda: known, layout=layout)[one.name]


def versions_of(item: LockInput) -> dict[str, frozenset[str]]:
    return {p.name: frozenset({p.version or ""}) for p in item.lock.packages}


def _moved(old: Plan, new: Plan) -> int:
    before = {n: layer.label for layer in old.layers for n in layer.names}
    return sum(1 for layer in new.layers for n in layer.names
               if n in before and before[n] != layer.label)


def slice_texts(plan: Plan) -> dict[str, int]:
    """Each slice file's text -> its layer's bytes."""
    return {render_slice(SliceLine(requirement=p.requirement, index=p.index, hashed=p.hashed)
                         for p in layer.packages): layer.compressed_bytes for layer in plan.layers}


def independent_rebuilt(old: Plan, new: Plan) -> tuple[int, int]:
    """(slices rebuilt, bytes) with independent layers: every slice whose file is not
    byte-equal to one of the old build's is built and pushed; the others are the same blobs."""
    before = slice_texts(old)
    missed = [size for text, size in slice_texts(new).items() if text not in before]
    return len(missed), sum(missed)


def floor_bytes(old: Plan, new: Plan) -> tuple[int, int]:
    """(packages, bytes) of the new closure whose version changed or that are new."""
    before = {(p.name, p.version) for p in old.closure}
    changed = [p.compressed_bytes for p in new.closure if (p.name, p.version) not in before]
    return len(changed), sum(changed)


def _layout(design: str) -> Layout:
    found = [layout for layout in INDEPENDENT_LAYOUTS if independent_design(layout) == design]
    return found[0] if found else DEFAULT_LAYOUT


def plan_sequence(versions: Sequence[LockInput], *, cap: int, design: str = THIS_DESIGN,
                  learn: Sequence[LockInput] = (),
                  provided: tuple[str, ...] = ("flash-attn", "vllm")) -> list[Plan]:
    """Every version planned under `design`: re-planned from the previous version's slices (a
    repack plans each afresh); `learn` are earlier versions whose churn the first fresh plan may
    learn from (as `generate --repack` reads the lock's git history)."""
    layout = _layout(design)
    plans: list[Plan] = []
    for i, item in enumerate(versions):
        seen = [*learn, *versions[:i + 1]]  # what a repack may learn from: the past only
        churn = count_changes(versions_of(v) for v in seen)
        if design != REPACKED and plans:
            plans.append(plan_version(item, cap, previous=plans[-1], provided=provided,
                                      changes=churn, history=len(seen), layout=layout))
        else:
            plans.append(plan_version(item, cap, changes=churn if learn or i else {},
                                      history=len(seen) if learn or i else 0,
                                      provided=provided, layout=layout))
    return plans


def rebuild_costs(versions: Sequence[LockInput], *, cap: int, learn: Sequence[LockInput] = (),
                  designs: Sequence[str] = DESIGNS) -> list[PairCost]:
    """Cost of every consecutive pair of `versions` under every design (see plan_sequence)."""
    provided = provided_names(recipe_config().build.wheel_globs)
    results = []
    for design in designs:
        plans = plan_sequence(versions, cap=cap, design=design, learn=learn, provided=provided)
        for old_plan, new_plan, old, new in zip(plans, plans[1:], versions, versions[1:], strict=False):
            if design == FLOOR:
                count, rebuilt = floor_bytes(old_plan, new_plan)
            elif design not in (BEFORE, ON_CHAIN):
                count, rebuilt = independent_rebuilt(old_plan, new_plan)
            else:
                build = chain_steps if design == BEFORE else slice_steps
                count, rebuilt = rebuilt_bytes(build(old_plan, old.lock), build(new_plan, new.lock))
            closure_changed = ({(p.name, p.version) for p in old_plan.closure}
                               != {(p.name, p.version) for p in new_plan.closure})
            results.append(PairCost(design=design, old=old.label, new=new.label,
                                    layers=len(new_plan.layers), layers_rebuilt=count,
                                    bytes_rebuilt=rebuilt,
                                    image_bytes=new_plan.total_compressed_bytes,
                                    closure_changed=closure_changed,
                                    moved=_moved(old_plan, new_plan)))
    return results
