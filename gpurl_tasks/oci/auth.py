"""Registry credentials: which go to which host, and the `WWW-Authenticate` challenge syntax.

The team's token (GPURL_REGISTRY_TOKEN, GHCR_TOKEN or `gh auth token`, with the configured user)
goes to the configured registry host only; every host, the configured one included when no
token is set, gets its own docker config.json `auths` entry or nothing. The secret is kept out
of every repr, str and message.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.files import read_text
from gpurl_tasks.redact import find_registry_token

__all__ = ["Credentials", "credential_hint", "credentials_for", "parse_challenge"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Credentials:
    """A user name and a secret; the secret is kept out of repr and str."""

    username: str
    secret: str = dataclasses.field(repr=False)
    source: str = "environment"

    def basic_header(self) -> str:
        token = base64.b64encode(f"{self.username}:{self.secret}".encode()).decode()
        return f"Basic {token}"


def credentials_for(
    host: str,
    *,
    registry_host: str,
    env: Mapping[str, str],
    user: str = "",
    docker_config: Path | None = None,
    gh_token: Callable[[], str | None] = lambda: None,
) -> Credentials | None:
    """The credentials for `host`: the team's token when `host` is `registry_host` (the
    configured registry), else (and when no token is set) docker's config.json entry for `host`.

    `docker_config` defaults to $DOCKER_CONFIG/config.json or ~/.docker/config.json.
    Credential helpers (credsStore) are not consulted; set the token variable instead.
    `gh_token` is not asked by default (no `gh` subprocess for a read).
    """
    if host == registry_host:
        found = find_registry_token(env, gh_token=gh_token)
        if found:
            return Credentials(username=user or "gpurl",
                               secret=found.token.reveal(), source=found.source.strip("$`"))
    if docker_config is None:
        base = env.get("DOCKER_CONFIG") or str(Path(env.get("HOME", "~")).expanduser() / ".docker")
        docker_config = Path(base) / "config.json"
    if not docker_config.is_file():
        return None
    try:
        data = json.loads(read_text(docker_config, what="docker config", error=RegistryError))
    except ValueError:
        raise RegistryError(f"the docker config {docker_config} is not valid JSON",
                            hint="fix or remove it (docker login writes it)") from None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        bare = re.sub(r"^https?://", "", str(key)).split("/", 1)[0]
        if bare != host or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                username, sep, secret = base64.b64decode(
                    str(entry["auth"]), validate=True).decode().partition(":")
            except (binascii.Error, ValueError):
                sep = ""
            if not sep:
                raise RegistryError(f"the auth entry for {host} in {docker_config} is not "
                                    "valid base64 of user:token",
                                    hint="log in again: `docker login HOST` rewrites the entry") from None
            return Credentials(username=username, secret=secret, source=str(docker_config))
        if entry.get("username") and entry.get("password"):
            return Credentials(username=str(entry["username"]), secret=str(entry["password"]),
                               source=str(docker_config))
    return None


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """`Bearer realm="...",service="...",scope="..."` -> ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {k.lower(): v for k, v in re.findall(r'(\w+)="([^"]*)"', rest)}
    return scheme.lower(), params


def credential_hint(host: str, credentials: Credentials | None) -> str:
    if credentials is None:
        return (f"no credentials found for {host}: set GPURL_REGISTRY_TOKEN (and registry.user) "
                f"or run `docker login {host}`")
    return (f"the credentials from {credentials.source} for user {credentials.username!r} were "
            f"rejected; for ghcr.io use a GitHub PAT with read:packages, not a Docker Hub token")
