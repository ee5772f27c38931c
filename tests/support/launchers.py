"""Reading a launcher file as a test checks a pin: its `NAME = "..."` values."""

from __future__ import annotations

import ast

__all__ = ["assigned"]


def assigned(text: str) -> dict[str, str]:
    """The launcher's `NAME = "..."` string values (a long one may be wrapped in parentheses)."""
    return {node.targets[0].id: str(node.value.value) for node in ast.parse(text).body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)}
