"""Image references: `[host/]repository[:tag][@sha256:...]`, parsed the way the Docker CLI does.

Also where the plain-HTTP decision lives: loopback registries are spoken to over HTTP, as
dockerd does, everything else over HTTPS, unless the config says otherwise.
"""

from __future__ import annotations

import dataclasses
import re

from gpurl_tasks.errors import RegistryError

__all__ = ["DIGEST_RE", "ImageRef", "parse_reference", "uses_plain_http"]

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPO_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImageRef:
    """`host/repository` plus a tag or a digest (or both: the digest wins)."""

    host: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def reference(self) -> str:
        """What goes after /manifests/: the digest when known, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def name(self) -> str:
        return f"{self.host}/{self.repository}"

    def with_digest(self, digest: str) -> ImageRef:
        return dataclasses.replace(self, digest=digest)

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_reference(text: str, *, default_host: str) -> ImageRef:
    """`[host/]repo[:tag][@sha256:...]` -> ImageRef; a first part with a dot, colon or
    `localhost` is a host, otherwise `default_host` applies (like the Docker CLI)."""
    raw = text.strip()
    digest = None
    if "@" in raw:
        raw, digest = raw.split("@", 1)
        if not DIGEST_RE.match(digest):
            raise RegistryError(f"image reference {text!r} has an invalid digest {digest!r}",
                                hint="a digest is 'sha256:' followed by 64 lowercase hex digits")
    first, _, rest = raw.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = default_host, raw
    tag = None
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG_RE.match(tag):
            raise RegistryError(f"image reference {text!r} has an invalid tag {tag!r}")
    if not path or not _REPO_RE.match(path):
        raise RegistryError(f"image reference {text!r} has an invalid repository name {path!r}",
                            hint="repository names are lowercase, e.g. org/image")
    if tag is None and digest is None:
        raise RegistryError(f"image reference {text!r} names neither a tag nor a digest",
                            hint="write REPO:TAG or REPO@sha256:...")
    return ImageRef(host=host, repository=path, tag=tag, digest=digest)


def uses_plain_http(host: str, insecure: bool | None) -> bool:
    """Loopback registries speak plain HTTP (as dockerd assumes); `insecure` overrides."""
    if insecure is not None:
        return insecure
    hostname = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0][1:]
    return hostname in ("localhost", "127.0.0.1", "::1") or hostname.startswith("127.")
