"""Real scale: the `heavy` profile (PyPI torch + the nvidia-* CUDA wheels, ~4 GB) planned, built,
pushed, verified and rebuilt on this machine (`nox -s bench-heavy`, never in CI).

Every step is the pipeline's own code (setup-local, plan, generate, the local build + push,
verify-layers); this module only times the steps, samples the builder's memory, and compares
what the registry holds with what the plan predicted. Steps:

1. index fill: `setup-local` (the heavy lock's wheels into $GPURL_CACHE_DIR, default
   `.cache/gpurl-heavy`, downloaded once and kept between runs);
2. plan + `generate --check` (the committed docker/Dockerfile.heavy must be current);
3. cold: build with `--no-cache`, push (new blobs), verify-layers;
4. warm: the same build again (every layer cached), push (nothing new), verify-layers;
5. bump: a copy of the workspace (a small repository under benchmarks/out/heavy-bump/, with the
   committed slice files, as a user's repository has them) with one small package moved to
   another version and re-locked against the loopback index, re-planned from those slices,
   generated, built with the build cache and pushed: which layers were rebuilt, and how many
   bytes the registry did not have before.

Results: the "real_scale" key of benchmarks/out/report.json, benchmarks/data/real-scale.json
(committed, so `nox -s bench` re-renders the section) and the "Real scale" section of
benchmarks/REPORT.md. `--clean` removes the heavy images, the index cache and the bump copy.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpurl_tasks.plan.model import Slice
from gpurl_tasks.values import format_bytes
from gpurl_tasks.writer.records import slice_of

if TYPE_CHECKING:
    from gpurl_tasks.config import Config

REPO_ROOT = Path(__file__).resolve().parent.parent
PROFILE = "heavy"
DATA = REPO_ROOT / "benchmarks" / "data" / "real-scale.json"
OUT = REPO_ROOT / "benchmarks" / "out"
REPORT = REPO_ROOT / "benchmarks" / "REPORT.md"
BUMP_DIR = OUT / "heavy-bump"
# The small package the bump moves, and the version it moves to (a real PyPI release).
BUMP = ("tqdm", "4.67.1")
BEGIN, END = "<!-- real-scale:begin -->", "<!-- real-scale:end -->"
GOAL = 0.02  # prediction error goal on every Python layer of 100 MB or more
BIG = 100 * 10**6

__all__ = ["BUMP", "DATA", "apply_bump", "clean", "main", "measure", "registry_layers",
           "render_section", "stage_bump_workspace", "write_results"]


def _default_cache() -> None:
    os.environ.setdefault("GPURL_CACHE_DIR", str(REPO_ROOT / ".cache" / "gpurl-heavy"))


# --- measuring helpers ---------------------------------------------------------------------


def _pids_of(name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _tree_rss(roots: Sequence[int]) -> int:
    """Resident bytes of `roots` and every descendant (the engine, BuildKit and its RUN steps)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            pid = int(entry.name)
            children.setdefault(int(fields[1]), []).append(pid)
            rss[pid] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, stack, seen = 0, list(roots), set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += rss.get(pid, 0)
        stack += children.get(pid, [])
    return total


def _host_used() -> int:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    def kib(key: str) -> int:
        return int(info[key].split()[0]) * 1024

    return kib("MemTotal") - kib("MemAvailable")


class MemorySampler:
    """Peak RSS of the builder (dockerd + containerd trees) and of the whole host, every 0.5 s."""

    def __init__(self) -> None:
        self.peak_builder = 0
        self.peak_host = 0
        self.host_before = _host_used()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            roots = _pids_of("dockerd") + _pids_of("containerd")
            self.peak_builder = max(self.peak_builder, _tree_rss(roots))
            self.peak_host = max(self.peak_host, _host_used())
            self._stop.wait(0.5)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def to_json(self) -> dict[str, int]:
        return {"builder_peak_rss_bytes": self.peak_builder, "host_used_peak_bytes": self.peak_host,
                "host_used_before_bytes": self.host_before}


@contextmanager
def _timed(times: dict[str, float], name: str, say: Callable[[str], None]) -> Iterator[None]:
    say(f"==> {name}")
    start = time.monotonic()
    yield
    times[name] = round(time.monotonic() - start, 1)
    say(f"<== {name}: {times[name]:.1f}s")


def _du(path: Path) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _installed_sizes(client: str, reference: str) -> list[int]:
    """Uncompressed bytes of the slice layers, oldest first, from the engine's history."""
    out = subprocess.run([client, "history", "--no-trunc", "--human=false", "--format",
                          "{{.Size}}\t{{.CreatedBy}}", reference],
                         check=True, capture_output=True, text=True).stdout
    sizes = []
    for line in reversed(out.splitlines()):
        size, _, created = line.partition("\t")
        if slice_of(created) is not None:
            sizes.append(int(size))
    return sizes


def registry_layers(host: str, repository: str) -> dict[str, int]:
    """Every layer blob of every tag of `repository` in the plain loopback registry at `host`:
    digest -> size."""
    import httpx

    from gpurl_tasks.imageref import parse_reference
    from gpurl_tasks.oci.registry import RegistryClient

    response = httpx.get(f"http://{host}/v2/{repository}/tags/list", timeout=30)
    tags = (response.json().get("tags") or []) if response.status_code == 200 else []
    blobs: dict[str, int] = {}
    with RegistryClient(host, insecure=True) as client:
        for tag in tags:
            if re.fullmatch(r"sha256-[0-9a-f]{64}", tag):  # the job's attestation (an index)
                continue
            image = client.pull(parse_reference(f"{host}/{repository}:{tag}", default_host=host))
            blobs.update({d.digest: d.size for d in image.layers})
    return blobs


# --- the steps -----------------------------------------------------------------------------


def _layers(report: Any, plan: Any, installed: list[int]) -> list[dict[str, Any]]:
    rows = []
    for row in report.rows:
        if row.sync_step is None:
            continue
        layer = plan.layers[row.sync_step]
        actual_installed = installed[row.sync_step] if row.sync_step < len(installed) else None
        rows.append({
            "sync_step": row.sync_step, "index": row.index, "digest": row.digest,
            "packages": len(layer.packages),
            "predicted_bytes": row.predicted, "actual_bytes": row.size,
            "error": None if row.error is None else round(row.error, 5),
            "predicted_installed_bytes": layer.installed_bytes,
            "actual_installed_bytes": actual_installed,
        })
    return rows


def _build(config: Any, sha: str, *, no_cache: bool, log: Path) -> Any:
    from gpurl_tasks.local.pipeline import build_local

    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as sink:
        return build_local(config, git_sha=sha, no_cache=no_cache,
                           on_line=lambda line: print(line, file=sink, flush=True))


def stage_bump_workspace(config: Config, dest: Path) -> Path:
    """Copy what a user's repository holds for the profile into `dest`: the workspace, the
    root pyproject.toml, the size tables, the committed slice files (the previous plan: without
    them the bump would pack afresh and move unchanged packages), an empty wheelhouse and the
    .dockerignore. Returns the copied workspace."""
    root = config.root
    shutil.rmtree(dest, ignore_errors=True)
    workspace = dest / config.workspace.relative_to(root)
    shutil.copytree(config.workspace, workspace, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(root / "pyproject.toml", dest / "pyproject.toml")
    shutil.copytree(root / "sizes", dest / "sizes")  # layers.size-overrides lives there
    slices = config.build.slices / config.profile
    shutil.copytree(slices, dest / slices.relative_to(root))
    wheelhouse = dest / config.build.wheelhouse.relative_to(root)
    wheelhouse.mkdir(parents=True)
    (wheelhouse / ".keep").touch()
    (dest / ".dockerignore").write_text((root / ".dockerignore").read_text())
    return workspace


def apply_bump(config: Config, workspace: Path) -> str:
    """Move BUMP's package to its version in `workspace`'s lock: its wheel downloaded into
    the profile's package index, a constraint added, re-locked against that index."""
    from gpurl_tasks import proc
    from gpurl_tasks.local import download
    from gpurl_tasks.local.builder import serving_index
    from gpurl_tasks.local.setup import cache_dir, index_dir

    name, version = BUMP
    index = index_dir(cache_dir(REPO_ROOT))
    target = download.DownloadTarget.for_target(python=config.target.python,
                                                glibc=config.target.glibc, arch=config.target.arch)
    download.download([f"{name}=={version}"], index, target=target)
    pyproject = workspace / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        "[tool.uv]\n", f'[tool.uv]\nconstraint-dependencies = ["{name}=={version}"]\n', 1))
    with serving_index(config.build.index_url, index):
        proc.run_quiet(["uv", "lock", "--directory", str(workspace)], timeout=600)
    return f"{name} {version}"


def _bump_copy(say: Callable[[str], None]) -> Path:
    """A small repository holding a copy of the workspace with BUMP applied and re-locked."""
    from gpurl_tasks import proc
    from gpurl_tasks.config import load_config

    config = load_config(REPO_ROOT, profile=PROFILE)
    workspace = stage_bump_workspace(config, BUMP_DIR)
    said = apply_bump(config, workspace)
    say(f"bumped {said} in {workspace}")
    name, version = BUMP
    git = ["git", "-C", str(BUMP_DIR), "-c", "user.name=gpurl", "-c", "user.email=gpurl@localhost"]
    proc.run_quiet([*git, "init", "-q"])
    proc.run_quiet([*git, "add", "-A"])
    proc.run_quiet([*git, "commit", "-qm", f"bump {name} to {version}"])
    return BUMP_DIR


def measure(say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every step for real and return the figures (see the module docstring)."""
    _default_cache()
    from gpurl_tasks import git
    from gpurl_tasks.config import load_config
    from gpurl_tasks.dockerfile.generate import generate
    from gpurl_tasks.local.engine import find_buildkit_client
    from gpurl_tasks.local.setup import cache_dir, index_dir, setup_local
    from gpurl_tasks.plan.profile import plan_for_config
    from gpurl_tasks.plan.report import render_plan
    from gpurl_tasks.release import flow as release
    from gpurl_tasks.release.verify import render_table

    config = load_config(REPO_ROOT, profile=PROFILE)
    times: dict[str, float] = {}
    disk_before = shutil.disk_usage(REPO_ROOT).used
    with _timed(times, "setup-local (index fill)", say):
        setup = setup_local(config)
    index_step = next(s for s in setup.steps if s.name == "package index")
    say(f"    package index: {index_step.status} {index_step.detail}")
    with _timed(times, "plan", say):
        plan = plan_for_config(config)
    say(render_plan(plan))
    with _timed(times, "generate --check", say):
        generate(config, check=True, planner=lambda _: plan)
    sha = git.head_sha(REPO_ROOT)
    logs = OUT / "heavy-logs"
    runs: dict[str, Any] = {}
    with MemorySampler() as memory:
        for label, no_cache in (("cold", True), ("warm", False)):
            with _timed(times, f"{label} build + push", say):
                built = _build(config, sha, no_cache=no_cache, log=logs / f"{label}.log")
            with _timed(times, f"{label} verify-layers", say):
                report = release.verify_reference(config, built.reference)
            runs[label] = {"build_seconds": round(built.build_seconds, 1),
                           "push_seconds": round(built.push_seconds, 1),
                           "verify_seconds": times[f"{label} verify-layers"],
                           "cached_steps": built.cached_steps, "ok": report.ok}
    say(render_table(report))
    client = find_buildkit_client()[0]
    layers = _layers(report, plan, _installed_sizes(client, built.reference))

    had = registry_layers(config.registry.host, config.registry.repository)
    with _timed(times, "bump: copy + re-lock", say):
        bump_root = _bump_copy(say)
    bump_config = load_config(bump_root, profile=PROFILE)
    bump_plan = plan_for_config(bump_config)
    generate(bump_config, planner=lambda _: bump_plan)
    with MemorySampler() as bump_memory, _timed(times, "bump build + push", say):
        bumped = _build(bump_config, git.head_sha(bump_root), no_cache=False,
                        log=logs / "bump.log")
    bump_report = release.verify_reference(bump_config, bumped.reference)
    sync_rows = [r for r in bump_report.rows if r.sync_step is not None]
    new = {r.digest: r.size for r in bump_report.rows if r.digest not in had}
    python_bytes = sum(r.size for r in sync_rows)
    new_python = sum(r.size for r in sync_rows if r.digest in new)
    run_steps = [s for s in bumped.steps if not s.is_from and s.instruction.startswith("RUN")]
    sync_ran = [s for s in run_steps if Slice.IMAGE_DIR in s.instruction and s.status != "cached"]
    bump = {
        "package": BUMP[0], "to_version": BUMP[1], "reference": bumped.reference,
        "build_seconds": round(bumped.build_seconds, 1), "push_seconds": round(bumped.push_seconds, 1),
        "run_steps": len(run_steps), "run_steps_rebuilt": sum(s.status != "cached" for s in run_steps),
        "sync_layers": len(sync_rows), "sync_steps_rebuilt": len(sync_ran),
        "layers_new": len(new), "new_bytes": sum(new.values()),
        "new_python_bytes": new_python, "python_bytes": python_bytes,
        "new_python_share": round(new_python / python_bytes, 4) if python_bytes else None,
        "builder_peak_rss_bytes": bump_memory.peak_builder,
        "from_committed_slices": True,  # the copy re-planned from the committed slice files
    }
    index = index_dir(cache_dir(REPO_ROOT))
    blobs = registry_layers(config.registry.host, config.registry.repository)
    return {
        "profile": PROFILE, "reference": built.reference, "digest": built.digest,
        "cap_bytes": plan.cap_bytes, "packages": sum(len(x.packages) for x in plan.layers),
        "wheel_bytes": sum(x.compressed_bytes for x in plan.layers),
        "index": {"status": index_step.status, "seconds": round(index_step.seconds, 1)},
        "times": times, "runs": runs, "memory": memory.to_json(), "layers": layers,
        "image_layers": len(report.rows), "image_bytes": report.total, "bump": bump,
        "disk": {"index_bytes": _du(index), "registry_heavy_blob_bytes": sum(blobs.values()),
                 "bump_copy_bytes": _du(BUMP_DIR),
                 "filesystem_growth_bytes": shutil.disk_usage(REPO_ROOT).used - disk_before},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
    }


# --- the report ----------------------------------------------------------------------------


def _size(n: float | None) -> str:
    return "-" if n is None else format_bytes(round(n))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:+.2f}%"


def largest_big_error(data: dict[str, Any]) -> dict[str, Any] | None:
    """The sync layer of 100 MB or more with the largest |error|."""
    big = [r for r in data["layers"] if r["error"] is not None and r["actual_bytes"] >= BIG]
    return max(big, key=lambda r: abs(r["error"]), default=None)


def _bump_text(bump: dict[str, Any]) -> str:
    """The bump paragraph; a run whose bump copy lacked the committed slice files (it packed
    afresh, so unchanged packages could move) gives no figure."""
    if not bump.get("from_committed_slices"):
        return (f"After bumping one small package ({bump['package']} to {bump['to_version']}): "
                "**to be regenerated by `nox -s bench-heavy`**. The last run's bump copy lacked the "
                "committed slice files, so its planner packed afresh and could move unchanged "
                "packages between slices; its figure measured that, not a user's bump, and is not "
                "shown. The bump now starts from the committed slices, as a user's repository does.")
    return (f"After bumping one small package ({bump['package']} to {bump['to_version']}, a copy of "
            f"the workspace with its committed slice files, re-locked): {bump['run_steps_rebuilt']} "
            f"of {bump['run_steps']} RUN steps of the final build rebuilt (the slice installs run "
            f"apart, one slice image each, and the environment is composed at the registry: a "
            f"changed slice shows as new bytes below, not as a RUN here; "
            f"{bump['sync_steps_rebuilt']} of the {bump['sync_layers']} slice installs ran in the "
            f"final build), in {bump['build_seconds']:.1f}s, pushed in "
            f"{bump['push_seconds']:.1f}s; {bump['layers_new']} blobs the registry did not have, "
            f"**{_size(bump['new_bytes'])}** new bytes, of which {_size(bump['new_python_bytes'])} "
            f"in Python layers = **{_pct(bump['new_python_share']).lstrip('+')}** of the Python "
            f"layers ({_size(bump['python_bytes'])}).")


def render_section(data: dict[str, Any] | None) -> str:
    """The "Real scale" section of REPORT.md; pure."""
    out = ["## Real scale: the heavy profile built on this machine", ""]
    if data is None:
        out += ["No measured run yet: `nox -s bench-heavy` writes `benchmarks/data/real-scale.json`.", ""]
        return "\n".join(out)
    worst = largest_big_error(data)
    cold, warm, bump, mem = data["runs"]["cold"], data["runs"]["warm"], data["bump"], data["memory"]
    out += [
        f"`nox -s bench-heavy`, {data['measured_at']}, {data['machine']['cpus']} CPUs: profile "
        f"`heavy` (examples/heavy: PyPI torch 2.8.0 with the nvidia-*-cu12 wheels and triton, "
        f"transformers, numpy, safetensors), {data['packages']} packages, "
        f"{_size(data['wheel_bytes'])} of wheels, cap {_size(data['cap_bytes'])}; image "
        f"`{data['reference']}`, {data['image_layers']} layers, {_size(data['image_bytes'])}.",
        "",
        "| sync layer | packages | predicted | actual (registry) | error | installed predicted "
        "| installed actual |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in data["layers"]:
        out.append(f"| {r['sync_step']} | {r['packages']} | {_size(r['predicted_bytes'])} | "
                   f"{_size(r['actual_bytes'])} | {_pct(r['error'])} | "
                   f"{_size(r['predicted_installed_bytes'])} | {_size(r['actual_installed_bytes'])} |")
    goal = all(abs(r["error"]) <= GOAL for r in data["layers"]
               if r["error"] is not None and r["actual_bytes"] >= BIG)
    out += ["", "Largest error on a layer of 100 MB or more: "
            + (f"**{_pct(worst['error'])}** (sync layer {worst['sync_step']}, "
               f"{_size(worst['actual_bytes'])})" if worst else "none") +
            f"; goal within {GOAL:.0%} on every such layer: {'met' if goal else 'NOT met'}.", ""]
    t = data["times"]
    out += [
        "| step | cold | warm |", "|---|---:|---:|",
        f"| index fill (setup-local) | {data['index']['seconds']:.1f}s ({data['index']['status']}) "
        f"| - |",
        f"| build | {cold['build_seconds']:.1f}s | {warm['build_seconds']:.1f}s "
        f"({warm['cached_steps']} cached steps) |",
        f"| push | {cold['push_seconds']:.1f}s | {warm['push_seconds']:.1f}s |",
        f"| verify-layers | {cold['verify_seconds']:.1f}s | {warm['verify_seconds']:.1f}s |",
        f"| plan / generate --check | {t['plan']:.1f}s / {t['generate --check']:.1f}s | |",
        "",
        f"Cold means `--no-cache` (every instruction after the base image runs, every blob is new "
        f"to the registry); warm is the same build again. The build step includes building and "
        f"pushing each slice image the cache repository lacks (all of them on a first run) and "
        f"composing the environment at the registry, so the push step is left with the final "
        f"image's own layers. The index fill is cold only on a run "
        f"that had to download (the wheels are kept in `.cache/gpurl-heavy/`). Builder peak "
        f"memory (resident set of the dockerd and containerd process trees, RUN steps included): "
        f"**{_size(mem['builder_peak_rss_bytes'])}**; host memory in use peaked at "
        f"{_size(mem['host_used_peak_bytes'])} (from {_size(mem['host_used_before_bytes'])}).",
        "",
        _bump_text(bump),
        "",
        f"Disk: the index cache holds {_size(data['disk']['index_bytes'])}, the registry "
        f"{_size(data['disk']['registry_heavy_blob_bytes'])} of gpurl/heavy blobs (compressed), "
        f"and the filesystem grew by {_size(data['disk']['filesystem_growth_bytes'])} during the "
        f"run (images and build cache in the engine, registry blobs, the bump copy; a first run "
        f"also downloads the index). `nox -s bench-heavy -- --clean` removes the heavy images, "
        f"the index cache and the bump copy.",
        "",
    ]
    return "\n".join(out)


def write_results(data: dict[str, Any]) -> None:
    """Into benchmarks/data/real-scale.json, out/report.json's "real_scale" and REPORT.md."""
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    OUT.mkdir(parents=True, exist_ok=True)
    report_json = OUT / "report.json"
    merged = json.loads(report_json.read_text()) if report_json.exists() else {}
    merged["real_scale"] = data
    report_json.write_text(json.dumps(merged, indent=1, sort_keys=True) + "\n")
    REPORT.write_text(splice_section(REPORT.read_text() if REPORT.exists() else "",
                                     render_section(data)))


def splice_section(text: str, section: str) -> str:
    """`text` with the marked real-scale section replaced (or appended); pure."""
    block = f"{BEGIN}\n{section.rstrip()}\n{END}\n"
    found = re.search(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n?", text, flags=re.S)
    if found:
        return text[:found.start()] + block + text[found.end():]
    return text.rstrip() + "\n\n" + block


def load_data(path: Path = DATA) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


# --- clean ---------------------------------------------------------------------------------


def clean(say: Callable[[str], None] = print) -> None:
    """Remove the heavy images from the engine, the index cache and the bump copy."""
    _default_cache()
    from gpurl_tasks.config import load_config
    from gpurl_tasks.local.engine import find_buildkit_client
    from gpurl_tasks.local.setup import cache_dir

    config = load_config(REPO_ROOT, profile=PROFILE)
    before = shutil.disk_usage(REPO_ROOT).used
    client = find_buildkit_client()[0]
    images = subprocess.run([client, "images", "-q", "--no-trunc", config.registry.image],
                            check=True, capture_output=True, text=True).stdout.split()
    if images:
        subprocess.run([client, "rmi", "-f", *sorted(set(images))], check=False,
                       capture_output=True)
    for path in (cache_dir(REPO_ROOT), BUMP_DIR, OUT / "heavy-logs"):
        shutil.rmtree(path, ignore_errors=True)
    freed = before - shutil.disk_usage(REPO_ROOT).used
    say(f"removed {len(set(images))} heavy image(s), {cache_dir(REPO_ROOT)} and {BUMP_DIR}: "
        f"{_size(freed)} freed")
    say("left: the engine's build cache (`docker builder prune` frees it for every project) and "
        f"the {config.registry.repository} blobs in the shared loopback registry (its garbage "
        "collector frees them)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.real_scale", description=__doc__)
    parser.add_argument("--clean", action="store_true", help="remove the heavy images and caches")
    parser.add_argument("--render", action="store_true",
                        help="re-render the REPORT.md section from benchmarks/data/real-scale.json")
    args = parser.parse_args(argv)
    if args.clean:
        clean()
        return 0
    if args.render:
        data = load_data()
        REPORT.write_text(splice_section(REPORT.read_text(), render_section(data)))
        return 0
    from gpurl_tasks.errors import GpurlError

    try:
        data = measure()
    except GpurlError as exc:
        print(f"error: {exc.message}" + (f"\n  hint: {exc.hint}" if exc.hint else ""),
              file=sys.stderr)
        return exc.exit_code or 1
    data["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    write_results(data)
    print(render_section(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
