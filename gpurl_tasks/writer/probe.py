"""What a written slice's bytes depend on in the image the writer runs in (stdlib only; it
starts the venv's python and uv itself: the cluster job's copy has no gpurl to run them)."""

from __future__ import annotations

import platform
import subprocess
import zlib

from gpurl_tasks.writer.blob import LayerError
from gpurl_tasks.writer.records import Probe

__all__ = ["probe"]


def _said(argv: list[str]) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        raise LayerError(f"cannot run {argv[0]}: {exc.strerror}") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise LayerError(f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def probe(venv: str) -> Probe:
    """Ask the image this runs in (env-base) what a slice's bytes depend on: the one probe,
    for both the local path's staging containers and the cluster job."""
    python = _said([f"{venv.rstrip('/')}/bin/python", "-c",
                    "import sys; print(sys.version.split()[0])"])
    return Probe(python=python, zlib=zlib.ZLIB_RUNTIME_VERSION, uv=_said(["uv", "--version"]),
                 machine=platform.machine())
