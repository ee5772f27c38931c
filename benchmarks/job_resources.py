"""A job container's peak memory and disk, sampled from outside while it runs (the kaniko
benchmark's job: what `cluster.memory` and `cluster.disk` must cover).

The container runs with `--rm`, so its cgroup and writable layer go with it: a thread polls
them while it lives. Memory comes from the container's memory cgroup (v1:
/sys/fs/cgroup/memory/docker/<id>, v2: the unified tree's docker scope):
- `peak_usage`: the kernel's own high-water mark (v1 memory.max_usage_in_bytes, v2
  memory.peak), page cache included, so it is what a limit of that size would have seen;
- `peak_working_set`: usage less inactive file pages, sampled (the figure the kubelet evicts
  on, and what the job cannot give back under pressure);
- `peak_rss`: anonymous resident memory, sampled (the processes' own heaps).
Disk: `du` of the container's writable layer (overlay2's upper directory: the unpacked base,
kaniko's /kaniko and snapshots, gpurl's written slices outside /app) plus what the job added to
the mounted bundle (/app, an emptyDir on the cluster, counted against the same ephemeral
storage), sampled every `disk_every` seconds, so a short spike between two samples is missed.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["JobSampler", "cgroup_dir"]

_V1 = Path("/sys/fs/cgroup/memory/docker")
_V2 = (Path("/sys/fs/cgroup/system.slice"), Path("/sys/fs/cgroup/unified/system.slice"))


def cgroup_dir(container_id: str) -> Path | None:
    """The container's memory cgroup directory, v1 first (Docker's cgroupfs driver)."""
    for candidate in (_V1 / container_id,
                      *(root / f"docker-{container_id}.scope" for root in _V2)):
        if candidate.is_dir():
            return candidate
    return None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stat(path: Path) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in (line.split() for line in path.read_text().splitlines())}
    except (OSError, ValueError):
        return {}


def _du(path: Path) -> int:
    done = subprocess.run(["du", "-sxb", str(path)], capture_output=True, text=True,
                          check=False)
    try:
        return int(done.stdout.split()[0])
    except (ValueError, IndexError):
        return 0


class JobSampler:
    """Samples container `name` from its start to its end; `bundle` is the host directory
    mounted at /app (its size before the job is the baseline)."""

    def __init__(self, name: str, bundle: Path, *, every: float = 1.0,
                 disk_every: float = 10.0) -> None:
        self.name, self.bundle = name, bundle
        self.every, self.disk_every = every, disk_every
        self.bundle_before = _du(bundle)
        self.peak_usage = self.peak_working_set = self.peak_rss = 0
        self.peak_layer = self.peak_bundle_added = 0
        self.samples = 0
        self.cgroup: Path | None = None
        self._upper: Path | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _find(self) -> None:
        done = subprocess.run(["docker", "container", "inspect", "-f",
                               "{{.Id}} {{.GraphDriver.Data.UpperDir}}", self.name],
                              capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.split():
            cid, *upper = done.stdout.split()
            self.cgroup = cgroup_dir(cid)
            self._upper = Path(upper[0]) if upper else None

    def _memory(self) -> None:
        assert self.cgroup is not None
        v1 = (self.cgroup / "memory.max_usage_in_bytes").exists()
        peak = _read_int(self.cgroup / ("memory.max_usage_in_bytes" if v1 else "memory.peak"))
        usage = _read_int(self.cgroup / ("memory.usage_in_bytes" if v1 else "memory.current"))
        stat = _stat(self.cgroup / "memory.stat")
        if peak is None or usage is None or not stat:
            return  # the container is gone
        inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
        rss = stat.get("total_rss", stat.get("anon", 0))
        self.peak_usage = max(self.peak_usage, peak)
        self.peak_working_set = max(self.peak_working_set, usage - inactive)
        self.peak_rss = max(self.peak_rss, rss)
        self.samples += 1

    def _disk(self) -> None:
        if self._upper is not None and self._upper.is_dir():
            self.peak_layer = max(self.peak_layer, _du(self._upper))
        self.peak_bundle_added = max(self.peak_bundle_added,
                                     _du(self.bundle) - self.bundle_before)

    def _loop(self) -> None:
        last_disk = 0.0
        while not self._stop.is_set():
            if self.cgroup is None:
                self._find()
            if self.cgroup is not None:
                self._memory()
                if time.monotonic() - last_disk >= self.disk_every:
                    self._disk()
                    last_disk = time.monotonic()
            self._stop.wait(self.every)

    def __enter__(self) -> JobSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_bundle_added = max(self.peak_bundle_added, _du(self.bundle) - self.bundle_before)

    def to_json(self) -> dict[str, Any]:
        return {"peak_memory_bytes": self.peak_usage,
                "peak_working_set_bytes": self.peak_working_set,
                "peak_rss_bytes": self.peak_rss,
                "peak_disk_bytes": self.peak_layer + self.peak_bundle_added,
                "peak_layer_bytes": self.peak_layer,
                "peak_bundle_added_bytes": self.peak_bundle_added,
                "memory_samples": self.samples,
                "cgroup": str(self.cgroup) if self.cgroup else None}
