"""An immutable tag is never moved: what the registry already holds under PREFIX-SHA.

Both build paths ask before pushing (the local one after building, when it can compare
images; the cluster one before submitting, and the kaniko script again with crane before it
builds). Overwriting is possible only knowingly (`--force`). The tags are spelled here from
plain values (a tag prefix, a source id); release/configured.py names a config's.
"""

from __future__ import annotations

import re

from gpurl_tasks.errors import BuildError
from gpurl_tasks.values import SOURCE_ID_PATTERN

__all__ = ["INDEX_SUFFIX", "TagMoveRefused", "index_tag", "is_index_tag", "refuse_to_move"]

INDEX_SUFFIX = "index"


class TagMoveRefused(BuildError):
    """The immutable tag already names a different image."""


def index_tag(prefix: str, source: str) -> str:
    """`PREFIX-<source id>-index`: the immutable tag of an image index of variants (its first
    variant's tag prefix). No variant's tag is spelled so (none ends in `-index`), and the source
    id sits where a variant's tag has it, so a pin's comment names its commit the same way."""
    return f"{prefix}-{source}-{INDEX_SUFFIX}"


def is_index_tag(prefix: str, tag: str) -> bool:
    """`tag` is spelled like an index_tag of `prefix`."""
    return re.fullmatch(rf"{re.escape(prefix)}-{SOURCE_ID_PATTERN}-{INDEX_SUFFIX}", tag) is not None


def refuse_to_move(reference: str, existing: str, *, force: bool, why: str) -> None:
    """Raise unless `force`: `reference` already holds `existing` and pushing would move it."""
    if force:
        return
    raise TagMoveRefused(
        f"{reference} already exists as {existing} and {why}: an immutable tag is never moved "
        "(nodes that pulled it keep the old image under imagePullPolicy: IfNotPresent)",
        hint="commit the change (a new commit is a new tag), pin the existing digest, or pass "
             "--force to overwrite the tag knowingly")
