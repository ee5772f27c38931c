"""Run every benchmark section and write benchmarks/REPORT.md and benchmarks/out/report.json.

`python -m benchmarks.run` (or `nox -s bench`). A section whose input is absent (the real locks,
a measured build) is kept in the report with the reason, never filled with made-up figures.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import (
    kaniko_scale,
    layer_budget,
    noop_rebuild,
    prediction,
    quality,
    real_scale,
    rebuild_cost,
    speed,
    whole_history,
    whole_image,
)
from benchmarks.common import (
    REPO_ROOT,
    SHARED_LOCKS,
    SKYRL_SIZES,
    LockInput,
    closure_sizes,
    plan_lock,
    real_lock_paths,
    with_overrides,
)
from benchmarks.history import add_to_extra, bump_package, newest_upload
from benchmarks.report import render_markdown
from benchmarks.synth import SYNTH_EXTRA, synthetic_lock_text
from gpurl_tasks.errors import GpurlError
from gpurl_tasks.plan.lock import load_lock
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.sizes import SizeSources, load_size_sources

__all__ = ["bump_sequence", "closure_changes", "main", "run"]

GB = 10**9
QUALITY_CAPS = (4 * GB, 2 * GB, 1 * GB)
REBUILD_CAPS = (4 * GB, 2 * GB)
EXTRA = "vllm"
SMALL_BUMP = "certifi"  # a small pure-Python package every closure of the real locks holds
ADDED = ("extra-plugin", "1.0.0", 3 * 10**6)  # name, version, wheel bytes
HISTORY_ARCHIVE = REPO_ROOT.parent / "shared" / "data" / "skyrl-train-lock-history.tar.xz"
HISTORY_SIZES = REPO_ROOT / "benchmarks" / "data" / "history-sizes.json"


def _write(path: Path, text: str) -> None:
    """Temp file + rename: a reader never sees half a report."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


def closure_changes(old: Plan, new: Plan) -> dict[str, Any]:
    """Packages added, removed, re-versioned, unchanged, and the heavy ones re-versioned."""
    before = {p.name: p.version for p in old.closure}
    after = {p.name: p.version for p in new.closure}
    common = before.keys() & after.keys()
    heavy = sorted(p.name for p in new.closure if p.name in common and before[p.name] != p.version
                   and p.compressed_bytes > quality.HEAVY_THRESHOLD)
    return {"heavy_changed": heavy,
            "added": len(after.keys() - before.keys()), "removed": len(before.keys() - after.keys()),
            "changed": sum(1 for n in common if before[n] != after[n]),
            "unchanged": sum(1 for n in common if before[n] == after[n])}


def bump_sequence(base: LockInput, *, small: str = SMALL_BUMP) -> list[LockInput]:
    """base, then one small package bumped, then torch bumped (+1% size), then a package added."""
    closure = {p.name: p for p in plan_lock(base, cap=sum(QUALITY_CAPS)).closure}
    if small not in closure:
        small = min((p for p in closure.values() if p.compressed_bytes < 10**6), key=lambda p: p.name).name
    lock1, _ = bump_package(base.lock, small, closure[small].version)
    v1 = LockInput(label=f"{small} bumped", lock=lock1, sources=base.sources, extras=base.extras)
    lock2, extra = bump_package(lock1, "torch", closure["torch"].version, size_factor=1.01,
                                overrides=base.sources.overrides)
    v2 = LockInput(label="torch bumped", lock=lock2, sources=with_overrides(base.sources, extra),
                   extras=base.extras)
    name, version, size = ADDED
    lock3 = add_to_extra(lock2, EXTRA, name, version, size)
    v3 = LockInput(label=f"{name} added to [{EXTRA}]", lock=lock3, sources=v2.sources, extras=base.extras)
    return [base, v1, v2, v3]


def _speed(paths: dict[str, Path], synth: Path, synth_label: str, runs: int) -> dict[str, Any]:
    results = [speed.time_planner(c, p, extras=(EXTRA,), overrides=SKYRL_SIZES, cap=4 * GB, runs=runs)
               for c, p in paths.items()]
    results.append(speed.time_planner(synth_label, synth, extras=(SYNTH_EXTRA,),
                                      overrides=None, cap=4 * GB, runs=max(3, runs // 2)))
    profile = speed.profile_plan(synth, extras=(SYNTH_EXTRA,), overrides=None, cap=4 * GB)
    fixture = REPO_ROOT / "examples" / "skyrl" / "skyrl-train" / "uv.lock"
    processes = [
        speed.time_processes("skyrl fixture (committed slices)", fixture,
                             ["--profile", "skyrl", "--variant", "standard", "--json"],
                             cwd=REPO_ROOT, runs=runs),
        speed.time_processes(synth_label, synth, ["--profile", "skyrl", "--lock", str(synth),
                                                  "--extra", SYNTH_EXTRA, "--json"],
                             cwd=REPO_ROOT, runs=max(3, runs // 2)),
    ]
    return {"results": [r.to_json() for r in results], "profile_lock": synth_label,
            "profile": profile, "processes": [p.to_json() for p in processes]}


def _quality(real: list[LockInput]) -> list[dict[str, Any]]:
    rows = []
    for item in real:
        sizes, flags, _ = closure_sizes(item.lock, item.extras, item.sources)
        for cap in QUALITY_CAPS:
            found = quality.quality_rows(sizes, lock=item.label, cap=cap, sync_flags=flags)
            rows += [r.to_json() for r in found]
    return rows


def history_versions(scratch: Path, sources: SizeSources,
                     archive: Path = HISTORY_ARCHIVE) -> tuple[list[LockInput], list[str]]:
    """The shared lock history (oldest first) as lock inputs, and the sizes estimated for it."""
    if not archive.exists():
        return [], []
    where = scratch / "history"
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    root = next(p.parent for p in where.rglob("ORDER"))
    order = [line.split()[0] for line in (root / "ORDER").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    estimated = json.loads(HISTORY_SIZES.read_text())
    merged = with_overrides(sources, estimated)
    return ([LockInput(label=c, lock=load_lock(root / f"{c}.uv.lock"), sources=merged,
                       extras=(EXTRA,)) for c in order],
            [f"{k} {v / 10**6:.0f} MB" for k, v in sorted(estimated.items())])


def _rebuild(real: list[LockInput], texts: dict[str, str], scratch: Path,
             archive: Path = HISTORY_ARCHIVE) -> dict[str, Any]:
    history, estimated = history_versions(scratch, real[0].sources, archive)
    sequences: dict[str, tuple[list[LockInput], list[LockInput]]] = {
        "generated bumps": (bump_sequence(real[-1]), [])}
    notes = ["**generated bumps** start from the newest real lock: one small package bumped, "
             "torch bumped (+1% size), a 3 MB package added to the `vllm` extra"]
    if history:
        tail = [*history, *real]  # the two shared locks are newer than the history's 20
        sequences["lock history, ordered by size"] = (tail, [])
        half = len(history) // 2
        sequences["lock history, order learned from the first half"] = (tail[half:], tail[:half])
        notes.append(f"**lock history** = the {len(history)} oldest versions of SkyRL's lock "
                     f"({history[0].label} .. {history[-1].label}) then the two shared locks "
                     f"({', '.join(r.label for r in real)}); the first plan is packed by size, or "
                     f"with the churn learned from the first {half} versions (as `generate "
                     "--repack` learns from git history)")
    pairs = [{"sequence": name, "cap": cap, **cost.to_json()}
             for name, (seq, learn) in sequences.items() for cap in REBUILD_CAPS
             for cost in rebuild_cost.rebuild_costs(seq, cap=cap, learn=learn)]
    counts = []
    for item in real:
        planned = rebuild_cost.plan_version(item, 4 * GB)
        counts.append({"lock": item.label, "cap": 4 * GB, "layers": len(planned.layers),
                       "lower_bound": planned.lower_bound_layers,
                       "largest": max(layer.compressed_bytes for layer in planned.layers)})
    return {"order": list(texts), "pairs": pairs, "history_note": "; ".join(notes) + ".",
            "estimated_sizes": estimated, "layer_counts": counts}


def run(*, runs: int, locks_dir: Path, measured: Path, scratch: Path,
        synth_packages: int = 5000, synth_heavy: int = 50,
        history: Path = HISTORY_ARCHIVE) -> dict[str, Any]:
    """Every section's figures as plain JSON data (the report is rendered from this alone)."""
    skipped: dict[str, str] = {}
    paths = real_lock_paths(locks_dir)
    if not paths:
        skipped["real locks"] = f"no real SkyRL lock in {locks_dir}"
    texts = {c: p.read_text() for c, p in paths.items()}
    # Oldest first by content, not by the order the commits were named in.
    paths = dict(sorted(paths.items(), key=lambda kv: newest_upload(texts[kv[0]]) or ""))
    texts = {c: texts[c] for c in paths}
    sources: SizeSources = load_size_sources(SKYRL_SIZES, None)
    real = [LockInput(label=c, lock=load_lock(p), sources=sources, extras=(EXTRA,)) for c, p in paths.items()]
    synth = scratch / f"synthetic-{synth_packages}.uv.lock"
    _write(synth, synthetic_lock_text(packages=synth_packages, heavy=synth_heavy, seed=0))
    synth_label = f"synthetic {synth_packages:,} packages"
    measured_build = prediction.load_measured(measured)
    return {
        "environment": {"python": platform.python_version(), "machine": platform.machine(),
                        "cpus": os.cpu_count(), "runs": runs},
        "skipped": skipped,
        "speed": _speed(paths, synth, synth_label, runs),
        "quality": _quality(real) if real else [],
        "prediction": measured_build.to_json() if measured_build else None,
        "measured_path": str(measured.relative_to(REPO_ROOT)) if measured.is_relative_to(REPO_ROOT)
        else str(measured),
        "rebuild": _rebuild(real, texts, scratch, history) if real else None,
        "layer_budget": layer_budget.measure(scratch / "budget", archive=history,
                                             locks_dir=locks_dir) if real else None,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="timed runs per lock (median reported)")
    parser.add_argument("--locks", type=Path, default=SHARED_LOCKS, help="directory of the real locks")
    parser.add_argument("--history", type=Path, default=HISTORY_ARCHIVE,
                        help="the lock history archive (tar.xz)")
    parser.add_argument("--measured", type=Path, default=prediction.MEASURED_LAYERS,
                        help="measured per-layer sizes of a real build (JSON)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "benchmarks" / "out",
                        help="directory for report.json and scratch files")
    parser.add_argument("--report", type=Path, default=REPO_ROOT / "benchmarks" / "REPORT.md",
                        help="markdown report to write")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    try:
        results = run(runs=args.runs, locks_dir=args.locks, measured=args.measured, scratch=args.out,
                      history=args.history)
    except (GpurlError, prediction.MeasuredFileError) as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    # The real-scale section comes from `nox -s bench-heavy`'s last run (benchmarks/data/).
    results["real_scale"] = real_scale.load_data()
    markdown = real_scale.splice_section(render_markdown(results),
                                         real_scale.render_section(results["real_scale"]))
    # ... and the real-kaniko section from `nox -s bench-kaniko`'s last run
    markdown = kaniko_scale.splice_section(markdown,
                                           kaniko_scale.render_section(kaniko_scale.load_data()))
    # ... and the no-op rebuild's from `nox -s bench-noop`'s last run
    markdown = noop_rebuild.splice_section(markdown,
                                           noop_rebuild.render_section(noop_rebuild.load_data()))
    # ... and the whole image's re-push from `nox -s bench-whole-image`'s last run
    markdown = whole_image.splice_section(markdown,
                                          whole_image.render_section(whole_image.load_data()))
    # ... and the whole image across the lock history from `nox -s bench-whole-history`'s
    markdown = whole_history.splice_section(
        markdown, whole_history.render_section(whole_history.load_data()))
    _write(args.out / "report.json", json.dumps(results, indent=2, sort_keys=True) + "\n")
    _write(args.report, markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
