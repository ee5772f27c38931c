"""A second Docker engine of our own, empty, for pulls only: it holds exactly the images a
test pulls into it, so `docker pull` there shows what a cluster node that holds the previous
image downloads (the build engine holds every layer it built or used, so it pulls nothing).

It shares nothing with the build engine: its own data root, exec root, socket and bridge
interface (created here and deleted after; never `--bridge none`, with which dockerd deletes
the host's docker0, the build engine's bridge), no iptables rules; it is stopped by its pid
when the block ends. Needs root, as dockerd does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["pull_engine"]


@contextlib.contextmanager
def pull_engine(root: Path, client: str) -> Iterator[str]:
    """Start `dockerd` under `root` (short: a unix socket path is limited); yield its -H
    (`client`: the docker client that talks to it)."""
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    root.mkdir(parents=True, exist_ok=True)
    socket = root / "d.sock"
    host = f"unix://{socket}"
    bridge = f"gpurlpe{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", "name", bridge, "type", "bridge"], check=True)
    with (root / "dockerd.log").open("w") as log:
        daemon = subprocess.Popen(
            [dockerd, "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
             "--host", host, "--pidfile", str(root / "d.pid"), "--bridge", bridge,
             "--iptables=false", "--ip-masq=false"], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([client, "-H", host, "version"], capture_output=True,
                             check=False).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the pull engine did not start: "
                                   f"{(root / 'dockerd.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield host
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
        subprocess.run(["ip", "link", "del", bridge], check=False)
        shutil.rmtree(root, ignore_errors=True)
