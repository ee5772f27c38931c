"""The registry as a config names it, mapped to oci/'s plain values: the settings every client
is made with, the references a task works on (this tree's immutable tag, the image index's tag,
the layer cache), and what the registry already holds under a tag.

oci/ knows neither the config nor git; the config and the source id (`source_id`, git) are
read here, on the caller's side, once.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpurl_tasks.config import Config, Variant
from gpurl_tasks.dockerfile.context import source_id
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.oci.connect import ClientSettings, open_client
from gpurl_tasks.oci.tags import index_tag

__all__ = ["cache_repository", "client_settings", "existing_digest", "existing_image",
           "index_prefix", "index_reference", "resolve_reference"]


def client_settings(config: Config) -> ClientSettings:
    """The configured registry, its user, `registry.insecure`, and the retry bounds
    (`registry.retries`, `registry.retry-max-wait`)."""
    registry = config.registry
    return ClientSettings(registry_host=registry.host, user=registry.user,
                          insecure=registry.insecure, attempts=registry.retries + 1,
                          max_wait=float(registry.retry_max_wait))


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


def index_prefix(config: Config) -> str:
    """The tag prefix of the image index of `config`'s launcher variable (`oci.tags.index_tag`)."""
    return _index_first(config).registry.tag_prefix


def index_reference(config: Config, source: str | None = None) -> str:
    """`REGISTRY/REPO:PREFIX-<source id>-index`: the immutable tag of the image index of the
    variants sharing `config`'s launcher variable (release/index.py), in the first of them's
    repository."""
    first = _index_first(config)
    return f"{first.registry.image}:{index_tag(first.registry.tag_prefix, source or source_id(config))}"


def existing_digest(config: Config, reference: str, env: Mapping[str, str] | None = None
                    ) -> str | None:
    """The digest the registry holds under `reference`'s tag, or None when it has none."""
    ref = parse_reference(reference, default_host=config.registry.host)
    with open_client(client_settings(config), ref, env) as client:
        return client.lookup(ref)


def existing_image(config: Config, reference: str, env: Mapping[str, str] | None = None
                   ) -> tuple[str, str] | None:
    """(manifest digest, config digest) of the variant's platform's image under the tag, or
    None."""
    ref = parse_reference(reference, default_host=config.registry.host)
    with open_client(client_settings(config), ref, env) as client:
        if client.lookup(ref) is None:
            return None
        image = client.pull(ref, platform=config.target.platform)
    return image.manifest_digest, image.config_digest
