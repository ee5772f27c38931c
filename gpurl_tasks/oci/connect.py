"""A registry client for an image reference's host, holding only the credentials `oci.auth`
allows that host: the edge every registry read (tags before a push, verify, pin) opens.

It takes plain values (`ClientSettings`); release/configured.py maps a config to them."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping

from gpurl_tasks.imageref import ImageRef
from gpurl_tasks.oci.auth import Credentials, credentials_for
from gpurl_tasks.oci.registry import RegistryClient

__all__ = ["ClientSettings", "open_client", "registry_client"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ClientSettings:
    """What every client is made with: the team's registry (the one host its token and user
    go to), the scheme rule and the retry bounds."""

    registry_host: str
    user: str
    insecure: bool | None  # True: plain HTTP; False: HTTPS; None: HTTPS, HTTP to a loopback without TLS
    attempts: int  # tries of one request, the first included
    max_wait: float  # the longest wait between two tries, in seconds


def open_client(settings: ClientSettings, ref: ImageRef, env: Mapping[str, str] | None = None, *,
                on_retry: Callable[[str], None] | None = None) -> RegistryClient:
    """A client for the reference's host, with the credentials `oci.auth` allows it: the
    team's token only when it is the configured registry, so a reference to a foreign registry
    can never make it (or its token service) receive that token."""
    env = os.environ if env is None else env
    ours = ref.host == settings.registry_host
    credentials = credentials_for(ref.host, registry_host=settings.registry_host, env=env,
                                  user=settings.user if ours else "")
    return registry_client(settings, ref.host, credentials, on_retry=on_retry)


def registry_client(settings: ClientSettings, host: str, credentials: Credentials | None = None, *,
                    on_retry: Callable[[str], None] | None = None) -> RegistryClient:
    """The one way gpurl makes a registry client: the settings' scheme for the host and their
    retry bounds on 5xx, 429 and failed connections (oci/retry.py); `on_retry` is told each
    retry in one line."""
    return RegistryClient(host, credentials=credentials, insecure=settings.insecure,
                          attempts=settings.attempts, max_wait=settings.max_wait,
                          on_retry=on_retry)
