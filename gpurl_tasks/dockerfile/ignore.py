""".dockerignore's rules as the builders match them (pure): what a build context holds.

A rule is a path pattern, `!PATTERN` an exception; `*` and `?` match within one path
component, `**` any number of components; a rule matching a directory keeps everything under
it out; the last rule that matches a path decides. A hand-written Dockerfile's COPY takes only
what they let in (handwritten.py), so rebuild-needed and doctor read the context this way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["IgnoreRule", "ignore_rules", "in_context", "is_ignored"]

IgnoreRule = tuple[bool, re.Pattern[str]]  # (an exception `!PATTERN`, what it matches)


def _pattern(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern as the builders match it: `*` and `?` within one path
    component, `**` any number of components, `[...]` a character class."""
    parts = [part for part in pattern.split("/") if part not in ("", ".")]
    out = []
    for i, part in enumerate(parts):
        if part == "**":
            out.append(".*" if i == len(parts) - 1 else "(?:.*/)?")
            continue
        text = re.sub(r"\\\[(!?)((?:[^\]\\]|\\\\.)+)\\\]",
                      lambda m: "[" + ("^" if m[1] else "") + m[2].replace("\\", "") + "]",
                      re.escape(part))
        out.append(text.replace("\\*", "[^/]*").replace("\\?", "[^/]")
                   + ("/" if i < len(parts) - 1 else ""))
    return re.compile("".join(out))


def ignore_rules(text: str) -> tuple[IgnoreRule, ...]:
    """The rules of a .dockerignore text, in order (comments and blank lines dropped)."""
    rules = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        rules.append((negate, _pattern(line.removeprefix("!").strip())))
    return tuple(rules)


def is_ignored(path: str, rules: Iterable[IgnoreRule]) -> bool:
    """`path` (relative to the context) is kept out of the build context: the last rule that
    matches it or a directory above it decides, an exception `!` letting it back in."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    kept = False
    for negate, pattern in rules:
        if any(pattern.fullmatch(prefix) for prefix in prefixes):
            kept = not negate
    return kept


def in_context(paths: Iterable[str], context: str, ignore_text: str) -> dict[str, str]:
    """{path relative to the context: the repository path} of `paths` (repository-relative)
    that lie under `context` (a repository-relative directory, "." the root) and that its
    .dockerignore text lets into the build context."""
    prefix = "" if context in ("", ".") else context.rstrip("/") + "/"
    rules = ignore_rules(ignore_text)
    return {rel: path for path in paths if path.startswith(prefix)
            for rel in [path[len(prefix):]] if not is_ignored(rel, rules)}
