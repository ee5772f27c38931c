"""An immutable tag is never moved: what the registry already holds under PREFIX-SHA.

Both build paths ask before pushing (the local one after building, when it can compare
images; the cluster one before submitting, and the kaniko script again with crane before it
builds). Overwriting is possible only knowingly (`--force`). Without --ref, verify-layers, pin
and sbom work on this tree's immutable tag (`resolve_reference`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gpurl_tasks.config import Config, Variant
from gpurl_tasks.dockerfile.context import source_id
from gpurl_tasks.errors import BuildError
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.values import SOURCE_ID_PATTERN

__all__ = ["INDEX_SUFFIX", "TagMoveRefused", "cache_repository", "existing_digest",
           "existing_image", "index_reference", "is_index_tag", "refuse_to_move",
           "resolve_reference"]

INDEX_SUFFIX = "index"


class TagMoveRefused(BuildError):
    """The immutable tag already names a different image."""


def cache_repository(config: Config) -> str:
    """`host/repository` of the layer cache (kaniko's cache, the slice images): shared across
    builds, never delete it."""
    return config.cluster.cache_repo or f"{config.registry.image}/cache"


def resolve_reference(config: Config, text: str | None) -> ImageRef:
    """The image a task works on: as given, or the working tree's immutable tag
    (`REGISTRY/REPO:PREFIX-<source id>`, the tag a build of it pushes)."""
    text = text or config.registry.immutable_reference(source_id(config))
    return parse_reference(text, default_host=config.registry.host)


def _index_first(config: Config) -> Variant:
    """The first variant naming `config`'s launcher variable: its tag prefix names the index."""
    return next(v for v in config.variants if v.launcher.variable == config.launcher.variable)


def index_reference(config: Config, source: str | None = None) -> str:
    """`REGISTRY/REPO:PREFIX-<source id>-index`: the immutable tag of the image index of the
    variants sharing `config`'s launcher variable (release/index.py), PREFIX the first of
    them's tag prefix. No variant's tag is spelled so (none ends in `-index`), and the source
    id sits where a variant's tag has it, so a pin's comment names its commit the same way."""
    first = _index_first(config)
    return f"{first.registry.image}:{first.registry.tag_prefix}-{source or source_id(config)}" \
           f"-{INDEX_SUFFIX}"


def is_index_tag(config: Config, tag: str) -> bool:
    """`tag` is spelled like an index_reference's tag of `config`'s group."""
    return re.fullmatch(rf"{re.escape(_index_first(config).registry.tag_prefix)}-{SOURCE_ID_PATTERN}-"
                        rf"{INDEX_SUFFIX}", tag) is not None


def existing_digest(config: Config, reference: str, env: Mapping[str, str] | None = None
                    ) -> str | None:
    """The digest the registry holds under `reference`'s tag, or None when it has none."""
    ref = parse_reference(reference, default_host=config.registry.host)
    with open_client(config, ref, env) as client:
        return client.lookup(ref)


def existing_image(config: Config, reference: str, env: Mapping[str, str] | None = None
                   ) -> tuple[str, str] | None:
    """(manifest digest, config digest) of the variant's platform's image under the tag, or
    None."""
    ref = parse_reference(reference, default_host=config.registry.host)
    with open_client(config, ref, env) as client:
        if client.lookup(ref) is None:
            return None
        image = client.pull(ref, platform=config.target.platform)
    return image.manifest_digest, image.config_digest


def refuse_to_move(reference: str, existing: str, *, force: bool, why: str) -> None:
    """Raise unless `force`: `reference` already holds `existing` and pushing would move it."""
    if force:
        return
    raise TagMoveRefused(
        f"{reference} already exists as {existing} and {why}: an immutable tag is never moved "
        "(nodes that pulled it keep the old image under imagePullPolicy: IfNotPresent)",
        hint="commit the change (a new commit is a new tag), pin the existing digest, or pass "
             "--force to overwrite the tag knowingly")
