"""The workspace bundle iris uploads with a job, computed the way iris computes it.

iris zips `git ls-files --cached --others --exclude-standard` (minus caches and VCS
directories) with deflate and rejects a zip over 25 MiB with no per-file override.
Wheels must never ride the bundle: the in-cluster build fetches them itself.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from gpurl_tasks.errors import BuildError
from gpurl_tasks.values import format_bytes

__all__ = ["MAX_BUNDLE_BYTES", "Bundle", "bundle_files", "check_bundle", "measure_bundle"]

MAX_BUNDLE_BYTES = 25 * 1024 * 1024

# Paths iris drops even when git lists them (bytecode, caches, virtualenvs, VCS dirs).
_EXCLUDED = re.compile(
    r"\.pyc$|\.mov$|\.egg-info(/|$)"
    r"|(^|/)(__pycache__|\.git|\.mypy_cache|\.pytest_cache|\.ruff_cache|\.venv|venv"
    r"|node_modules)(/|$)"
)

GitLister = Callable[[Path], list[str]]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Bundle:
    """What iris would upload: the files, the zipped size and any wheels among them."""

    files: tuple[str, ...]
    zip_bytes: int
    wheels: tuple[str, ...]


def bundle_files(root: Path, list_git: GitLister) -> tuple[str, ...]:
    """Relative paths iris bundles: git's non-ignored files that exist, minus caches."""
    names = {n for n in list_git(root) if n and not _EXCLUDED.search(n)}
    return tuple(sorted(n for n in names if (root / n).is_file()))


def measure_bundle(root: Path, list_git: GitLister) -> Bundle:
    """Zip the bundle to a temp file (deflate, like iris) and report its size."""
    files = bundle_files(root, list_git)
    with tempfile.TemporaryFile() as handle:
        with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as zf:
            for name in files:
                zf.write(root / name, name)
        size = handle.tell()
    wheels = tuple(n for n in files if n.endswith(".whl"))
    return Bundle(files=files, zip_bytes=size, wheels=wheels)


def check_bundle(bundle: Bundle, *, limit: int = MAX_BUNDLE_BYTES) -> None:
    """Refuse a bundle iris would reject, or one that carries wheels."""
    if bundle.wheels:
        shown = ", ".join(bundle.wheels[:3]) + (" ..." if len(bundle.wheels) > 3 else "")
        raise BuildError(
            f"the iris workspace bundle would include {len(bundle.wheels)} wheel file(s): {shown}",
            hint="wheels must not ride the bundle (25 MiB cap); keep them gitignored under "
                 "docker/wheelhouse/ - the in-cluster build fetches them from the wheel base URL",
        )
    if bundle.zip_bytes > limit:
        raise BuildError(
            f"the iris workspace bundle is {format_bytes(bundle.zip_bytes)} zipped, over iris's "
            f"hard cap of {limit // (1024 * 1024)} MiB ({len(bundle.files)} files)",
            hint="gitignore large files; iris has no per-file skip and no override",
        )
