"""A real registry on 127.0.0.1: Debian's `docker-registry` (CNCF distribution) as a subprocess.

Each instance gets a random free port, its own storage directory and config file, and can be
stopped and started again on the same port (for "registry went away mid-run" tests).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

__all__ = ["REGISTRY_BIN", "RegistryServer", "free_port", "require_registry", "running_registry"]

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"


def require_registry() -> None:
    """Skip (or fail under CI) when the registry binary is absent."""
    if Path(REGISTRY_BIN).exists():
        return
    message = "docker-registry is not installed (apt-get install -y docker-registry)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RegistryServer:
    """One registry process; `auth_yaml` is an optional `auth:` section (indented YAML)."""

    def __init__(self, workdir: Path, *, storage: Path | None = None, auth_yaml: str = "",
                 port: int | None = None) -> None:
        self.workdir = workdir
        self.storage = storage or workdir / "storage"
        self.port = port or free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.url = f"http://{self.host}"
        self.config = workdir / "config.yml"
        self.log = workdir / "registry.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self.storage.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            "version: 0.1\n"
            "log:\n  level: warn\n"
            "storage:\n"
            f"  filesystem:\n    rootdirectory: {self.storage}\n"
            "  delete:\n    enabled: true\n"
            "http:\n"
            f"  addr: 127.0.0.1:{self.port}\n"
            + auth_yaml
        )

    def start(self) -> None:
        with self.log.open("ab") as log:
            self._proc = subprocess.Popen([REGISTRY_BIN, "serve", str(self.config)],
                                          stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"registry exited: {self.log.read_text()[-2000:]}")
            try:
                httpx.get(f"{self.url}/v2/", timeout=1)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("registry did not come up within 20s")

    def stop(self) -> None:
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None


@contextlib.contextmanager
def running_registry(workdir: Path, **kwargs: object) -> Iterator[RegistryServer]:
    require_registry()
    workdir.mkdir(parents=True, exist_ok=True)
    server = RegistryServer(workdir, **kwargs)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()
