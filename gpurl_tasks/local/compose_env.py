"""The composed environment, locally: env-base built with BuildKit, each slice's layer written
by gpurl itself (local/stage.py, writer/blob.py), the image composed at the loopback registry
by manifest (writer/composition.py, which the cluster job runs too), then handed to the final
build as ENV_SOURCE.

1. build `env-base` and push it to the cache repository (`env-base-<image id>`);
2. per slice, its cache tag (`slice-<label>-<hash of what its blob depends on>`); only a
   slice the cache lacks is staged and written, in parallel, in containers of env-base, and
   its blob pushed and recorded there as a one-layer image under that tag;
3. env-base's layers and each slice's blob are mounted into the image's repository (no
   bytes move) and the composed manifest is written under `env-<hash>`;
4. the caller builds `rl` with `--build-arg ENV_SOURCE=<host/repo@digest>`.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpurl_tasks import proc
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.recipe import ENV_BASE_STAGE
from gpurl_tasks.errors import BuildError, RegistryError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.local import builder
from gpurl_tasks.local.builder import LineSink
from gpurl_tasks.local.composed import ComposedEnv, SliceOutcome
from gpurl_tasks.local.stage import (
    StageBuild,
    StagedSlice,
    probe_base,
    stage_command,
    stage_slice,
)
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import parse_manifest
from gpurl_tasks.oci.registry import ManifestUnknown, RegistryClient
from gpurl_tasks.plan.model import Layer, Plan
from gpurl_tasks.release.configured import cache_repository, client_settings
from gpurl_tasks.writer.blob import LayerError, compressor
from gpurl_tasks.writer.composition import Composition, Record, compose, record_of_image
from gpurl_tasks.writer.records import (
    MEDIA_TYPES,
    platform_of,
    recorded_history,
    slice_image,
    slice_key,
    written_history,
)
from gpurl_tasks.writer.staging import cross_platform

__all__ = ["Wanted", "compose_at_registry", "compose_commands", "compose_environment",
           "staging_platform"]

_WORKERS = max(1, min(4, (os.cpu_count() or 1)))  # slices are independent: stage in parallel


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Builds:
    """`docker build` of one stage of the generated Dockerfile, logged to its own file."""

    client: str
    dockerfile: Path
    context: Path
    build_args: Mapping[str, str]
    log_dir: Path
    on_line: LineSink | None

    def command(self, target: str, *, tags: tuple[str, ...] = (),
                iidfile: Path | None = None) -> list[str]:
        return builder.build_command(self.client, dockerfile=self.dockerfile,
                                     context=self.context, build_args=self.build_args,
                                     target=target, tags=tags, iidfile=iidfile)

    def run(self, target: str, *, tags: tuple[str, ...] = (), iidfile: Path | None = None,
            ) -> None:
        argv = self.command(target, tags=tags, iidfile=iidfile)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        builder.run_build(argv, self.on_line, self.log_dir / f"{target}.log")


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseDocuments:
    """env-base as the registry holds it: its manifest and config documents."""

    manifest: Mapping[str, Any]
    config: Mapping[str, Any]

    @property
    def media_type(self) -> str:
        return str(self.manifest.get("mediaType"))


def _env_base(registry: RegistryClient, ref: ImageRef) -> BaseDocuments:
    _, _, manifest = registry.manifest(ref)
    digest = parse_manifest(manifest, "manifest of env-base").config_digest
    base = BaseDocuments(manifest=manifest, config=registry.blob_json(ref, digest))
    if base.media_type not in MEDIA_TYPES:
        raise RegistryError(f"env-base's manifest is {base.media_type}, not a Docker or OCI "
                            "image manifest",
                            hint="build env-base again: a plain image manifest, not an index")
    return base


def _cached(registry: RegistryClient, ref: ImageRef, name: str) -> tuple[Record | None, bool]:
    """The slice its record holds, trusted only when the record's layer blob is there (a
    cleanup of the cache repository, or the registry, can keep a tag and lose its blob):
    (the slice, False); (None, True) for a record whose blob is gone, which is written again;
    (None, False) when there is no record."""
    if registry.lookup(ref) is None:
        return None, False
    _, _, manifest = registry.manifest(ref)
    digest = parse_manifest(manifest, f"manifest of cached slice {name}").config_digest
    try:
        record = record_of_image(name, manifest, registry.blob_json(ref, digest))
    except ManifestUnknown:  # its config is gone
        return None, True
    except LayerError as exc:
        raise RegistryError(str(exc),
                            hint="the cached slice's record is damaged: "
                                 "delete its tag from the cache repository, build again") from None
    if not registry.has_blob(ref, str(record.layer["digest"])):
        return None, True
    return record, False


def _check_blobs(registry: RegistryClient, target: ImageRef, composed: Composition,
                 names: Mapping[str, str]) -> None:
    """Every blob the composed manifest names is in `target`'s repository, before the
    manifest is written: a registry that does not check would take a manifest no node can
    pull. `names` says which slice a layer digest is."""
    missing = [names.get(d, f"layer {i} ({d[:19]})")
               for i, d in enumerate(composed.layers) if not registry.has_blob(target, d)]
    if not registry.has_blob(target, composed.config_digest):
        missing.append(f"the config ({composed.config_digest[:19]})")
    if missing:
        raise BuildError(f"the composed environment names blobs {target.host}/"
                         f"{target.repository} does not hold: {', '.join(missing)}; its "
                         "manifest is not written",
                         hint="run the build again: a slice whose blob is gone is written anew")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Wanted:
    """One slice of the plan: its layer, its file here and its cache tag."""

    layer: Layer
    path: Path  # the slice file on this machine
    ref: ImageRef  # its cache tag


def compose_commands(config: Config, plan: Plan, *, client: str, dockerfile: Path,
                     context: Path, build_args: Mapping[str, str]) -> tuple[tuple[str, ...], ...]:
    """What `compose_environment` runs at most, for a dry run: env-base's build and push, then
    each slice's staging container. Only a slice its cache tag lacks is written; the tags and
    env-base's id are known once env-base is built, so they are shown as <placeholders>."""
    builds = _Builds(client=client, dockerfile=dockerfile, context=context,
                     build_args=dict(build_args), log_dir=Path(), on_line=None)
    base = f"{cache_repository(config)}:env-base-<image id>"
    commands = [builds.command(ENV_BASE_STAGE, iidfile=Path("<env-base.iid>")),
                [client, "tag", "<image id>", base], builder.push_command(client, base)]
    staging = stage_builds(config, plan)
    commands += [stage_command(client, image="<image id>", slice_file=layer.slice.path(config.variant),
                               dest=layer.slice.image_path, out_dir=Path("<out>"),
                               output=f"{layer.name}.tar.gz", venv=config.build.venv,
                               level=config.layers.slice_gzip_level,
                               build=staging.get(layer.name), hashed=layer.hashed)
                 for layer in plan.layers]
    return tuple(tuple(argv) for argv in commands)


def stage_builds(config: Config, plan: Plan) -> dict[str, StageBuild]:
    """The slices staged on the slices below them (the lock's build settings), by NN-label."""
    layers = {layer.name: layer for layer in plan.layers}
    return {build.name: StageBuild(lower=tuple((layers[n].slice.path(config.variant),
                                                layers[n].slice.image_path) for n in build.lower),
                                   no_isolation=build.no_isolation)
            for build in plan.builds}


def staging_platform(config: Config, machine: str) -> str | None:
    """uv's --python-platform for staging this variant's slices on `machine` (the staging
    image's, from its probe), None when it is the target's own (writer/staging.py)."""
    try:
        return cross_platform(arch=config.target.arch, glibc=config.target.glibc,
                              machine=machine)
    except ValueError as exc:
        raise BuildError(f"{config.variant.name}'s slices cannot be staged on {machine}: {exc}",
                         hint="set target.glibc to one uv names, or write them on an "
                              f"{config.target.arch} builder") from None


def compose_environment(config: Config, plan: Plan, *, client: str, dockerfile: Path,
                        context: Path, build_args: Mapping[str, str], log_dir: Path,
                        on_line: LineSink | None = None) -> ComposedEnv:
    """Write the missing slice layers, compose the environment at the registry, return it.
    The package index must be served for the duration (the caller's `serving_index`)."""
    start = time.monotonic()
    staging = stage_builds(config, plan)
    builds = _Builds(client=client, dockerfile=dockerfile, context=context,
                     build_args=dict(build_args), log_dir=log_dir, on_line=on_line)
    cache = parse_reference(cache_repository(config), default_host=config.registry.host,
                            bare=True)
    target = parse_reference(config.registry.image, default_host=config.registry.host, bare=True)
    level = config.layers.slice_gzip_level
    with tempfile.TemporaryDirectory(prefix="gpurl-env-") as tmp:
        iidfile = Path(tmp) / "env-base.iid"
        builds.run(ENV_BASE_STAGE, iidfile=iidfile)
        base_id = iidfile.read_text().strip()
        base_ref = dataclasses.replace(cache, tag=f"env-base-{base_id.removeprefix('sha256:')[:32]}",
                                       digest=None)
        proc.run_quiet([client, "tag", base_id, str(base_ref)])
        builder.push_image(client, str(base_ref))
        probe = probe_base(client, base_id, config.build.venv)
        compressor_id = compressor(level, probe.zlib)
        platform = staging_platform(config, probe.machine)
        with open_client(client_settings(config), cache, on_retry=on_line) as registry:
            base = _env_base(registry, base_ref)
            wanted = []
            for layer in plan.layers:
                path = layer.slice.path(config.variant)
                text = read_text(path, what="slice file", error=BuildError).encode()
                tag = slice_key(label=layer.label, slice_text=text,
                                created_by=written_history(layer.slice.image_path,
                                                           config.build.venv,
                                                           hashed=layer.hashed),
                                python=probe.python, venv=config.build.venv, uv=probe.uv,
                                compressor=compressor_id, arch=config.target.arch)
                wanted.append(Wanted(layer=layer, path=path,
                                     ref=dataclasses.replace(cache, tag=tag, digest=None)))

            def stage(w: Wanted) -> StagedSlice:
                return stage_slice(client, image=base_id, slice_file=w.path,
                                   dest=w.layer.slice.image_path, out_dir=Path(tmp),
                                   name=w.layer.name, venv=config.build.venv, level=level,
                                   build=staging.get(w.layer.name), platform=platform,
                                   hashed=w.layer.hashed)

            outcomes, tag, digest = compose_at_registry(
                registry, cache=cache, target=target, base=base, wanted=wanted, stage=stage,
                venv=config.build.venv, log_dir=log_dir)
    return ComposedEnv(reference=f"{target.name}@{digest}", tag=tag, base_id=base_id,
                       slices=outcomes, seconds=time.monotonic() - start)


def compose_at_registry(registry: RegistryClient, *, cache: ImageRef, target: ImageRef,
                        base: BaseDocuments, wanted: Sequence[Wanted],
                        stage: Callable[[Wanted], StagedSlice], venv: str, log_dir: Path
                        ) -> tuple[tuple[SliceOutcome, ...], str, str]:
    """The registry half of a composition: reuse each slice whose record (and its blob) is
    there, `stage` and record the others in parallel, compose them onto `base` in `target`'s
    repository once every blob is there -> (each slice's outcome, the tag, its digest). A run
    stopped at any step leaves only complete records (a record's manifest is written after
    its blobs), which the next run reuses."""
    records = {w.layer.name: _cached(registry, w.ref, w.layer.name) for w in wanted}
    found = {name: record for name, (record, _) in records.items()}
    lost = {name for name, (_, gone) in records.items() if gone}
    missing = [w for w in wanted if found[w.layer.name] is None]
    staged: dict[str, StagedSlice] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=_WORKERS) as pool:
        jobs = {pool.submit(stage, w): w for w in missing}
        for job in concurrent.futures.as_completed(jobs):
            w = jobs[job]
            done = job.result()
            staged[w.layer.name] = done
            found[w.layer.name] = _record(registry, w, done, base, venv)
            done.path.unlink()
            _write_log(log_dir, w.layer.name, done)
    slices = [record for w in wanted if (record := found[w.layer.name]) is not None]
    if len(slices) != len(wanted):
        raise BuildError(f"{len(wanted) - len(slices)} slice(s) have no record after writing: "
                         "the environment is not composed without them",
                         hint="the slice logs above say which failed; build again")
    try:
        composed = compose(base.manifest, base.config, slices)
    except LayerError as exc:
        raise RegistryError(str(exc),
                            hint="a slice record does not fit env-base: delete the slice tags from the "
                                 "cache repository, build again") from None
    for blob in composed.layers:
        registry.mount_blob(target, blob, cache.repository)
    registry.push_blob(target, composed.config)
    _check_blobs(registry, target, composed,
                 {str(s.layer["digest"]): f"slice {s.name}" for s in slices})
    digest = registry.put_manifest(target, composed.tag, composed.manifest, composed.media_type)
    outcomes = tuple(
        SliceOutcome(name=w.layer.name, reference=str(w.ref), built=w.layer.name in staged,
                     blob=str(s.layer["digest"]), size=int(s.layer["size"]),
                     seconds=staged[w.layer.name].seconds if w.layer.name in staged else 0.0,
                     rewritten=w.layer.name in lost)
        for w, s in zip(wanted, slices, strict=True))
    return outcomes, composed.tag, digest


def _record(registry: RegistryClient, wanted: Wanted, done: StagedSlice,
            base: BaseDocuments, venv: str) -> Record:
    """Push a written slice's blob and its one-layer image under its cache tag."""
    assert wanted.ref.tag is not None
    registry.push_blob(wanted.ref, done.path, done.blob.digest)
    created_by = recorded_history(written_history(wanted.layer.slice.image_path, venv,
                                                  hashed=wanted.layer.hashed),
                                  wanted.ref.tag)
    manifest, config = slice_image(done.blob, created_by=created_by, media_type=base.media_type,
                                   platform=platform_of(dict(base.config)))
    registry.push_blob(wanted.ref, config)
    registry.put_manifest(wanted.ref, wanted.ref.tag, manifest, base.media_type)
    return record_of_image(wanted.layer.name, json.loads(manifest), json.loads(config))


def _write_log(log_dir: Path, name: str, done: StagedSlice) -> None:
    write_atomic(log_dir / f"slice-{name}.log",
                 f"{done.log}\nwrote {done.blob.digest} ({done.blob.size:,} bytes) "
                 f"in {done.seconds:.1f}s\n")
