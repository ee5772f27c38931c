"""The push probe with an opaque bearer token (what ghcr.io's token service hands out).

Stand-in, because neither GHCR nor a local registry that takes opaque tokens can run here:
the real `docker-registry` only accepts the JWTs tests/support/token_auth.py signs, whose
`access` claim the client reads, so the upload path is never taken against it. This loopback
server speaks exactly the distribution API's part of the contract the probe relies on:
`/v2/` answers 401 with a Bearer challenge, the realm issues an opaque token, and a blob
upload is started (202 + Location) for a token that may push, refused (403 DENIED) for one
that may not; the probe must cancel the upload it started (DELETE on the Location).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpurl_tasks.errors import RegistryError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.auth import Credentials
from gpurl_tasks.oci.registry import RegistryClient

PUSHER = "opaque-may-push-7f3a"
READER = "opaque-read-only-91c2"


class _Registry(ThreadingHTTPServer):
    requests: list[tuple[str, str, str]]  # (method, path, the bearer token or "")


class _Handler(BaseHTTPRequestHandler):
    server: _Registry

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, body: dict[str, object] | None = None,
                headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body or {}).encode()
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        auth = self.headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else ""
        self.server.requests.append((self.command, self.path, token))
        host = f"127.0.0.1:{self.server.server_address[1]}"
        if self.path.startswith("/token"):
            # the Basic credentials choose the opaque token, as a token service would
            user = "reader" if "cmVhZGVy" in auth else "pusher"  # base64("reader")
            self._answer(200, {"token": READER if user == "reader" else PUSHER})
        elif token not in (PUSHER, READER):
            scope = "repository:team/image:pull,push"
            self._answer(401, {"errors": [{"code": "UNAUTHORIZED"}]}, {
                "WWW-Authenticate": f'Bearer realm="http://{host}/token",'
                                    f'service="{host}",scope="{scope}"'})
        elif self.command == "POST" and self.path.endswith("/blobs/uploads/"):
            if token == READER:
                self._answer(403, {"errors": [{"code": "DENIED", "message": "no push"}]})
            else:
                self._answer(202, headers={"Location": "/v2/team/image/blobs/uploads/u-1"})
        elif self.command == "DELETE":
            self._answer(204)
        else:
            self._answer(200)

    do_GET = do_POST = do_DELETE = do_HEAD = _handle


@pytest.fixture
def registry() -> Iterator[_Registry]:
    server = _Registry(("127.0.0.1", 0), _Handler)
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _probe(server: _Registry, user: str) -> str:
    host = f"127.0.0.1:{server.server_address[1]}"
    credentials = Credentials(username=user, secret="the-users-pat")
    ref = parse_reference(f"{host}/team/image:doctor", default_host=host)
    with RegistryClient(host, credentials=credentials, insecure=True) as c:
        return c.push_access(ref)


def test_an_opaque_token_that_may_push_is_proved_by_an_upload_then_cancelled(
        registry: _Registry) -> None:
    assert _probe(registry, "pusher") == "upload"
    methods = [(m, p) for m, p, t in registry.requests if t == PUSHER]
    assert ("POST", "/v2/team/image/blobs/uploads/") in methods
    assert ("DELETE", "/v2/team/image/blobs/uploads/u-1") in methods  # nothing left behind
    assert not any(m == "PUT" for m, _, _ in registry.requests)  # nothing was pushed


def test_an_opaque_read_only_token_is_refused_in_one_line(registry: _Registry) -> None:
    with pytest.raises(RegistryError) as refused:
        _probe(registry, "reader")
    assert "\n" not in refused.value.message
    assert READER not in str(refused.value) and "the-users-pat" not in str(refused.value)
    assert not any(m == "DELETE" for m, _, _ in registry.requests)
