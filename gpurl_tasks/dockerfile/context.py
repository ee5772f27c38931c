"""The build context (the repository root): what never enters an image, and the source id
an image built from it is tagged with (ignore.py matches .dockerignore's rules as the
builders do).

The launcher holds the pin of the image built from this context, so it is kept out of the
context (.dockerignore): an image that contained its own pin would change digest with every
pin. Edits to files kept out of the context cannot change the image, so they do not make the
tree "dirty" for its tag either.
"""

from __future__ import annotations

from pathlib import Path

from gpurl_tasks import git
from gpurl_tasks.config import Config
from gpurl_tasks.errors import CheckFailed
from gpurl_tasks.files import read_text

__all__ = ["DOCKERIGNORE_NOTE", "StaleContextError", "context_rules",
           "ignored_paths", "read_dockerignore", "source_id", "stale_context_error",
           "updated_dockerignore"]

_GLOB = set("*?[]!")


class StaleContextError(CheckFailed):
    """The committed .dockerignore lacks a rule `invoke generate` writes."""


DOCKERIGNORE_NOTE = (
    "# Kept out of the build context by `invoke generate`: each launcher (it holds the pin of the\n"
    "# image built from this context, so an image containing it would change digest with every\n"
    "# pin; it runs from the synced workspace) and each symlink to a path dependency (copied\n"
    "# from its real place instead: a link copied as a link would dangle in the image).\n")


def context_rules(config: Config, links: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What .dockerignore must exclude for `config`: its launcher (inside the context) and
    the symlinks to path sources, which are copied from their real place instead (a link
    copied as a link would dangle in the image)."""
    launcher = config.launcher.path
    rules = [launcher.relative_to(config.root).as_posix()] if launcher.is_relative_to(config.root) \
        else []
    return tuple(dict.fromkeys([*rules, *links]))


def updated_dockerignore(text: str, rules: tuple[str, ...]) -> str | None:
    """`text` with every missing rule appended (with the note once), or None if none is
    missing; pure."""
    present = {line.strip().lstrip("/") for line in text.splitlines()}
    missing = [rule for rule in rules if rule not in present]
    if not missing:
        return None
    note = "" if DOCKERIGNORE_NOTE in text else DOCKERIGNORE_NOTE
    separator = "\n" if text and not text.endswith("\n") else ""
    return f"{text}{separator}{note}" + "".join(f"{rule}\n" for rule in missing)


def stale_context_error(root: Path, text: str, rules: tuple[str, ...]) -> StaleContextError:
    missing = [rule for rule in rules if rule not in
               {line.strip().lstrip("/") for line in text.splitlines()}]
    return StaleContextError(
        f".dockerignore does not exclude {', '.join(missing)}: an image would contain its own "
        "pin (and change digest with every pin) or a symlink that dangles in it",
        hint="run `invoke generate` and commit the result")


def read_dockerignore(root: Path) -> str:
    path = root / ".dockerignore"
    return read_text(path, what="build context ignore file") if path.exists() else ""


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
