"""Test support: a loopback HTTP file server that honours single Range requests (as CDNs do)."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["serve_files"]


@contextlib.contextmanager
def serve_files(root: Path, *, ranges: bool = True) -> Iterator[str]:
    """Serve `root` on a free 127.0.0.1 port; yields the base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def _body(self) -> bytes | None:
            path = root / self.path.lstrip("/")
            return path.read_bytes() if path.is_file() else None

        def do_HEAD(self) -> None:
            body = self._body()
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()

        def do_GET(self) -> None:
            body = self._body()
            if body is None:
                self.send_error(404)
                return
            spec = self.headers.get("Range")
            if ranges and spec and spec.startswith("bytes="):
                start_s, end_s = spec[6:].split("-")
                start, end = int(start_s), min(int(end_s), len(body) - 1)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(body)}")
                body = body[start:end + 1]
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
