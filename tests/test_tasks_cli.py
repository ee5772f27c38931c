"""Every invoke task explains itself: `invoke TASK --help` shows its help (never runs it), and
`invoke --list` shows a first docstring line that stands on its own."""

from __future__ import annotations

import inspect
import pathlib
import subprocess
import sys

import pytest

import tasks
from tests.support.tasks_runner import REPO_ROOT

TASKS = sorted(tasks.ns.tasks.items())


@pytest.mark.parametrize(("name", "task"), TASKS, ids=[name for name, _ in TASKS])
def test_task_help_shows_every_flag_and_runs_nothing(name: str, task: object) -> None:
    """`--help` after the task name, also for tasks with a positional JOB (invoke would
    otherwise take `--help` as the job id and run the task)."""
    done = subprocess.run([sys.executable, "-m", "invoke", name, "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    shown = done.stdout + done.stderr
    assert done.returncode == 0, shown
    assert f"[--core-opts] {name} [--options]" in shown
    body = task.body  # type: ignore[attr-defined]
    params = [p.rstrip("_").replace("_", "-") for p in inspect.signature(body).parameters
              if p != "c"]
    assert [p for p in params if f"--{p}" not in shown] == []
    assert "error:" not in shown


def test_list_lines_stand_alone() -> None:
    """The first docstring line is what `invoke --list` shows: a whole sentence."""
    done = subprocess.run([sys.executable, "-m", "invoke", "--list"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60, check=True)
    for name, task in TASKS:
        first = inspect.getdoc(task.body).splitlines()[0]  # type: ignore[attr-defined,union-attr]
        assert first.endswith((".", ")")), f"{name}: {first!r} is cut mid-sentence"
        assert name in done.stdout


def test_missing_iris_hint_says_how_to_install_the_pinned_release(tmp_path: pathlib.Path) -> None:
    """`invoke watch JOB` without iris: one line, and a hint with the pinned release, the
    resolver flags it needs and its Python (pins from the one place the noxfile reads too)."""
    import noxfile
    from gpurl_tasks.cluster import iris_release

    assert noxfile.IRIS_CONTRACT_PINS == iris_release.IRIS_CONTRACT_PINS
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}  # no iris on PATH
    done = subprocess.run([sys.executable, "-m", "invoke", "watch", "/alice/job"],
                          cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 3, done.stderr  # watch: could not conclude
    assert done.stderr.startswith("error: couldn't find iris in PATH\n  hint: install the pinned")
    for needed in (*iris_release.IRIS_CONTRACT_PINS, "--prerelease if-necessary-or-explicit",
                   "--exclude-newer 2026-07-04", "Python >= 3.12", "GPURL_IRIS"):
        assert needed in done.stderr
    assert "Traceback" not in done.stderr


def test_no_task_lets_a_flag_shadow_dash_h() -> None:
    """`invoke TASK -h` must show help, never set a flag (`build -h` once meant --chain)."""
    import tasks

    for name, task in tasks.ns.tasks.items():
        shorts = {flag for arg in task.get_arguments() for flag in arg.names if len(flag) == 1}
        assert "h" not in shorts, name
