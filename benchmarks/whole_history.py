"""The lock-history model extended to the whole image (issue 51): what each version of SkyRL's
lock re-pushes of the environment's slices *and* of the final stage, against the floor of
changed bytes (`nox -s bench-whole-history`; a model, no build: seconds).

Versions: the shared lock history (the 20 oldest SkyRL locks, then the two shared locks), each
planned under the config's default layout from the previous version's slices, at a 4 GB cap
(rebuild_cost.plan_sequence). Every version's image is the gpu-rl profile's: its slices, the
compiled wheels (the lock's `vllm` and `flash-attn`, whose versions stand for the wheels the
builder compiles), the post-installs (build.post-install) and the rest of the rl stage (the
workspace, the final sync's local packages, the asserts). A layer is pushed again when its
cache key misses:

- **slices** (both releases): a slice whose file is not byte-equal to one of the old build's;
- **today's final stage**: the compiled layer is keyed by its MANIFEST (new when the compiled
  versions move); the pinned post-install slice by its pins (new when they go stale, which is
  decided by `postinstall.stale_reason`: the lock now holds a pinned package; the pins are
  taken as the post-installs the lock does not hold); the rest of the rl stage chains the
  composed environment, so it is new whenever any layer below it is;
- **the previous release's final stage**: the compiled tree's COPY, the post-install RUN and
  the rest all chain the environment image, so any slice change pushes all of them again;
- **floor**: the bytes of the locked packages (the compiled ones included) whose version
  changed or that are new: what any layering must push.

Sizes the locks do not give are estimated in benchmarks/data/final-stage-sizes.json and named in
the report: the older flash-attn wheels (the newest's size), the post-installs' install and the
rest of the rl stage at SkyRL's scale. Results: benchmarks/data/whole-history.json and the
"Whole image across the lock history" section of REPORT.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, SKYRL_SIZES, TARGET, LockInput, real_lock_paths, with_overrides
from benchmarks.rebuild_cost import (
    floor_bytes,
    independent_rebuilt,
    plan_sequence,
    recipe_config,
    slice_texts,
)
from benchmarks.report import record_and_render, splice_marked
from gpurl_tasks.config import PythonSelection
from gpurl_tasks.plan.lock import install_closure, load_lock
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.postinstall import PostInstallInputs, stale_reason
from gpurl_tasks.plan.sizes import SizeSources, load_size_sources, package_sizes
from gpurl_tasks.plan.slices import SliceLine
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.wheelglobs import provided_names
from gpurl_tasks.values import format_bytes

__all__ = ["FinalStage", "PairBytes", "final_stage", "load_data", "main", "measure",
           "pair_bytes", "render_section", "splice_section", "summarize"]

DATA = REPO_ROOT / "benchmarks" / "data" / "whole-history.json"
ESTIMATES = REPO_ROOT / "benchmarks" / "data" / "final-stage-sizes.json"
REPORT = REPO_ROOT / "benchmarks" / "REPORT.md"
BEGIN, END = "<!-- whole-history:begin -->", "<!-- whole-history:end -->"
CAP = 4 * 10**9
POST_INSTALL_KEY, REST_KEY = "post-install", "final-stage-rest"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FinalStage:
    """One version's final stage, as far as its layers' cache keys and bytes go."""

    compiled: frozenset[tuple[str, str]]  # the compiled wheels' (name, version): the MANIFEST
    compiled_bytes: int
    locked: frozenset[str]  # every package name the lock's closure holds


@dataclasses.dataclass(frozen=True, kw_only=True)
class PairBytes:
    """What one version step pushes again, by part."""

    old: str
    new: str
    closure_changed: bool
    slices: int  # the environment's slices (both releases)
    today: int  # today's final stage
    previous: int  # the previous release's final stage
    floor: int  # changed locked packages, compiled ones included
    image: int  # the new version's whole image (the Python part and the final stage)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def final_stage(item: LockInput, provided: Sequence[str], sources: SizeSources) -> FinalStage:
    """The version's compiled wheels (the lock's provided packages) and locked names."""
    closure = install_closure(item.lock, TARGET, PythonSelection(extras=item.extras))
    compiled = [p for p in closure.packages if p.name in provided]
    sizes = package_sizes(compiled, target_tags(TARGET), sources)
    return FinalStage(compiled=frozenset((p.name, p.version or "") for p in compiled),
                      compiled_bytes=sum(s.compressed_bytes for s in sizes),
                      locked=frozenset(p.name for p in closure.packages))


def _pins_go_stale(post_installs: Sequence[str], old: FinalStage, new: FinalStage) -> bool:
    """Whether the pins resolved against the old lock are stale against the new one, as
    `invoke lock-post-install --check` decides it (the pins: what the old lock did not hold)."""
    inputs = PostInstallInputs(requirements=tuple(post_installs), constraints=(), python=TARGET.python,
                               platform="model", index_url="")
    held = [SliceLine(requirement=f"{n}==0", index=None, hashed=True)
            for n in sorted(set(post_installs) - old.locked)]
    now = dataclasses.replace(inputs, constraints=tuple(f"{n}==0" for n in sorted(new.locked)))
    return stale_reason((inputs.digest, tuple(held)), now) is not None


def pair_bytes(old_plan: Plan, new_plan: Plan, old: FinalStage, new: FinalStage, *,
               post_installs: Sequence[str], post_install_bytes: int, rest_bytes: int,
               labels: tuple[str, str]) -> PairBytes:
    """One step's re-push by part, from the cache keys described in the module docstring."""
    _, slices = independent_rebuilt(old_plan, new_plan)
    env_moved = slice_texts(old_plan).keys() != slice_texts(new_plan).keys()
    compiled_moved = old.compiled != new.compiled
    pins_moved = _pins_go_stale(post_installs, old, new)
    below_moved = env_moved or compiled_moved or pins_moved
    today = (new.compiled_bytes * compiled_moved + post_install_bytes * pins_moved
             + rest_bytes * below_moved)
    chained = env_moved or compiled_moved
    previous = (new.compiled_bytes + post_install_bytes + rest_bytes) * chained
    _, changed = floor_bytes(old_plan, new_plan)
    return PairBytes(
        old=labels[0], new=labels[1],
        closure_changed=({(p.name, p.version) for p in old_plan.closure}
                         != {(p.name, p.version) for p in new_plan.closure}) or compiled_moved,
        slices=slices, today=today, previous=previous,
        floor=changed + new.compiled_bytes * compiled_moved,
        image=new_plan.total_compressed_bytes + new.compiled_bytes + post_install_bytes + rest_bytes)


def summarize(pairs: Sequence[PairBytes]) -> dict[str, Any]:
    """Over the closure-changing steps: each release's whole-image re-push against the floor,
    as totals and as the median of the steps' ratios."""
    steps = [p for p in pairs if p.closure_changed and p.floor]
    if not steps:
        return {"steps": 0}
    today = [p.slices + p.today for p in steps]
    previous = [p.slices + p.previous for p in steps]
    floor = [p.floor for p in steps]
    return {
        "steps": len(steps),
        "today_bytes": sum(today), "previous_bytes": sum(previous), "floor_bytes": sum(floor),
        "today_vs_floor": sum(today) / sum(floor),
        "previous_vs_floor": sum(previous) / sum(floor),
        "today_median_vs_floor": statistics.median(t / f for t, f in zip(today, floor, strict=True)),
        "previous_median_vs_floor": statistics.median(
            p / f for p, f in zip(previous, floor, strict=True)),
        "final_stage_today_bytes": sum(p.today for p in steps),
        "final_stage_previous_bytes": sum(p.previous for p in steps),
    }


def _versions(scratch: Path, estimated: dict[str, int]) -> list[LockInput]:
    from benchmarks.run import history_versions

    sources = load_size_sources(SKYRL_SIZES, None)
    history, _ = history_versions(scratch, sources)
    real = [LockInput(label=c, lock=load_lock(p), sources=sources, extras=("vllm",))
            for c, p in real_lock_paths().items()]
    return [dataclasses.replace(v, sources=with_overrides(v.sources, estimated))
            for v in [*history, *real]]


def measure(scratch: Path) -> dict[str, Any] | None:
    """Every step of the history, or None where the history or the real locks are absent."""
    estimates = json.loads(ESTIMATES.read_text())
    wheels = {k: v for k, v in estimates.items() if "==" in k}
    versions = _versions(scratch, wheels)
    if len(versions) < 2:
        return None
    config = recipe_config()
    provided = provided_names(config.build.wheel_globs)
    post_installs = [e.name for e in config.build.post_installs]
    plans = plan_sequence(versions, cap=CAP, provided=provided)
    stages = [final_stage(v, provided, v.sources) for v in versions]
    pairs = [pair_bytes(plans[i - 1], plans[i], stages[i - 1], stages[i],
                        post_installs=post_installs,
                        post_install_bytes=estimates[POST_INSTALL_KEY],
                        rest_bytes=estimates[REST_KEY],
                        labels=(versions[i - 1].label, versions[i].label))
             for i in range(1, len(versions))]
    return {"measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cap": CAP,
            "post_installs": post_installs, "compiled": sorted(provided), "estimates": estimates,
            "pairs": [p.to_json() for p in pairs],
            "summary": summarize(pairs)}


def _mb(n: int) -> str:
    return format_bytes(n)


def render_section(data: dict[str, Any] | None) -> str:
    """The REPORT.md section, between its markers."""
    if not data:
        return (f"{BEGIN}\n_No whole-history run recorded yet (`nox -s bench-whole-history`; it "
                f"needs the shared lock history)._\n{END}")
    s = data["summary"]
    estimates = ", ".join(f"{k} {_mb(v)}" for k, v in sorted(data["estimates"].items()))
    lines = [BEGIN, f"Modelled {data['measured_at']} (`nox -s bench-whole-history`): the lock "
             f"history of section 4 at a {data['cap'] / 10**9:g} GB cap, each version the "
             "gpu-rl image: its slices, the compiled wheels "
             f"({', '.join(data['compiled'])}, at the lock's versions), the post-installs "
             f"({', '.join(data['post_installs'])}) and the rest of the rl stage. Today's final "
             "stage keys the compiled layer by its MANIFEST and the pinned post-installs by "
             "their pins; the previous release's chains all of it on the environment. Estimated "
             f"sizes: {estimates}.", "",
             "| step | closure changed | slices | final stage, today | final stage, previous "
             "release | floor | today / floor | previous / floor |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for p in data["pairs"]:
        def ratio(part: int, p: dict[str, Any] = p) -> str:
            return f"{(p['slices'] + part) / p['floor']:.2f}x" if p["floor"] else "-"
        lines.append(f"| {p['old']} -> {p['new']} | {'yes' if p['closure_changed'] else 'no'} | "
                     f"{_mb(p['slices'])} | {_mb(p['today'])} | {_mb(p['previous'])} | "
                     f"{_mb(p['floor'])} | {ratio(p['today'])} | {ratio(p['previous'])} |")
    if s["steps"]:
        lines += ["", f"Over the {s['steps']} closure-changing steps, the whole image re-pushes "
                  f"{_mb(s['today_bytes'])} today against a floor of {_mb(s['floor_bytes'])}: "
                  f"**{s['today_vs_floor']:.2f}x the floor** (median step "
                  f"{s['today_median_vs_floor']:.2f}x). The previous release's final stage "
                  f"made it {_mb(s['previous_bytes'])}: {s['previous_vs_floor']:.2f}x the floor "
                  f"(median step {s['previous_median_vs_floor']:.2f}x). The final stage alone: "
                  f"{_mb(s['final_stage_today_bytes'])} today, "
                  f"{_mb(s['final_stage_previous_bytes'])} before."]
    lines.append(END)
    return "\n".join(lines)


def load_data(path: Path = DATA) -> dict[str, Any] | None:
    """The last run's figures (benchmarks/data/whole-history.json), if any."""
    return json.loads(path.read_text()) if path.exists() else None


def splice_section(text: str, section: str) -> str:
    return splice_marked(text, section, begin=BEGIN, end=END,
                         heading="Whole image across the lock history")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.whole_history", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render", action="store_true",
                        help="re-render the REPORT.md section from the results file")
    parser.add_argument("--data", type=Path, default=DATA, help="the results file")
    args = parser.parse_args(argv)
    measured = None
    if not args.render:
        with tempfile.TemporaryDirectory() as scratch:
            measured = measure(Path(scratch))
        if measured is None:
            print("error: the shared lock history or the real SkyRL locks are absent "
                  "(hint: they are in ../shared/data)", file=sys.stderr)
            return 2
    return record_and_render(parser, args.data, measured, REPORT, render=render_section,
                             splice=splice_section)


if __name__ == "__main__":
    raise SystemExit(main())
