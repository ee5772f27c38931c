"""What a rebuild pushes of the whole image (issue 51), on real kaniko, with compiled wheels of
a realistic size (`nox -s bench-whole-image`, never in CI; the demo profile as a cluster
profile, the loopback registry on 127.0.0.1:5005).

The stand-in for the compiled wheels: the demo's own compiled wheel with one more file of
incompressible bytes in it (`--compiled-mb`, 300 by default: the order of the vLLM fork and
flash-attn wheels installed), fetched by the job as the prebuilt wheels are. Both arms run
the generated script in a job container (as noop_rebuild and kaniko_scale run it), each into
a repository of its own, in one run:

- `written`: today's job. The compiled wheels are a layer the composition writes, keyed by
  their MANIFEST; the rl stage is FROM the composed environment. Builds: cold; the same
  inputs again (the executor run all the same: the `--force` rebuild); a code change; a
  one-package lock bump (pycparser 3.12 -> 3.11, one slice file changes).
- `copied`: the baseline, the previous release's final stage: the composition writes no
  compiled layer and the rl stage is FROM `env-compiled`, whose COPY of the compiled tree is
  keyed on the environment image (the job script rendered without its `--compiled-wheel`
  words, which is exactly what the previous release's script did), and the post-installs
  are not pinned (no post-install.pins: resolved by a RUN after the final sync, as that
  release did). Builds: cold; the bump.

For each build: wall time, the image's layers and bytes, and the layer blobs that are new
against the build before it (what a push uploads and a node pulls again), the compiled
layer's among them. The floor of a bump is the changed slice's blob. Results:
benchmarks/data/whole-image.json and the "Whole-image re-push" section of REPORT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.kaniko_scale import PLAIN, SOURCES
from benchmarks.noop_rebuild import cluster_edits, edit_demo, git, job, served_parts
from benchmarks.report import record_and_render, splice_marked

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA = REPO_ROOT / "benchmarks" / "data" / "whole-image.json"
OUT = REPO_ROOT / "benchmarks" / "out"
REPORT = REPO_ROOT / "benchmarks" / "REPORT.md"
BEGIN, END = "<!-- whole-image:begin -->", "<!-- whole-image:end -->"
# the compiled layer, as either arm's history names it: the written layer's install of the
# fetched wheels, or the COPY of the compiled stage's tree
COMPILED = re.compile(r"/tmp/wheels/gpurl_demo_ext-|COPY --from=\S+ /tmp/gpurl-compiled/ /")
Say = Callable[[str], None]

__all__ = ["COMPILED", "bump_ratio", "load_data", "main", "measure", "new_layers",
           "render_section", "splice_section", "unpinned"]


def without_compiled_layer(script: str) -> str:
    """The job script as the previous release rendered it for the final stage: its composing
    step names no compiled wheel, so the composition writes no compiled layer and the final
    build takes no COMPILED_SOURCE (the rl stage is FROM env-compiled)."""
    edited = re.sub(r" --compiled-wheel \S+", "", script)
    if edited == script:
        raise RuntimeError("the job script names no --compiled-wheel any more")
    return edited


def unpinned(tree: Path) -> None:
    """The tree as the previous release built it: no post-install pins, so the post-installs
    are resolved by a RUN after the final sync (regenerated and committed)."""
    from tests.support.demo_tree import invoke

    pins = sorted(tree.glob("docker/layers/demo/**/post-install.pins"))
    if not pins:
        raise RuntimeError("the demo has no post-install.pins any more")
    for path in pins:
        path.unlink()
    done = invoke(tree, "generate", "--profile", "demo")
    if done.returncode != 0:
        raise RuntimeError(f"generate without the pins failed: {done.stderr[-2000:]}")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", "the post-installs resolved at build time")


def new_layers(layers: list[dict[str, Any]], before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The layers of an image whose blob the image before it did not have."""
    held = {layer["digest"] for layer in before}
    return [layer for layer in layers if layer["digest"] not in held]


def bump_ratio(new_bytes: int, floor_bytes: int) -> float:
    """A bump's re-push against its floor (the changed slice's blob)."""
    return round(new_bytes / floor_bytes, 1) if floor_bytes else float("inf")


def _image_layers(repository: str, digest: str) -> list[dict[str, Any]]:
    """Each layer of the pushed image: digest, size and the history entry that made it."""
    from gpurl_tasks.imageref import parse_reference
    from gpurl_tasks.oci.registry import RegistryClient
    from gpurl_tasks.release.verify import layer_instructions
    from gpurl_tasks.writer.records import slice_of

    ref = parse_reference(f"{PLAIN}/{repository}@{digest}", default_host=PLAIN)
    with RegistryClient(PLAIN, insecure=True) as client:
        image = client.pull(ref)
    instructions, _ = layer_instructions(image)
    return [{"digest": d.digest, "size": d.size, "instruction": (text or "")[:120],
             "compiled": bool(COMPILED.search(text or "")),
             "slice": bool((entry := slice_of(text)) and entry.written)}
            for d, text in zip(image.layers, instructions, strict=True)]


def _code_change(tree: Path) -> None:
    code = tree / "examples" / "demo" / "src" / "gpurl_demo" / "__init__.py"
    code.write_text(code.read_text() + "# a code change\n")
    git(tree, "commit", "-qam", "a code change")


def _bump(tree: Path) -> None:
    from tests.support.demo_tree import BUMPED, invoke, relock

    done = invoke(tree, "fill-index", "--profile", "demo", "--pins", BUMPED)
    if done.returncode != 0:
        raise RuntimeError(f"fill-index failed: {done.stderr[-2000:]}")
    relock(tree, ("dependencies = [", f'dependencies = [\n  "{BUMPED}",'),
           upgrade=BUMPED.split("==")[0])


STEPS: dict[str, Callable[[Path], None] | None] = {
    "cold": None, "same inputs": None, "code change": _code_change, "bump": _bump}
ARMS = {"written": ("cold", "same inputs", "code change", "bump"), "copied": ("cold", "bump")}


def measure_arm(arm: str, run: str, executor: str, served: tuple[Any, str, str],
                work: Path, say: Say) -> list[dict[str, Any]]:
    from tests.support.demo_tree import copy_tree

    builders, crane_url, wheel_url = served
    tree = copy_tree(work / f"tree-{executor}-{arm}")
    repository = f"gpurl/whole-{run}-{executor}-{arm}"
    edit_demo(tree, cluster_edits(repository, builders.executors[executor], crane_url,
                                  builders.crane_sha256, wheel_url),
              f"demo on kaniko into {repository}")
    if arm == "copied":
        unpinned(tree)
    edit = without_compiled_layer if arm == "copied" else (lambda text: text)
    builds: list[dict[str, Any]] = []
    before: list[dict[str, Any]] = []
    for step in ARMS[arm]:
        change = STEPS[step]
        if change is not None:
            change(tree)
        say(f"==> {executor} {arm}: {step}")
        label = f"{executor}-{arm}-{step.replace(' ', '-')}"
        seconds, digest = job(tree, uuid.uuid4().hex[:7], "", label, script_edit=edit)
        layers = _image_layers(repository, digest)
        fresh = new_layers(layers, before) if before else layers
        compiled = [layer for layer in layers if layer["compiled"]]
        changed_slices = [layer for layer in fresh if layer["slice"]]
        build = {"arm": arm, "step": step, "seconds": seconds, "digest": digest,
                 "layers": len(layers), "image_bytes": sum(x["size"] for x in layers),
                 "new_blobs": len(fresh), "new_bytes": sum(x["size"] for x in fresh),
                 "compiled_bytes": sum(x["size"] for x in compiled),
                 "compiled_new": any(x in fresh for x in compiled),
                 "slice_bytes": sum(x["size"] for x in changed_slices), "new": fresh}
        say(f"<== {executor} {arm} {step}: {seconds:.0f}s, {build['new_blobs']} new blob(s), "
            f"{build['new_bytes']:,} of {build['image_bytes']:,} bytes; compiled layer "
            f"{'pushed' if build['compiled_new'] else 'kept'}")
        builds.append(build)
        before = layers
    return builds


def measure(executors: tuple[str, ...], compiled_mb: int, say: Say = print) -> dict[str, Any]:
    from gpurl_tasks.config import load_config
    from gpurl_tasks.local.setup import setup_local
    from tests.support.demo_tree import CACHE

    os.environ.setdefault("GPURL_CACHE_DIR", str(CACHE))
    OUT.mkdir(parents=True, exist_ok=True)
    setup_local(load_config(REPO_ROOT, profile="demo", env={}))
    run = uuid.uuid4().hex[:6]
    data: dict[str, Any] = {"measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                            "cpus": os.cpu_count(), "run": run, "compiled_mb": compiled_mb,
                            "builds": []}
    work = OUT / f"whole-image-{run}"
    with served_parts(work, say, payload_bytes=compiled_mb * 1_000_000) as served:
        for executor in executors:
            for arm in ARMS:
                try:
                    builds = measure_arm(arm, run, executor, served, work, say)
                except RuntimeError as exc:  # keep what the run measured; say what failed
                    say(f"<== {executor} {arm}: failed: {str(exc)[-500:]}")
                    builds = [{"arm": arm, "failed": str(exc)[-500:]}]
                data["builds"] += [{"executor": executor, **b} for b in builds]
    return data


def render_section(data: dict[str, Any] | None) -> str:
    """The REPORT.md section, between its markers."""
    if not data:
        return f"{BEGIN}\n_No whole-image run recorded yet (`nox -s bench-whole-image`)._\n{END}"
    lines = [BEGIN, f"Measured {data['measured_at']} on {data['cpus']} CPUs (`nox -s "
             f"bench-whole-image`; the demo profile on real kaniko, its compiled wheel carrying "
             f"{data['compiled_mb']} MB of incompressible stand-in kernels). New blobs are the "
             "image's layer blobs the build before it did not have: what the push uploads and "
             "every node pulls again. `written`: the compiled wheels are a layer the "
             "composition writes, keyed by their MANIFEST, and the post-installs a pinned slice "
             "(today); `copied`: the previous release's final stage, which copies the compiled "
             "tree onto the environment and resolves the post-installs in a RUN after the "
             "final sync.", "",
             "| executor | arm | build | seconds | new blobs | new bytes | share of the image "
             "| compiled layer | bump / changed slice |",
             "|---|---|---|---:|---:|---:|---:|---|---:|"]
    for b in data["builds"]:
        if "failed" in b:
            lines.append(f"| {b['executor']} | {b['arm']} | failed: {b['failed'][:120]} "
                         "| | | | | | |")
            continue
        share = b["new_bytes"] / b["image_bytes"] if b["image_bytes"] else 0.0
        compiled = ("new" if b["compiled_new"] else "kept") if b["step"] != "cold" else \
            f"{b['compiled_bytes']:,} B"
        ratio = f"{bump_ratio(b['new_bytes'], b['slice_bytes'])}x" \
            if b["step"] == "bump" else ""
        lines.append(f"| {b['executor']} | {b['arm']} | {b['step']} | {b['seconds']:.0f} | "
                     f"{b['new_blobs']} | {b['new_bytes']:,} | {share:.2%} | {compiled} | "
                     f"{ratio} |")
    bumps = {(b["executor"], b["arm"]): b for b in data["builds"]
             if b.get("step") == "bump"}
    for executor in dict.fromkeys(b["executor"] for b in data["builds"]):
        written, copied = bumps.get((executor, "written")), bumps.get((executor, "copied"))
        if written and copied and written["new_bytes"]:
            lines += ["", f"{executor}: the bump re-pushes {written['new_bytes']:,} bytes "
                      f"against the previous release's {copied['new_bytes']:,} "
                      f"({copied['new_bytes'] / written['new_bytes']:.1f}x less)."]
    if data.get("note"):
        lines += ["", str(data["note"])]
    lines.append(END)
    return "\n".join(lines)


def load_data(path: Path = DATA) -> dict[str, Any] | None:
    """The last run's figures (benchmarks/data/whole-image.json), if any."""
    return json.loads(path.read_text()) if path.exists() else None


def splice_section(text: str, section: str) -> str:
    return splice_marked(text, section, begin=BEGIN, end=END, heading="Whole-image re-push")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.whole_image", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render", action="store_true",
                        help="re-render the REPORT.md section from the results file")
    parser.add_argument("--executors", default="upstream",
                        help="comma-separated kaniko executors (upstream, fork)")
    parser.add_argument("--compiled-mb", type=int, default=300,
                        help="the stand-in kernels' size in the compiled wheel, in MB")
    parser.add_argument("--data", type=Path, default=DATA, help="the results file")
    args = parser.parse_args(argv)
    executors = tuple(filter(None, args.executors.split(",")))
    if not executors or set(executors) - {"upstream", "fork"}:
        parser.error(f"--executors takes upstream and/or fork, comma-separated; got "
                     f"{args.executors!r}")
    if args.compiled_mb < 1:
        parser.error("--compiled-mb must be 1 or more")
    measured = None
    if not args.render:
        if not SOURCES.is_dir():
            print(f"error: no kaniko/crane source archives at {SOURCES}", file=sys.stderr)
            return 2
        measured = measure(executors, args.compiled_mb)
    return record_and_render(parser, args.data, measured, REPORT, render=render_section,
                             splice=splice_section)


if __name__ == "__main__":
    raise SystemExit(main())
