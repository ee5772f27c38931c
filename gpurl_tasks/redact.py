"""Registry credentials: where the push token comes from, and keeping it out of output.

The token is wrapped in `Secret` as soon as it is read, so an accidental f-string,
repr or exception message shows a placeholder, never the value.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterable, Mapping

__all__ = ["REDACTED", "Secret", "TokenSource", "find_registry_token", "looks_like_docker_hub",
           "redact"]

REDACTED = "***"
_DOCKER_HUB_PREFIX = "dckr_pat_"


class Secret:
    """A string that never renders itself; call `reveal()` where the value is really needed."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"Secret({REDACTED!r})"

    def __str__(self) -> str:
        return REDACTED

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TokenSource:
    """The token and where it was found (for messages; the value itself is never shown)."""

    token: Secret
    source: str


def _forms(value: str) -> list[str]:
    """The value plus the encodings it is commonly shipped in (base64 with and without a user)."""
    forms = [value, base64.b64encode(value.encode()).decode()]
    return [f for f in forms if len(f) >= 4]


def redact(text: str, secrets: Iterable[str | Secret]) -> str:
    """`text` with every secret (and its base64) replaced by a placeholder."""
    values: list[str] = []
    for secret in secrets:
        raw = secret.reveal() if isinstance(secret, Secret) else secret
        if raw:
            values += _forms(raw)
    for value in sorted(set(values), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def looks_like_docker_hub(token: Secret) -> bool:
    """Docker Hub personal access tokens start with `dckr_pat_`; ghcr.io rejects them."""
    return token.reveal().startswith(_DOCKER_HUB_PREFIX)


def find_registry_token(
    env: Mapping[str, str], *, gh_token: Callable[[], str | None]
) -> TokenSource | None:
    """GPURL_REGISTRY_TOKEN, else GHCR_TOKEN, else `gh auth token` (when gh is installed)."""
    for name in ("GPURL_REGISTRY_TOKEN", "GHCR_TOKEN"):
        value = env.get(name, "").strip()
        if value:
            return TokenSource(token=Secret(value), source=f"${name}")
    value = (gh_token() or "").strip()
    if value:
        return TokenSource(token=Secret(value), source="`gh auth token`")
    return None

