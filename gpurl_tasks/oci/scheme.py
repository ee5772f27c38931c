"""Which URL scheme a registry host is spoken to in, and what a failed TLS connection means.

`registry.insecure = true` forces plain HTTP and `false` HTTPS. Unset, a loopback host is tried
over HTTPS first and spoken to in plain HTTP only when the server does not speak TLS at all
(as dockerd and go-containerregistry do); every other host is HTTPS only. A certificate the
trust store rejects is never a reason to fall back: it is an error naming the host and how to
trust its CA. Certificates are checked against the bundle SSL_CERT_FILE names (else
SSL_CERT_DIR, else certifi's), which is how httpx builds its default trust store.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import Mapping
from typing import Literal

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.imageref import is_loopback, split_host_port

__all__ = ["HTTP", "HTTPS", "TlsFailure", "candidate_schemes", "credentials_allowed",
           "tls_failure", "untrusted_certificate"]

HTTPS = "https"
HTTP = "http"

# OpenSSL's reasons for a handshake whose peer answered with something that is not TLS
# (a plain HTTP server answers a ClientHello with "HTTP/1.1 400 ...").
_NOT_TLS_REASONS = frozenset({"WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE",
                              "PACKET_LENGTH_TOO_LONG", "UNKNOWN_PROTOCOL", "HTTP_REQUEST",
                              "HTTPS_PROXY_REQUEST", "UNEXPECTED_EOF_WHILE_READING"})


def candidate_schemes(host: str, insecure: bool | None) -> tuple[str, ...]:
    """The schemes to try for `host` (`name[:port]`), in order; the first that connects wins."""
    if insecure is not None:
        return (HTTP,) if insecure else (HTTPS,)
    if is_loopback(split_host_port(host)[0]):
        return (HTTPS, HTTP)
    return (HTTPS,)


def credentials_allowed(scheme: str, host: str) -> bool:
    """Credentials may travel over `scheme` to `host`: over TLS, or in the clear to loopback."""
    return scheme == HTTPS or is_loopback(split_host_port(host)[0])


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TlsFailure:
    """Why a connection attempt failed at the TLS layer, in words."""

    kind: Literal["certificate", "not-tls", "handshake"]
    detail: str

    def __str__(self) -> str:
        if self.kind == "certificate":
            return f"certificate verify failed: {self.detail}"
        if self.kind == "not-tls":
            return f"the server does not speak TLS ({self.detail})"
        return f"TLS handshake failed ({self.detail})"


def tls_failure(exc: BaseException) -> TlsFailure | None:
    """Classify a failed connection from the exceptions it was raised from; None when TLS
    played no part (refused, timed out, unresolvable)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLCertVerificationError):
            return TlsFailure(kind="certificate",
                              detail=str(cause.verify_message or cause.reason or cause))
        if isinstance(cause, ssl.SSLEOFError):
            return TlsFailure(kind="not-tls", detail="closed during the handshake")
        if isinstance(cause, ssl.SSLError):
            reason = str(cause.reason or "")
            kind: Literal["not-tls", "handshake"] = (
                "not-tls" if reason in _NOT_TLS_REASONS else "handshake")
            return TlsFailure(kind=kind, detail=reason or str(cause))
        if isinstance(cause, ConnectionResetError):
            return TlsFailure(kind="not-tls", detail="connection reset during the handshake")
        cause = cause.__cause__ or cause.__context__
    return None


def untrusted_certificate(host: str, failure: TlsFailure, env: Mapping[str, str]
                          ) -> RegistryError:
    """The error for a registry whose certificate the trust store (named from `env` the way
    httpx picks it) rejects."""
    if env.get("SSL_CERT_FILE"):
        store = f"SSL_CERT_FILE={env['SSL_CERT_FILE']}"
    elif env.get("SSL_CERT_DIR"):
        store = f"SSL_CERT_DIR={env['SSL_CERT_DIR']}"
    else:
        store = "certifi's bundle (SSL_CERT_FILE unset)"
    return RegistryError(
        f"the registry at https://{host} presented a certificate this machine does not trust "
        f"({failure.detail})",
        hint=f"certificates are checked against {store}: point SSL_CERT_FILE at a PEM bundle "
             "that also holds the registry's CA (it replaces the default store, so keep the "
             "public roots in it for ghcr.io)")
