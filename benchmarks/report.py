"""Render the benchmark results (plain JSON data from run.run) as the markdown report.

Pure: the same results give the same text, so REPORT.md can be re-rendered from report.json.
Every figure in the prose is read from the results; nothing is typed in by hand.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from benchmarks import layer_budget
from benchmarks.quality import INDEPENDENT
from benchmarks.rebuild_cost import BEFORE, FLOOR, ON_CHAIN, REPACKED, THIS_DESIGN
from gpurl_tasks.values import format_bytes

__all__ = ["record_and_render", "render_markdown", "splice_marked"]

MEASURED_FORMAT = '{"build": name, "layers": [{"step": i, "predicted": bytes, "actual": bytes}]}'


def splice_marked(text: str, section: str, *, begin: str, end: str, heading: str) -> str:
    """`text` with the section between `begin` and `end` replaced by `section` (which carries
    its markers), or appended under `heading` where it has none yet; pure."""
    if begin in text and end in text:
        return text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    return text.rstrip("\n") + f"\n\n## {heading}\n\n" + section + "\n"


def record_and_render(parser: argparse.ArgumentParser, data: Path,
                      measured: dict[str, Any] | None, report: Path, *,
                      render: Callable[[dict[str, Any] | None], str],
                      splice: Callable[[str, str], str]) -> int:
    """A real-part benchmark's last step: its figures (`measured`, None for --render) written
    to `data`, its REPORT.md section rendered from what `data` holds and spliced in."""
    if measured is not None:
        data.parent.mkdir(parents=True, exist_ok=True)
        data.write_text(json.dumps(measured, indent=1, sort_keys=True) + "\n")
    try:
        recorded = json.loads(data.read_text()) if data.exists() else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        parser.error(f"--data {data} is not a results file this benchmark wrote: {exc}")
    section = render(recorded)
    report.write_text(splice(report.read_text(), section))
    print(section)
    return 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return [*lines, ""]


def _speed(data: dict[str, Any]) -> list[str]:
    out = ["## 1. Planner speed", "",
           "Plan = parse + install closure + sizes + pack (as `invoke plan` does it, caches cleared "
           "before each run); parse = a bare `tomllib.load` of the same file. Medians; cap 4 GB. The "
           "synthetic lock (benchmarks/synth.py, seed 0) has 50 heavy wheels of 100 MB-1.5 GB behind an "
           "extra and light ones of 10 kB-2 MB; some edges carry markers that do not hold on the target, "
           "so its closure is smaller than the lock.", ""]
    rows = []
    for r in data["results"]:
        st = r["stage_seconds"]
        rows.append([r["label"], r["packages_in_lock"], r["closure"], r["layers"], _ms(r["toml_seconds"]),
                     _ms(r["plan_seconds"]), f"{r['ratio']:.1f}x",
                     " / ".join(_ms(st[s]) for s in ("parse", "closure", "sizes", "pack"))])
    out += _table(["lock", "packages", "closure", "layers", "tomllib.load", "plan", "plan/parse",
                   "parse / closure / sizes / pack"], rows)
    if data.get("processes"):
        out += ["As a whole process (what a user waits for): `invoke plan` from interpreter start "
                "to its JSON output, against a process that starts the same Python and only "
                "`tomllib.load`s the same lock, bytecode cached as after a user's first run. "
                "Medians of wall time, and of CPU time (user + system), which other work on the "
                "machine disturbs less.", ""]
        out += _table(["lock", "command", "bare tomllib process", "invoke plan process",
                       "ratio", "CPU: bare / plan", "CPU ratio"],
                      [[p["label"], f"`{' '.join(p['command'][:4])} ...`", _ms(p["toml_seconds"]),
                        _ms(p["plan_seconds"]), f"{p['ratio']:.1f}x",
                        f"{_ms(p['toml_cpu_seconds'])} / {_ms(p['plan_cpu_seconds'])}",
                        f"{p['cpu_ratio']:.1f}x"] for p in data["processes"]])
    out += [f"Profile (cProfile, one plan of the {data['profile_lock']} lock; profiling slows it "
            "down, read the shares), top functions by own time:", ""]
    out += _table(["function", "calls", "own time", "share", "cumulative"],
                  [[f"`{p['function']}`", p["calls"], _ms(p["own_seconds"]), _pct(p["own_share"]),
                    _ms(p["cumulative_seconds"])] for p in data["profile"]])
    synth = data["results"][-1]
    st = synth["stage_seconds"]
    total = sum(st.values())
    top = data["profile"][0] if data["profile"] else None
    where = (f"Where the time goes ({synth['label']}): parsing the lock into typed values "
             f"{_pct(st['parse'] / total)} (tomllib itself is {_pct(synth['toml_seconds'] / total)} "
             f"of the plan), sizes {_pct(st['sizes'] / total)}, closure {_pct(st['closure'] / total)}, "
             f"packing {_pct(st['pack'] / total)}.")
    if top and "sizes.py" in top["function"]:
        where += (f" The single largest cost is `{top['function']}` ({_pct(top['own_share'])} of the "
                  f"profiled time on its own, {_pct(top['cumulative_share'])} with the tag hashing it "
                  f"calls; {top['calls']} calls): `select_wheel` rebuilds the rank table of every "
                  "supported tag for each package. Building it once per target would remove most of the "
                  "sizes stage.")
    out.append(where)
    return [*out, ""]


def _quality(rows: list[dict[str, Any]]) -> list[str]:
    out = ["## 2. Plan quality", "",
           "Extra `vllm`, linux x86_64 CPython 3.12, compressed sizes. Lower bound = ceil(total / cap). "
           "Spread = largest / smallest layer; stdev over layer sizes.", ""]
    for lock in dict.fromkeys(r["lock"] for r in rows):
        out += [f"### {lock}", ""]
        body = []
        for r in (r for r in rows if r["lock"] == lock):
            if r["layers"] == 0:
                body.append([format_bytes(r["cap"]), r["method"], "-", r["lower_bound"], "-", "-", "-", "-",
                             r["note"]])
                continue
            body.append([format_bytes(r["cap"]), r["method"], r["layers"], r["lower_bound"],
                         format_bytes(r["largest"]), _pct(r["largest"] / r["cap"]),
                         f"{r['spread']:.2f}", format_bytes(round(r["stdev"])), r["note"]])
        out += _table(["cap", "method", "layers", "lower bound", "largest", "largest/cap", "spread",
                       "stdev", "note"], body)
    return out


def _prediction(data: dict[str, Any] | None, path: str) -> list[str]:
    out = ["## 3. Size prediction", ""]
    if data is None:
        return [*out, f"No measured build yet: `{path}` is absent. It is written from a real build "
                f"(format `{MEASURED_FORMAT}`); no figure is estimated in its place.", ""]
    out += [f"Build `{data['build']}`: predicted vs actual compressed size of each sync layer.", ""]
    out += _table(["step", "predicted", "actual", "error"],
                  [[x["step"], format_bytes(x["predicted"]), format_bytes(x["actual"]),
                    f"{x['error_percent']:+.2f}%"] for x in data["layers"]])
    return [*out, f"Largest error {data['max_abs_error_percent']:.2f}%; "
            f"total {data['total_error_percent']:+.2f}%.", ""]


def _find(pairs: list[dict[str, Any]], **match: object) -> dict[str, Any] | None:
    return next((p for p in pairs if all(p[k] == v for k, v in match.items())), None)


def _cell(p: dict[str, Any] | None) -> str:
    if p is None:
        return "-"
    if p["design"] == FLOOR:
        return f"{_pct(p['fraction'])} ({format_bytes(p['bytes_rebuilt'])}, {p['layers_rebuilt']} packages)"
    mark = "" if p["closure_changed"] else " (closure unchanged)"
    mark += f", {p['moved']} moved" if p["moved"] else ""
    share = f"{_pct(p['fraction'])} ({format_bytes(p['bytes_rebuilt'])}"
    return f"{share}, {p['layers_rebuilt']}/{p['layers']}){mark}"


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summary(pairs: list[dict[str, Any]], design: str) -> dict[str, Any]:
    """Per design: no-op bumps (closure unchanged), and median/mean/worst of the others."""
    mine = [p for p in pairs if p["design"] == design]
    noop = [p for p in mine if not p["closure_changed"]]
    moved = [p["fraction"] for p in mine if p["closure_changed"]]
    return {"bumps": len(mine), "noop": len(noop),
            "noop_worst": max((p["fraction"] for p in noop), default=0.0),
            "changed": len(moved), "median": _median(moved) if moved else 0.0,
            "mean": sum(moved) / len(moved) if moved else 0.0, "worst": max(moved, default=0.0),
            "layers": max((p["layers"] for p in mine), default=0),
            "fewest_layers": min((p["layers"] for p in mine), default=0)}


def _layers(design: str, s: dict[str, Any]) -> str:
    if design == FLOOR:
        return "-"
    low, high = s["fewest_layers"], s["layers"]
    return str(high) if low == high else f"{low}-{high}"


def _rebuild(data: dict[str, Any]) -> list[str]:
    pairs = data["pairs"]
    designs = list(dict.fromkeys(p["design"] for p in pairs))
    out = ["## 4. Rebuild cost across a lock history", "",
           "Counted: compressed bytes of the Python environment's layers that miss the build cache "
           "(the builder reinstalls them and every node pulls them again), as a share of those layers "
           "in the new version. A step's cache key chains its parent's key, its instruction and the "
           "files it copies, as in Docker and kaniko. The compiled wheels' packages (vllm, flash-attn) "
           "are in no layer: they come from the wheels. Cells: share (bytes, layers rebuilt / layers).",
           "",
           f"Designs: **{BEFORE}** = the Dockerfile before slices (`COPY pyproject.toml uv.lock`, "
           f"then one `uv sync` per layer); **{REPACKED}** = the default slices packed afresh "
           "every version; **independent, own-layer X, N groups** = independent layers (each "
           "slice is its own layer wherever it sits) with a slice of its own for every package of "
           "at least X and the rest in N stable groups, each version re-planned from the previous "
           "slices: a bump costs the slices whose file changed "
           f"(**{THIS_DESIGN}** is the config's default, and what both the local build and the "
           "cluster's kaniko job build: gpurl writes each slice's layer and composes them at the "
           f"registry); **{ON_CHAIN}** = that default plan built as one chain "
           "(`cluster.env-source = \"chain\"` or `build --chain`: a changed slice rebuilds every "
           f"slice above it); **{FLOOR}** = the bytes of the packages "
           "whose version changed or that are new, what any layering must push. Layers: the "
           "fewest-most slices over the sequence.", "",
           f"Sequences: {data['history_note']}", ""]
    if data.get("estimated_sizes"):
        out += ["Sizes the history's locks lack and no measurement gives were estimated "
                f"(`benchmarks/data/history-sizes.json`): {', '.join(data['estimated_sizes'])}.", ""]
    for sequence in dict.fromkeys(p["sequence"] for p in pairs):
        for cap in dict.fromkeys(p["cap"] for p in pairs if p["sequence"] == sequence):
            chosen = [p for p in pairs if p["sequence"] == sequence and p["cap"] == cap]
            out += [f"### {sequence}, cap {format_bytes(cap)}", ""]
            rows = [[d, str(s["bumps"]), f"{s['noop']} ({_pct(s['noop_worst'])} worst)",
                     _pct(s["median"]), _pct(s["mean"]), _pct(s["worst"]), _layers(d, s)]
                    for d in designs for s in [summary(chosen, d)]]
            out += _table(["design", "bumps", "closure unchanged", "median", "mean", "worst",
                           "layers"], rows)
            out.append("")
            steps = dict.fromkeys((p["old"], p["new"]) for p in chosen)
            out += _table(["change", *designs],
                          [[f"{old} -> {new}",
                            *(_cell(_find(chosen, design=d, old=old, new=new)) for d in designs)]
                           for old, new in steps])
    return out


def _findings(results: dict[str, Any]) -> list[str]:
    out = ["## Targets", ""]
    rebuild = results["rebuild"]
    if not rebuild:
        return [*out, "Not computed: the real locks are absent.", ""]
    pairs = [p for p in rebuild["pairs"] if p["cap"] == 4 * 10**9]
    gen = [p for p in pairs if p["sequence"] == "generated bumps"]
    hist = [p for p in pairs if p["sequence"] == "lock history, ordered by size"]
    small = {p["design"]: p for p in gen if p["new"] == gen[0]["new"]} if gen else {}
    s_new, s_chain, s_floor, s_old = (summary(hist, d) for d in (THIS_DESIGN, ON_CHAIN, FLOOR, BEFORE))
    if hist:
        out += [f"Independent layers, composed (both paths: the local build and the cluster's "
                f"kaniko job), on the whole lock history at {format_bytes(4 * 10**9)} "
                f"({THIS_DESIGN}):", "",
                f"- Bumps that change the closure ({s_new['changed']}): median "
                f"{_pct(s_new['median'])}, mean {_pct(s_new['mean'])}, worst {_pct(s_new['worst'])} "
                f"(built as one chain: median {_pct(s_chain['median'])}, mean {_pct(s_chain['mean'])}, "
                f"worst {_pct(s_chain['worst'])}; floor: median {_pct(s_floor['median'])}, mean "
                f"{_pct(s_floor['mean'])}, worst {_pct(s_floor['worst'])}). Target: median at most "
                "5%, mean at most 25%: "
                + ("met." if s_new["median"] <= 0.05 and s_new["mean"] <= 0.25 else "NOT met."),
                f"- Slices: {s_new['fewest_layers']}-{s_new['layers']}; Docker allows 127 layers in "
                "an image, base and other layers included.",
                f"- Bumps whose install closure did not change: {s_new['noop']} of "
                f"{s_new['bumps']}; worst {_pct(s_new['noop_worst'])} rebuilt (target: 0 bytes)."]
    if THIS_DESIGN in small and BEFORE in small:
        mine, before = small[THIS_DESIGN], small[BEFORE]
        out.append(f"- One small package bumped ({mine['new']}): {_pct(mine['fraction'])} "
                   f"({format_bytes(mine['bytes_rebuilt'])}) of the Python layers; before slices "
                   f"{_pct(before['fraction'])}.")
    if hist:
        out.append(f"- Closure-changing bumps on the lock history before slices: median "
                   f"{_pct(s_old['median'])}.")
    for item in rebuild["layer_counts"]:
        out.append(f"- Layers at {format_bytes(item['cap'])} for {item['lock']}: {item['layers']} "
                   f"(lower bound {item['lower_bound']}); largest "
                   f"{format_bytes(item['largest'])}.")
    return [*out, ""]


def _headlines(results: dict[str, Any]) -> list[str]:
    out = ["## Headline figures", ""]
    sp = results["speed"]["results"]
    real = [r for r in sp[:-1]]
    if real:
        out.append("- Planning a real lock: " + ", ".join(
            f"{r['label']} {_ms(r['plan_seconds'])} ({r['ratio']:.1f}x `tomllib.load`)" for r in real) + ".")
    s = sp[-1]
    out.append(f"- {s['label'].capitalize()} ({s['closure']} in the closure): {_ms(s['plan_seconds'])} "
               f"({s['ratio']:.1f}x `tomllib.load`).")
    q4 = [r for r in results["quality"] if r["method"] == INDEPENDENT and r["layers"]]
    if q4:
        out.append("- Plan quality: the planner's layers over the lower bound, "
                   f"{', '.join(str(r['layers'] - r['lower_bound']) for r in q4)} in the "
                   f"{len(q4)} feasible (lock, cap) cases; "
                   f"worst largest/cap {_pct(max(r['largest'] / r['cap'] for r in q4))}.")
    bad = [r for r in results["quality"] if r["method"] == INDEPENDENT and not r["layers"]]
    for r in bad:
        out.append(f"- {r['lock']} at {format_bytes(r['cap'])}: {r['note']}.")
    pred = results["prediction"]
    out.append("- Size prediction: " + ("no measured build yet." if pred is None else
               f"largest per-layer error {pred['max_abs_error_percent']:.2f}% ({pred['build']})."))
    rb = results["rebuild"]
    if rb:
        gen = [p for p in rb["pairs"] if p["sequence"] == "generated bumps" and p["cap"] == 4 * 10**9]
        new = next((p for p in gen if p["design"] == THIS_DESIGN), None)
        old = next((p for p in gen if p["design"] == ON_CHAIN), None)
        if new and old:
            out.append(f"- Rebuild cost of one small bump ({new['new']}) at 4 GB: "
                       f"{_pct(new['fraction'])} of the Python layers "
                       f"({format_bytes(new['bytes_rebuilt'])}) composed; built as one chain "
                       f"{_pct(old['fraction'])} ({format_bytes(old['bytes_rebuilt'])}).")
        hist = [p for p in rb["pairs"]
                if p["sequence"] == "lock history, ordered by size" and p["cap"] == 4 * 10**9]
        if hist:
            s_new, s_chain, s_floor = (summary(hist, d) for d in (THIS_DESIGN, ON_CHAIN, FLOOR))
            out.append(f"- Lock history, closure-changing bumps at 4 GB: composed median "
                       f"{_pct(s_new['median'])} / mean {_pct(s_new['mean'])}; as one chain "
                       f"{_pct(s_chain['median'])} / {_pct(s_chain['mean'])}; floor "
                       f"{_pct(s_floor['median'])} / {_pct(s_floor['mean'])}.")
    return [*out, ""]


def render_markdown(results: dict[str, Any]) -> str:
    env = results["environment"]
    out = ["# gpurl planner benchmarks", "",
           f"Written by `nox -s bench` (Python {env['python']}, {env['machine']}, {env['cpus']} CPUs, "
           f"{env['runs']} timed runs per real lock). Timings vary between machines; the other figures "
           "do not.", ""]
    for what, why in results["skipped"].items():
        out.append(f"Skipped {what}: {why}.")
    if results["skipped"]:
        out.append("")
    out += _headlines(results)
    out += _speed(results["speed"])
    out += _quality(results["quality"]) if results["quality"] else [
        "## 2. Plan quality", "", "Not computed: the real locks are absent.", ""]
    out += _prediction(results["prediction"], results["measured_path"])
    out += _rebuild(results["rebuild"]) if results["rebuild"] else [
        "## 4. Rebuild cost across a lock history", "", "Not computed: the real locks are absent.", ""]
    out += layer_budget.render_section(results.get("layer_budget"))
    out += _findings(results)
    return "\n".join(out).rstrip() + "\n"
