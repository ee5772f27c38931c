"""A fault-injecting HTTP proxy in front of the real registry.

Everything is forwarded to the real registry except the faults a test scripts: a status
(429 with Retry-After, 500), a truncated body (full Content-Length, half the bytes, then the
connection closes), a corrupted body (one byte flipped, headers unchanged), a connection
dropped without any answer, a redirect to itself (a loop), a body labelled gzip that is not,
or a document of the test's choosing ("serve": `body` with its own Docker-Content-Digest).
The log records when each request arrived, so a test can check that Retry-After was honoured.

Besides scripted faults, `Rates` injects faults at random but reproducibly: each request is
keyed by its method, its path (an upload session's id left out), its digest and body length,
and how many times that key was seen; a hash of the seed and the key decides, so the same
seed gives the same faults whatever order the threads run in. The faults: a 5xx on a blob
upload request or a manifest PUT, a connection reset in the middle of an upload's body (half
of it read, then an RST), a 429 with Retry-After. At most `streak` faults in a row hit one key,
so a client retrying more often than that always gets through.

With `tls` the proxy serves HTTPS with that CA's certificate for 127.0.0.1 (and talks HTTPS to
an upstream that serves it, `upstream_tls`), so real clients (gpurl's RegistryClient, crane)
talk to it as to the TLS registry; the client's Host header is passed on, so the registry's
upload Locations point at the proxy and every request of an upload goes through it.
"""

from __future__ import annotations

import collections
import dataclasses
import email.message
import hashlib
import http.client
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.support.tls import LocalCA

__all__ = ["Fault", "FaultProxy", "Rates"]

_SESSION = re.compile(r"/blobs/uploads/[^/?]+")


@dataclasses.dataclass(frozen=True)
class Rates:
    """Seeded fault rates (0 to 1); `only_agent`: only requests whose User-Agent holds it."""

    seed: int = 0
    upload_5xx: float = 0.0  # a request of a blob upload (POST, PATCH, PUT) answered 503
    manifest_put_5xx: float = 0.0  # a manifest PUT answered 500
    reset_mid_body: float = 0.0  # an upload's PATCH or PUT with a body: reset halfway through
    too_many: float = 0.0  # any request answered 429 with Retry-After
    retry_after: str = "1"
    streak: int = 2
    only_agent: str = ""

    def draw(self, key: str, kind: str) -> float:
        digest = hashlib.sha256(f"{self.seed}|{kind}|{key}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2.0**64


@dataclasses.dataclass
class Fault:
    """Apply `kind` to the next `times` requests whose path contains `path`."""

    path: str
    kind: str  # "429" | "500" | "503" | "reset" | "truncate" | "corrupt" | "drop" | "loop" | "gzip" | "serve"
    times: int = 1
    retry_after: str | Callable[[], str] = "1"  # a callable: its value when answered (a date)
    method: str | None = None
    body: bytes = b""  # "serve": the document to answer with
    content_type: str = "application/vnd.oci.image.manifest.v1+json"


class _Server(ThreadingHTTPServer):
    """A client that hangs up mid-answer (crane killed, a retry racing ahead) is no error."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass


class FaultProxy:
    def __init__(self, upstream_port: int, *, tls: LocalCA | None = None,
                 upstream_tls: bool | None = None, rates: Rates | None = None) -> None:
        self.upstream_port = upstream_port
        self.faults: list[Fault] = []
        self.rates = rates
        self.injected: collections.Counter[str] = collections.Counter()
        self.log: list[tuple[float, str, str, str]] = []  # (time, method, path, what happened)
        self._lock = threading.Lock()
        self._seen: collections.Counter[str] = collections.Counter()
        self._streaks: collections.Counter[str] = collections.Counter()
        self._upstream_tls = (tls is not None) if upstream_tls is None else upstream_tls
        self._client_context = tls.context() if tls else None
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                fault = proxy._take(self.command, self.path) or proxy._drawn(
                    self.command, self.path, self.headers)
                proxy.log.append((time.monotonic(), self.command, self.path,
                                  fault.kind if fault else "forward"))
                if fault and fault.kind == "reset":
                    self._reset_mid_body()
                    return
                if fault and fault.kind == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault and fault.kind in ("loop", "gzip", "serve"):
                    self._answer(fault)
                    return
                if fault and fault.kind in ("429", "500", "503"):
                    self._read_body()  # the request is answered, whole, as a registry would
                    body = b'{"errors":[{"code":"TOOMANYREQUESTS"}]}' if fault.kind == "429" \
                        else b'{"errors":[{"code":"UNKNOWN"}]}'
                    self.send_response(int(fault.kind))
                    if fault.kind == "429":
                        after = fault.retry_after
                        self.send_header("Retry-After", after() if callable(after) else after)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(body)
                    return
                payload = self._read_body()
                upstream = proxy._upstream()
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("transfer-encoding", "content-length")}
                if payload is not None:
                    headers["Content-Length"] = str(len(payload))
                upstream.request(self.command, self.path, body=payload, headers=headers)
                answer = upstream.getresponse()
                body = answer.read()
                upstream.close()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length",
                                           "date", "server"):
                        self.send_header(key, value)
                declared = int(answer.getheader("Content-Length") or len(body))
                self.send_header("Content-Length", str(declared))
                if fault and fault.kind == "truncate":
                    self.send_header("Connection", "close")
                self.end_headers()
                if self.command == "HEAD":
                    return
                if fault and fault.kind == "truncate":
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if fault and fault.kind == "corrupt" and body:
                    body = body[:-2] + bytes([body[-2] ^ 0x01]) + body[-1:]
                self.wfile.write(body)

            def _read_body(self) -> bytes | None:
                """The request's body, whether sent with a Content-Length or chunked."""
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    parts: list[bytes] = []
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return b"".join(parts)
                        parts.append(self.rfile.read(size))
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else None

            def _reset_mid_body(self) -> None:
                """Read half the body the client sends, then reset the connection (RST)."""
                length = int(self.headers.get("Content-Length") or 0)
                if not length:  # chunked: half of its first chunk
                    length = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                self.rfile.read(length // 2)
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                           struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def _answer(self, fault: Fault) -> None:
                body = b"" if fault.kind == "loop" else (
                    fault.body if fault.kind == "serve" else b"this is not gzip at all")
                self.send_response(307 if fault.kind == "loop" else 200)
                if fault.kind == "loop":
                    self.send_header("Location", self.path)
                if fault.kind == "gzip":
                    self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Type", fault.content_type)
                self.send_header("Docker-Content-Digest",
                                 "sha256:" + hashlib.sha256(body).hexdigest())
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        self._server = _Server(("127.0.0.1", 0), Handler)
        if tls is not None:
            serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            serving.load_cert_chain(str(tls.cert), str(tls.key))
            self._server.socket = serving.wrap_socket(self._server.socket, server_side=True)
        self.port = self._server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"{'https' if tls else 'http'}://{self.host}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _upstream(self) -> http.client.HTTPConnection:
        if self._upstream_tls:
            return http.client.HTTPSConnection("127.0.0.1", self.upstream_port, timeout=60,
                                               context=self._client_context)
        return http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)

    def _drawn(self, method: str, path: str, headers: email.message.Message) -> Fault | None:
        """The fault `rates` puts on this request, if any (see the module's docstring)."""
        rates = self.rates
        if rates is None or rates.only_agent not in str(headers.get("User-Agent")):
            return None
        split = urlsplit(path)
        upload, manifest = "/blobs/uploads/" in split.path, "/manifests/" in split.path
        length = headers.get("Content-Length") or (
            "chunked" if headers.get("Transfer-Encoding") else "0")
        key = (f"{method} {_SESSION.sub('/blobs/uploads/*', split.path)} "
               f"{parse_qs(split.query).get('digest', [''])[0]} {length}")
        with self._lock:
            self._seen[key] += 1
            key = f"{key} #{self._seen[key]}"
            base = key.rsplit(" #", 1)[0]
            if self._streaks[base] >= rates.streak:
                self._streaks[base] = 0
                return None
            chances = [("429", rates.too_many, True),
                       ("reset", rates.reset_mid_body,
                        upload and method in ("PATCH", "PUT") and length != "0"),
                       ("503", rates.upload_5xx, upload),
                       ("500", rates.manifest_put_5xx, manifest and method == "PUT")]
            for kind, rate, applies in chances:
                if applies and rates.draw(key, kind) < rate:
                    self._streaks[base] += 1
                    self.injected[kind] += 1
                    return Fault(path="", kind=kind, retry_after=rates.retry_after)
            self._streaks[base] = 0
        return None

    def inject(self, fault: Fault) -> None:
        with self._lock:
            self.faults.append(fault)

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fault.path in path and fault.method in (None, method):
                    fault.times -= 1
                    return fault
        return None

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._server.shutdown()
        self._server.server_close()
