"""Find the real local parts integration tests need; skip visibly, or fail under CI=true.

`.ci/run` installs and starts every part, so in CI a missing part is a failure, never a skip.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

__all__ = ["BASE_IMAGE", "build_source_wheel", "docker_ready", "free_port", "need",
           "non_loopback_address", "python312", "shellcheck", "uv"]


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
