"""The build context (the repository root): what never enters an image, and the source id
an image built from it is tagged with.

The launcher holds the pin of the image built from this context, so it is kept out of the
context (.dockerignore): an image that contained its own pin would change digest with every
pin. Edits to files kept out of the context cannot change the image, so they do not make the
tree "dirty" for its tag either.
"""

from __future__ import annotations

from gpurl_tasks import git
from gpurl_tasks.config import Config
from gpurl_tasks.errors import GpurlError
from gpurl_tasks.files import read_text, write_atomic

__all__ = ["DOCKERIGNORE_NOTE", "StaleContextError", "ensure_launcher_ignored", "ignored_paths",
           "source_id"]

_GLOB = set("*?[]!")


class StaleContextError(GpurlError):
    """The committed .dockerignore lacks a rule `invoke generate` writes."""

    exit_code = 1


DOCKERIGNORE_NOTE = ("# The launcher holds the pin of the image built from this context; an image that "
                     "contained it\n# would change digest with every pin. It runs from the synced "
                     "workspace. (invoke generate)\n")


def ensure_launcher_ignored(config: Config, *, check: bool) -> bool:
    """The build context's .dockerignore lists the profile's launcher (added when missing),
    so the image never contains its own pin; with `check`, a missing rule is an error."""
    path = config.root / ".dockerignore"
    launcher = config.launcher.path
    if not launcher.is_relative_to(config.root):
        return False  # a launcher outside the context is never copied into the image
    rule = launcher.relative_to(config.root).as_posix()
    text = read_text(path, what="build context ignore file") if path.exists() else ""
    if rule in (line.strip().lstrip("/") for line in text.splitlines()):
        return False
    if check:
        raise StaleContextError(
            f".dockerignore does not exclude {rule}: the {config.profile!r} image would contain "
            "its own pin and change digest with every pin",
            hint="run `invoke generate` and commit the result")
    note = "" if DOCKERIGNORE_NOTE in text else DOCKERIGNORE_NOTE
    separator = "\n" if text and not text.endswith("\n") else ""
    write_atomic(path, f"{text}{separator}{note}{rule}\n")
    return True


def ignored_paths(config: Config) -> tuple[str, ...]:
    """The plain (glob-free) paths .dockerignore keeps out of the build context."""
    path = config.root / ".dockerignore"
    if not path.exists():
        return ()
    lines = (line.strip().lstrip("/") for line in
             read_text(path, what="build context ignore file").splitlines())
    return tuple(line for line in lines if line and not line.startswith("#")
                 and not _GLOB & set(line))


def source_id(config: Config) -> str:
    """The short sha, or `SHA-dirty-<diff hash>` when tracked files that enter the build
    context have uncommitted edits (a pinned launcher does not count: it never enters it)."""
    return git.source_id(config.root, ignored_paths(config))
