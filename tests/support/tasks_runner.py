"""Run `invoke TASK ...` as a user would, in a subprocess, with the config steered by env vars."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from tests.conftest import REPO_ROOT

__all__ = ["REPO_ROOT", "head_short_sha", "one_variant", "run_task"]


def run_task(*args: str, env: Mapping[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m invoke ARGS` in the repository root; GPURL_* from the caller's env are dropped
    so only `env` steers the config."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPURL_")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                      os.environ.get("PYTHONPATH", "")]))
    base["HOME"] = base.get("HOME", "/root")
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=REPO_ROOT,
                          env={**base, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def head_short_sha() -> str:
    """The source id the tasks tag this checkout with: the short sha, or SHA-dirty-<hash>
    while tracked files that enter the image have uncommitted edits."""
    from gpurl_tasks.config import load_config
    from gpurl_tasks.dockerfile.context import source_id

    return source_id(load_config(REPO_ROOT, env={}))


def one_variant(stdout: str) -> Any:
    """The result of a per-variant task's `--json` (`{"variants": {NAME: result}}`) that
    answered for exactly one variant."""
    document = json.loads(stdout)
    assert list(document) == ["variants"] and len(document["variants"]) == 1, stdout[:500]
    return next(iter(document["variants"].values()))
