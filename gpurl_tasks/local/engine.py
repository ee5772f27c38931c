"""The local Docker engine: make sure one answers, and find a client that speaks BuildKit.

BuildKit matters because it builds only the stages the target needs (the legacy builder
builds every stage, so the `wheel-builder` stage would compile even on the prebuilt path).
The `docker` 28.x client first on PATH on these machines has no buildx plugin, so
`DOCKER_BUILDKIT=1` fails with it; Debian's own 20.10 client from the `docker.io` package
runs BuildKit builds without buildx. We therefore probe candidates with a real, tiny build.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from gpurl_tasks import proc
from gpurl_tasks.errors import BuildError
from gpurl_tasks.files import write_atomic

__all__ = [
    "BUILDKIT_ENV",
    "apt_install",
    "can_self_install",
    "client_candidates",
    "engine_answers",
    "ensure_program",
    "find_buildkit_client",
    "probe_buildkit",
    "start_dockerd",
    "wait_until",
]

BUILDKIT_ENV = {"DOCKER_BUILDKIT": "1"}
_CLIENT_ENV = "GPURL_DOCKER_CLIENT"  # an explicit client wins over the search


def can_self_install() -> bool:
    """On Debian as root we may apt-get and start daemons ourselves; elsewhere we only advise."""
    return Path("/etc/debian_version").exists() and os.geteuid() == 0


def engine_answers(client: str) -> str | None:
    """The engine's server version when `client info` answers, else None."""
    if not shutil.which(client) and not Path(client).exists():
        return None
    done = proc.run_quiet([client, "info", "--format", "{{.ServerVersion}}"], check=False,
                       timeout=30)
    version = done.stdout.strip()
    return version if done.returncode == 0 and version else None


def wait_until(probe: Callable[[], str | None], *, timeout: float, interval: float = 0.5,
               ) -> str | None:
    """Call `probe` until it returns a value or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def apt_install(*packages: str) -> None:
    """apt-get install `packages` (Debian, root), after `apt-get update`."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    proc.run_quiet(["apt-get", "update", "-q"], env=env, timeout=600)
    proc.run_quiet(["apt-get", "install", "-y", "-q", *packages],
                env=env, timeout=1200)


def ensure_program(program: str, package: str, *, dry_run: bool) -> str | None:
    """Install `package` when `program` is missing and we may; what was (or would be) done."""
    if shutil.which(program):
        return None
    if not can_self_install():
        raise BuildError(f"couldn't find {program!r} on PATH", hint=f"install {package}")
    if not dry_run:
        apt_install(package)
    return f"{'would apt-get' if dry_run else 'apt-get'} install {package}"


def start_dockerd(log_file: Path, *, timeout: float = 60) -> str:
    """Start `dockerd` in the background (own session, logs to `log_file`); wait for it.

    Returns the server version. The daemon outlives this process on purpose: it is the
    machine's engine, shared by every later build.
    """
    dockerd = proc.require("dockerd", hint="apt-get install docker.io")
    pid = proc.spawn_detached([dockerd], log_file)

    def probe() -> str | None:
        if not proc.alive(pid):
            raise BuildError(
                "dockerd exited right after starting: "
                f"{proc.tail(log_file.read_text(errors='replace'), 5)}",
                hint=f"see {log_file}",
            )
        return engine_answers("docker") or engine_answers("/usr/bin/docker")

    version = wait_until(probe, timeout=timeout)
    if version is None:
        raise BuildError(f"dockerd did not answer within {timeout:.0f}s", hint=f"see {log_file}")
    return version


def client_candidates() -> list[str]:
    """Clients to try, best first: $GPURL_DOCKER_CLIENT, Debian's docker.io client, PATH."""
    found: list[str] = []
    explicit = os.environ.get(_CLIENT_ENV)
    if explicit:
        found.append(explicit)
    if shutil.which("dpkg"):
        listing = proc.run_quiet(["dpkg", "-L", "docker.io"], check=False).stdout
        found += [line for line in listing.splitlines() if line.endswith("/bin/docker")]
    path = os.environ.get("PATH", "")
    found += [str(Path(d) / "docker") for d in path.split(os.pathsep)
              if d and (Path(d) / "docker").is_file()]
    unique: list[str] = []
    for item in found:
        real = str(Path(item).resolve())
        if real not in {str(Path(u).resolve()) for u in unique}:
            unique.append(item)
    return unique


def probe_buildkit(client: str) -> str | None:
    """None when `DOCKER_BUILDKIT=1 client build` runs a real (empty) build, else the reason."""
    with tempfile.TemporaryDirectory(prefix="gpurl-probe-") as tmp:
        dockerfile = Path(tmp) / "Dockerfile"
        write_atomic(dockerfile, "FROM scratch\nENV GPURL_PROBE=1\n")
        done = proc.run_quiet(
            [client, "build", "--progress", "plain", "--output", f"type=local,dest={tmp}/out",
             "-f", str(dockerfile), tmp],
            env={**os.environ, **BUILDKIT_ENV}, check=False, timeout=120,
        )
    if done.returncode == 0:
        return None
    lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if ln.strip()]
    return lines[0] if lines else f"exit {done.returncode}"


def find_buildkit_client() -> tuple[str, list[str]]:
    """The first client whose BuildKit probe passes, plus why the others were rejected."""
    rejected: list[str] = []
    for client in client_candidates():
        reason = probe_buildkit(client)
        if reason is None:
            return client, rejected
        rejected.append(f"{client}: {reason}")
    raise BuildError(
        "no docker client here can run BuildKit builds"
        + (f" ({'; '.join(rejected)})" if rejected else ""),
        hint="apt-get install docker.io (its 20.10 client builds with DOCKER_BUILDKIT=1), "
             f"install the buildx plugin, or set {_CLIENT_ENV}",
    )
