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
from pathlib import Path

from gpurl_tasks import proc

__all__ = ["IRIS_CONTRACT_EXCLUDE_NEWER", "IRIS_CONTRACT_PINS", "IRIS_PYTHON", "find_python312",
           "install_hint"]

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
