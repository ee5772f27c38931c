"""Issue 53: the CLI contract, second pass.

`test_every_exit_2_error_carries_a_hint` reads gpurl_tasks' source: an `error:` line is never
without a hint, so every raise of an error class that exits 2 passes `hint=`, unless the class
has a `default_hint`. The table runs the `gpurl` command in-process (its `main(argv)`, the
same program a shell runs), with a canary token in the environment of every case.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import gpurl_tasks
from gpurl_tasks.errors import ExitCode, GpurlError
from tests.conftest import REPO_ROOT


def _error_classes() -> dict[str, type[GpurlError]]:
    """Every GpurlError subclass gpurl_tasks defines, by name (names are unique)."""
    found: dict[str, type[GpurlError]] = {}
    for module in pkgutil.walk_packages(gpurl_tasks.__path__, "gpurl_tasks."):
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, type) and issubclass(value, GpurlError):
                found[value.__name__] = value
    return found


def _unhinted_raises(classes: dict[str, type[GpurlError]], files: list[Path]) -> list[str]:
    """`file:line: Class` of each construction of an exit-2 class without a default hint
    that passes no `hint=` (or passes `hint=None`)."""
    bare = {name for name, kind in classes.items()
            if kind.exit_code == ExitCode.ERROR and not kind.default_hint}
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else None
            if name not in bare:
                continue
            hint = next((k.value for k in node.keywords if k.arg == "hint"), None)
            if hint is None or (isinstance(hint, ast.Constant) and not hint.value):
                found.append(f"{path.name}:{node.lineno}: {name}")
    return found


def test_every_exit_2_error_carries_a_hint() -> None:
    """A class that exits 2 either has a default hint or every raise of it writes one."""
    classes = _error_classes()
    assert {"ConfigError", "RegistryError", "LockError"} <= set(classes)
    missing = _unhinted_raises(classes, sorted((REPO_ROOT / "gpurl_tasks").rglob("*.py")))
    assert not missing, "errors raised without a hint:\n" + "\n".join(missing)


def test_the_hint_check_finds_a_raise_without_one(tmp_path: Path) -> None:
    """The check itself: of a class without a default hint, a bare raise and `hint=None` are
    found, one with a hint is not; a class with a default hint needs none."""
    class Bare(GpurlError):
        pass

    class Helped(GpurlError):
        default_hint = "do this"

    source = tmp_path / "m.py"
    source.write_text('raise Bare("a")\nraise Bare("b", hint=None)\nraise Bare("c", hint="h")\n'
                      'raise errors.Bare("d")\nraise Helped("e")\n')
    found = _unhinted_raises({"Bare": Bare, "Helped": Helped}, [source])
    assert found == ["m.py:1: Bare", "m.py:2: Bare", "m.py:4: Bare"]
    assert Bare("x").hint is None and Helped("x").hint == "do this"
    assert Helped("x", hint="that").specific_hint == "that" and Helped("x").specific_hint is None
