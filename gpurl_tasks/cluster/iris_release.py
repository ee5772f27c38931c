"""The iris release gpurl is checked against, pinned once in iris-release.toml beside this
module (noxfile.py reads the same file without importing gpurl_tasks).

Unpinned installs break: newer finelog/rigging/httpx releases do not import together, so the
dependency set is resolved as of the release date too. iris needs Python >= 3.12.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path

from gpurl_tasks import proc

__all__ = ["IRIS_CONTRACT_EXCLUDE_NEWER", "IRIS_CONTRACT_PINS", "IRIS_ENV", "IRIS_PYTHON",
           "find_iris", "find_python312", "install_hint", "iris_program"]

# The iris binary to drive (the runbook insists on one specific cw-capable install).
IRIS_ENV = "GPURL_IRIS"

_RELEASE = tomllib.loads((Path(__file__).parent / "iris-release.toml").read_text())
IRIS_CONTRACT_PINS: tuple[str, ...] = tuple(_RELEASE["pins"])
IRIS_CONTRACT_EXCLUDE_NEWER: str = _RELEASE["exclude-newer"]
IRIS_PYTHON: str = _RELEASE["python"]


def install_hint(env_var: str) -> str:
    """How to install the pinned release into its own Python 3.12 environment."""
    pins = " ".join(shlex.quote(p) for p in IRIS_CONTRACT_PINS)
    return (f"install the pinned iris (Python >= {IRIS_PYTHON}): uv venv --python {IRIS_PYTHON} "
            f"~/.iris && uv pip install --python ~/.iris --prerelease if-necessary-or-explicit "
            f"--exclude-newer {IRIS_CONTRACT_EXCLUDE_NEWER} {pins}; then put ~/.iris/bin on PATH "
            f"or set {env_var}=~/.iris/bin/iris")


def find_python312() -> str | None:
    """A Python 3.12 that runs: PATH first, then pyenv's versions (whose shim hides it from uv)."""
    candidates = [shutil.which("python3.12"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")))]
    for candidate in filter(None, candidates):
        if proc.run([candidate, "--version"], check=False, echo=None).returncode == 0:
            return candidate
    return None


def iris_program(env: Mapping[str, str]) -> str:
    """The iris program to run: $GPURL_IRIS, else `iris` on PATH."""
    return env.get(IRIS_ENV, "") or "iris"


def find_iris(program: str, env: Mapping[str, str]) -> str:
    """The iris binary's path; when missing, the hint says how to install the pinned release."""
    try:
        return proc.find_program(program, path=env.get("PATH"))
    except proc.ProgramNotFound as exc:
        raise proc.ProgramNotFound(exc.message, hint=install_hint(IRIS_ENV)) from None
