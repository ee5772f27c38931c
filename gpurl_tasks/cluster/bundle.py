"""The workspace bundle iris uploads with a job, computed the way iris computes it, and the
workspace `invoke build` stages for it.

iris zips `git ls-files --cached --others --exclude-standard` (minus caches and VCS
directories) of the directory it runs in with deflate and rejects a zip over 25 MiB with no
per-file override. Wheels must never ride the bundle: the in-cluster build fetches them itself.

What the job runs besides the repository's files (its slice index, attestation skeleton and
gpurl's own code: cluster/kaniko.py's `job_files`) is rendered at submit time and never
committed: `stage_workspace` copies the bundle's files into a fresh directory outside any git
repository and adds them, and iris runs there. Outside a git repository iris bundles every file
of the directory (minus the same caches), so the staged directory is the bundle.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

from gpurl_tasks.errors import BuildError
from gpurl_tasks.values import format_bytes

__all__ = ["MAX_BUNDLE_BYTES", "Bundle", "bundle_files", "check_bundle", "measure_bundle",
           "stage_workspace", "staged_env", "with_job_files"]

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


def with_job_files(bundle: Bundle, job_files: Mapping[str, bytes]) -> Bundle:
    """`bundle` with the files staged beside it, measured as iris zips them (a zip's entries
    are compressed one by one, so their sizes add)."""
    with tempfile.TemporaryFile() as handle:
        with zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as zf:
            for name in sorted(job_files):
                zf.writestr(name, job_files[name])
        size = handle.tell() - 22  # one end-of-directory record, which the bundle has already
    return dataclasses.replace(bundle, files=tuple(sorted({*bundle.files, *job_files})),
                               zip_bytes=bundle.zip_bytes + size)


def stage_workspace(root: Path, files: tuple[str, ...], job_files: Mapping[str, bytes],
                    dest: Path) -> None:
    """Fill `dest` (empty, outside any git repository) with the bundle's `files` of `root` and
    the `job_files`: the directory iris runs in, so what it bundles is exactly these."""
    clash = sorted(n for n in files if n in job_files or any(
        n.startswith(f"{j.partition('/')[0]}/") for j in job_files))
    if clash:
        raise BuildError(f"the repository has {clash[0]}, where invoke build stages the job's "
                         f"own files ({', '.join(sorted(job_files))})",
                         hint="rename or gitignore it: that directory is gpurl's in the bundle")
    for name in files:
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)  # a link's file, as iris zips it
    for name, data in job_files.items():
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)


def staged_env(env: Mapping[str, str], dest: Path) -> dict[str, str]:
    """The environment iris runs with in the staged `dest`: git finds no repository there (none
    above it either, whatever TMPDIR is), so iris bundles the directory's files as they are."""
    kept = {k: v for k, v in env.items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    ceiling = [p for p in (env.get("GIT_CEILING_DIRECTORIES", ""), str(dest.parent)) if p]
    return {**kept, "GIT_CEILING_DIRECTORIES": os.pathsep.join(ceiling)}


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
