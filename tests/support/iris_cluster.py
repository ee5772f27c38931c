"""A real local iris cluster for the tests: controller, autoscaler and one CPU worker as
threads of one process, each job a host subprocess (no Docker, no network).

`local_iris()` starts it from `tests/support/iris_controller.py` (the stock controller with
only the client-freshness check off: see that file) with a config file that names a fixed
loopback port, in a temp `HOME`/`TMPDIR`/cwd it owns, waits for "Controller started at" and
for the worker, and always stops it by its PID (SIGTERM, then SIGKILL). Clients are the
stock `iris --controller-url URL`.

The task inherits the controller's environment and runs `bash -lc`, whose /etc/profile
resets PATH; the controller's HOME therefore holds a `.bash_profile` with the test hooks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["BASH_PROFILE", "LocalIris", "cluster_yaml", "local_iris"]

WRAPPER = Path(__file__).parent / "iris_controller.py"

# `platform.local` + `controller.local` is already local: never add `cluster start --local`,
# which rewrites the controller port to 0 (a random one).
_CLUSTER_YAML = """\
platform:
  local: {{}}
controller:
  local:
    port: {port}
defaults:
  autoscaler:
    evaluation_interval: {{milliseconds: 500}}
    scale_up_delay: {{milliseconds: 1000}}
    scale_down_delay: {{milliseconds: 1000}}
worker_provider: {{}}
scale_groups:
  cpu:
    num_vms: 1
    resources: {{cpu: 8, ram: 16GB, disk: 50GB, device_type: cpu, capacity_type: on-demand}}
    buffer_slices: 1
    max_slices: 1
    slice_template: {{num_vms: 1, local: {{}}}}
"""

# Sourced by each task's `bash -lc` after /etc/profile. Two stand-ins for the cluster pod:
# PATH additions survive the login shell, and GPURL_KANIKO_ROOT gives the build script a
# private root whose `app` is the job's bundle (a pod has it at /app; here iris extracts
# it into $IRIS_WORKDIR) and where the stand-in `crane export` lays down /kaniko.
BASH_PROFILE = """\
if [ -n "${GPURL_TEST_PATH_PREPEND:-}" ]; then
  PATH="$GPURL_TEST_PATH_PREPEND:$PATH"; export PATH
fi
if [ -n "${IRIS_WORKDIR:-}" ] && [ -n "${GPURL_TEST_KANIKO_ROOTS:-}" ]; then
  GPURL_KANIKO_ROOT="$(mktemp -d "$GPURL_TEST_KANIKO_ROOTS/root.XXXXXX")"
  ln -s "$IRIS_WORKDIR" "$GPURL_KANIKO_ROOT/app"
  export GPURL_KANIKO_ROOT
fi
"""


def cluster_yaml(port: int) -> str:
    """The cluster config: a fixed controller port and one CPU scale group."""
    return _CLUSTER_YAML.format(port=port)


@dataclasses.dataclass(frozen=True)
class LocalIris:
    """A running local cluster: its URL, the stock client, and the controller's files."""

    url: str
    iris: Path
    pid: int
    log: Path
    home: Path
    kaniko_roots: Path

    def client(self, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`iris --controller-url URL ARGS` with the stock client."""
        return subprocess.run([str(self.iris), f"--controller-url={self.url}", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, check=False,
                              env={**os.environ, "HOME": str(self.home.parent / "client-home")})


def _wait_for(predicate: object, what: str, log: Path, proc: subprocess.Popen[bytes],
              deadline: float) -> None:
    assert callable(predicate)
    while not predicate():
        if proc.poll() is not None:
            raise RuntimeError(f"iris controller exited ({proc.returncode}) before {what}:\n"
                               + log.read_text(errors="replace")[-3000:])
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within the deadline:\n"
                               + log.read_text(errors="replace")[-3000:])
        time.sleep(0.2)


@contextlib.contextmanager
def local_iris(root: Path, port: int, *, env: dict[str, str] | None = None,
               start_timeout: float = 90) -> Iterator[LocalIris]:
    """Start the controller under `root` on 127.0.0.1:`port`; stop it on exit, always.

    `env` is the controller's environment, and so every task's (default: this process's)."""
    iris = Path(sys.executable).with_name("iris")
    home, tmp, cwd, roots = root / "home", root / "tmp", root / "cwd", root / "kaniko-roots"
    for path in (home, tmp, cwd, roots, root / "client-home"):
        path.mkdir(parents=True, exist_ok=True)
    (home / ".bash_profile").write_text(BASH_PROFILE)
    config = root / "cluster.yaml"
    config.write_text(cluster_yaml(port))
    log = root / "controller.log"
    url = f"http://127.0.0.1:{port}"
    proc_env = {**(os.environ if env is None else env), "HOME": str(home), "TMPDIR": str(tmp),
                "GPURL_TEST_KANIKO_ROOTS": str(roots)}
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(WRAPPER), "--config", str(config),
                                 "cluster", "start"], cwd=cwd, env=proc_env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + start_timeout
        _wait_for(lambda: f"Controller started at {url}" in log.read_text(errors="replace"),
                  "'Controller started at'", log, proc, deadline)
        # the warm worker registers ~2 s later; a job submitted before it just pends
        _wait_for(lambda: "Worker registered:" in log.read_text(errors="replace"),
                  "'Worker registered:'", log, proc, deadline)
        yield LocalIris(url=url, iris=iris, pid=proc.pid, log=log, home=home,
                        kaniko_roots=roots)
    finally:
        _stop(proc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (LocalCluster.close(): kills tasks, removes its temp dirs), SIGKILL after 20 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
