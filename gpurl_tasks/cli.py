"""Helpers shared by tasks.py and noxfile.py: config from flags, clean failures, output.

This is the edge where errors become one line and an exit code, and where JSON and
human output are printed; the modules below never print or exit.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from invoke.exceptions import Exit

from gpurl_tasks.config import Config, load_committed_config, load_config
from gpurl_tasks.errors import ConfigError, GpurlError
from gpurl_tasks.steps import StepRecord, timed

__all__ = ["REPO_ROOT", "ConfigError", "clean_failures", "config_for", "emit_json",
           "say", "step"]

REPO_ROOT = Path(__file__).resolve().parent.parent


def config_for(profile: str | None = None, *, committed: bool = False,
               **overrides: Any) -> Config:
    """Resolve the config for a task; flag names map to dotted keys ("layers__size_cache").

    `committed`: pyproject only (see `load_committed_config`); the profile may still come from
    $GPURL_PROFILE.
    """
    if committed:
        name = profile or os.environ.get("GPURL_PROFILE") or load_config(REPO_ROOT, env={}).profile
        return load_committed_config(REPO_ROOT, name)
    dotted: Mapping[str, Any] = {k.replace("__", ".").replace("_", "-"): v
                                 for k, v in overrides.items()}
    return load_config(REPO_ROOT, profile=profile, overrides=dotted)


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


def step(name: str, *, out: Callable[[str], None] = say) -> AbstractContextManager[StepRecord]:
    """A timed step whose start and end lines go to stderr (see `steps.timed`)."""
    return timed(name, out)
