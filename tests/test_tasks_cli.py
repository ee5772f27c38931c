"""Every invoke task explains itself: `invoke TASK --help` shows its help (never runs it), and
`invoke --list` shows a first docstring line that stands on its own."""

from __future__ import annotations

import inspect
import json
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
    assert done.returncode == 2, done.stderr  # a missing tool, as for `invoke kill`
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


def _positionals(task: object) -> list[str]:
    return [a.name for a in task.get_arguments() if a.positional]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("name", "task"), TASKS, ids=[name for name, _ in TASKS])
def test_every_task_fails_under_json_as_one_object_with_its_exit_code(name: str,
                                                                      task: object) -> None:
    """The one --json contract, for every task in invoke's collection (a new task is covered
    without editing this test): a failure (here a profile no config has) prints exactly one
    JSON object {"error", "hint", "exit_code"} on stdout, exits with that code, which is
    ExitCode.ERROR, and still says the error on stderr."""
    from gpurl_tasks.errors import ExitCode
    from tests.support.tasks_runner import run_task

    given = [f"{p}-value" for p in _positionals(task)]
    done = run_task(name, *given, "--profile", "no-such-profile", "--json", timeout=120)
    failure = json.loads(done.stdout)
    assert set(failure) == {"error", "hint", "exit_code"}, done.stdout
    assert "no-such-profile" in failure["error"]
    assert done.returncode == failure["exit_code"] == ExitCode.ERROR, done.stderr
    assert done.stderr.startswith(f"error: {failure['error']}")
    assert "Traceback" not in done.stderr


def test_short_flags_are_the_few_explicit_ones() -> None:
    """No generated short flag: each task's one-letter flags are exactly cli.SHORT_FLAGS' for
    the flags it has (`-p` once meant --probe in `sizes` and --profile elsewhere)."""
    from gpurl_tasks.cli import SHORT_FLAGS

    for name, task in tasks.ns.tasks.items():
        for arg in task.get_arguments():
            shorts = [flag for flag in arg.names if len(flag) == 1]
            long = arg.names[0]
            assert shorts == ([SHORT_FLAGS[long]] if long in SHORT_FLAGS else []), \
                (name, arg.names)


def test_every_profile_flag_resolves_like_every_other(tmp_path: pathlib.Path) -> None:
    """--profile absent: $GPURL_PROFILE, for every task that takes it (setup-local and the
    local tasks once defaulted to demo and ignored it). A profile the variable names that
    no config has is the error each task reports. `generate`'s --profile is a filter over
    every profile, not the config a task runs with: it is the one task without it."""
    from tests.support.tasks_runner import run_task

    for name, task in TASKS:
        if name == "generate":
            continue
        given = [f"{p}-value" for p in _positionals(task)]
        done = run_task(name, *given, "--json", env={"GPURL_PROFILE": "from-the-env"})
        assert "from-the-env" in json.loads(done.stdout)["error"], (name, done.stdout)
