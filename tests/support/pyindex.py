"""Test support: build real wheels in-process and serve them as a PEP 503 index on 127.0.0.1.

The wheels are genuine (METADATA, WHEEL, RECORD with hashes) so real uv resolves, locks and
installs them; payload bytes are random so their compressed size is predictable.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import http.server
import io
import json
import os
import threading
import zipfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from packaging.utils import canonicalize_name

__all__ = ["make_wheel", "serve_index"]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def make_wheel(
    directory: Path,
    name: str,
    version: str,
    *,
    requires: Sequence[str] = (),
    payload_bytes: int = 0,
    seed: int = 0,
    tag: str = "py3-none-any",
    extra_files: Mapping[str, bytes] | None = None,
    console_scripts: Mapping[str, str] | None = None,
) -> Path:
    """Write `name-version-TAG.whl` with `payload_bytes` of incompressible data.

    `tag` (one `python-abi-platform` triple) goes into the filename and the WHEEL file; any
    tag but the pure default marks the wheel as platlib, as a compiled wheel is.
    `extra_files` (path in the wheel -> bytes) and `console_scripts` (name -> `module:func`)
    make a wheel with more than one package directory, a `.pth` file or entry points.
    """
    dist = name.replace("-", "_")
    module = f"{dist}/__init__.py"
    files: dict[str, bytes] = {module: f"VERSION = {version!r}\n".encode()}
    if payload_bytes:
        rng = hashlib.sha256(f"{name}{version}{seed}".encode()).digest()
        blocks = (payload_bytes + 31) // 32
        data = b"".join(hashlib.sha256(rng + i.to_bytes(8, "big")).digest() for i in range(blocks))
        files[f"{dist}/payload.bin"] = data[:payload_bytes]
    files.update(extra_files or {})
    info = f"{dist}-{version}.dist-info"
    if console_scripts:
        files[f"{info}/entry_points.txt"] = ("[console_scripts]\n" + "".join(
            f"{script} = {target}\n" for script, target in console_scripts.items())).encode()
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    metadata += [f"Requires-Dist: {req}" for req in requires]
    files[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    purelib = "true" if tag == "py3-none-any" else "false"
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: gpurl-tests\n"
                              f"Root-Is-Purelib: {purelib}\nTag: {tag}\n").encode()
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{dist}-{version}-{tag}.whl"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, data in files.items():
            info_ = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            info_.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info_, data)
    target.write_bytes(buffer.getvalue())
    return target


def _write_simple_index(wheels: Path, root: Path, unhashed: Collection[str] = ()) -> None:
    """PEP 691 JSON pages (which carry file sizes, so uv records them in the lock). The
    projects named in `unhashed` are listed as PyTorch's mirror index lists its wheels: no
    hash, no size (uv then records a URL only)."""
    bare = {canonicalize_name(n) for n in unhashed}
    projects: dict[str, list[Path]] = {}
    for wheel in sorted(wheels.glob("*.whl")):
        projects.setdefault(canonicalize_name(wheel.name.split("-")[0]), []).append(wheel)
    simple = root / "simple"
    simple.mkdir(parents=True, exist_ok=True)
    meta = {"api-version": "1.1"}
    (simple / "index.json").write_text(json.dumps(
        {"meta": meta, "projects": [{"name": p} for p in sorted(projects)]}))
    for project, files in projects.items():
        page = simple / project
        page.mkdir(exist_ok=True)
        entries = [{"filename": f.name, "url": f"/files/{f.name}", "hashes": {}} if project in bare
                   else {"filename": f.name, "url": f"/files/{f.name}", "size": f.stat().st_size,
                         "hashes": {"sha256": hashlib.sha256(f.read_bytes()).hexdigest()}}
                   for f in files]
        (page / "index.json").write_text(json.dumps({"meta": meta, "name": project,
                                                     "files": entries}))
    files_dir = root / "files"
    files_dir.mkdir(exist_ok=True)
    for wheel in wheels.glob("*.whl"):
        target = files_dir / wheel.name
        if not target.exists():
            os.link(wheel, target)


@contextlib.contextmanager
def serve_index(wheels: Path, root: Path, *, port: int = 0,
                unhashed: Collection[str] = ()) -> Iterator[str]:
    """Serve `wheels` as a simple index on 127.0.0.1:`port` (0: a free one); yields the /simple URL.
    `unhashed`: projects served with no hash and no size."""
    _write_simple_index(wheels, root, unhashed)
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {**http.server.SimpleHTTPRequestHandler.extensions_map,
                      ".json": "application/vnd.pypi.simple.v1+json"}

    def send_head(self) -> Any:
        if self.path.startswith("/simple"):
            self.path = self.path.split("?", 1)[0].rstrip("/") + "/index.json"
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:
        pass
