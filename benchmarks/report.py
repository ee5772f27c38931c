"""Render the benchmark results (plain JSON data from run.run) as the markdown report.

Pure: the same results give the same text, so REPORT.md can be re-rendered from report.json.
Every figure in the prose is read from the results; nothing is typed in by hand.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpurl_tasks.units import format_bytes

__all__ = ["render_markdown"]

MEASURED_FORMAT = '{"build": name, "layers": [{"step": i, "predicted": bytes, "actual": bytes}]}'


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
    mark = " (replanned)" if p["replanned"] else ""
    mark += f", {p['moved']} moved" if p["moved"] else ""
    share = f"{_pct(p['fraction'])} ({format_bytes(p['bytes_rebuilt'])}"
    return f"{share}, {p['layers_rebuilt']}/{p['layers']}){mark}"


def _rebuild(data: dict[str, Any]) -> list[str]:
    pairs = data["pairs"]
    designs = list(dict.fromkeys(p["design"] for p in pairs))
    out = ["## 4. Rebuild cost across a lock history", ""]
    up = data["newest_upload"]
    if len(data["order"]) > 1:
        out.append("Order of the real locks: " + " then ".join(
            f"{c} (newest artifact uploaded {up[c]})" for c in data["order"]) +
            ". A lock cannot be older than the newest file it pins, so the order follows from the contents.")
    ch = data["real_changes"]
    if ch:
        out.append(f" Between them the `vllm` closure has {ch['changed']} packages at a new version, "
                   f"{ch['added']} added, {ch['removed']} removed and {ch['unchanged']} unchanged; the "
                   f"packages over 100 MB at a new version: {', '.join(ch['heavy_changed']) or 'none'}.")
    out += ["", "Generated bumps start from the newest real lock: one small package bumped, then torch "
            "bumped (+1% size), then a 3 MB package added to the `vllm` extra.", "",
            "Counted: compressed bytes of the Python environment's layers (the chain) that miss the build "
            "cache, i.e. the builder reinstalls and every node pulls again, as a share of those layers' "
            "total in the new version. Not counted: the base image and apt layers, and the layers after "
            "the chain (compiled wheels, harbor, local packages, asserts), which any lock change rebuilds "
            "in every design here. "
            "A step's cache key chains its parent's key, its instruction and the files it copies. Cells: "
            "share (bytes, layers rebuilt / layers), then how many packages present in both versions sit "
            "in a different layer.",
            "",
            "Designs: **current** = the rl stage of the Dockerfile `invoke generate` writes for each "
            "version's plan (`COPY pyproject.toml uv.lock`, then one `uv sync` per layer); "
            "**slices** = per layer `COPY slice-k.txt` + `uv pip install --no-deps --require-hashes -r "
            "slice-k.txt`, final `uv sync --frozen` installs nothing; **stable buckets** = packages keep "
            "their layer across versions; **light last** = packages up to "
            f"{format_bytes(data['light_threshold'])} packed into their own layers after the heavy ones; "
            "**independent slices** = each slice built in its own stage and copied in (an upper bound: "
            "assumes byte-identical blobs for unchanged layers, not verified for kaniko).", ""]
    for sequence in dict.fromkeys(p["sequence"] for p in pairs):
        for cap in dict.fromkeys(p["cap"] for p in pairs if p["sequence"] == sequence):
            out += [f"### {sequence}, cap {format_bytes(cap)}", ""]
            steps = dict.fromkeys((p["old"], p["new"]) for p in pairs if p["sequence"] == sequence)
            out += _table(["change", *designs],
                          [[f"{old} -> {new}",
                            *(_cell(_find(pairs, sequence=sequence, cap=cap, design=d, old=old, new=new))
                              for d in designs)] for old, new in steps])
    return out


def _findings(results: dict[str, Any]) -> list[str]:
    out = ["## Where the current design is weak, and what would improve it", ""]
    rebuild = results["rebuild"]
    if not rebuild:
        return [*out, "Not computed: the real locks are absent.", ""]
    pairs = [p for p in rebuild["pairs"] if p["sequence"] == "generated bumps"]
    cap = max(p["cap"] for p in pairs)
    steps = list(dict.fromkeys(p["new"] for p in pairs))
    small, torch, added = steps[0], steps[1], steps[2]

    def get(design: str, new: str, at: int = cap) -> dict[str, Any]:
        found = _find(pairs, cap=at, design=design, new=new)
        assert found is not None
        return found

    cur = get("current", small)
    sl = get("slices", small)
    moved = get("slices", torch)["moved"]
    best = "slices + stable buckets + light last"
    out.append(f"1. **Any lock change rebuilds the whole Python environment.** Every `uv sync` step follows "
               f"`COPY pyproject.toml uv.lock`, so {small} alone costs {_pct(cur['fraction'])} of the chain "
               f"({format_bytes(cur['bytes_rebuilt'])} at a {format_bytes(cap)} cap): the builder "
               "reinstalls it and every node pulls it again. The same holds for every pair in the tables "
               "above.")
    out.append(f"2. **Slice files alone do not fix it** ({_pct(sl['fraction'])} for the same bump). The "
               "planner spreads the long tail of small packages over every layer (LPT fills gaps with them) "
               "and puts the layer with the most packages first, so a small bump lands in an early layer "
               "and invalidates every layer after it. Re-packing each version also moves packages between "
               f"layers ({moved} packages change layer when only torch is bumped), changing slices that did "
               "not need to change.")
    lines = [f"{label}: {_pct(get(best, new)['fraction'])} ({format_bytes(get(best, new)['bytes_rebuilt'])})"
             for label, new in (("small bump", small), ("torch bump", torch), ("added package", added))]
    layers_now, layers_best = get("current", small)["layers"], get(best, small)["layers"]
    out.append(f"3. **Change: slice files + stable bucket assignment + the long tail last.** Install each "
               "layer from its own slice (DESIGN.md section 3), keep each package in the layer it had in "
               f"the previous plan, and pack packages up to {format_bytes(rebuild['light_threshold'])} into "
               f"layers placed after the heavy ones. At {format_bytes(cap)}: " + "; ".join(lines) +
               f". Cost: {layers_best} layers instead of {layers_now}.")
    small_cap = min(p["cap"] for p in pairs)
    if small_cap != cap:
        t = get(best, torch, small_cap)
        out.append(f"4. A smaller cap limits what a heavy bump drags along: at {format_bytes(small_cap)} the "
                   f"torch bump rebuilds {_pct(t['fraction'])} ({format_bytes(t['bytes_rebuilt'])}) with the "
                   "same design, since only the layers from torch's layer on are invalidated.")
    ind = _find(pairs, cap=cap, design="independent slices + stable buckets + light last", new=torch)
    if ind:
        out.append(f"5. Building each slice in its own stage and copying it in would make layers "
                   f"independent (torch bump {_pct(ind['fraction'])}, {format_bytes(ind['bytes_rebuilt'])}), "
                   "if the builder writes byte-identical blobs for unchanged layers; that is unverified for "
                   "kaniko.")
    real = [p for p in rebuild["pairs"] if p["sequence"] == "real history" and p["cap"] == cap]
    if real:
        lo = min(p["fraction"] for p in real)
        heavy = (rebuild["real_changes"] or {}).get("heavy_changed", [])
        out.append(f"6. Between the two real locks no design helps much (best {_pct(lo)}): "
                   f"{len(heavy)} packages over 100 MB changed version ({', '.join(heavy)}), so every "
                   "heavy layer holds a changed package. The gains above are for the frequent small steps "
                   "between such upgrades.")
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
    q4 = [r for r in results["quality"] if r["method"] == "planner" and r["layers"]]
    if q4:
        out.append("- Plan quality: the planner reaches the lower bound in "
                   f"{sum(r['layers'] == r['lower_bound'] for r in q4)}/{len(q4)} feasible (lock, cap) "
                   "cases; "
                   f"worst largest/cap {_pct(max(r['largest'] / r['cap'] for r in q4))}, worst spread "
                   f"{max(r['spread'] for r in q4):.2f}.")
    bad = [r for r in results["quality"] if r["method"] == "planner" and not r["layers"]]
    for r in bad:
        out.append(f"- {r['lock']} at {format_bytes(r['cap'])}: {r['note']}.")
    pred = results["prediction"]
    out.append("- Size prediction: " + ("no measured build yet." if pred is None else
               f"largest per-layer error {pred['max_abs_error_percent']:.2f}% ({pred['build']})."))
    rb = results["rebuild"]
    if rb:
        pairs = [p for p in rb["pairs"] if p["sequence"] == "generated bumps"]
        cap = max(p["cap"] for p in pairs)
        first = pairs[0]["new"]
        cur = _find(pairs, cap=cap, design="current", new=first)
        best = _find(pairs, cap=cap, design="slices + stable buckets + light last", new=first)
        if cur and best:
            out.append(f"- Rebuild cost of one small bump ({first}) at {format_bytes(cap)}: current "
                       f"design {_pct(cur['fraction'])} of the Python layers "
                       f"({format_bytes(cur['bytes_rebuilt'])}); "
                       f"slices + stable buckets + light last {_pct(best['fraction'])} "
                       f"({format_bytes(best['bytes_rebuilt'])}).")
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
    out += _findings(results)
    return "\n".join(out).rstrip() + "\n"
