"""A real registry on 127.0.0.1: Debian's `docker-registry` (CNCF distribution) as a subprocess.

Each instance gets a random free port, its own storage directory and config file, and can be
stopped and started again on the same port (for "registry went away mid-run" tests). With `tls`
(tests/support/tls.py) it serves HTTPS with a certificate for 127.0.0.1, as ghcr.io serves
HTTPS; `bind` puts it on another of this machine's addresses (a non-loopback host).
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from tests.support.local_parts import free_port, need
from tests.support.tls import LocalCA

__all__ = ["REGISTRY_BIN", "RegistryServer", "free_port", "require_registry", "running_registry"]

REGISTRY_BIN = shutil.which("docker-registry") or "/usr/bin/docker-registry"


def require_registry() -> None:
    """Skip (or fail under CI) when the registry binary is absent."""
    need(Path(REGISTRY_BIN).exists(),
         "docker-registry is not installed (apt-get install -y docker-registry)")


class RegistryServer:
    """One registry process; `auth_yaml` is an optional `auth:` section (indented YAML)."""

    def __init__(self, workdir: Path, *, storage: Path | None = None, auth_yaml: str = "",
                 port: int | None = None, tls: LocalCA | None = None,
                 bind: str = "127.0.0.1") -> None:
        self.workdir = workdir
        self.storage = storage or workdir / "storage"
        self.port = port or free_port()
        self.host = f"{bind}:{self.port}"
        self.tls = tls
        self.url = f"{'https' if tls else 'http'}://{self.host}"
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
            f"  addr: {self.host}\n"
            + (tls.registry_yaml() if tls else "")
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
                httpx.get(f"{self.url}/v2/", timeout=1,
                          verify=self.tls.context() if self.tls else True)
                return
            except httpx.TransportError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError("registry did not come up within 20s")

    def remove_blob(self, digest: str) -> None:
        """Delete a blob's bytes from the storage directory, as a registry's cleanup or a lost
        disk does, leaving every manifest and tag that names it (the registry keeps no cache
        of blob descriptors here, so its next HEAD answers 404)."""
        hexdigest = digest.removeprefix("sha256:")
        data = self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"
        data.unlink()

    def blobs(self) -> dict[str, int]:
        """{digest: size} of every blob in the storage directory (layers, configs and
        manifests alike): what the registry holds, read from its disk."""
        root = self.storage / "docker/registry/v2/blobs/sha256"
        return {f"sha256:{data.parent.name}": data.stat().st_size
                for data in root.glob("*/*/data")}

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
