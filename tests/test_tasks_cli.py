"""Every invoke task is documented: a docstring, and help text for every flag."""

from __future__ import annotations

import inspect

import pytest

import tasks

TASKS = sorted(tasks.ns.tasks.items())


@pytest.mark.parametrize(("name", "task"), TASKS, ids=[name for name, _ in TASKS])
def test_task_has_docstring_and_help_for_every_flag(name: str, task: object) -> None:
    body = task.body  # type: ignore[attr-defined]
    assert inspect.getdoc(body), f"{name} has no docstring"
    params = [p.rstrip("_") for p in inspect.signature(body).parameters if p != "c"]  # json_ -> --json
    missing = [p for p in params if p not in task.help]  # type: ignore[attr-defined]
    assert not missing, f"{name}: no help for {missing}"


def test_the_user_entry_points_exist() -> None:
    assert {"plan", "sizes"} <= set(tasks.ns.task_names)
