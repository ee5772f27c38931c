"""Pin an immutable image digest into the launcher file, touching nothing else.

The assignment is located with `ast` (never a loose regex), so comments, strings that merely
mention the variable, other assignments and odd formatting are left byte for byte; only the
value's source span and a provenance comment directly above the statement change. The write
is atomic (temp file in the same directory, fsync, rename), so a kill leaves the old file or
the new one, never half of each. A second pin of the same digest changes nothing.

Which digest is pinned: for a variant whose launcher variable is its own, its *image
manifest* digest (of an index given by --ref: the entry of its target's platform), not the
index digest. With `imagePullPolicy: IfNotPresent` the node keeps whatever it pulled under the
reference it was given, so the reference should name exactly the bytes verify-layers measured;
an index gpurl did not compose can carry entries (other platforms, build attestations) that
were never verified. It is also what the runbook pins (`crane manifest --platform linux/amd64
... | sha256`). Kaniko pushes a single manifest, whose tag's digest is the manifest digest.

Variants of different platforms naming one variable (H100's amd64 and GB200's arm64 image)
pin the digest of the image index gpurl composed of exactly their verified manifests
(release/index.py): containerd picks the node's platform, and every byte it can pull was
checked. Each variant's own manifest digest may go to its `launcher.platform-variable`.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import difflib
import os
import sys

from gpurl_tasks.config import RegistrySettings
from gpurl_tasks.errors import PinError
from gpurl_tasks.imageref import ImageRef
from gpurl_tasks.launcher.source import (
    find_assignment,
    node_span,
    parse_module,
    source_lines,
    string_literal,
)
from gpurl_tasks.values import PIN_MARKER, format_bytes

__all__ = [
    "Provenance",
    "check_immutable",
    "pinned_value",
    "provenance_comment",
    "rewrite_assignment",
    "unified_diff",
]

@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Provenance:
    """What the comment above the pinned assignment records."""

    tag: str | None
    layer_count: int
    largest_bytes: int
    total_bytes: int
    date: dt.date
    platform: str = "linux/amd64"


def check_immutable(ref: ImageRef, registry: RegistrySettings) -> None:
    """Refuse floating tags: only a digest or the immutable PREFIX-GITSHA tag may be pinned."""
    if ref.digest:
        return
    tag = ref.tag or ""
    if tag == registry.floating_tag:
        raise PinError(
            f"refusing to pin the floating tag {tag!r} ({ref}): it moves with every push and "
            "goes stale on nodes under imagePullPolicy: IfNotPresent",
            hint=f"pin the immutable {registry.tag_prefix}-<gitsha> tag or a @sha256: digest")
    if not registry.is_immutable_tag(tag):
        raise PinError(
            f"refusing to pin {ref}: {tag!r} is not an immutable "
            f"{registry.tag_prefix}-<gitsha> (or -<gitsha>-dirty-<hash>) tag",
            hint="pass the tag the build pushed (e.g. from `git rev-parse --short HEAD`) "
                 "or a @sha256: digest")


def pinned_value(ref: ImageRef, manifest_digest: str) -> str:
    """`host/repository@sha256:...`, the string the launcher holds."""
    return f"{ref.name}@{manifest_digest}"


def provenance_comment(info: Provenance) -> str:
    tag = info.tag or "pinned by digest"
    return (f"{PIN_MARKER} {tag}, {info.platform}, {info.layer_count} layers, largest "
            f"{format_bytes(info.largest_bytes)}, total {format_bytes(info.total_bytes)}, "
            f"{info.date.isoformat()}")


def _comment_lines(comment: str, indent: str, line_length: int) -> list[str]:
    """`comment` as one line, or split at ", " into `# gpurl pin:` lines that fit."""
    if len(indent) + len(comment) <= line_length or not comment.startswith(PIN_MARKER):
        return [comment]
    first, *rest = comment[len(PIN_MARKER):].strip().split(", ")
    lines: list[str] = []
    current = f"{PIN_MARKER} {first}"
    for part in rest:
        if len(indent) + len(current) + len(part) + 3 > line_length:  # ", " and a trailing ","
            lines.append(current + ",")
            current = f"{PIN_MARKER} {part}"
        else:
            current = f"{current}, {part}"
    return [*lines, current]


def rewrite_assignment(source: str, variable: str, value: str, comment: str, *,
                       where: str = "the launcher", line_length: int | None = None) -> str:
    """Return `source` with `variable`'s string value set to `value` and `comment` above it.

    Unchanged when the value is already `value` and a provenance comment is present
    (idempotent: the date in an existing comment is not refreshed by a no-op pin). Lines
    gpurl writes stay within `line_length`, when given, where a break is possible (E501).
    """
    string_literal(value, "", where)  # refused before the file is read
    node = find_assignment(parse_module(source, where), variable, where)
    literal = node.value
    if not (isinstance(literal, ast.Constant) and isinstance(literal.value, str)):
        raise PinError(f"{where}:{node.lineno}: {variable} is not assigned a plain string literal",
                       hint=f"assign {variable} a plain string literal (\"...\"), then pin again")
    lines = source_lines(source)
    stmt_line = node.lineno - 1
    above = stmt_line
    while above > 0 and lines[above - 1].lstrip().startswith(PIN_MARKER):
        above -= 1
    if literal.value == value and above < stmt_line:
        return source
    start, end = node_span(lines, literal)
    old_literal = source[start:end]
    new_literal = string_literal(value, old_literal, where)
    line = lines[stmt_line]
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    ending = line[len(line.rstrip("\r\n")):] or os.linesep
    one_line = len(line.rstrip("\r\n")) - len(old_literal) + len(new_literal)
    limit = line_length or sys.maxsize
    if literal.lineno == node.lineno and one_line > limit:
        new_literal = f"({ending}{indent}    {new_literal}{ending}{indent})"
    lines = source_lines(source[:start] + new_literal + source[end:])
    lines[above:stmt_line] = [f"{indent}{text}{ending}"
                              for text in _comment_lines(comment, indent, limit)]
    return "".join(lines)


def unified_diff(old: str, new: str, path: str) -> str:
    return "".join(difflib.unified_diff(source_lines(old), source_lines(new), fromfile=f"a/{path}",
                                        tofile=f"b/{path}"))


