"""Registry credentials: where the push token comes from, and keeping it out of output.

The token is wrapped in `Secret` as soon as it is read, so an accidental f-string,
repr or exception message shows a placeholder, never the value.
"""

from __future__ import annotations

import base64
import dataclasses
import urllib.parse
from collections.abc import Callable, Iterable, Mapping

from gpurl_tasks.config import environment_value

__all__ = ["REDACTED", "TOKEN_ENVS", "Secret", "TokenSource", "find_registry_token", "known_secrets",
           "looks_like_docker_hub", "redact"]

REDACTED = "***"
_DOCKER_HUB_PREFIX = "dckr_pat_"
# Where the registry token is read, in order: a secret, so never part of the (printable) config.
TOKEN_ENVS = ("GPURL_REGISTRY_TOKEN", "GHCR_TOKEN")


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


def _base64_forms(raw: bytes) -> list[str]:
    """The base64 text `raw` shows wherever it sits in an encoded stream: at each of the three
    byte alignments, the characters that depend on `raw` alone (the first and last partial
    quantum depend on neighbouring bytes, so they are left out)."""
    forms = [base64.b64encode(raw).decode().rstrip("=")]
    for shift in (1, 2):
        encoded = base64.b64encode(b"\0" * shift + raw).decode().rstrip("=")
        start = (shift * 8 + 5) // 6  # first character with no bits of the prefix
        end = (shift + len(raw)) * 8 // 6  # characters made entirely of known bits
        forms.append(encoded[start:end])
    forms.append(base64.b64encode(raw).decode()[: len(raw) * 8 // 6])
    return forms


def _forms(value: str) -> list[str]:
    """The value and the encodings it ships in: URL-encoded (as in a URL or a form), base64 at
    any alignment (alone, inside `user:token` and inside any longer base64 text), and the
    base64 of the URL-encoded value."""
    quoted = urllib.parse.quote(value, safe="")
    forms = [value, quoted, urllib.parse.quote_plus(value, safe="")]
    forms += _base64_forms(value.encode()) + _base64_forms(quoted.encode())
    return [f for f in forms if len(f) >= 4]


def redact(text: str, secrets: Iterable[str | Secret]) -> str:
    """`text` with every secret, in every form `_forms` lists, replaced by a placeholder."""
    values: list[str] = []
    for secret in secrets:
        raw = secret.reveal() if isinstance(secret, Secret) else secret
        if raw:
            values += _forms(raw)
    for value in sorted(set(values), key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text


def known_secrets(env: Mapping[str, str], *, gh_token: Callable[[], str | None],
                  users: Iterable[str] = ()) -> tuple[Secret, ...]:
    """Every registry secret gpurl could have used, from every source (both token variables
    and `gh auth token`), plus `user:token` for each known user: what output is redacted of."""
    tokens = [env.get(name, "").strip() for name in TOKEN_ENVS]
    tokens.append((gh_token() or "").strip())
    names = {u for u in (*users, environment_value("registry.user", env) or "", "gpurl") if u}
    found = [t for t in tokens if t]
    return tuple(Secret(v) for v in dict.fromkeys(
        found + [f"{user}:{token}" for token in found for user in sorted(names)]))


def looks_like_docker_hub(token: Secret) -> bool:
    """Docker Hub personal access tokens start with `dckr_pat_`; ghcr.io rejects them."""
    return token.reveal().startswith(_DOCKER_HUB_PREFIX)


def find_registry_token(
    env: Mapping[str, str], *, gh_token: Callable[[], str | None]
) -> TokenSource | None:
    """GPURL_REGISTRY_TOKEN, else GHCR_TOKEN, else `gh auth token` (when gh is installed)."""
    for name in TOKEN_ENVS:
        value = env.get(name, "").strip()
        if value:
            return TokenSource(token=Secret(value), source=f"${name}")
    value = (gh_token() or "").strip()
    if value:
        return TokenSource(token=Secret(value), source="`gh auth token`")
    return None

