"""Read and edit Python source by `ast` spans, never re-rendering it: the launcher pin
(release/pin.py) and the image table (launcher/table.py) replace exactly the source of the nodes
they change, so comments, quotes and formatting elsewhere stay byte for byte.
"""

from __future__ import annotations

import ast
import re

from gpurl_tasks.errors import PinError

__all__ = ["find_assignment", "node_span", "parse_module", "source_lines", "string_literal"]

_LINE_RE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def parse_module(source: str, where: str) -> ast.Module:
    """`source` parsed, or one PinError naming the file, the reason and the line."""
    try:
        return ast.parse(source)
    except SyntaxError as exc:
        raise PinError(f"{where} is not valid Python ({exc.msg}, line {exc.lineno})",
                       hint="fix the file so that `python -m py_compile` accepts it") from None


def source_lines(text: str) -> list[str]:
    """Lines with their own endings, split the way the tokenizer counts them."""
    return _LINE_RE.findall(text)


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        return list(node.targets)
    if isinstance(node, ast.AnnAssign):
        return [node.target]
    return []


def _names_in(target: ast.expr) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def find_assignment(tree: ast.Module, variable: str, where: str, *,
                    key: str = "launcher.variable") -> ast.Assign | ast.AnnAssign:
    """The one statement `variable = ...` in `tree` (an error for none, several, or one that
    assigns other names too)."""
    found: list[ast.Assign | ast.AnnAssign] = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        for target in _targets(node):
            if variable not in _names_in(target):
                continue
            if not isinstance(target, ast.Name) or len(_targets(node)) != 1:
                raise PinError(f"{where}:{node.lineno}: {variable} is assigned together with "
                               "other names; gpurl only rewrites `NAME = \"...\"`",
                               hint=f"assign {variable} alone, as {variable} = \"...\", then pin again")
            found.append(node)
    if not found:
        raise PinError(f"{where} has no assignment to {variable}",
                       hint=f"check launcher.path and {key} in the config")
    if len(found) > 1:
        lines = ", ".join(str(n.lineno) for n in sorted(found, key=lambda n: n.lineno))
        raise PinError(f"{where} assigns {variable} {len(found)} times (lines {lines})",
                       hint="keep exactly one assignment so the pin is unambiguous")
    return found[0]


def _offset(lines: list[str], lineno: int, col_bytes: int) -> int:
    """ast (1-based line, UTF-8 byte column) -> index into the text."""
    start = sum(len(line) for line in lines[: lineno - 1])
    return start + len(lines[lineno - 1].encode()[:col_bytes].decode())


def node_span(lines: list[str], node: ast.expr) -> tuple[int, int]:
    """[start, end) of `node`'s source in the text whose `source_lines` are `lines`."""
    assert node.end_lineno is not None and node.end_col_offset is not None
    return (_offset(lines, node.lineno, node.col_offset),
            _offset(lines, node.end_lineno, node.end_col_offset))


def string_literal(value: str, old: str, where: str) -> str:
    """`value` as a string literal in the quotes of the literal `old` it replaces (double
    quotes for anything else); a value that would need escaping is refused."""
    if not value.isprintable() or any(c in value for c in "\"'\\"):
        raise PinError(f"refusing to write {value!r} into {where}: it needs escaping",
                       hint="pin a reference without quotes, backslashes or control characters")
    quote = "'" if old.lstrip("rRuUfF")[:1] == "'" else '"'
    return f"{quote}{value}{quote}"
