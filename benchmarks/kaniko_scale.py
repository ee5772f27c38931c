"""Real kaniko at heavy scale: the `heavy` profile (~4 GB of wheels, 36 slices) built as the
cluster builds it (`nox -s bench-kaniko`, never in CI).

The generated kaniko script runs unmodified in a job container (gpurl_tasks.local.from_source
.run_job), with the executors and crane `setup-kaniko` builds from their source archives,
against the plain loopback registry. In one run, each build into a repository of its own
(so its cache starts empty unless it is a warm rebuild):

1. upstream v1.23.2, cold, the environment as one layer chain (`cluster.env-source = chain`);
2. upstream, cold, then warm, the environment composed from written slices (the default):
   the cold environment should take at most half the chain's time; then a small bump
   (real_scale.BUMP re-locked, `invoke generate`, committed) on top of that cache;
3. the fork v1.28.3, cold (chain), then warm (nothing changed);
4. the fork, cold, with `--snapshot-mode=redo` (stats files instead of hashing them);
5. the fork, cold, with the same lock as one install layer (one slice holding every package:
   the build-time price of layering).
`--only LABEL,...` runs a subset (the table then shows only those).

For each: wall time, every slice RUN's install and snapshot seconds from kaniko's log (as the
filesystem grows), the layers and bytes the image has, and the blobs the registry did not have
before. Results: benchmarks/data/kaniko-scale.json and the "Real kaniko" section of REPORT.md.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.job_resources import JobSampler
from benchmarks.real_scale import BUMP, apply_bump, registry_layers
from benchmarks.report import splice_marked
from gpurl_tasks.writer.records import slice_of

REPO_ROOT = Path(__file__).resolve().parent.parent
PROFILE = "heavy"
SOURCES = REPO_ROOT.parent / "shared" / "third_party"
DATA = REPO_ROOT / "benchmarks" / "data" / "kaniko-scale.json"
OUT = REPO_ROOT / "benchmarks" / "out"
REPORT = REPO_ROOT / "benchmarks" / "REPORT.md"
BEGIN, END = "<!-- kaniko-scale:begin -->", "<!-- kaniko-scale:end -->"
PLAIN = "127.0.0.1:5005"  # the heavy profile's registry; `--registry-port` moves it
BASE = "gpurl/bookworm-python:3.11"
JOB_IMAGE = "gpurl/kaniko-job:bookworm"
# the job's request before it was measured (the runbook's: kaniko snapshotted the environment)
RUNBOOK_MEMORY, RUNBOOK_DISK = "512GB", "400GB"
_STAMP = re.compile(r"INFO\S*\[(\d+)\] (.*)")
_COMPOSED = re.compile(r"==> environment \S+ \((\d+) slice\(s\) written, \d+ of them as their "
                       r"record's blob was gone; (\d+) cached[;)]")

__all__ = ["load_data", "main", "measure", "render_section", "slice_timings", "splice_section"]


def slice_timings(log: str) -> list[dict[str, Any]]:
    """Per slice RUN in kaniko's log: its label, install seconds (the command) and snapshot
    seconds (the filesystem walk after it, up to the layer push or the next instruction; the
    baseline snapshot a stage's first RUN takes before the command counts as install)."""
    events = [(int(m.group(1)), m.group(2)) for m in map(_STAMP.search, log.splitlines()) if m]
    ends = ("Pushing layer", "COPY ", "RUN ", "Storing", "Pushing image", "No files changed")
    rows: list[dict[str, Any]] = []
    for i, (start, text) in enumerate(events):
        found = slice_of(text) if text.startswith("RUN ") else None
        if found is None:
            continue
        end = next((j for j in range(i + 1, len(events)) if events[j][1].startswith(ends)), None)
        if end is None:
            continue
        snaps = [t for t, x in events[i + 1:end] if x.startswith("Taking snapshot of full")]
        if not snaps:
            continue
        rows.append({"slice": found.stem, "install_s": snaps[-1] - start,
                     "snapshot_s": events[end][0] - snaps[-1]})
    return rows


@contextlib.contextmanager
def _serve(directory: Path) -> Iterator[str]:
    """`directory` over HTTP on a free 127.0.0.1 port (crane's archive, as the release is)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _tree(dest: Path) -> Path:
    """The checkout's tracked files, committed in a fresh repository."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src, target = REPO_ROOT / name, dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), target)
        elif src.is_file():
            target.write_bytes(src.read_bytes())
            target.chmod(src.stat().st_mode)
    _commit(dest, "tree")
    return dest


def _commit(tree: Path, message: str) -> None:
    for argv in (["git", "init", "-q"], ["git", "add", "-A"],
                 ["git", "-c", "user.name=gpurl", "-c", "user.email=gpurl@localhost",
                  "commit", "-qm", message]):
        subprocess.run(argv, cwd=tree, check=True, capture_output=True)


def _invoke(tree: Path, *args: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=tree, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"invoke {' '.join(args)} failed: {done.stderr[-2000:]}")


def _configure(tree: Path, *, repository: str, executor: str, crane: tuple[str, str],
               snapshot: str = "full", one_layer: bool = False, env_source: str = "chain",
               registry: str = PLAIN) -> None:
    """The heavy profile as a cluster profile, built into `repository`."""
    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    start = text.index("[tool.gpurl.profiles.heavy]")
    end = text.index("\n[tool.gpurl.profiles.", text.index("[tool.gpurl.profiles.heavy.build]"))
    section = text[start:end]
    for old, new in (
        ('workspace = "examples/heavy"\nbackend = "local"',
         'workspace = "examples/heavy"\nbackend = "iris"'),
        (f'base-image = "{BASE}"',
         f'base-image = "{registry}/{BASE}"'),
        ('repository = "gpurl/heavy"', f'repository = "{repository}"'),
        (f'host = "{PLAIN}"', f'host = "{registry}"'),
        ('user = ""', 'user = "gpurl"'),
        ("[tool.gpurl.profiles.heavy.layers]\ncap = \"1GB\"",
         "[tool.gpurl.profiles.heavy.cluster]\n"
         f'kaniko-executor = "{executor}"\ncrane-url = "{crane[0]}"\n'
         f'crane-sha256 = "{crane[1]}"\nsnapshot-mode = "{snapshot}"\n'
         f'env-source = "{env_source}"\n\n'
         "[tool.gpurl.profiles.heavy.layers]\n"
         + ('cap = "100GB"\nown-layer = "100GB"\ntail-groups = 1' if one_layer
            else 'cap = "1GB"')),
    ):
        if old not in section:
            raise RuntimeError(f"the heavy profile has no {old!r} any more")
        section = section.replace(old, new, 1)
    pyproject.write_text(text[:start] + section + text[end:])
    _invoke(tree, "generate", "--profile", PROFILE, *(["--repack"] if one_layer else []))
    _commit(tree, f"heavy on kaniko into {repository}")


def _bump(tree: Path, say: Callable[[str], None]) -> None:
    """The small bump the local benchmark makes, in this tree: re-locked, its slice files
    regenerated (the committed plan kept, so only the bumped package's slice changes)."""
    from gpurl_tasks.config import load_config

    config = load_config(tree, profile=PROFILE, env={})
    say(f"bumped {apply_bump(config, config.workspace)} in {tree}")
    _invoke(tree, "generate", "--profile", PROFILE)
    _commit(tree, f"bump {' '.join(BUMP)}")


def _build(tree: Path, label: str, repository: str, say: Callable[[str], None],
           registry: str = PLAIN) -> dict[str, Any]:
    from gpurl_tasks.cluster.kaniko import job_files, render_script
    from gpurl_tasks.config import load_config
    from gpurl_tasks.local.builder import serving_index
    from gpurl_tasks.local.from_source import run_job
    from gpurl_tasks.local.setup import index_dir

    config = load_config(tree, profile=PROFILE, env={})
    before = registry_layers(registry, repository)
    gitsha = uuid.uuid4().hex[:7]
    say(f"==> {label}")
    start = time.monotonic()
    # what `invoke build` stages beside the tree's files, and the script it submits
    for name, data in job_files(config).items():
        (tree / name).parent.mkdir(parents=True, exist_ok=True)
        (tree / name).write_bytes(data)
    script = tree.parent / "build.sh"
    script.write_text(render_script(config))
    container = f"gpurl-kaniko-scale-{label}-{gitsha}"
    with (serving_index(config.build.index_url, index_dir(Path(os.environ["GPURL_CACHE_DIR"]))),
          JobSampler(container, tree) as sampled):
        code, output = run_job(tree, "/job/build.sh",
                               {"GITSHA": gitsha, "DOCKER_TOKEN": "unused-on-a-plain-registry"},
                               image=JOB_IMAGE, mounts={script: "/job/build.sh"}, timeout=5400,
                               name=container)
    seconds = round(time.monotonic() - start, 1)
    (OUT / f"kaniko-{label}.log").write_text(output)
    if code != 0:
        raise RuntimeError(f"{label}: the script failed: {output[-3000:]}")
    after = registry_layers(registry, repository)
    pushed = {d: s for d, s in after.items() if d not in before}
    from gpurl_tasks.imageref import parse_reference
    from gpurl_tasks.oci.registry import RegistryClient

    ref = parse_reference(f"{registry}/{repository}:{PROFILE}-{gitsha}", default_host=registry)
    with RegistryClient(registry, insecure=True) as client:
        image = client.pull(ref)
    resources = sampled.to_json()
    say(f"<== {label}: {seconds:.0f}s, {len(image.layers)} layers, {len(pushed)} new blobs, "
        f"peak memory {resources['peak_memory_bytes']} B, disk {resources['peak_disk_bytes']} B")
    return {"label": label, "seconds": seconds, "layers": len(image.layers),
            "image_bytes": sum(d.size for d in image.layers), "new_blobs": len(pushed),
            "new_bytes": sum(pushed.values()), "slices": slice_timings(output), **resources,
            "composed": [int(n) for n in found.groups()] if (found := _COMPOSED.search(output))
            else None}


PLANS = (  # label, executor, snapshot mode, one layer, env-source, repository key
    ("upstream-composed-cold", "upstream", "full", False, "composed", "e"),
    ("upstream-composed-warm", "upstream", "full", False, "composed", "e"),
    ("upstream-composed-bump", "upstream", "full", False, "composed", "e"),
    ("fork-composed-cold", "fork", "full", False, "composed", "f"),
    ("fork-composed-warm", "fork", "full", False, "composed", "f"),
    ("fork-composed-bump", "fork", "full", False, "composed", "f"),
    ("upstream-cold", "upstream", "full", False, "chain", "a"),
    ("fork-cold", "fork", "full", False, "chain", "b"),
    ("fork-warm", "fork", "full", False, "chain", "b"),
    ("fork-redo-cold", "fork", "redo", False, "chain", "c"),
    ("fork-one-layer-cold", "fork", "full", True, "chain", "d"),
)


def measure(say: Callable[[str], None] = print, only: frozenset[str] = frozenset(),
            registry: str = PLAIN) -> dict[str, Any]:
    os.environ.setdefault("GPURL_CACHE_DIR", str(REPO_ROOT / ".cache" / "gpurl-heavy"))
    from gpurl_tasks.config import load_config
    from gpurl_tasks.local.from_source import job_image, setup_kaniko
    from gpurl_tasks.local.setup import setup_local

    OUT.mkdir(parents=True, exist_ok=True)
    setup_local(load_config(REPO_ROOT, profile=PROFILE, env={},
                            overrides={"registry.host": registry}))
    builders = setup_kaniko(REPO_ROOT / ".cache" / "gpurl" / "builders", SOURCES, registry,
                            say=say)
    job_image(BASE, JOB_IMAGE)
    for argv in (["docker", "tag", BASE, f"{registry}/{BASE}"],
                 ["docker", "push", f"{registry}/{BASE}"]):
        subprocess.run(argv, check=True, capture_output=True)
    served = builders.crane_archive.parent
    run = uuid.uuid4().hex[:6]
    builds: list[dict[str, Any]] = []
    with _serve(served) as url:
        crane = (f"{url}/{builders.crane_archive.name}", builders.crane_sha256)
        for label, executor, snapshot, one_layer, env_source, repo_key in PLANS:
            if only and label not in only:
                continue
            repository = f"gpurl/kaniko-heavy-{run}-{repo_key}"
            tree = _tree(OUT / f"kaniko-tree-{run}-{label}")
            _configure(tree, repository=repository, executor=builders.executors[executor],
                       crane=crane, snapshot=snapshot, one_layer=one_layer,
                       env_source=env_source, registry=registry)
            if label.endswith("-bump"):
                _bump(tree, say)
            try:
                builds.append(_build(tree, label, repository, say, registry))
            except RuntimeError as exc:  # keep what the run measured; say what failed
                say(f"<== {label}: failed: {str(exc)[-300:]}")
                builds.append({"label": label, "failed": str(exc)[-300:]})
    return {"builds": builds, "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cpus": os.cpu_count()}


def _slice_summary(build: dict[str, Any]) -> str:
    rows = build.get("slices", [])
    if build.get("composed"):
        written, cached = build["composed"]
        return f"composed: {written} slice(s) written, {cached} cached"
    if not rows:
        return "no slice RUNs in the log"
    first, last = rows[0], rows[-1]
    snap = sum(r["snapshot_s"] for r in rows)
    return (f"{len(rows)} slice RUNs; snapshot {snap}s in all, first {first['snapshot_s']}s, "
            f"last {last['snapshot_s']}s; install {sum(r['install_s'] for r in rows)}s")


def render_section(data: dict[str, Any] | None) -> str:
    if not data:
        return f"{BEGIN}\n_No kaniko-scale run recorded yet (`nox -s bench-kaniko`)._\n{END}"
    by = {b["label"]: b for b in data["builds"] if "failed" not in b}
    lines = [BEGIN, f"Measured {data['measured_at']} on {data['cpus']} CPUs "
             "(`nox -s bench-kaniko`; the heavy profile, ~4 GB of wheels).", "",
             "| build | seconds | layers | image | new blobs | new bytes | slice RUNs |",
             "|---|---:|---:|---:|---:|---:|---|"]
    from gpurl_tasks.values import format_bytes

    failed = [b for b in data["builds"] if "failed" in b]
    for b in data["builds"]:
        if "failed" in b:
            lines.append(f"| {b['label']} | failed | | | | | see below |")
            continue
        lines.append(f"| {b['label']} | {b['seconds']:.0f} | {b.get('layers', '?')} | "
                     f"{format_bytes(b.get('image_bytes'))} | {b.get('new_blobs', '?')} | "
                     f"{format_bytes(b.get('new_bytes'))} | {_slice_summary(b)} |")
    ratios = []
    if "upstream-cold" in by and "fork-cold" in by:
        ratios.append(f"fork/upstream cold {by['fork-cold']['seconds'] / by['upstream-cold']['seconds']:.2f}")
    if "upstream-composed-cold" in by and "upstream-cold" in by:
        ratios.append("composed/chain cold "
                      f"{by['upstream-composed-cold']['seconds'] / by['upstream-cold']['seconds']:.2f}")
    if "upstream-composed-bump" in by and "upstream-composed-warm" in by:
        bump, warm = by["upstream-composed-bump"], by["upstream-composed-warm"]
        ratios.append(f"composed bump/rebuild with nothing changed {bump['seconds'] / warm['seconds']:.2f}")
    if "fork-redo-cold" in by and "fork-cold" in by:
        ratios.append(f"redo/full {by['fork-redo-cold']['seconds'] / by['fork-cold']['seconds']:.2f}")
    if "fork-one-layer-cold" in by and "fork-cold" in by:
        ratios.append("layered/one layer "
                      f"{by['fork-cold']['seconds'] / by['fork-one-layer-cold']['seconds']:.2f}")
    lines += ["", "Ratios (same run): " + ("; ".join(ratios) or "none (a build failed)") + "."]
    lines += _resources_table(data["builds"])
    lines += [f"\n{b['label']} failed: `{b['failed'].splitlines()[-1][:200]}`" for b in failed]
    if data.get("note"):  # the run's conditions, recorded with its figures
        lines += ["", str(data["note"])]
    lines.append(END)
    return "\n".join(lines)


def _resources_table(builds: list[dict[str, Any]]) -> list[str]:
    """The job container's peaks (benchmarks/job_resources.py) against the runbook's request."""
    from gpurl_tasks.values import format_bytes, parse_size

    measured = [b for b in builds if "peak_memory_bytes" in b]
    if not measured:
        return []
    memory = parse_size(RUNBOOK_MEMORY, binary_gb=True)
    disk = parse_size(RUNBOOK_DISK, binary_gb=True)
    lines = ["", f"The job's resources (its container's memory cgroup and disk; the runbook's "
             f"request {RUNBOOK_MEMORY} memory, {RUNBOOK_DISK} disk):", "",
             "| build | seconds | peak memory | working set | RSS | peak disk | "
             f"memory / {RUNBOOK_MEMORY} | disk / {RUNBOOK_DISK} |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for b in measured:
        lines.append(f"| {b['label']} | {b['seconds']:.0f} | {format_bytes(b['peak_memory_bytes'])}"
                     f" | {format_bytes(b.get('peak_working_set_bytes'))} | "
                     f"{format_bytes(b.get('peak_rss_bytes'))} | "
                     f"{format_bytes(b['peak_disk_bytes'])} | {b['peak_memory_bytes'] / memory:.3f}"
                     f" | {b['peak_disk_bytes'] / disk:.3f} |")
    return lines


def load_data(path: Path = DATA) -> dict[str, Any] | None:
    """The last run's figures (benchmarks/data/kaniko-scale.json), if any."""
    return json.loads(path.read_text()) if path.exists() else None


def splice_section(text: str, section: str) -> str:
    return splice_marked(text, section, begin=BEGIN, end=END, heading="Real kaniko at heavy scale")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.kaniko_scale", description=__doc__)
    parser.add_argument("--render", action="store_true",
                        help="re-render the REPORT.md section from benchmarks/data/kaniko-scale.json")
    parser.add_argument("--only", default="", help="comma-separated build labels to run: "
                        + ", ".join(p[0] for p in PLANS))
    parser.add_argument("--registry-port", type=int, default=int(PLAIN.rsplit(":", 1)[1]),
                        help="the loopback registry's port (started if none answers there), "
                             "so a run can leave the shared 5005 to other work")
    parser.add_argument("--data", type=Path, default=DATA,
                        help="the results file to write (and render from)")
    args = parser.parse_args(argv)
    only = frozenset(filter(None, args.only.split(",")))
    if only - {p[0] for p in PLANS}:
        print(f"error: --only names no such build: {', '.join(sorted(only - {p[0] for p in PLANS}))}",
              file=sys.stderr)
        return 2
    if not args.render:
        if not SOURCES.is_dir():
            print(f"error: no kaniko/crane source archives at {SOURCES}", file=sys.stderr)
            return 2
        data = measure(only=only, registry=f"127.0.0.1:{args.registry_port}")
        args.data.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    section = render_section(load_data(args.data))
    REPORT.write_text(splice_section(REPORT.read_text(), section))
    print(section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
