"""Digest proof: the same pushed bytes before and after a change to the orchestration (issue 50).

`python -m benchmarks.digest_proof --before REF [--profile demo --profile heavy]` (never in CI:
it builds env-base, writes every slice and pushes several GB for the heavy profile). For each
side (REF in a detached worktree, and this tree) and each profile, a fresh loopback registry
(`docker-registry` on a free port, its storage in a temporary directory) receives what the
local path's `compose environment` step pushes (`local/actions.compose`: env-base built and
pushed, every slice staged and written in env-base, recorded, the environment composed), run
by that side's own code (`PYTHONPATH` and the working directory are its tree). Then every
pushed digest is read back from each registry and compared: env-base's image id and manifest,
each slice's blob and record manifest, each composed manifest and its config. A difference is
shown as the JSON paths where the two documents differ, so it can be told apart from a change
of bytes. Results: benchmarks/data/digest-proof.json and a table on stdout.

Each side's wheels come from the profile's own loopback index, filled once under
$GPURL_CACHE_DIR (default `.cache/gpurl-digest-<profile>`; `.cache/gpurl-heavy` for heavy, the
one `nox -s bench-heavy` fills) by setup-local's package-index step.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA = REPO_ROOT / "benchmarks" / "data" / "digest-proof.json"
PROFILES = ("demo", "heavy")
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json",
                  "application/vnd.docker.distribution.manifest.v2+json")

__all__ = ["DATA", "compare", "json_paths_differing", "main", "render_table"]


# --- the worker: one side's compose step, in that side's tree -------------------------------


def _worker(profile: str, out: Path) -> None:
    """Run in a side's tree (PYTHONPATH, cwd): compose each variant of `profile` with that
    side's code and write what it reports. Imports only what both sides have.

    The package index is held open around every variant and the report written inside that
    block: a build that serves the shared index keeps it up, when its block ends, for as long
    as another build on the machine uses it (pyindex.shared), and the parent reads the report
    without waiting for that."""
    import gpurl_tasks
    from gpurl_tasks.config import load_config
    from gpurl_tasks.dockerfile.generate import fitted_plan
    from gpurl_tasks.dockerfile.recipe import wheel_source_arg
    from gpurl_tasks.local import actions, builder
    from gpurl_tasks.local.setup import cache_dir, index_dir

    root = Path.cwd()
    if not Path(gpurl_tasks.__file__).resolve().is_relative_to(root.resolve()):
        raise SystemExit(f"error: gpurl_tasks imported from {gpurl_tasks.__file__}, not {root}")

    def say(line: str) -> None:
        print(line, file=sys.stderr)

    chosen = load_config(root, profile=profile)
    variants = {}
    with builder.serving_index(chosen.build.index_url, index_dir(cache_dir(root)), on_wait=say):
        for name in [v.name for v in chosen.variants]:
            # a profile without [variants] has one, named by the profile and chosen by None
            config = load_config(root, profile=profile,
                                 variant=name if len(chosen.variants) > 1 else None)
            args = {**wheel_source_arg(config, None), "GITSHA": "digest-proof"}
            composed, line = actions.compose(config, fitted_plan(config), git_sha="digest-proof",
                                             build_args=args, on_line=None, say=say)
            say(f"{profile}/{name}: {line}")
            variants[name] = composed.to_json()
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps(variants, indent=1))
        tmp.replace(out)


# --- the registry, read back -----------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _registry(storage: Path) -> Iterator[str]:
    """A fresh `docker-registry` on a free loopback port for the block: its host."""
    from gpurl_tasks.local.registry_server import RegistryPaths, start_registry

    port = _free_port()
    pid = start_registry(RegistryPaths(storage, port), port)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def _get(url: str, accept: Sequence[str] = ()) -> tuple[bytes, str]:
    request = urllib.request.Request(url, headers={"Accept": ", ".join(accept)} if accept else {})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.read(), response.headers.get("Docker-Content-Digest", "")


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _manifest(host: str, repository: str, reference: str) -> tuple[dict[str, Any], str]:
    data, _ = _get(f"http://{host}/v2/{repository}/manifests/{reference}", MANIFEST_TYPES)
    return json.loads(data), _sha256(data)


def read_back(host: str, composed: dict[str, Any]) -> dict[str, Any]:
    """Every digest one variant's compose step pushed, read from the registry (not from what
    the step reported)."""
    name, digest = composed["reference"].split("/", 1)[1].split("@")
    manifest, manifest_digest = _manifest(host, name, digest)
    config_bytes, _ = _get(f"http://{host}/v2/{name}/blobs/{manifest['config']['digest']}")
    slices = {}
    for outcome in composed["slices"]:
        repository, tag = outcome["reference"].split("/", 1)[1].rsplit(":", 1)
        record, record_digest = _manifest(host, repository, tag)
        slices[outcome["name"]] = {"blob": record["layers"][0]["digest"],
                                   "size": record["layers"][0]["size"],
                                   "reported_blob": outcome["blob"], "tag": tag,
                                   "record": record_digest, "written": outcome["built"]}
    cache = composed["slices"][0]["reference"].split("/", 1)[1].rsplit(":", 1)[0]
    base_tag = f"env-base-{composed['base_id'].removeprefix('sha256:')[:32]}"
    _, base_digest = _manifest(host, cache, base_tag)
    return {"env_base_id": composed["base_id"], "env_base_manifest": base_digest,
            "slices": slices, "manifest": manifest_digest, "config": _sha256(config_bytes),
            "tag": composed["tag"], "manifest_document": manifest,
            "config_document": json.loads(config_bytes)}


# --- one side ---------------------------------------------------------------------------------


def _cache_dir(profile: str) -> Path:
    named = {"heavy": "gpurl-heavy"}.get(profile, f"gpurl-digest-{profile}")
    return Path(os.environ.get("GPURL_CACHE_DIR") or REPO_ROOT / ".cache" / named).resolve()


def _fill_index(profile: str, cache: Path) -> str:
    """setup-local's package-index step (idempotent) for `profile`, with this tree's code."""
    from gpurl_tasks.config import load_config
    from gpurl_tasks.local.setup import package_index

    status, detail = package_index(load_config(REPO_ROOT, profile=profile), cache)
    return f"{status}: {detail}"


def run_side(tree: Path, profile: str, scratch: Path) -> dict[str, Any]:
    """`profile` composed by `tree`'s code into a fresh registry -> each variant read back."""
    cache = _cache_dir(profile)
    with _registry(scratch / "registry") as host:
        out = scratch / "composed.json"
        env = {**os.environ, "PYTHONPATH": str(tree), "GPURL_REGISTRY_HOST": host,
               "GPURL_CACHE_DIR": str(cache)}
        worker = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker",
                                   profile, str(out)], cwd=tree, env=env)
        while worker.poll() is None and not out.exists():
            time.sleep(2)
        if not out.exists():
            raise SystemExit(f"error: the compose step failed at {tree} ({profile})")
        if worker.poll() is None:
            print(f"{profile}: the worker (pid {worker.pid}) keeps the package index up for "
                  "another build on this machine, and exits when that build ends", file=sys.stderr)
        composed = json.loads(out.read_text())
        return {name: read_back(host, variant) for name, variant in composed.items()}


# --- comparison -------------------------------------------------------------------------------


def json_paths_differing(a: Any, b: Any, path: str = "") -> list[str]:
    """The paths (`history[3].created_by`) where two JSON documents differ, each with both
    values when they are scalars."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for key in sorted(a.keys() | b.keys())
                for p in (json_paths_differing(a.get(key), b.get(key), f"{path}.{key}")
                          if key in a and key in b else [f"{path}.{key}: only on one side"])]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True))
                for p in json_paths_differing(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {a!r} -> {b!r}"]


def compare(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per pushed digest: what it is, both digests, the same or not, and where the
    documents differ when they do."""
    rows: list[dict[str, Any]] = []

    def row(variant: str, item: str, x: str, y: str, diff: list[str] | None = None) -> None:
        rows.append({"variant": variant, "item": item, "before": x, "after": y,
                     "same": x == y, **({"differs_at": diff} if x != y and diff else {})})

    for variant in sorted(before.keys() | after.keys()):
        b, a = before.get(variant), after.get(variant)
        if b is None or a is None:
            rows.append({"variant": variant, "item": "variant", "same": False,
                         "differs_at": ["composed on one side only"]})
            continue
        row(variant, "env-base image id", b["env_base_id"], a["env_base_id"])
        row(variant, "env-base manifest", b["env_base_manifest"], a["env_base_manifest"])
        for name in sorted(b["slices"].keys() | a["slices"].keys()):
            sb, sa = b["slices"].get(name, {}), a["slices"].get(name, {})
            row(variant, f"slice {name} blob", sb.get("blob", "-"), sa.get("blob", "-"))
            row(variant, f"slice {name} record", sb.get("record", "-"), sa.get("record", "-"))
        row(variant, "composed manifest", b["manifest"], a["manifest"],
            json_paths_differing(b["manifest_document"], a["manifest_document"]))
        row(variant, "composed config", b["config"], a["config"],
            json_paths_differing(b["config_document"], a["config_document"]))
    return rows


def render_table(profiles: dict[str, list[dict[str, Any]]]) -> str:
    """Markdown: per profile and variant, how many of each kind of digest are the same."""
    lines = ["| profile | variant | env-base | slice blobs | slice records | composed manifest "
             "| composed config |", "|---|---|---|---|---|---|---|"]
    for profile, rows in profiles.items():
        for variant in dict.fromkeys(r["variant"] for r in rows):
            mine = [r for r in rows if r["variant"] == variant]

            def count(prefix: str, suffix: str = "", rows: list[dict[str, Any]] = mine) -> str:
                hit = [r for r in rows if r["item"].startswith(prefix) and r["item"].endswith(suffix)]
                return f"{sum(r['same'] for r in hit)}/{len(hit)} same"

            def one(item: str, rows: list[dict[str, Any]] = mine) -> str:
                found = next(r for r in rows if r["item"] == item)
                return ("same " if found["same"] else "DIFFERS ") + f"`{found['after'][7:19]}`"

            lines.append(f"| {profile} | {variant} | {count('env-base')} | "
                         f"{count('slice ', ' blob')} | {count('slice ', ' record')} | "
                         f"{one('composed manifest')} | {one('composed config')} |")
    return "\n".join(lines)


@contextlib.contextmanager
def _worktree(ref: str, given: Path | None) -> Iterator[tuple[Path, str]]:
    """`ref` checked out detached in a temporary worktree (or `given`): (its path, commit)."""
    if given is not None:
        yield given.resolve(), _commit(given, "HEAD")
        return
    commit = _commit(REPO_ROOT, ref)
    where = Path(tempfile.mkdtemp(prefix="gpurl-digest-before-"))
    subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "add", "--detach", str(where), commit],
                   check=True, capture_output=True)
    try:
        yield where, commit
    finally:
        subprocess.run(["git", "-C", str(REPO_ROOT), "worktree", "remove", "--force", str(where)],
                       check=False, capture_output=True)


def _commit(tree: Path, ref: str) -> str:
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--verify", "--quiet", ref],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: git cannot resolve {ref!r} in {tree} "
                         "(hint: --before takes a commit of this repository)")
    return done.stdout.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.digest_proof",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="the commit whose pushed bytes are the reference")
    parser.add_argument("--before-tree", type=Path, help="an existing checkout of --before")
    parser.add_argument("--profile", action="append",
                        help="profiles to compose (repeatable; default demo and heavy)")
    parser.add_argument("--output", type=Path, default=DATA)
    args = parser.parse_args(argv)
    profiles = args.profile or list(PROFILES)
    found: dict[str, Any] = json.loads(args.output.read_text()) if args.output.is_file() else {}
    results = found.get("profiles", {})
    with _worktree(args.before, args.before_tree) as (before_tree, before_commit):
        for profile in profiles:
            print(f"{profile}: index {_fill_index(profile, _cache_dir(profile))}", file=sys.stderr)
            sides = {}
            for side, tree in (("before", before_tree), ("after", REPO_ROOT)):
                with tempfile.TemporaryDirectory(prefix=f"gpurl-digest-{side}-") as scratch:
                    sides[side] = run_side(tree, profile, Path(scratch))
            rows = compare(sides["before"], sides["after"])
            results[profile] = {
                "before": before_commit, "after": _commit(REPO_ROOT, "HEAD"),
                # what each side ran: the package's tree (a commit on top that leaves it alone
                # ran the same code)
                "code": {"before": _commit(before_tree, "HEAD:gpurl_tasks"),
                         "after": _commit(REPO_ROOT, "HEAD:gpurl_tasks")},
                "written": {side: sum(s["written"] for v in got.values() for s in v["slices"].values())
                            for side, got in sides.items()},
                "rows": rows,
                "measured_at": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")}
    table = render_table({p: r["rows"] for p, r in results.items()})
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps({"profiles": results, "table": table}, indent=1) + "\n")
    tmp.replace(args.output)
    print(table)
    for profile, result in results.items():
        for r in result["rows"]:
            if not r["same"]:
                print(f"{profile} {r['variant']} {r['item']} differs at: "
                      + "; ".join(r.get("differs_at", ["(bytes)"])))
    return 0 if all(r["same"] for res in results.values() for r in res["rows"]) else 1


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        _worker(sys.argv[2], Path(sys.argv[3]))
    else:
        sys.exit(main())
