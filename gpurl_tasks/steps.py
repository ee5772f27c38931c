"""The one step record and timer: what a step did, how it ended and how long it took.

Every long piece of work (setup-local's steps, the main job's pipeline, a task's build) is
reported through `timed`, so progress looks the same everywhere. Nothing here prints: the
caller passes where the start and end lines go.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

from gpurl_tasks.errors import ExitCode

T = TypeVar("T")

__all__ = ["HEARTBEAT_SECONDS", "Argv", "DryRun", "Step", "StepRecord", "Steps", "dry_run_of", "timed"]


@dataclasses.dataclass
class StepRecord:
    """One step: set `detail` (and `status`, e.g. found / started / would) inside the block;
    `seconds` is filled in after it."""

    name: str
    status: str = ""
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail,
                "seconds": round(self.seconds, 2)}


HEARTBEAT_SECONDS = 30.0


@contextlib.contextmanager
def _heartbeat(name: str, out: Callable[[str], None], start: float,
               every: float) -> Iterator[None]:
    """While the block runs, say every `every` seconds that `name` is still running."""
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every):
            out(f"    ... {name}: still running ({time.monotonic() - start:.0f}s)")

    thread = threading.Thread(target=beat, name=f"heartbeat {name}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@contextlib.contextmanager
def timed(name: str, out: Callable[[str], None] | None = None, *,
          heartbeat: float = HEARTBEAT_SECONDS) -> Iterator[StepRecord]:
    """Time a step; with `out`, say its start, that it is alive every `heartbeat` seconds
    while it runs (a debootstrap or a cold build shows no other sign of life), and its end
    with the detail, duration and a tick (or a cross when it raised)."""
    if out:
        out(f"==> {name}")
    record = StepRecord(name=name)
    start = time.monotonic()
    try:
        with _heartbeat(name, out, start, heartbeat) if out else contextlib.nullcontext():
            yield record
    except BaseException:
        if out:
            out(f"<== {name}: failed after {time.monotonic() - start:.1f}s ✗")
        raise
    record.seconds = time.monotonic() - start
    if out:
        shown = record.detail or "done"
        out(f"<== {name}: {shown} ({record.seconds:.1f}s) ✓")


Argv = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class DryRun:
    """Every `--dry-run` outcome, whatever the backend: the commands the run would execute, in
    order, each an argv; nothing was done. `shown`: the human lines, when they differ from the
    commands shell-quoted (the iris command elides its long payload)."""

    commands: tuple[Argv, ...]
    shown: tuple[str, ...] = ()
    exit_code: int = ExitCode.OK
    # what the real run would refuse on and the dry run did not (said on stderr as it runs)
    warnings: tuple[str, ...] = ()

    def human(self) -> str:
        return "\n".join(self.shown or tuple(shlex.join(argv) for argv in self.commands))

    def to_json(self) -> dict[str, Any]:
        return {"dry_run": True, "commands": [list(argv) for argv in self.commands],
                "warnings": list(self.warnings)}


@dataclasses.dataclass(frozen=True)
class Step(Generic[T]):
    """One step of a longer run: what it executes (`commands`, which a dry run shows) and the
    action that does it, returning its value and the detail of its end line."""

    name: str
    commands: tuple[Argv, ...]
    action: Callable[[], tuple[T, str]]


class Steps:
    """The one step runner: runs steps in order, each timed and said (`timed`), and keeps
    their records."""

    def __init__(self, say: Callable[[str], None] | None) -> None:
        self.say = say
        self.records: list[StepRecord] = []

    def run(self, step: Step[T]) -> T:
        with timed(step.name, self.say) as record:
            value, record.detail = step.action()
        self.records.append(record)
        return value


def dry_run_of(steps: Iterable[Step[Any]]) -> DryRun:
    """What running `steps` would execute: their commands in order, none run."""
    return DryRun(tuple(argv for step in steps for argv in step.commands))
