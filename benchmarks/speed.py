"""Section 1: planner wall time against a bare `tomllib.load` of the same file, and a profile.

Each run starts cold: the marker cache of the closure walk and the target-tag cache are
cleared, as they are in a fresh `invoke plan` process. Stages are timed separately so the
report can say where the time goes; one cProfile run names the functions.
"""

from __future__ import annotations

import cProfile
import dataclasses
import io
import os
import pstats
import resource
import statistics
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import TARGET
from gpurl_tasks.config import PythonSelection
from gpurl_tasks.plan import lock as lock_module
from gpurl_tasks.plan import sizes as sizes_module
from gpurl_tasks.plan import slices as slices_module
from gpurl_tasks.plan.lock import install_closure, load_lock
from gpurl_tasks.plan.model import Plan, sync_selection_flags
from gpurl_tasks.plan.profile import local_install_flags
from gpurl_tasks.plan.sizes import load_size_sources, package_sizes
from gpurl_tasks.plan.target import target_tags
from gpurl_tasks.plan.variants import VariantInput, plan_images

__all__ = ["STAGES", "ProcessResult", "SpeedResult", "plan_file", "profile_plan", "time_planner",
           "time_processes"]

STAGES = ("parse", "closure", "sizes", "pack")


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpeedResult:
    label: str
    packages_in_lock: int
    closure: int
    layers: int
    runs: int
    toml_seconds: float  # median of bare tomllib.load
    plan_seconds: float  # median of parse + closure + sizes + pack
    stage_seconds: dict[str, float]  # median per stage

    @property
    def ratio(self) -> float:
        return self.plan_seconds / self.toml_seconds

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ratio": self.ratio}


def _clear_caches() -> None:
    lock_module.parse_lock.cache_clear()  # a process parses each lock once, then reuses it
    lock_module._NAMES.clear()
    lock_module._SOURCES.clear()
    lock_module._compiled.cache_clear()
    slices_module._one_requirement.cache_clear()
    sizes_module._RANKS.clear()  # the tag ranks and each wheel filename's best rank
    target_tags.cache_clear()


def plan_file(path: Path, *, extras: tuple[str, ...], overrides: Path | None, cap: int,
              clock: Callable[[], float] = time.perf_counter) -> tuple[Plan, dict[str, float], int]:
    """Plan one lock file cold; returns the plan, seconds per stage and the lock's package count."""
    _clear_caches()
    marks = [clock()]
    lock = load_lock(path)
    marks.append(clock())
    selection = PythonSelection(extras=extras)
    closure = install_closure(lock, TARGET, selection)
    marks.append(clock())
    sizes = package_sizes(closure.packages, target_tags(TARGET), load_size_sources(overrides, None))
    marks.append(clock())
    flags = sync_selection_flags(selection, local_flags=local_install_flags(lock, closure))
    one = VariantInput(name="image", sizes=tuple(sizes), sync_flags=flags,
                       local=tuple(p.name for p in closure.local))
    plan = plan_images([one], cap=cap, basis="compressed")[one.name]
    marks.append(clock())
    stages = {name: marks[i + 1] - marks[i] for i, name in enumerate(STAGES)}
    return plan, stages, len(lock.packages)


def _toml_seconds(path: Path) -> float:
    start = time.perf_counter()
    with path.open("rb") as handle:
        tomllib.load(handle)
    return time.perf_counter() - start


def time_planner(label: str, path: Path, *, extras: tuple[str, ...], overrides: Path | None,
                 cap: int, runs: int) -> SpeedResult:
    """Median wall time of `runs` cold plans and `runs` bare TOML loads, interleaved."""
    toml_times: list[float] = []
    plan_times: list[float] = []
    per_stage: dict[str, list[float]] = {s: [] for s in STAGES}
    plan: Plan | None = None
    count = 0
    for _ in range(runs):
        toml_times.append(_toml_seconds(path))
        plan, stages, count = plan_file(path, extras=extras, overrides=overrides, cap=cap)
        plan_times.append(sum(stages.values()))
        for name, seconds in stages.items():
            per_stage[name].append(seconds)
    assert plan is not None
    return SpeedResult(label=label, packages_in_lock=count, closure=len(plan.closure),
                       layers=len(plan.layers), runs=runs,
                       toml_seconds=statistics.median(toml_times),
                       plan_seconds=statistics.median(plan_times),
                       stage_seconds={s: statistics.median(v) for s, v in per_stage.items()})


def profile_plan(path: Path, *, extras: tuple[str, ...], overrides: Path | None, cap: int,
                 top: int = 12) -> list[dict[str, Any]]:
    """One cProfile'd plan; the `top` functions by own time, with call counts and cumulative time."""
    profiler = cProfile.Profile()
    profiler.enable()
    plan_file(path, extras=extras, overrides=overrides, cap=cap)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    rows: list[dict[str, Any]] = []
    entries: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (filename, line, func), (_, ncalls, tottime, cumtime, _) in entries.items():
        short = "/".join(Path(filename).parts[-2:]) if filename != "~" else "builtin"
        rows.append({"function": f"{short}:{line}({func})", "calls": ncalls,
                     "own_seconds": tottime, "cumulative_seconds": cumtime})
    total = sum(r["own_seconds"] for r in rows)
    rows.sort(key=lambda r: -r["own_seconds"])
    for row in rows:
        row["own_share"] = row["own_seconds"] / total if total else 0.0
        row["cumulative_share"] = row["cumulative_seconds"] / total if total else 0.0
    return rows[:top]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessResult:
    """`invoke plan` as a whole process (interpreter start, imports, config, plan, output)
    against a process that only starts Python and `tomllib.load`s the same file: wall time,
    and CPU time (user + system), which other work on a shared machine disturbs less."""

    label: str
    command: list[str]
    runs: int
    toml_seconds: float  # median wall time of the bare process
    plan_seconds: float  # median wall time of the `invoke plan` process
    toml_cpu_seconds: float
    plan_cpu_seconds: float

    @property
    def ratio(self) -> float:
        return self.plan_seconds / self.toml_seconds

    @property
    def cpu_ratio(self) -> float:
        return self.plan_cpu_seconds / self.toml_cpu_seconds

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "ratio": self.ratio, "cpu_ratio": self.cpu_ratio}


def _timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return seconds, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def time_processes(label: str, lock: Path, plan_args: list[str], *, cwd: Path,
                   runs: int) -> ProcessResult:
    """Medians of `runs` `python -m invoke plan ARGS` processes and `runs` bare
    `python -c tomllib.load(LOCK)` processes, interleaved (the same interpreter), each after
    one untimed run: a user's second `invoke plan` finds its bytecode cached, so the
    processes may write it whatever PYTHONDONTWRITEBYTECODE says here."""
    bare = [sys.executable, "-c", "import sys, tomllib; tomllib.load(open(sys.argv[1], 'rb'))",
            str(lock)]
    plan = [sys.executable, "-m", "invoke", "plan", *plan_args]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    _timed(bare, cwd, env)
    _timed(plan, cwd, env)
    toml, planned = [], []
    for _ in range(runs):
        toml.append(_timed(bare, cwd, env))
        planned.append(_timed(plan, cwd, env))
    return ProcessResult(label=label, command=["invoke", "plan", *plan_args], runs=runs,
                         toml_seconds=statistics.median(t[0] for t in toml),
                         plan_seconds=statistics.median(t[0] for t in planned),
                         toml_cpu_seconds=statistics.median(t[1] for t in toml),
                         plan_cpu_seconds=statistics.median(t[1] for t in planned))
