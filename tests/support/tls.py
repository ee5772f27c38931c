"""A throwaway certificate authority and a server certificate for 127.0.0.1 and localhost,
made with the `openssl` CLI, for a real registry serving TLS on loopback (the stand-in for
ghcr.io's HTTPS). A client trusts it the one way gpurl's does: SSL_CERT_FILE names `ca`."""

from __future__ import annotations

import dataclasses
import ssl
import subprocess
from pathlib import Path

__all__ = ["LocalCA", "make_ca"]


@dataclasses.dataclass(frozen=True)
class LocalCA:
    ca: Path  # the CA certificate (PEM): the bundle SSL_CERT_FILE names to trust it
    cert: Path  # the server's certificate, signed by the CA
    key: Path  # the server's private key

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca))

    def registry_yaml(self) -> str:
        """The `tls:` part of a registry's `http:` section (indented YAML)."""
        return f"  tls:\n    certificate: {self.cert}\n    key: {self.key}\n"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(workdir: Path) -> LocalCA:
    workdir.mkdir(parents=True, exist_ok=True)
    ca, ca_key = workdir / "ca.crt", workdir / "ca.key"
    cert, key, csr = workdir / "server.crt", workdir / "server.key", workdir / "server.csr"
    extensions = workdir / "server.ext"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
             "-subj", "/CN=gpurl-test-ca", "-keyout", str(ca_key), "-out", str(ca),
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
             "-keyout", str(key), "-out", str(csr))
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                          "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "2", "-out", str(cert), "-extfile", str(extensions))
    return LocalCA(ca=ca, cert=cert, key=key)
