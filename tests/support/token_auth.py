"""Bearer-token auth for the real registry: a loopback token service that signs JWTs.

The registry itself is the real `docker-registry` configured with `auth: token:`; it answers
401 with a `WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge, as ghcr.io
does. The token service is the stand-in for GHCR's (which cannot run here): it checks Basic
credentials and issues an RS256 JWT carrying the x5c certificate the registry trusts. Keys,
certificates and signatures come from the `openssl` CLI, so no crypto library is needed.
"""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

__all__ = ["TokenService"]

SERVICE = "gpurl-test-registry"
ISSUER = "gpurl-test-issuer"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class TokenService:
    """Issues tokens for `username`/`secret`; counts requests so tests can see the flow.
    `grants` limits the actions a token carries (("pull",): a read-only token, as a token
    service grants what the account may do of what was asked)."""

    def __init__(self, workdir: Path, *, username: str, secret: str,
                 grants: tuple[str, ...] | None = None) -> None:
        self.workdir = workdir
        self.grants = grants  # the actions it grants (None: every action asked for)
        self.username = username
        self.secret = secret
        self.key = workdir / "token.key"
        self.cert = workdir / "token.crt"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=gpurl-test-token", "-keyout", str(self.key),
                        "-out", str(self.cert)], check=True, capture_output=True)
        der = subprocess.run(["openssl", "x509", "-in", str(self.cert), "-outform", "DER"],
                             check=True, capture_output=True).stdout
        self._x5c = base64.b64encode(der).decode()
        self.requests: list[dict[str, object]] = []
        self.authorizations: list[str] = []  # each request's Authorization header, as sent
        service = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query)
                auth = self.headers.get("Authorization", "")
                user = None
                if auth.startswith("Basic "):
                    name, _, password = base64.b64decode(auth[6:]).decode().partition(":")
                    if name == service.username and password == service.secret:
                        user = name
                service.requests.append({"scope": query.get("scope", [""])[0],
                                         "service": query.get("service", [""])[0],
                                         "authorized": user is not None})
                service.authorizations.append(auth)
                if user is None:
                    body = b'{"errors":[{"code":"UNAUTHORIZED","message":"bad credentials"}]}'
                    self.send_response(401)
                else:
                    token = service.sign(user, query.get("scope", []))
                    body = json.dumps({"token": token, "expires_in": 300}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.realm = f"http://127.0.0.1:{self.port}/token"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def auth_yaml(self) -> str:
        return ("auth:\n  token:\n"
                f"    realm: {self.realm}\n    service: {SERVICE}\n    issuer: {ISSUER}\n"
                f"    rootcertbundle: {self.cert}\n")

    def sign(self, user: str, scopes: list[str]) -> str:
        access = []
        for scope in scopes:
            kind, name, actions = scope.split(":", 2) if scope.count(":") >= 2 else ("", "", "")
            asked = actions.split(",")
            granted = [a for a in asked if self.grants is None or a in self.grants]
            access.append({"type": kind, "name": name, "actions": granted})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [self._x5c]}
        claims = {"iss": ISSUER, "sub": user, "aud": SERVICE, "exp": now + 300,
                  "nbf": now - 10, "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = ".".join(_b64url(json.dumps(part).encode()) for part in (header, claims))
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                                   input=signing_input.encode(), check=True,
                                   capture_output=True).stdout
        return f"{signing_input}.{_b64url(signature)}"

    def __enter__(self) -> TokenService:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
