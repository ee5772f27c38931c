"""The iris release gpurl is checked against, pinned once (noxfile's iris-contract session and
the "couldn't find iris" hint both read it).

Unpinned installs break: newer finelog/rigging/httpx releases do not import together, so the
dependency set is resolved as of the release date too. iris needs Python >= 3.12.
"""

from __future__ import annotations

import glob
import os
import shlex
import shutil

from gpurl_tasks import proc

__all__ = ["IRIS_CONTRACT_EXCLUDE_NEWER", "IRIS_CONTRACT_PINS", "IRIS_PYTHON", "find_python312",
           "install_hint"]

IRIS_CONTRACT_PINS = (
    "marin-iris==0.2.35.dev202607030841",
    "marin-rigging==0.2.35.dev202607030841",
    "marin-finelog==0.2.12.dev202607030858",
    "marin-finelog-server==0.2.10",
)
IRIS_CONTRACT_EXCLUDE_NEWER = "2026-07-04"
IRIS_PYTHON = "3.12"


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
