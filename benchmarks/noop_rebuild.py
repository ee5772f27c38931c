"""The no-op rebuild's wall time (issue 51): a rebuild with no input changed, on the local path
and on real kaniko, against what the last release did for it, in one run (`nox -s bench-noop`,
never in CI; the demo profile, the loopback registry on 127.0.0.1:5005).

Why: the no-op (release/reuse.py) replaces a whole build with a registry lookup and one
manifest PUT; this measures what that saves where it matters, against the rebuild every
unchanged commit used to cost.

1. Local path (`invoke` in a committed copy of the checkout, its own repository): `invoke demo`
   (the first build, recorded by its inputs); a new commit of the same inputs; `invoke build`
   (the no-op: it must answer `reused` and run no step); the same with `--force` (the previous
   release's rebuild: BuildKit against its warm cache).
2. Real kaniko (the generated script in a job container, as kaniko_scale runs it, the inputs
   tag `invoke build` hands the job as INPUTS_TAG): a cold job; the same job again, warm (the
   previous release's rebuild: the executor against its cache); a new commit of the same inputs
   and `invoke build --backend iris` (the no-op: its lookup finds what the job recorded; a
   stand-in `iris` that fails means it never submitted).
Results: benchmarks/data/noop-rebuild.json and the "No-op rebuild" section of REPORT.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.kaniko_scale import BASE, JOB_IMAGE, PLAIN, SOURCES
from benchmarks.report import record_and_render, splice_marked

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA = REPO_ROOT / "benchmarks" / "data" / "noop-rebuild.json"
OUT = REPO_ROOT / "benchmarks" / "out"
REPORT = REPO_ROOT / "benchmarks" / "REPORT.md"
BEGIN, END = "<!-- noop-rebuild:begin -->", "<!-- noop-rebuild:end -->"
LOCAL_FLAGS = ("build", "--backend", "local", "--profile", "demo", "--wheel-source",
               "prebuilt-wheelhouse", "--json")
TOKEN = "unused-on-a-plain-registry"  # the loopback registry asks for none
Say = Callable[[str], None]

__all__ = ["load_data", "main", "measure", "render_section", "speedup", "splice_section"]


def speedup(noop_s: float, baseline_s: float) -> float:
    """How many times faster the no-op is than the rebuild it replaces (baseline / no-op)."""
    return round(baseline_s / noop_s, 1) if noop_s > 0 else float("inf")


def git(tree: Path, *args: str) -> str:
    argv = ["git", "-c", "user.name=gpurl", "-c", "user.email=gpurl@localhost", *args]
    return subprocess.run(argv, cwd=tree, check=True, capture_output=True, text=True).stdout.strip()


def edit_demo(tree: Path, edits: Mapping[str, str], message: str) -> None:
    """Replace each text once in the copy's pyproject.toml, regenerate, commit."""
    from tests.support.demo_tree import invoke

    pyproject = tree / "pyproject.toml"
    text = pyproject.read_text()
    for old, new in edits.items():
        if old not in text:
            raise RuntimeError(f"the demo profile has no {old!r} any more")
        text = text.replace(old, new, 1)
    pyproject.write_text(text)
    generated = invoke(tree, "generate", "--profile", "demo")
    if generated.returncode != 0:
        raise RuntimeError(f"generate failed: {generated.stderr[-2000:]}")
    git(tree, "add", "-A")
    git(tree, "commit", "-qm", message)


def _timed_invoke(tree: Path, *args: str, env: Mapping[str, str] | None = None,
                  ) -> tuple[float, dict[str, Any], str]:
    """`invoke ARGS --json` in the copy: (wall seconds, its JSON, its stderr); raises on failure."""
    from tests.support.demo_tree import invoke

    start = time.monotonic()
    done = invoke(tree, *args, env=env)
    seconds = round(time.monotonic() - start, 2)
    if done.returncode != 0:
        raise RuntimeError(f"invoke {' '.join(args)} failed: {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout), done.stderr


def measure_local(run: str, say: Say) -> dict[str, Any]:
    """The local path: first build, the no-op, then `--force` (the warm-cache rebuild)."""
    from tests.support.demo_tree import copy_tree

    tree = copy_tree(OUT / f"noop-local-{run}")
    repository = f"gpurl/noop-{run}"  # its own: no image another run recorded is found
    edit_demo(tree, {'repository = "gpurl/demo"': f'repository = "{repository}"'},
               f"demo into {repository}")
    say("==> local: invoke demo (the first build)")
    first_s, first, _ = _timed_invoke(tree, "demo", "--json")
    git(tree, "commit", "-q", "--allow-empty", "-m", "same inputs")
    say("==> local: invoke build, nothing changed (the no-op)")
    noop_s, noop, noop_err = _timed_invoke(tree, *LOCAL_FLAGS)
    if noop.get("reused") is not True or "<== " in noop_err or noop["digest"] != first["digest"]:
        raise RuntimeError(f"the no-op built: {noop} {noop_err[-2000:]}")
    say("==> local: invoke build --force (the previous release's rebuild)")
    force_s, forced, force_err = _timed_invoke(tree, *LOCAL_FLAGS, "--force")
    if "reused" in forced or "<== build + push:" not in force_err:
        raise RuntimeError(f"--force did not build: {forced}")
    say(f"<== local: first {first_s}s, no-op {noop_s}s, --force {force_s}s")
    return {"first_s": first_s, "noop_s": noop_s, "force_s": force_s,
            "speedup": speedup(noop_s, force_s), "digest": first["digest"],
            "inputs_tag": noop["inputs_tag"], "force_cached_steps": forced.get("cached_steps"),
            "first_cached_steps": first["build"].get("cached_steps"),
            "steps": forced.get("steps")}


@contextmanager
def served_parts(work: Path, say: Say, *, payload_bytes: int = 0
                 ) -> Iterator[tuple[Any, str, str]]:
    """The executors and crane (setup-kaniko from source archives), the job image, the base in
    the loopback registry, and crane's archive and the demo's compiled wheel (with the wheel
    dataset's MANIFEST; `payload_bytes` of incompressible stand-in kernels in it) served from
    127.0.0.1: (builders, crane url, wheel base url)."""
    from gpurl_tasks.local.from_source import job_image, setup_kaniko
    from tests.support.demo_tree import CACHE, demo_wheelhouse
    from tests.support.rangeserver import serve_files

    builders = setup_kaniko(CACHE / "builders", SOURCES, PLAIN, say=say)
    job_image(BASE, JOB_IMAGE)
    for argv in (["docker", "tag", BASE, f"{PLAIN}/{BASE}"], ["docker", "push", f"{PLAIN}/{BASE}"]):
        subprocess.run(argv, check=True, capture_output=True)
    served = work / "served"
    demo_wheelhouse(served / "wheels", work / "wheel", payload_bytes=payload_bytes)
    shutil.copy2(builders.crane_archive, served)
    with serve_files(served) as url:
        yield builders, f"{url}/{builders.crane_archive.name}", f"{url}/wheels"


def cluster_edits(repository: str, executor_ref: str, crane_url: str, crane_sha256: str,
                  wheel_url: str) -> dict[str, str]:
    """The demo as a cluster profile building into `repository`, everything on loopback: the
    executor and crane built here, the prebuilt wheel served at `wheel_url`."""
    return {
        'workspace = "examples/demo"\nbackend = "local"':
            'workspace = "examples/demo"\nbackend = "iris"',
        f'base-image = "{BASE}"': f'base-image = "{PLAIN}/{BASE}"',
        'repository = "gpurl/demo"': f'repository = "{repository}"',
        'floating-tag = "demo"\nuser = ""': 'floating-tag = "demo"\nuser = "gpurl"',
        "[tool.gpurl.profiles.demo.layers]":
            "[tool.gpurl.profiles.demo.cluster]\n"
            f'kaniko-executor = "{executor_ref}"\n'
            f'crane-url = "{crane_url}"\ncrane-sha256 = "{crane_sha256}"\n\n'
            "[tool.gpurl.profiles.demo.layers]",
        'wheel-source = "wheel-builder"':
            f'wheel-source = "prebuilt-wheelhouse"\nwheel-base-url = "{wheel_url}"',
    }


def job(tree: Path, gitsha: str, inputs_tag: str, label: str,
        script_edit: Callable[[str], str] = lambda text: text) -> tuple[float, str]:
    """The committed script in a job container, its bundle staged as `invoke build` stages it
    (`script_edit`: a benchmark's change to the rendered script, which it states): (wall
    seconds, the digest it pushed); raises on failure."""
    from gpurl_tasks.cluster.bundle import bundle_files, stage_workspace
    from gpurl_tasks.cluster.kaniko import job_files, render_script
    from gpurl_tasks.config import load_config
    from gpurl_tasks.git import ls_bundle_files
    from gpurl_tasks.local.builder import serving_index
    from gpurl_tasks.local.from_source import run_job
    from gpurl_tasks.local.setup import index_dir
    from tests.support.demo_tree import CACHE

    config = load_config(tree, profile="demo", env={})
    bundle = tree.parent / f"bundle-{label}"
    bundle.mkdir(parents=True)
    stage_workspace(tree, bundle_files(tree, ls_bundle_files), job_files(config), bundle)
    script = tree.parent / f"bundle-{label}.sh"
    script.write_text(script_edit(render_script(config)))
    commit = git(tree, "rev-parse", "HEAD")
    env = {"GITSHA": gitsha, "DOCKER_TOKEN": TOKEN, "DOCKER_USER_ID": config.registry.user,
           "GIT_COMMIT": commit, "JOB_NAME": f"gpurl-kaniko-{gitsha}", "INPUTS_TAG": inputs_tag}
    start = time.monotonic()
    with serving_index(config.build.index_url, index_dir(CACHE)):
        code, output = run_job(bundle, "/job/build.sh", env, image=JOB_IMAGE,
                               mounts={script: "/job/build.sh"}, timeout=1800,
                               name=f"gpurl-noop-{label}-{gitsha}")
    seconds = round(time.monotonic() - start, 2)
    (OUT / f"noop-kaniko-{label}.log").write_text(output)
    pushed = [line.rpartition("@")[2] for line in output.splitlines() if line.startswith("pushed ")]
    if code != 0 or len(pushed) != 1:
        raise RuntimeError(f"the {label} job failed: {output[-3000:]}")
    return seconds, pushed[0]


def measure_kaniko(run: str, executor: str, say: Say) -> dict[str, Any]:
    """Real kaniko: a cold job, the same job warm (the previous release's rebuild), then
    `invoke build --backend iris` after a new commit of the same inputs (the no-op)."""
    from gpurl_tasks.cluster import jobs
    from gpurl_tasks.config import load_config
    from gpurl_tasks.rebuild.inputs_key import inputs_tag
    from tests.support.demo_tree import copy_tree

    work = OUT / f"noop-kaniko-{run}-{executor}"
    with served_parts(work, say) as (builders, crane_url, wheel_url):
        tree = copy_tree(work / "tree")
        repository = f"gpurl/noop-kaniko-{run}-{executor}"
        edit_demo(tree, cluster_edits(repository, builders.executors[executor], crane_url,
                                      builders.crane_sha256, wheel_url),
                  f"demo on kaniko into {repository}")
        config = load_config(tree, profile="demo", env={})
        kube = work / "kubeconfig"
        kube.write_text(f"apiVersion: v1\nclusters:\n- name: {config.cluster.name}\n")
        # `invoke build`'s environment: a token, a kubeconfig, and an iris that fails, so a
        # build that did not find its image is an error here, never a submitted job
        env = {**os.environ, "GPURL_REGISTRY_TOKEN": TOKEN, "KUBECONFIG": str(kube),
               "GPURL_IRIS": shutil.which("false") or "/bin/false"}
        inputs = jobs._inputs(config, jobs.real_world(env), say, resolve_base=True)
        if inputs is None:
            raise RuntimeError("the inputs key could not be read")
        tag = inputs_tag(inputs.key)
        say(f"==> kaniko ({executor}): cold job, recording {tag}")
        cold_s, cold = job(tree, git(tree, "rev-parse", "--short", "HEAD"), tag,
                            f"{executor}-cold")
        say(f"==> kaniko ({executor}): the same job again, warm (the previous release's rebuild)")
        warm_s, warm = job(tree, uuid.uuid4().hex[:7], tag, f"{executor}-warm")
        git(tree, "commit", "-q", "--allow-empty", "-m", "same inputs")
        say(f"==> kaniko ({executor}): invoke build --backend iris, nothing changed (the no-op)")
        noop_s, noop, noop_err = _timed_invoke(tree, "build", "--backend", "iris", "--profile",
                                               "demo", "--json", env=env)
        # the tag names what the warm job pushed and recorded last
        if noop.get("reused") is not True or (noop.get("inputs_tag"), noop["digest"]) != (tag, warm):
            raise RuntimeError(f"the no-op did not reuse {tag}: {noop} {noop_err[-2000:]}")
    say(f"<== kaniko ({executor}): cold {cold_s}s, warm {warm_s}s, no-op {noop_s}s")
    return {"executor": executor, "executor_ref": builders.executors[executor],
            "cold_s": cold_s, "warm_s": warm_s, "noop_s": noop_s,
            "speedup": speedup(noop_s, warm_s), "cold_digest": cold, "warm_digest": warm,
            "inputs_tag": tag}


def measure(parts: frozenset[str], executors: tuple[str, ...], say: Say = print
            ) -> dict[str, Any]:
    """Both halves in one run (kaniko once per executor); a half that fails is recorded with
    its error."""
    from gpurl_tasks.config import load_config
    from gpurl_tasks.local.setup import setup_local

    OUT.mkdir(parents=True, exist_ok=True)
    setup_local(load_config(REPO_ROOT, profile="demo", env={}))
    run = uuid.uuid4().hex[:6]
    data: dict[str, Any] = {"measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                            "cpus": os.cpu_count(), "run": run}
    halves: dict[str, Callable[[], dict[str, Any]]] = {"local": lambda: measure_local(run, say)}
    for executor in executors:
        halves[f"kaniko-{executor}"] = functools.partial(measure_kaniko, run, executor, say)
    for name, step in halves.items():
        if name.partition("-")[0] not in parts:
            continue
        try:
            data[name] = step()
        except RuntimeError as exc:  # keep what the run measured; say what failed
            say(f"<== {name}: failed: {str(exc)[-500:]}")
            data[name] = {"failed": str(exc)[-500:]}
    return data


def _row(label: str, half: dict[str, Any], first: str, baseline: str, note: str) -> str:
    """One path's line: its first build, the no-op, the baseline and their ratio."""
    if "noop_s" not in half:
        return f"| {label} | {half.get('failed') or half.get('missing', 'not run')} | | | |"
    return (f"| {label} | {half[first]:.1f}s | {half['noop_s']:.1f}s | {half[baseline]:.1f}s "
            f"{note} | {half['speedup']}x |")


def render_section(data: dict[str, Any] | None) -> str:
    """The REPORT.md section, between its markers."""
    if not data:
        return f"{BEGIN}\n_No no-op rebuild run recorded yet (`nox -s bench-noop`)._\n{END}"
    kaniko = {k.partition("-")[2]: v for k, v in data.items() if k.startswith("kaniko-")}
    lines = [BEGIN, f"Measured {data['measured_at']} on {data['cpus']} CPUs (`nox -s bench-noop`;"
             " the demo profile, one run). The no-op is `invoke build` with no input changed "
             "(after a new commit): the inputs tag found, checked and the commit's tag put on "
             "its digest, no executor run. The baseline is what the previous release did for "
             "the same rebuild.", "",
             "| path | first build | no-op | baseline (previous release) | baseline / no-op |",
             "|---|---:|---:|---:|---:|"]
    if "local" in data:
        lines.append(_row("local (BuildKit; first: `invoke demo`)", data["local"], "first_s",
                          "force_s", "(`--force`, warm cache)"))
    lines += [_row(f"real kaniko, {name} (first: a cold job)", half, "cold_s", "warm_s",
                   "(the job again, warm cache)") for name, half in kaniko.items()]
    local = data.get("local", {})
    if "first_cached_steps" in local:
        lines += ["", f"Local: the first build found {local['first_cached_steps']} of "
                  f"{local['steps']} build steps in BuildKit's cache (an engine this machine's "
                  f"other work shares), `--force` {local['force_cached_steps']}."]
    if kaniko:
        lines += ["", "The kaniko times are the job container's wall time alone (no iris "
                  "submission or scheduling, which the no-op also saves); the no-op's is "
                  "`invoke build` for the cluster profile, whole, process start included. "
                  "Executors: " + ", ".join(f"{n} {h['executor_ref']}" for n, h in kaniko.items()
                                            if "executor_ref" in h) + "."]
    if data.get("note"):
        lines += ["", str(data["note"])]
    lines.append(END)
    return "\n".join(lines)


def load_data(path: Path = DATA) -> dict[str, Any] | None:
    """The last run's figures (benchmarks/data/noop-rebuild.json), if any."""
    return json.loads(path.read_text()) if path.exists() else None


def splice_section(text: str, section: str) -> str:
    return splice_marked(text, section, begin=BEGIN, end=END, heading="No-op rebuild: wall time")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.noop_rebuild", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--render", action="store_true",
                        help="re-render the REPORT.md section from the results file")
    parser.add_argument("--only", choices=("local", "kaniko"), default=None,
                        help="run one half (the other is recorded as not run)")
    parser.add_argument("--executors", default="upstream,fork",
                        help="comma-separated kaniko executors to time (setup-kaniko builds both)")
    parser.add_argument("--data", type=Path, default=DATA, help="the results file")
    args = parser.parse_args(argv)
    executors = tuple(filter(None, args.executors.split(",")))
    unknown = sorted(set(executors) - {"upstream", "fork"})
    if unknown or not executors:
        parser.error(f"--executors takes upstream and/or fork, comma-separated; got "
                     f"{args.executors!r}")
    measured = None
    if not args.render:
        parts = frozenset({args.only} if args.only else {"local", "kaniko"})
        if "kaniko" in parts and not SOURCES.is_dir():
            print(f"error: no kaniko/crane source archives at {SOURCES}", file=sys.stderr)
            return 2
        measured = measure(parts, executors)
    return record_and_render(parser, args.data, measured, REPORT, render=render_section,
                             splice=splice_section)


if __name__ == "__main__":
    raise SystemExit(main())
