"""The environment image from env-base and the slice layers gpurl wrote (pure: documents in,
documents out).

Each slice's layer is written by gpurl itself (oci/layer.py) from a staging install of the
slice alone, so its blob depends only on the slice file, env-base's Python and venv path, the
pinned uv and the writer with its gzip level: the same inputs give the same digest on every
builder, after any cache loss. Each is cached in the cache repository as a one-layer image
under a tag that hashes exactly those inputs (`slice_key`), never env-base's image id, so a
rebuilt env-base that keeps them reuses every slice.

The environment image is written, never built: env-base's layers, then each slice's blob in
plan order, with env-base's config whose `rootfs.diff_ids` and `history` follow the layers
(verify-layers maps each slice layer to its `uv pip install ... -r /tmp/gpurl-layers/...`).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.oci.compose import Composed
from gpurl_tasks.oci.image import (
    Descriptor,
    Manifest,
    parse_config,
    parse_diff_ids,
    parse_manifest,
)
from gpurl_tasks.oci.layer import MEDIA_TYPES, WRITER_VERSION, Blob, canonical_json
from gpurl_tasks.oci.layer import slice_image as layer_image
from gpurl_tasks.plan.model import Layer

__all__ = ["BaseImage", "WrittenSlice", "build_env_script", "compose_written", "image_of",
           "install_command", "no_isolation_args", "slice_image",
           "written_history", "written_slice"]


def install_command(*, prefix: str, venv: str, slice_file: str,
                    build_args: Sequence[str] = ()) -> list[str]:
    """The staging install of one slice: its files laid out as they sit in `venv`, under
    `prefix` (the local path's staging container and the cluster job's script run it);
    `build_args` are the slice's `no_isolation_args`."""
    return ["uv", "pip", "install", "--no-deps", "--require-hashes", "--no-installer-metadata",
            *build_args, "--prefix", prefix, "--python", f"{venv}/bin/python", "-r", slice_file]


def no_isolation_args(names: Sequence[str]) -> list[str]:
    """The lock's `no-build-isolation-package` settings for a slice's packages, as uv's flags."""
    return [w for name in names for w in ("--no-build-isolation-package", name)]


def build_env_script(*, prefix: str, venv: str, files: str) -> str:
    """Shell that installs the slices below one slice (`files`: their slice files, as shell
    words) into the scratch `prefix` and puts it on PYTHONPATH, so the slice's sdists build
    against the packages the environment holds under it (plan/buildenv.py); `prefix` never
    reaches the layer. One install per file: each names its own index, and uv refuses two
    `--index-url`s in one install. No --require-hashes (a git slice has no hash; the hashes
    listed are still checked). Its status is non-zero when one install fails."""
    install = ["uv", "pip", "install", "--no-deps", "--no-installer-metadata",
               "--prefix", prefix, "--python", f"{venv}/bin/python"]
    return (f'{{ built=0; for lower in {files}; do {" ".join(install)} -r "$lower" >&2 '
            '|| { built=1; break; }; done; [ "$built" = 0 ]; } && '
            f'PYTHONPATH="$(echo {prefix}/lib/python*/site-packages)" && export PYTHONPATH')


def written_history(layer: Layer, venv: str) -> str:
    """The history entry of a written slice, on every builder: what ran to stage it
    (verify-layers maps a layer with `uv pip install` and the slice file's path to its slice)."""
    return (f"gpurl {WRITER_VERSION}: uv pip install --no-deps --require-hashes "
            f"--no-installer-metadata --prefix {venv} -r {layer.slice.image_path}")



@dataclasses.dataclass(frozen=True, kw_only=True)
class WrittenSlice:
    """One slice layer: its blob descriptor, diff_id and the history entry naming it."""

    name: str  # the plan's NN-label
    layer: Descriptor
    diff_id: str
    created_by: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class BaseImage:
    """env-base as the registry holds it: manifest and config (checked types)."""

    manifest: Manifest
    config: Mapping[str, Any]
    diff_ids: tuple[str, ...]

    @staticmethod
    def from_documents(manifest: Mapping[str, Any], config: Mapping[str, Any]) -> BaseImage:
        parsed = parse_manifest(manifest, "manifest of env-base")
        parse_config(config, "config of env-base")
        diff_ids = parse_diff_ids(config, "config of env-base")
        if len(diff_ids) != len(parsed.layers):
            raise RegistryError(f"env-base has {len(parsed.layers)} layers and "
                                f"{len(diff_ids)} diff_ids")
        if parsed.media_type not in MEDIA_TYPES or parsed.config is None:
            raise RegistryError(f"env-base's manifest is {parsed.media_type}, not a Docker or "
                                "OCI image manifest")
        return BaseImage(manifest=parsed, config=config, diff_ids=diff_ids)

    @property
    def layer_type(self) -> str:
        return MEDIA_TYPES[self.manifest.media_type][1]


def slice_image(written: WrittenSlice, *, media_type: str, platform: Mapping[str, str],
                ) -> tuple[bytes, bytes]:
    """(manifest, config) of the one-layer image that records a slice in the cache
    repository: oci/layer.py's, which the cluster job writes too, so both paths record the
    same slice as the same image."""
    blob = Blob(digest=written.layer.digest, diff_id=written.diff_id, size=written.layer.size)
    return layer_image(blob, created_by=written.created_by, media_type=media_type,
                       platform=dict(platform))


def written_slice(name: str, manifest: Mapping[str, Any], config: Mapping[str, Any],
                  ) -> WrittenSlice:
    """A cached slice image read back: exactly one layer, one diff_id, one history entry."""
    where = f"cached slice {name}"
    parsed = parse_manifest(manifest, f"manifest of {where}")
    diff_ids = parse_diff_ids(config, f"config of {where}")
    history = parse_config(config, f"config of {where}").history
    if len(parsed.layers) != 1 or len(diff_ids) != 1 or len(history) != 1 \
            or not history[0].created_by:
        raise RegistryError(f"{where} is not a one-layer image gpurl wrote",
                            hint="delete its tag from the cache repository")
    return WrittenSlice(name=name, layer=parsed.layers[0], diff_id=diff_ids[0],
                        created_by=history[0].created_by)


def compose_written(base: BaseImage, slices: Sequence[WrittenSlice]) -> Composed:
    """env-base's layers, then each slice's blob in order, with env-base's config extended
    to match (environment, workdir and platform are env-base's)."""
    if not slices:
        raise RegistryError("no slice layers to compose")
    for written in slices:
        if written.layer.media_type != base.layer_type:
            raise RegistryError(f"slice {written.name} is a {written.layer.media_type} layer, "
                                f"env-base's are {base.layer_type}",
                                hint="delete its tag from the cache repository")
    config: dict[str, Any] = copy.deepcopy(dict(base.config))
    config["rootfs"] = {"type": "layers",
                        "diff_ids": [*base.diff_ids, *(s.diff_id for s in slices)]}
    config["history"] = [*(dict(e) for e in base.config.get("history") or []),
                         *({"created_by": s.created_by} for s in slices)]
    assert base.manifest.config is not None  # checked in from_documents
    return image_of((*base.manifest.layers, *(s.layer for s in slices)), config,
                    media_type=base.manifest.media_type,
                    config_type=base.manifest.config.media_type)


def image_of(layers: Sequence[Descriptor], config: Mapping[str, Any], *, media_type: str,
             config_type: str) -> Composed:
    """The manifest of `layers` under `config` (written canonically), as the registry takes
    it: the one place an image is put together from its parts."""
    blob = canonical_json(config)
    descriptor = Descriptor(media_type=config_type, size=len(blob),
                            digest="sha256:" + hashlib.sha256(blob).hexdigest())
    manifest = Manifest(layers=tuple(layers), config_digest=descriptor.digest, config=descriptor,
                        media_type=media_type)
    return Composed(manifest=manifest, config=blob)
