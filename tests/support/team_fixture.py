"""The team fixture (examples/team): a scratch repository laid out like the team's current one,
and the two loopback servers its lock was resolved against.

Its lock names three kinds of files, as the team's does:
- "native" wheels (a fake vLLM fork and flash-attn, one per machine) as `[tool.uv.sources]` URLs
  of release assets, served by a plain file server on 127.0.0.1:FILES_PORT;
- a torch from the package index whose pages carry no hash (PyTorch's mirror serves none);
- a handful of small pure wheels from PyPI, served by the same index, 127.0.0.1:INDEX_PORT.

The fake wheels are made here, when served (they are not committed: *.whl is ignored, and the
code below is their source): byte-identical on every run, so the hashes the lock records stay
valid. They hold a tiny pure-Python module each; nothing runs them on aarch64 here.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpurl_tasks.local.download import DownloadTarget, download
from tests.support.git import git
from tests.support.pyindex import _QuietHandler, make_wheel, serve_index

__all__ = [
    "FILES_PORT",
    "INDEX_PORT",
    "LOCK_BUMP",
    "MACHINES",
    "PYPI_PINS",
    "TEAM",
    "TeamServers",
    "build_fake_wheels",
    "fetch_pypi_wheels",
    "serve_team",
    "team_repository",
]

_ROOT = Path(__file__).resolve().parents[2]
TEAM = _ROOT / "examples" / "team"
FILES_PORT = 5009  # the release-asset file server (the native wheels' URLs)
INDEX_PORT = 5010  # the package index (torch without hashes, the PyPI wheels)
MACHINES = ("x86_64", "aarch64")
# Small pure wheels from PyPI (two einops: the `cpu` extra pins the older one, a real conflict).
PYPI_PINS = ("einops==0.7.0", "einops==0.8.1", "filelock==3.16.1", "packaging==24.2",
             "typing-extensions==4.12.2")
# A newer release for a lock bump (`uv lock --upgrade-package filelock`), served only where a
# test asks for it: a fresh lock would pick it, and the committed lock was resolved without it.
LOCK_BUMP = "filelock==3.17.0"
VLLM_VERSION = "0.0.0.dev20260914+marin.c0ffee1.cu132"  # a fork build, as the team's is named


def _manylinux(machine: str) -> str:
    return f"manylinux_2_28_{machine}"


def build_fake_wheels(dest: Path) -> list[Path]:
    """Write the fixture's own wheels into dest/releases (URL sources) and dest/index (the
    hashless torch). Fixed contents and zip times: the same bytes on every run."""
    made = []
    for machine in MACHINES:
        made.append(make_wheel(dest / "releases", "vllm", VLLM_VERSION,
                               requires=["torch==2.13.0", "packaging>=24"],
                               tag=f"cp38-abi3-{_manylinux(machine)}"))
        made.append(make_wheel(dest / "releases", "flash-attn", "2.8.3",
                               requires=["torch", "einops"],
                               tag=f"cp311-cp311-{_manylinux(machine)}"))
        made.append(make_wheel(dest / "index", "torch", "2.13.0+cu132",
                               requires=["filelock", "typing-extensions>=4.10"],
                               tag=f"cp311-cp311-{_manylinux(machine)}"))
    return made


def team_repository(dest: Path) -> Path:
    """examples/team/'s tracked files as a repository of its own at `dest`, one commit (the
    repository before gpurl: what `gpurl init` adopts)."""
    fixture = TEAM.relative_to(_ROOT)
    for name in filter(None, git(_ROOT, "ls-files", "-z", str(fixture)).split("\0")):
        target = dest / Path(name).relative_to(fixture)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((_ROOT / name).read_bytes())
    git(dest, "init", "-q")
    git(dest, "add", "-A")
    git(dest, "commit", "-qm", "an existing repository")
    return dest


def fetch_pypi_wheels(dest: Path, *, extra: tuple[str, ...] = ()) -> list[Path]:
    """The PyPI pins, and the `extra` ones, into `dest` (reused when there), by pip, with
    PyPI's own bytes."""
    return download((*PYPI_PINS, *extra), dest, target=DownloadTarget())


@dataclass(frozen=True, kw_only=True)
class TeamServers:
    index_url: str  # http://127.0.0.1:INDEX_PORT/simple
    files_url: str  # http://127.0.0.1:FILES_PORT


@contextlib.contextmanager
def serve_team(pypi: Path, scratch: Path) -> Iterator[TeamServers]:
    """Both servers on their fixed ports until the block ends: the index serves `pypi`'s
    wheels and the fake torch (no hash), the file server the fake release wheels (all made
    under `scratch`)."""
    build_fake_wheels(scratch / "fake")
    wheels = scratch / "index-wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    for source in [*pypi.glob("*.whl"), *(scratch / "fake" / "index").glob("*.whl")]:
        shutil.copy2(source, wheels / source.name)
    handler = functools.partial(_QuietHandler, directory=str(scratch / "fake" / "releases"))
    files = http.server.ThreadingHTTPServer(("127.0.0.1", FILES_PORT), handler)
    thread = threading.Thread(target=files.serve_forever, daemon=True)
    thread.start()
    try:
        with serve_index(wheels, scratch / "index", port=INDEX_PORT,
                         unhashed=frozenset({"torch"})) as index_url:
            yield TeamServers(index_url=index_url, files_url=f"http://127.0.0.1:{FILES_PORT}")
    finally:
        files.shutdown()
        files.server_close()
