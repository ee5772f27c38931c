"""A PEP 503 simple index on 127.0.0.1, served from a directory of wheels and sdists.

Local builds run with the host network, so a RUN inside the build reaches this index and
never needs the internet. `uv sync --frozen` installs straight from the URLs recorded in
uv.lock, so the scheme is: the demo workspace is locked against this index at a fixed URL
(`build.index-url`, e.g. http://127.0.0.1:5006/simple) and the build serves the same
directory at the same URL. Files are linked as `/files/<filename>#sha256=<hex>`, so the lock
records `http://127.0.0.1:PORT/files/<filename>` with the same hashes PyPI publishes.

The directory is filled on the host by `local/download.py`.
"""

from __future__ import annotations

import contextlib
import fcntl
import html
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from gpurl_tasks.errors import BuildError, ConfigError
from gpurl_tasks.files import sha256_of
from gpurl_tasks.imageref import is_loopback

__all__ = [
    "JSON_TYPE",
    "IndexServer",
    "port_of",
    "project_of",
    "release_of",
    "render_project",
    "render_project_json",
    "render_root",
    "serve",
    "shared",
]


def project_of(filename: str) -> str | None:
    """The normalized project name of a wheel or sdist file name; None for anything else."""
    release = release_of(filename)
    return release[0] if release else None


def render_root(projects: Iterable[str]) -> str:
    """The /simple/ page: one link per project."""
    links = "".join(f'<a href="{html.escape(p)}/">{html.escape(p)}</a>\n'
                    for p in sorted(set(projects)))
    return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"


def render_project(files: Iterable[tuple[str, str]]) -> str:
    """A /simple/<project>/ page from (filename, sha256) pairs, links relative to it."""
    links = "".join(
        f'<a href="../../files/{html.escape(name)}#sha256={digest}">{html.escape(name)}</a>\n'
        for name, digest in sorted(files)
    )
    return f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n"


JSON_TYPE = "application/vnd.pypi.simple.v1+json"


def render_project_json(project: str, files: Iterable[tuple[str, str, int]]) -> str:
    """A PEP 691 JSON project page with PEP 700 sizes, so uv.lock records each file's `size`
    (the layer planner needs them; the HTML page cannot carry them)."""
    entries = sorted(files)
    versions = sorted({_version_of(name) for name, _, _ in entries} - {""})
    return json.dumps({
        "meta": {"api-version": "1.1"},
        "name": project,
        "versions": versions,
        "files": [{"filename": name, "url": f"../../files/{name}", "hashes": {"sha256": digest},
                   "size": size} for name, digest, size in entries],
    }, indent=1, sort_keys=True) + "\n"


def release_of(filename: str) -> tuple[str, Version] | None:
    """(normalized project name, version) of a wheel or sdist file name; None for anything
    else: what a file in the index directory provides."""
    try:
        if filename.endswith(".whl"):
            name, version, _, _ = parse_wheel_filename(filename)
            return str(name), version
        if filename.endswith((".tar.gz", ".zip")):
            name, version = parse_sdist_filename(filename)
            return str(name), version
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


def _version_of(filename: str) -> str:
    release = release_of(filename)
    return str(release[1]) if release else ""


def port_of(index_url: str) -> int:
    """The port of a loopback index URL like http://127.0.0.1:5006/simple."""
    parts = urlsplit(index_url)
    if parts.scheme != "http" or not is_loopback(parts.hostname or "") \
            or parts.port is None or parts.path.rstrip("/") != "/simple":
        raise ConfigError(f"build.index-url {index_url!r} is not a loopback index",
                          hint="use http://127.0.0.1:PORT/simple for the local path")
    return parts.port


class _Catalog:
    """The directory's files by project, with sha256s computed once per file version."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._hashes: dict[tuple[str, int, int], str] = {}
        self._lock = threading.Lock()

    def files(self) -> dict[str, list[tuple[str, str, int]]]:
        """project -> [(filename, sha256, size)]."""
        by_project: dict[str, list[tuple[str, str, int]]] = {}
        for path in sorted(self.directory.iterdir()):
            project = project_of(path.name) if path.is_file() else None
            if project is not None:
                by_project.setdefault(project, []).append(
                    (path.name, self._sha256(path), path.stat().st_size))
        return by_project

    def _sha256(self, path: Path) -> str:
        stat = path.stat()
        key = (path.name, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            if key not in self._hashes:
                self._hashes[key] = sha256_of(path)
            return self._hashes[key]


def _handler(catalog: _Catalog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(body=True)

        def do_HEAD(self) -> None:
            self._answer(body=False)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: a build fetches hundreds of files."""

        def _answer(self, *, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            parts = [p for p in path.split("/") if p]
            if parts == ["simple"]:
                self._send_text(render_root(catalog.files()), body)
            elif len(parts) == 2 and parts[0] == "simple":
                files = catalog.files().get(canonicalize_name(parts[1]))
                if files is None:
                    self.send_error(404, "no such project")
                elif parts[1] != canonicalize_name(parts[1]):
                    self.send_response(301)
                    self.send_header("Location", f"/simple/{canonicalize_name(parts[1])}/")
                    self.end_headers()
                elif JSON_TYPE in self.headers.get("Accept", ""):
                    self._send_text(render_project_json(parts[1], files), body, JSON_TYPE)
                else:
                    self._send_text(render_project([(n, h) for n, h, _ in files]), body)
            elif len(parts) == 2 and parts[0] == "files" and project_of(parts[1]) \
                    and (catalog.directory / parts[1]).is_file():
                self._send_file(catalog.directory / parts[1], body)
            else:
                self.send_error(404)

        def _send_text(self, text: str, body: bool, kind: str = "text/html") -> None:
            data = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", f"{kind}; charset=utf-8" if kind == "text/html"
                             else kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def _send_file(self, path: Path, body: bool) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(path.stat().st_size))
            self.end_headers()
            if body:
                with path.open("rb") as handle:
                    shutil.copyfileobj(handle, self.wfile)

    return Handler


@dataclass(frozen=True, kw_only=True)
class IndexServer:
    """A running index: `url` is what `--index-url` / `[[tool.uv.index]]` take."""

    directory: Path
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/simple"


@contextlib.contextmanager
def serve(directory: Path, *, port: int = 0) -> Iterator[IndexServer]:
    """Serve `directory` on 127.0.0.1:`port` (0: a free port) in a thread until the block ends."""
    if not directory.is_dir():
        raise BuildError(f"package directory {directory} does not exist",
                         hint="fill it first (invoke setup-local downloads the demo's wheels)")
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(_Catalog(directory)))
    except OSError as exc:
        raise BuildError(f"cannot serve the package index on 127.0.0.1:{port}: {exc.strerror}",
                         hint="another index may already be serving there; stop it or "
                              "choose another port in build.index-url") from None
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="gpurl-pyindex", daemon=True)
    thread.start()
    try:
        yield IndexServer(directory=directory, port=server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)




def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """The per-port lock (read-only is enough for flock, so another user's file serves)."""
    fd = os.open(directory / "lock", os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _other_leases(directory: Path) -> list[Path]:
    """The leases of live processes (a killed build's lease is removed here)."""
    live = []
    for lease in directory.glob("lease-*"):
        pid = lease.name.split("-")[1]
        if pid.isdigit() and _alive(int(pid)):
            live.append(lease)
        else:
            with contextlib.suppress(OSError):  # another user's, in the sticky directory
                lease.unlink(missing_ok=True)
    return live


@contextlib.contextmanager
def shared(directory: Path, *, port: int, answers: Callable[[], bool],
           on_wait: Callable[[str], None] | None = None, poll: float = 1.0,
           max_wait: float = 2 * 3600) -> Iterator[None]:
    """The index on `port` for as long as this block runs, shared by every build on the machine.

    The first build serves it; a build that finds it answering uses it. Each holds a lease
    (a file named by its pid, under a per-port lock), and the one serving keeps serving, after
    its own block ends, until no live lease is left (at most `max_wait` seconds, saying so on
    `on_wait`; the tasks pass their progress line): two builds at once, or a test run beside
    a user's build, no longer lose their index when the other ends first.
    """
    leases = Path(tempfile.gettempdir()) / f"gpurl-index-{port}"
    with contextlib.suppress(FileExistsError):
        leases.mkdir()
        leases.chmod(0o1777)  # every user's builds share it, as /tmp
    lease = leases / f"lease-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    with contextlib.ExitStack() as serving:
        serves_here = False
        try:
            with _locked(leases):
                lease.touch()
                serves_here = not answers()
                if serves_here:
                    serving.enter_context(serve(directory, port=port))
            yield
        finally:
            lease.unlink(missing_ok=True)
            waited, deadline = False, time.monotonic() + max_wait
            while serves_here:
                with _locked(leases):
                    others = _other_leases(leases)
                    if not others or time.monotonic() > deadline:
                        serving.close()  # under the lock: no build joins a closing index
                        break
                if not waited and on_wait is not None:
                    on_wait(f"keeping the package index on 127.0.0.1:{port} up for "
                        f"{len(others)} other build(s) on this machine")
                    waited = True
                time.sleep(poll)
