"""A fault-injecting HTTP proxy in front of the real registry.

Everything is forwarded to the real registry except the faults a test scripts: a status
(429 with Retry-After, 500), a truncated body (full Content-Length, half the bytes, then the
connection closes), a corrupted body (one byte flipped, headers unchanged), a connection
dropped without any answer, a redirect to itself (a loop), a body labelled gzip that is not,
or a document of the test's choosing ("serve": `body` with its own Docker-Content-Digest).
The log records when each request arrived, so a test can check that Retry-After was honoured.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["Fault", "FaultProxy"]


@dataclasses.dataclass
class Fault:
    """Apply `kind` to the next `times` requests whose path contains `path`."""

    path: str
    kind: str  # "429" | "500" | "truncate" | "corrupt" | "drop" | "loop" | "gzip" | "serve"
    times: int = 1
    retry_after: str = "1"
    method: str | None = None
    body: bytes = b""  # "serve": the document to answer with
    content_type: str = "application/vnd.oci.image.manifest.v1+json"


class FaultProxy:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.faults: list[Fault] = []
        self.log: list[tuple[float, str, str, str]] = []  # (time, method, path, what happened)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                fault = proxy._take(self.command, self.path)
                proxy.log.append((time.monotonic(), self.command, self.path,
                                  fault.kind if fault else "forward"))
                if fault and fault.kind == "drop":
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault and fault.kind in ("loop", "gzip", "serve"):
                    self._answer(fault)
                    return
                if fault and fault.kind in ("429", "500"):
                    body = b'{"errors":[{"code":"TOOMANYREQUESTS"}]}' if fault.kind == "429" \
                        else b'{"errors":[{"code":"UNKNOWN"}]}'
                    self.send_response(int(fault.kind))
                    if fault.kind == "429":
                        self.send_header("Retry-After", fault.retry_after)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(body)
                    return
                length = int(self.headers.get("Content-Length") or 0)
                payload = self.rfile.read(length) if length else None
                upstream = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port,
                                                      timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
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

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self.host = f"127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

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
