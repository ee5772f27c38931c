"""A registry on 127.0.0.1 for the local path: Debian's `docker-registry` (CNCF distribution).

It runs in the background with its config, storage, log and pid file under the cache
directory, so a second `setup-local` finds it instead of starting another. dockerd treats
127.0.0.0/8 as an insecure (plain HTTP) registry by default, so no daemon config is needed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import httpx

from gpurl_tasks import proc
from gpurl_tasks.errors import BuildError, ConfigError
from gpurl_tasks.files import write_atomic
from gpurl_tasks.imageref import is_loopback, split_host_port
from gpurl_tasks.local.engine import wait_until

__all__ = [
    "RegistryPaths",
    "loopback_port",
    "probe_registry",
    "registry_config",
    "start_registry",
]

def loopback_port(host: str) -> int:
    """The port of a loopback registry host like `127.0.0.1:5005`; ConfigError otherwise."""
    name, port = split_host_port(host)
    if not is_loopback(name) or port is None:
        raise ConfigError(
            f"registry.host {host!r} is not a loopback registry with a port",
            hint="the local backend pushes to e.g. 127.0.0.1:5005 (profile 'demo')",
        )
    return port


def registry_config(storage: Path, port: int) -> str:
    """The registry's config.yml: filesystem storage, loopback only, no auth, deletes allowed."""
    return (
        "version: 0.1\n"
        "log:\n  level: info\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {storage}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )


class RegistryPaths:
    """Where one registry instance keeps its files (per port, so several may coexist)."""

    def __init__(self, cache: Path, port: int) -> None:
        self.dir = cache / "registry" / str(port)
        self.config = self.dir / "config.yml"
        self.storage = self.dir / "data"
        self.log = self.dir / "registry.log"
        self.pid = self.dir / "registry.pid"


def probe_registry(port: int) -> str | None:
    """`registry/2.0` when a distribution registry answers on 127.0.0.1:port, else None.

    Raises ConfigError when something else holds the port, since starting ours would fail.
    """
    try:
        response = httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=2)
    except httpx.HTTPError:
        return None
    api = response.headers.get("Docker-Distribution-Api-Version")
    if api is None:
        raise ConfigError(
            f"127.0.0.1:{port} is taken by something that is not a registry",
            hint="choose another port in registry.host",
        )
    return str(api)


def _alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if proc.alive(pid) else None


def start_registry(paths: RegistryPaths, port: int, *, timeout: float = 30) -> int:
    """Start `docker-registry serve` in the background and wait until /v2/ answers; its pid."""
    binary = proc.require("docker-registry", hint="apt-get install docker-registry")
    paths.storage.mkdir(parents=True, exist_ok=True)
    write_atomic(paths.config, registry_config(paths.storage, port))
    stale = _alive(paths.pid)
    if stale is not None:  # ours, but not answering: replace it
        with contextlib.suppress(ProcessLookupError):
            os.kill(stale, 15)
    pid = proc.spawn_detached([binary, "serve", paths.config], paths.log)
    write_atomic(paths.pid, f"{pid}\n")

    def probe() -> str | None:
        if not proc.alive(pid):
            raise BuildError(
                "docker-registry exited right after starting: "
                f"{proc.tail(paths.log.read_text(errors='replace'), 3)}",
                hint=f"see {paths.log}",
            )
        return probe_registry(port)

    if wait_until(probe, timeout=timeout) is None:
        raise BuildError(f"docker-registry did not answer on 127.0.0.1:{port}",
                         hint=f"see {paths.log}")
    return pid




