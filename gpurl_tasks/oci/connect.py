"""A registry client for an image reference's host, holding only the credentials `oci.auth`
allows that host: the edge every registry read (tags before a push, verify, pin) opens."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from gpurl_tasks.config import Config
from gpurl_tasks.imageref import ImageRef
from gpurl_tasks.oci.auth import Credentials, credentials_for
from gpurl_tasks.oci.registry import RegistryClient

__all__ = ["open_client", "registry_client"]


def open_client(config: Config, ref: ImageRef, env: Mapping[str, str] | None = None, *,
                on_retry: Callable[[str], None] | None = None) -> RegistryClient:
    """A client for the reference's host, with the credentials `oci.auth` allows it: the
    team's token only when it is the configured registry, so a reference to a foreign registry
    can never make it (or its token service) receive that token."""
    env = os.environ if env is None else env
    ours = ref.host == config.registry.host
    credentials = credentials_for(ref.host, registry_host=config.registry.host, env=env,
                                  user=config.registry.user if ours else "")
    return registry_client(config, ref.host, credentials, on_retry=on_retry)


def registry_client(config: Config, host: str, credentials: Credentials | None = None, *,
                    on_retry: Callable[[str], None] | None = None) -> RegistryClient:
    """The one way gpurl makes a registry client: the config's scheme for the host and its
    retry bounds (`registry.retries`, `registry.retry-max-wait`) on 5xx, 429 and failed
    connections (writer/retry.py); `on_retry` is told each retry in one line."""
    return RegistryClient(host, credentials=credentials, insecure=config.registry.insecure,
                          attempts=config.registry.retries + 1,
                          max_wait=float(config.registry.retry_max_wait), on_retry=on_retry)
