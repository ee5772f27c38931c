"""The composed environment, locally: slice images built once with BuildKit, composed at the
loopback registry (oci/compose.py), then handed to the final build as ENV_SOURCE.

1. build `env-base` (its image id names every slice's base);
2. per slice, its cache tag (`slice-<label>-<hash of its inputs>` in the cache repository);
   only a tag the registry lacks is built (`--target slice-NN-label`) and pushed;
3. env-base's layers and each slice's install layer are mounted into the image's repository
   (no bytes move) and the composed manifest is written under `env-<hash>`;
4. the caller builds `rl` with `--build-arg ENV_SOURCE=<host/repo@digest>`.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from gpurl_tasks import proc
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.recipe import ENV_BASE_STAGE, slice_run
from gpurl_tasks.errors import BuildError
from gpurl_tasks.files import read_text
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.local import builder
from gpurl_tasks.local.builder import LineSink
from gpurl_tasks.oci.compose import (
    ComposedEnv,
    SliceImage,
    SliceOutcome,
    compose,
    composed_tag,
)
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import parse_manifest
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.oci.tags import cache_repository
from gpurl_tasks.plan.model import Plan

__all__ = ["compose_commands", "compose_environment"]


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


def _slice_image(registry: RegistryClient, ref: ImageRef, name: str) -> SliceImage:
    _, _, manifest = registry.manifest(ref)
    config_digest = parse_manifest(manifest, f"manifest of slice image {name}").config_digest
    return SliceImage.from_documents(name, manifest, registry.blob_json(ref, config_digest))


def compose_commands(config: Config, plan: Plan, *, client: str, dockerfile: Path,
                     context: Path, build_args: Mapping[str, str]) -> tuple[tuple[str, ...], ...]:
    """What `compose_environment` runs at most, for a dry run: env-base's build, then each
    slice's build and push. Only a slice its cache tag lacks is built; the tag's hash and the
    slices' base are known once env-base is built, so they are shown as <placeholders>."""
    builds = _Builds(client=client, dockerfile=dockerfile, context=context,
                     build_args=dict(build_args), log_dir=Path(), on_line=None)
    commands = [builds.command(ENV_BASE_STAGE, iidfile=Path("<env-base.iid>"))]
    builds = dataclasses.replace(builds, build_args={**builds.build_args,
                                                     "SLICE_BASE": "gpurl-env-base:<image id>"})
    for layer in plan.layers:
        ref = f"{cache_repository(config)}:slice-{layer.label}-<inputs hash>"
        commands += [builds.command(layer.slice.stage, tags=(ref,)),
                     builder.push_command(client, ref)]
    return tuple(tuple(argv) for argv in commands)


def compose_environment(config: Config, plan: Plan, *, client: str, dockerfile: Path,
                        context: Path, build_args: Mapping[str, str], log_dir: Path,
                        on_line: LineSink | None = None) -> ComposedEnv:
    """Build the missing slice images, compose the environment at the registry, return it.
    The package index must be served for the duration (the caller's `serving_index`).

    Always from the build cache: a slice image is named by its inputs, so one that exists is
    reused, and every slice must sit on the one env-base this run built (a `--no-cache` build
    of each slice target would rebuild env-base under each, each time different)."""
    start = time.monotonic()
    builds = _Builds(client=client, dockerfile=dockerfile, context=context,
                     build_args=dict(build_args), log_dir=log_dir, on_line=on_line)
    with tempfile.TemporaryDirectory(prefix="gpurl-env-") as tmp:
        iidfile = Path(tmp) / "env-base.iid"
        builds.run(ENV_BASE_STAGE, iidfile=iidfile)
        base_id = iidfile.read_text().strip()
    base_layers = tuple(json.loads(proc.run_quiet(
        [client, "image", "inspect", "--format", "{{json .RootFS.Layers}}", base_id]).stdout))
    # the slices build FROM this very image, never from the stage again: after a --no-cache
    # build the engine's cache holds two builds of env-base and may pick either
    local_base = f"gpurl-env-base:{base_id.removeprefix('sha256:')[:32]}"
    proc.run_quiet([client, "tag", base_id, local_base])
    builds = dataclasses.replace(builds, build_args={**builds.build_args,
                                                     "SLICE_BASE": local_base})
    cache = parse_reference(cache_repository(config), default_host=config.registry.host,
                            bare=True)
    target = parse_reference(config.registry.image, default_host=config.registry.host, bare=True)
    outcomes: list[SliceOutcome] = []
    images: list[SliceImage] = []
    with open_client(config, cache) as registry:
        for layer in plan.layers:
            text = read_text(layer.slice.path(config.variant), what="slice file",
                             error=BuildError).encode()
            tag = layer.slice.cache_tag(base_id=base_id, slice_text=text,
                                        install=slice_run(layer).render())
            ref = dataclasses.replace(cache, tag=tag, digest=None)
            image = None
            if registry.lookup(ref) is not None:
                image = _slice_image(registry, ref, layer.name)
                if image.diff_ids[:image.base_count] != base_layers:
                    image = None  # built on another build of env-base: build it again
            built = image is None
            if image is None:
                builds.run(layer.slice.stage, tags=(str(ref),))
                builder.push_image(client, str(ref))
                image = _slice_image(registry, ref, layer.name)
                if image.diff_ids[:image.base_count] != base_layers:
                    raise BuildError(f"slice {layer.name} was not built on {ENV_BASE_STAGE} "
                                     f"{base_id[:19]} ({local_base})")
            images.append(image)
            install = image.manifest.layers[-1]
            outcomes.append(SliceOutcome(name=layer.name, reference=str(ref), built=built,
                                         blob=install.digest, size=install.size))
        composed = compose(images)
        for blob in composed.manifest.layers:
            registry.mount_blob(target, blob.digest, cache.repository)
        registry.push_blob(target, composed.config)
        tag = composed_tag([i.manifest.config_digest for i in images])
        digest = registry.put_manifest(target, tag, composed.manifest_bytes,
                                       composed.manifest.media_type)
    return ComposedEnv(reference=f"{target.name}@{digest}", tag=tag, base_id=base_id,
                       slices=tuple(outcomes), seconds=time.monotonic() - start)
