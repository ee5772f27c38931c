"""The layer tool's command line (stdlib only): env-base's python3 runs it, from the package
(`python3 -m gpurl_tasks.writer.tool`) or from the zipapp `invoke build` stages for the cluster
job (cluster/jobapp.py: this package's own module files; `python3 -B job.pyz SUBCOMMAND`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gpurl_tasks.writer.blob import LayerError, compressor, write_layer
from gpurl_tasks.writer.compiled import COMPILED_SLOT
from gpurl_tasks.writer.composition import compose, record_of_image
from gpurl_tasks.writer.job import CompiledWheels, JobInputs, run_compose_env, write_compiled_layer
from gpurl_tasks.writer.orchestration import ComposeError
from gpurl_tasks.writer.probe import probe
from gpurl_tasks.writer.records import (
    manifest_blobs,
    platform_of,
    read_document,
    recorded_history,
    slice_image,
    slice_keys,
    write_layout,
)
from gpurl_tasks.writer.retry import RetryRules

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpurl-layer", description=(
        "gpurl's slice writer and composition, run in env-base (an error is one line on "
        "stderr and exit 2)"))
    sub = parser.add_subparsers(dest="command", required=True)
    write = sub.add_parser("write", help="one layer blob; prints its Blob as JSON")
    image = sub.add_parser("image", help=(
        "a slice's one-layer record image as an OCI layout (its history entry names the cache "
        "tag --record); prints its Blob as JSON"))
    for each in (write, image):
        each.add_argument("source", type=Path)
        each.add_argument("output", type=Path)
        each.add_argument("--prefix", required=True)
        each.add_argument("--level", type=int, required=True)
    image.add_argument("--created-by", required=True)
    image.add_argument("--record", required=True)
    composed = sub.add_parser("compose", help=(
        "the environment image as an OCI layout of its manifest and config (its layers are "
        "the registry's already); prints its tag and the manifest's digest"))
    composed.add_argument("output", type=Path)
    composed.add_argument("--record", nargs=3, action="append", default=[],
                          metavar=("NAME", "MANIFEST", "CONFIG"),
                          help="a slice's record documents, in plan order")
    for each in (image, composed):
        each.add_argument("--base-manifest", type=Path, required=True)
        each.add_argument("--base-config", type=Path, required=True)
    probing = sub.add_parser("probe", help="what a slice's bytes depend on here, as JSON")
    keys = sub.add_parser("keys", help="each slice's cache tag, one `NN-label tag` line each")
    for each in (probing, keys):
        each.add_argument("--venv", required=True)
    keys.add_argument("--index", type=Path, required=True)
    keys.add_argument("--context", type=Path, required=True)
    keys.add_argument("--level", type=int, required=True)
    sub.add_parser("blobs", help="the blobs a manifest names (config, then layers)") \
        .add_argument("manifest", type=Path)
    compiled = sub.add_parser("compiled", help=(
        "the compiled wheels' layer (the wheels installed into the venv's place, their MANIFEST "
        "beside) written as WORK/compiled-wheels.tar.gz; prints its Blob as JSON"))
    compiled.add_argument("wheelhouse", type=Path, help="holds MANIFEST and each wheel")
    compiled.add_argument("work", type=Path)
    compiled.add_argument("--wheel", action="append", required=True,
                          help="a compiled wheel's file name in the wheelhouse")
    compiled.add_argument("--venv", required=True)
    compiled.add_argument("--level", type=int, required=True)
    env = sub.add_parser("compose-env", help=(
        "the cluster job's composition: the slices the cache lacks staged with uv, written and "
        "recorded, the environment composed and pushed with crane ($WORK/crane); its "
        "reference in $WORK/env-image"))
    for flag in ("--cache-repo", "--env-base", "--venv"):
        env.add_argument(flag, required=True)
    for flag in ("--work", "--context", "--slice-index"):
        env.add_argument(flag, type=Path, required=True)
    for flag in ("--level", "--retries", "--retry-max-wait"):
        env.add_argument(flag, type=int, required=True)
    env.add_argument("--prebuilt-wheelhouse", default="", help=(
        "the compiled wheels the job fetched (empty: none, or the build compiles them): "
        "written as one more layer"))
    env.add_argument("--compiled-wheel", action="append", default=[],
                     help="a compiled wheel's file name in the wheelhouse")
    return parser


def _compose_env(args: argparse.Namespace) -> int:
    compiled = CompiledWheels(wheelhouse=Path(args.prebuilt_wheelhouse),
                              wheels=tuple(args.compiled_wheel)) \
        if args.prebuilt_wheelhouse and args.compiled_wheel else None
    return run_compose_env(JobInputs(
        cache_repo=args.cache_repo, env_base=args.env_base, work=args.work, context=args.context,
        slice_index=args.slice_index, venv=args.venv, level=args.level,
        rules=RetryRules(attempts=args.retries + 1, max_wait=float(args.retry_max_wait)),
        compiled=compiled))


def _run(args: argparse.Namespace) -> str:
    if args.command == "write":
        blob = write_layer(args.source, args.output, prefix=args.prefix, level=args.level)
        return json.dumps({**blob.to_json(), "compressor": compressor(args.level)})
    if args.command == "probe":
        return json.dumps(probe(args.venv).to_json())
    if args.command == "keys":
        return "\n".join(f"{name} {tag}" for name, tag in slice_keys(
            args.index, args.context, venv=args.venv, level=args.level,
            found=probe(args.venv)))
    if args.command == "compiled":
        staged = write_compiled_layer(args.wheelhouse, args.wheel, venv=args.venv,
                                      work=args.work, name=COMPILED_SLOT, level=args.level)
        return json.dumps({**staged.blob.to_json(), "compressor": compressor(args.level)})
    if args.command == "blobs":
        return "\n".join(manifest_blobs(read_document(args.manifest, "the manifest")))
    manifest = read_document(args.base_manifest, "env-base's manifest")
    config = read_document(args.base_config, "env-base's config")
    if args.command == "compose":
        records = [record_of_image(name, read_document(Path(m), f"the record of {name}"),
                                   read_document(Path(c), f"the config of {name}'s record"))
                   for name, m, c in args.record]
        composition = compose(manifest, config, records)
        write_layout(args.output, composition.manifest, composition.config)
        return f"{composition.tag} {composition.digest}"
    args.output.mkdir(parents=True, exist_ok=True)
    written = args.output / "layer.tar.gz"
    blob = write_layer(args.source, written, prefix=args.prefix, level=args.level)
    record, record_config = slice_image(
        blob, media_type=str(manifest.get("mediaType")), platform=platform_of(config),
        created_by=recorded_history(args.created_by, args.record))
    write_layout(args.output, record, record_config, moved=(blob, written))
    return json.dumps(blob.to_json())


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "compose-env":
        return _compose_env(args)
    try:
        said = _run(args)
    except (LayerError, ComposeError, OSError) as exc:
        sys.stderr.write(f"gpurl-layer: {exc}\n")
        return 2
    sys.stdout.write(said + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
