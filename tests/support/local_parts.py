"""Find the real local parts integration tests need; skip visibly, or fail under CI=true.

`.ci/run` installs and starts every part, so in CI a missing part is a failure, never a skip.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from gpurl_tasks.config import load_config
from gpurl_tasks.local.from_source import setup_kaniko

__all__ = ["BASE_IMAGE", "CRANE_ARCHIVE", "build_source_wheel", "docker_ready", "free_port", "need",
           "non_loopback_address", "pure_wheel", "python312", "real_crane", "shellcheck", "uv"]


def need(present: object, reason: str) -> None:
    """Skip (or under CI fail) the calling test when `present` is falsy."""
    if present:
        return
    if os.environ.get("CI"):
        pytest.fail(f"required local part missing in CI: {reason}")
    pytest.skip(reason)


def shellcheck() -> str:
    """The shellcheck binary (the lint and test groups install it beside the interpreter)."""
    found = shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent))
    need(found, "shellcheck not installed (the lint and test groups install it)")
    return str(found)


# The local path's base image (Debian bookworm's python3.11), as `invoke setup-local -p multiarch`
# makes it (gpurl_tasks/local/base_image.py).
BASE_IMAGE = "gpurl/bookworm-python:3.11"


def docker_ready() -> None:
    """Skip (or under CI fail) unless a Docker engine answers and holds BASE_IMAGE."""
    need(shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True,
                                                   check=False).returncode == 0,
         "no Docker engine answers here")
    need(subprocess.run(["docker", "image", "inspect", BASE_IMAGE], capture_output=True,
                        check=False).returncode == 0,
         f"no {BASE_IMAGE} image: run `invoke setup-local -p multiarch`")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (others run tests on this machine too)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def non_loopback_address() -> str:
    """An IPv4 address of this machine that is not loopback (the one its default route uses;
    a UDP connect sends nothing)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("198.51.100.1", 9))  # TEST-NET-2: only the route is looked up
            address = str(sock.getsockname()[0])
    except OSError:
        address = ""
    need(address and not address.startswith("127."), "this machine has no non-loopback IPv4")
    return address


def python312() -> str:
    """The Python 3.12 interpreter (SkyRL's locks require ==3.12.*)."""
    from gpurl_tasks.cluster.iris_release import find_python312

    found = find_python312()
    need(found, "no Python 3.12 (the SkyRL lock requires ==3.12.*)")
    assert found is not None
    return found


def uv() -> str:
    """The uv on PATH."""
    found = shutil.which("uv")
    need(found, "uv is not on PATH")
    assert found is not None
    return found


def build_source_wheel(source: Path, python: str, dest: Path, *, arch_list: str = "") -> Path:
    """The wheel a `./path` wheel spec's source builds into, by its real build backend (PEP
    517, as the wheel-builder stage's `pip wheel` runs it) on CPython `python` (the target's
    version), given TORCH_CUDA_ARCH_LIST `arch_list` as the wheel-builder gives its compile.
    A copy is built, so the checkout gets no build/ or .egg-info."""
    copy = dest / "src" / source.name
    shutil.copytree(source, copy)
    out = dest / "wheels"
    done = subprocess.run([uv(), "build", "--wheel", "--python", python, "--out-dir", str(out),
                           str(copy)], capture_output=True, text=True, check=False, timeout=300,
                          env={**os.environ, "TORCH_CUDA_ARCH_LIST": arch_list})
    assert done.returncode == 0, done.stderr
    (wheel,) = out.glob("*.whl")
    return wheel


_REPO = Path(__file__).resolve().parents[2]
# Where `invoke setup-kaniko` caches the crane release archive it builds (the kaniko e2e too).
CRANE_ARCHIVE = _REPO / ".cache" / "gpurl" / "builders" / "crane"


def real_crane(out: Path) -> Path:
    """Real crane, from the release archive `invoke setup-kaniko` builds from its source
    archive (../shared): built here (crane alone, cached for the kaniko e2e) where the
    archives are; skipped (failed under CI) where no crane can be had."""
    archives = sorted(CRANE_ARCHIVE.glob("*.tar.gz")) if CRANE_ARCHIVE.is_dir() else []
    sources = load_config(_REPO, profile="demo", env={}).cluster.source_archives
    if not archives and sources.is_dir():
        archives = [setup_kaniko(CRANE_ARCHIVE.parent, sources, "127.0.0.1:5005",
                                 executors=()).crane_archive]
    need(archives, f"no crane release archive under {CRANE_ARCHIVE} and no source archives at "
         f"{sources} to build it from (invoke setup-kaniko)")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archives[0]) as archive:
        archive.extract("crane", out, filter="data")
    return out / "crane"


def pure_wheel(directory: Path, name: str) -> Path:
    """A pure-Python wheel of one module, made here (uv installs it from its path, offline)."""
    files = {f"{name}/__init__.py": f"NAME = {name!r}\n".encode(),
             f"{name}-0.1.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                               "Version: 0.1\n".encode(),
             f"{name}-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: gpurl-test\n"
                                           b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip('=')},"
        f"{len(data)}\n" for path, data in files.items()) + f"{name}-0.1.dist-info/RECORD,,\n"
    wheel = directory / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in {**files, f"{name}-0.1.dist-info/RECORD": record.encode()}.items():
            archive.writestr(path, data)
    return wheel


def named_wheel(directory: Path, filename: str) -> Path:
    """A wheel under the file name `filename` (`dist-version-py-abi-platform.whl`), which uv
    installs wherever a wheel of that name would install: a stand-in for a compiled wheel."""
    from tests.support.pyindex import make_wheel

    dist, version, *_, python, abi, platform = filename.removesuffix(".whl").split("-")
    made = make_wheel(directory, dist, version, tag=f"{python}-{abi}-{platform}")
    assert made.name == filename, (made.name, filename)
    return made
