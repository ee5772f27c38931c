"""A PEP 503 simple index on 127.0.0.1, served from a directory of wheels and sdists.

Local builds run with the host network, so a RUN inside the build reaches this index and
never needs the internet. `uv sync --frozen` installs straight from the URLs recorded in
uv.lock, so the scheme is: the demo workspace is locked against this index at a fixed URL
(`build.index-url`, e.g. http://127.0.0.1:5006/simple) and the build serves the same
directory at the same URL. Files are linked as `/files/<filename>#sha256=<hex>`, so the lock
records `http://127.0.0.1:PORT/files/<filename>` with the same hashes PyPI publishes.

The directory is filled on the host with `pip download` of exact pins for the image's target
platform (pip is the ordinary client that can download wheels for another platform).
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import shutil
import sys
import threading
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from packaging.requirements import Requirement
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from gpurl_tasks import proc
from gpurl_tasks.config import TargetSpec
from gpurl_tasks.errors import BuildError, ConfigError
from gpurl_tasks.files import sha256_of
from gpurl_tasks.imageref import is_loopback
from gpurl_tasks.plan.target import platform_tags

__all__ = [
    "JSON_TYPE",
    "DownloadTarget",
    "IndexServer",
    "build_requires",
    "download",
    "lock_files",
    "missing_pins",
    "pins_from_lock",
    "port_of",
    "project_of",
    "render_project",
    "render_project_json",
    "render_root",
    "serve",
    "unmatched_lock_files",
    "unsatisfied",
]


def project_of(filename: str) -> str | None:
    """The normalized project name of a wheel or sdist file name; None for anything else."""
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[0])
        if filename.endswith((".tar.gz", ".zip")):
            return str(parse_sdist_filename(filename)[0])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return None
    return None


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


def _version_of(filename: str) -> str:
    try:
        if filename.endswith(".whl"):
            return str(parse_wheel_filename(filename)[1])
        return str(parse_sdist_filename(filename)[1])
    except (InvalidWheelFilename, InvalidSdistFilename):
        return ""


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


@dataclass(frozen=True, kw_only=True)
class DownloadTarget:
    """The platform the files are for: pip's --python-version/--platform/--implementation/--abi."""

    python_version: str = "3.11"
    platforms: tuple[str, ...] = ("manylinux_2_36_x86_64",)
    implementation: str = "cp"

    @classmethod
    def for_target(cls, *, python: str, glibc: str, arch: str) -> DownloadTarget:
        """Every manylinux tag a glibc `glibc` machine of `arch` accepts (pip does not expand
        `manylinux_2_X` platforms itself), newest first."""
        spec = TargetSpec(python=python, os="linux", arch=arch, glibc=glibc)
        tags = [t for t in platform_tags(spec) if t.startswith("manylinux")]
        return cls(python_version=python, platforms=tuple(tags))

    def pip_args(self) -> list[str]:
        nodot = self.python_version.replace(".", "")
        args = ["--python-version", self.python_version, "--implementation", self.implementation,
                "--abi", f"cp{nodot}", "--abi", "abi3", "--abi", "none"]
        for platform in self.platforms:
            args += ["--platform", platform]
        return args


def _pip() -> list[str]:
    """A pip that can run: this interpreter's, else python3's on PATH."""
    for python in (sys.executable, shutil.which("python3")):
        if python and proc.run_quiet([python, "-m", "pip", "--version"], check=False).returncode == 0:
            return [python, "-m", "pip"]
    raise BuildError("no pip available to download wheels", hint="apt-get install python3-pip")


def download(pins: Sequence[str], dest: Path, *, target: DownloadTarget,
             index_url: str | None = None, with_deps: bool = False,
             exact: bool = True) -> list[Path]:
    """`pip download` exact `name==version` pins as binary wheels for `target` into `dest`.

    `with_deps` also fetches their dependencies (to seed an index a new lock resolves
    against). Files already in `dest` are reused by pip. Returns the files now in `dest`.
    """
    bad = [p for p in pins if "==" not in p] if exact else []
    if bad:
        raise ConfigError(f"pins must be exact name==version, got {bad[0]!r}")
    dest.mkdir(parents=True, exist_ok=True)
    for batch in _rounds(pins):  # pip refuses two pins of one name in a call (seed vs lock)
        args = [*_pip(), "download", *([] if with_deps else ["--no-deps"]),
                "--only-binary=:all:", "--dest", str(dest), *target.pip_args(), *batch]
        if index_url:
            args += ["--index-url", index_url]
        proc.run_quiet(args, timeout=1800)
    return sorted(p for p in dest.iterdir() if project_of(p.name))


def _rounds(pins: Sequence[str]) -> list[list[str]]:
    """Pins split into calls that each name a project at most once, in order."""
    rounds: list[tuple[set[str], list[str]]] = []
    for pin in dict.fromkeys(pins):
        name = canonicalize_name(re.split(r"[=<>!~ \[;]", pin, maxsplit=1)[0])
        home = next((r for r in rounds if name not in r[0]), None)
        if home is None:
            rounds.append(home := (set(), []))
        home[0].add(name)
        home[1].append(pin)
    return [batch for _, batch in rounds]


def pins_from_lock(lock_text: str) -> list[str]:
    """`name==version` of every package in a uv.lock that comes from a registry (an index)."""
    data = tomllib.loads(lock_text)
    pins = []
    for package in data.get("package", []):
        source = package.get("source", {})
        if "registry" in source:
            pins.append(f"{package['name']}=={package['version']}")
    return sorted(set(pins))


def lock_files(lock_text: str) -> dict[str, set[str]]:
    """`name==version` -> the file names uv.lock records for it (wheels and sdist)."""
    files: dict[str, set[str]] = {}
    for package in tomllib.loads(lock_text).get("package", []):
        if "registry" not in package.get("source", {}):
            continue
        urls = [w.get("url", "") for w in package.get("wheels", [])]
        urls.append(package.get("sdist", {}).get("url", ""))
        names = {u.rsplit("/", 1)[-1] for u in urls if u}
        files.setdefault(f"{package['name']}=={package['version']}", set()).update(names)
    return files


def unmatched_lock_files(lock_text: str, directory: Path) -> list[str]:
    """Pins of the lock none of whose recorded files is in `directory`.

    `uv sync --frozen` fetches a file name the lock records; a wheel pip chose for the same
    version under another name (another platform tag) would not be found at build time.
    """
    present = {p.name for p in directory.iterdir()} if directory.is_dir() else set()
    return sorted(pin for pin, names in lock_files(lock_text).items()
                  if names and not names & present)


def _present(directory: Path) -> set[tuple[str, Version]]:
    have: set[tuple[str, Version]] = set()
    if directory.is_dir():
        for path in directory.iterdir():
            name, version = project_of(path.name), _version_of(path.name)
            if name and version:
                have.add((name, Version(version)))
    return have


def unsatisfied(requirements: Iterable[str], directory: Path) -> list[str]:
    """Requirement specs (`setuptools>=77`, `wheel`) no file in `directory` satisfies."""
    have = _present(directory)
    missing = []
    for text in requirements:
        req = Requirement(text)
        name = str(canonicalize_name(req.name))
        if not any(n == name and req.specifier.contains(v, prereleases=True) for n, v in have):
            missing.append(text)
    return missing


def build_requires(pyproject_text: str) -> list[str]:
    """`[build-system].requires` of a workspace: what building its own package needs."""
    table = tomllib.loads(pyproject_text).get("build-system", {})
    return [str(r) for r in table.get("requires", [])]


def missing_pins(pins: Iterable[str], directory: Path) -> list[str]:
    """The pins with no wheel or sdist of that name and version in `directory`."""
    have: set[tuple[str, Version]] = set()
    if directory.is_dir():
        for path in directory.iterdir():
            try:
                if path.name.endswith(".whl"):
                    parsed = parse_wheel_filename(path.name)[:2]
                elif path.name.endswith((".tar.gz", ".zip")):
                    parsed = parse_sdist_filename(path.name)
                else:
                    continue
            except (InvalidWheelFilename, InvalidSdistFilename):
                continue
            have.add((str(parsed[0]), Version(str(parsed[1]))))
    missing = []
    for pin in pins:
        name, _, version = pin.partition("==")
        if (str(canonicalize_name(name)), Version(version)) not in have:
            missing.append(pin)
    return missing
