"""Image references and registry hosts: the one grammar, used by the Dockerfile model and the
registry client alike.

`[host/]repository[:tag][@sha256:...]`, parsed the way the Docker CLI does: a first part with a
dot, a colon or `localhost` is a host. Also the one loopback check (a loopback registry may
be spoken to in plain HTTP, see `oci/scheme.py`; credentials in the clear only to loopback).
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re

from gpurl_tasks.errors import GpurlError

__all__ = ["DIGEST_RE", "ImageRef", "InvalidReference", "is_loopback",
           "parse_reference", "split_host_port"]

DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPO_RE = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_HOST_RE = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(?::[0-9]+)?$")


class InvalidReference(GpurlError):
    """An image reference that does not follow the grammar."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ImageRef:
    """`host/repository` plus a tag or a digest (or both: the digest wins). `host` is empty
    when the text named none and no default applied (a Dockerfile's `FROM debian:bookworm`)."""

    host: str = ""
    repository: str
    tag: str | None = None
    digest: str | None = None

    def __post_init__(self) -> None:
        if self.host and not _HOST_RE.match(self.host):
            raise InvalidReference(f"invalid registry host {self.host!r}",
                                   hint="a host is a name or IP with an optional :port, "
                                        "e.g. ghcr.io or 127.0.0.1:5005")
        if not _REPO_RE.match(self.repository):
            raise InvalidReference(f"invalid repository name {self.repository!r}",
                                   hint="repository names are lowercase, e.g. org/image")
        if self.tag is not None and not _TAG_RE.match(self.tag):
            raise InvalidReference(f"invalid tag {self.tag!r}",
                                   hint="a tag is up to 128 of [A-Za-z0-9_.-], not starting with . or -")
        if self.digest is not None and not DIGEST_RE.match(self.digest):
            raise InvalidReference(f"invalid digest {self.digest!r}",
                                   hint="a digest is 'sha256:' followed by 64 lowercase hex digits")

    @property
    def reference(self) -> str:
        """What goes after /manifests/: the digest when known, else the tag."""
        return self.digest or self.tag or "latest"

    @property
    def name(self) -> str:
        return f"{self.host}/{self.repository}" if self.host else self.repository

    def with_digest(self, digest: str) -> ImageRef:
        return dataclasses.replace(self, digest=digest)

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_reference(text: str, *, default_host: str = "", bare: bool = False) -> ImageRef:
    """`[host/]repo[:tag][@sha256:...]` -> ImageRef; without a host part `default_host` applies.

    A registry lookup needs a tag or a digest; `bare` also accepts a plain repository (a
    Dockerfile's `FROM scratch`).
    """
    raw = text.strip()
    digest = None
    if "@" in raw:
        raw, digest = raw.split("@", 1)
    first, _, rest = raw.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = default_host, raw
    tag = None
    if ":" in path.rsplit("/", 1)[-1]:
        path, tag = path.rsplit(":", 1)
    try:
        ref = ImageRef(host=host, repository=path, tag=tag, digest=digest)
    except InvalidReference as exc:
        raise InvalidReference(f"image reference {text!r}: {exc.message}", hint=exc.hint) from None
    if not bare and tag is None and digest is None:
        raise InvalidReference(f"image reference {text!r} names neither a tag nor a digest",
                               hint="write REPO:TAG or REPO@sha256:...")
    return ref


def split_host_port(host: str) -> tuple[str, int | None]:
    """`127.0.0.1:5005` -> ("127.0.0.1", 5005); `[::1]:5005` -> ("::1", 5005); no port -> None."""
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    elif host.count(":") == 1:
        name, port = host.split(":")
    else:
        name, port = host, ""
    return name, int(port) if port.isdigit() else None


def is_loopback(hostname: str) -> bool:
    """`localhost`, 127.0.0.0/8 or ::1 (a bare hostname, no port)."""
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname).is_loopback
    except ValueError:
        return False
