"""The composed environment, locally: env-base built with BuildKit, each slice's layer written
by gpurl itself (local/stage.py, writer/blob.py), the image composed at the loopback registry
by manifest (writer/composition.py, through writer/orchestration.py with gpurl's client: the
cluster job runs both with crane), then handed to the final build as ENV_SOURCE.

1. build `env-base` and push it to the cache repository (`env-base-<image id>`);
2. per slice, its cache tag (`slice-<label>-<hash of what its blob depends on>`); only a
   slice the cache lacks is staged and written, in parallel, in containers of env-base, and
   its blob pushed and recorded there as a one-layer image under that tag;
3. with prebuilt compiled wheels, their layer likewise (`slice-compiled-wheels-<hash of
   the MANIFEST and the install>`, written in a container of env-base as the cluster job
   writes it: writer/compiled.py);
4. env-base's layers and each layer's blob are mounted into the image's repository (no
   bytes move) and the composed manifest is written under `env-<hash>`;
5. the caller builds `rl` with `--build-arg ENV_SOURCE=<host/repo@digest>` (and
   `COMPILED_SOURCE=env` when the compiled layer is in it).
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

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
    compiled_command,
    probe_base,
    stage_command,
    stage_compiled,
    stage_slice,
)
from gpurl_tasks.oci.composing import ClientRegistry
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.plan.model import Layer, Plan
from gpurl_tasks.release.configured import cache_repository, client_settings
from gpurl_tasks.writer.blob import LayerError, compressor
from gpurl_tasks.writer.job import CompiledWheels, compiled_wheels_slot
from gpurl_tasks.writer.orchestration import (
    BaseDocuments,
    BlobsMissing,
    ComposeError,
    SliceFailures,
    Slot,
    compose_env,
    read_base,
)
from gpurl_tasks.writer.records import Probe, slice_key, written_history
from gpurl_tasks.writer.staging import cross_platform

__all__ = ["BaseDocuments", "CompiledLayer", "CompiledWheels", "Wanted", "compose_at_registry",
           "compose_commands", "compose_environment", "staging_platform"]

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


def _env_base(registry: RegistryClient, ref: ImageRef) -> BaseDocuments:
    try:
        return read_base(ClientRegistry(client=registry, cache=ref, target=ref),
                         ref.reference)
    except ComposeError as exc:
        raise RegistryError(str(exc), hint="build env-base again: a plain image manifest, "
                                           "not an index") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Wanted:
    """One slice of the plan: its layer, its file here and its cache tag."""

    layer: Layer
    path: Path  # the slice file on this machine
    ref: ImageRef  # its cache tag


def compose_commands(config: Config, plan: Plan, *, client: str, dockerfile: Path,
                     context: Path, build_args: Mapping[str, str],
                     compiled: CompiledWheels | None = None) -> tuple[tuple[str, ...], ...]:
    """What `compose_environment` runs at most, for a dry run: env-base's build and push, then
    each slice's staging container (and the compiled wheels' one). Only a layer its cache tag
    lacks is written; the tags and env-base's id are known once env-base is built, so they are
    shown as <placeholders>."""
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
    if compiled is not None:
        commands.append(compiled_command(client, image="<image id>", wheelhouse=compiled.wheelhouse,
                                         wheels=compiled.wheels, out_dir=Path("<out>"),
                                         venv=config.build.venv,
                                         level=config.layers.slice_gzip_level))
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
                        on_line: LineSink | None = None,
                        compiled: CompiledWheels | None = None) -> ComposedEnv:
    """Write the missing slice layers (and the compiled wheels' layer, when `compiled`),
    compose the environment at the registry, return it. The package index must be served for
    the duration (the caller's `serving_index`)."""
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

            extra = None
            # installed natively only: uv installs the wheel files for env-base's own machine
            # (another machine's wheels are left to the Dockerfile's stage, as before)
            if compiled is not None and platform is None:
                extra = CompiledLayer(
                    slot=_compiled_slot(compiled, venv=config.build.venv, level=level,
                                        found=probe),
                    stage=lambda: stage_compiled(client, image=base_id,
                                                 wheelhouse=compiled.wheelhouse,
                                                 wheels=compiled.wheels, out_dir=Path(tmp),
                                                 venv=config.build.venv, level=level))
            outcomes, tag, digest = compose_at_registry(
                registry, cache=cache, target=target, base=base, wanted=wanted, stage=stage,
                venv=config.build.venv, log_dir=log_dir, compiled=extra)
    return ComposedEnv(reference=f"{target.name}@{digest}", tag=tag, base_id=base_id,
                       slices=outcomes, seconds=time.monotonic() - start)


def _compiled_slot(compiled: CompiledWheels, *, venv: str, level: int, found: Probe) -> Slot:
    try:
        return compiled_wheels_slot(compiled.wheelhouse, compiled.wheels, venv=venv,
                                    level=level, found=found)
    except ComposeError as exc:
        raise BuildError(str(exc), hint="`invoke build-wheels` writes the wheels and their "
                                        "MANIFEST into build.wheelhouse") from None


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompiledLayer:
    """The compiled wheels' layer of a composition: its slot (keyed by the MANIFEST, as in
    the cluster job) and how to write it when the cache lacks it."""

    slot: Slot
    stage: Callable[[], StagedSlice]


def compose_at_registry(registry: RegistryClient, *, cache: ImageRef, target: ImageRef,
                        base: BaseDocuments, wanted: Sequence[Wanted],
                        stage: Callable[[Wanted], StagedSlice], venv: str, log_dir: Path,
                        compiled: CompiledLayer | None = None,
                        ) -> tuple[tuple[SliceOutcome, ...], str, str]:
    """The registry half of a composition (writer/orchestration.py, which the cluster job
    runs too) through gpurl's client: reuse each slice whose record (and its blob) is there,
    `stage` and record the others, compose them onto `base` in `target`'s repository, the
    compiled wheels' layer last -> (each layer's outcome, the tag, its digest)."""
    by_name = {w.layer.name: w for w in wanted}
    slots = [Slot(name=w.layer.name, tag=str(w.ref.tag),
                  created_by=written_history(w.layer.slice.image_path, venv,
                                             hashed=w.layer.hashed)) for w in wanted]
    references = {w.layer.name: str(w.ref) for w in wanted}
    if compiled is not None:
        slots.append(compiled.slot)
        references[compiled.slot.name] = str(dataclasses.replace(cache, tag=compiled.slot.tag,
                                                                 digest=None))

    def staged(slot: Slot) -> StagedSlice:
        done = compiled.stage() if compiled is not None and slot.name == compiled.slot.name \
            else stage(by_name[slot.name])
        _write_log(log_dir, slot.name, done)
        return done

    try:
        composed = compose_env(ClientRegistry(client=registry, cache=cache, target=target),
                               base=base, wanted=slots, stage=staged)
    except SliceFailures as failed:
        raise next(iter(failed.failures.values())) from None
    except BlobsMissing as exc:
        raise BuildError(str(exc), hint=exc.hint) from None
    except LayerError as exc:
        raise RegistryError(str(exc),
                            hint="a slice record is damaged or does not fit env-base: delete the "
                                 "slice tags from the cache repository, build again") from None
    outcomes = tuple(
        SliceOutcome(name=o.name, reference=references[o.name], built=o.state == "written",
                     blob=o.blob.digest, size=o.blob.size, seconds=o.seconds,
                     rewritten=o.rewritten)
        for o in composed.slices)
    return outcomes, composed.tag, composed.digest


def _write_log(log_dir: Path, name: str, done: StagedSlice) -> None:
    write_atomic(log_dir / f"slice-{name}.log",
                 f"{done.log}\nwrote {done.blob.digest} ({done.blob.size:,} bytes) "
                 f"in {done.seconds:.1f}s\n")
