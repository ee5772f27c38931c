"""Helpers shared by tasks.py and noxfile.py: config from flags, clean failures, output.

This is the edge where errors become one line and an exit code, and where JSON and
human output are printed; the modules below never print or exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from invoke.exceptions import Exit

from gpurl_tasks.config import Config, load_config
from gpurl_tasks.errors import ConfigError, GpurlError

__all__ = ["REPO_ROOT", "ConfigError", "StepRecord", "clean_failures", "config_for", "emit_json",
           "say", "step"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def config_for(profile: str | None = None, *, committed: bool = False,
               **overrides: Any) -> Config:
    """Resolve the config for a task; flag names map to dotted keys ("layers__size_cache").

    `committed`: pyproject only, no GPURL_* variables, for files that are generated and
    committed (they must not depend on whoever runs the generator).
    """
    dotted: Mapping[str, Any] = {k.replace("__", ".").replace("_", "-"): v
                                 for k, v in overrides.items()}
    env = {"GPURL_PROFILE": os.environ["GPURL_PROFILE"]} if "GPURL_PROFILE" in os.environ else {}
    return load_config(REPO_ROOT, profile=profile, overrides=dotted,
                       env=env if committed else None)


@contextlib.contextmanager
def clean_failures() -> Iterator[None]:
    """Turn a GpurlError into one actionable line and a non-zero exit, never a traceback."""
    try:
        yield
    except GpurlError as exc:
        line = f"error: {exc.message}"
        if exc.hint:
            line += f"\n  hint: {exc.hint}"
        raise Exit(line, code=exc.exit_code) from None


def say(message: str = "") -> None:
    """Human progress and diagnostics go to stderr so --json stdout stays parseable."""
    print(message, file=sys.stderr, flush=True)


def emit_json(obj: Any) -> None:
    """Exactly one JSON object on stdout."""
    print(json.dumps(obj, indent=2, sort_keys=False))


@dataclasses.dataclass
class StepRecord:
    """What a step did (set `detail` inside the block) and how long it took (after it)."""

    detail: str = ""
    seconds: float = 0.0


@contextlib.contextmanager
def step(name: str, *, out: Callable[[str], None] = say) -> Iterator[StepRecord]:
    """Print a step's start and its end with its detail, duration and a tick or a cross."""
    out(f"==> {name}")
    record = StepRecord()
    start = time.monotonic()
    try:
        yield record
    except BaseException:
        out(f"<== {name}: failed after {time.monotonic() - start:.1f}s ✗")
        raise
    record.seconds = time.monotonic() - start
    if record.detail:
        out(f"<== {name}: {record.detail} ({record.seconds:.1f}s) ✓")
    else:
        out(f"<== {name}: done in {record.seconds:.1f}s ✓")
