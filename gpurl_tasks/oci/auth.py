"""Registry credentials: where they come from, and the `WWW-Authenticate` challenge syntax.

GPURL_REGISTRY_TOKEN (with the configured user) wins; otherwise docker's config.json `auths`
entry for the host. The secret is kept out of every repr, str and message.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
from collections.abc import Mapping
from pathlib import Path

from gpurl_tasks.errors import RegistryError
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
    env: Mapping[str, str],
    user: str = "",
    docker_config: Path | None = None,
) -> Credentials | None:
    """Find credentials: the token `invoke build` uses (GPURL_REGISTRY_TOKEN, else GHCR_TOKEN;
    one lookup in credentials.py), then docker's config.json auths.

    `docker_config` defaults to $DOCKER_CONFIG/config.json or ~/.docker/config.json.
    Credential helpers (credsStore) are not consulted; set the token variable instead.
    """
    found = find_registry_token(env, gh_token=lambda: None)  # no `gh` subprocess for a read
    if found:
        return Credentials(username=env.get("GPURL_REGISTRY_USER") or user or "gpurl",
                           secret=found.token.reveal(), source=found.source.strip("$`"))
    if docker_config is None:
        base = env.get("DOCKER_CONFIG") or str(Path(env.get("HOME", "~")).expanduser() / ".docker")
        docker_config = Path(base) / "config.json"
    try:
        data = json.loads(docker_config.read_text())
    except (OSError, ValueError):
        return None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
    for key, entry in auths.items():
        bare = re.sub(r"^https?://", "", str(key)).split("/", 1)[0]
        if bare != host or not isinstance(entry, dict):
            continue
        if entry.get("auth"):
            try:
                username, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                raise RegistryError(f"the auth entry for {host} in {docker_config} is not "
                                    "valid base64 of user:token") from None
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
