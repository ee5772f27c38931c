"""Watch an iris job by polling its *state* until it is terminal.

Never a log-string watch: a clean kill or an OOM-reaped pod emits no final log line, so
waiting for one can hang forever. The loop is pure apart from the injected `read_state`,
`clock` and `sleep`, so tests drive it with a fake clock. Exit codes: 0 succeeded;
1 failed, killed, worker_failed or unschedulable; 2 absent (no record of the job);
3 the watcher itself could not conclude (CLI kept failing, or the time budget ran out).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gpurl_tasks.cluster.iris import (
    ABSENT,
    FAILED_STATES,
    IrisOutputError,
    Observation,
    TransientIrisError,
)
from gpurl_tasks.errors import ExitCode, IrisError

__all__ = [
    "WatchResult",
    "WatcherError",
    "exit_code_for",
    "log_window_start",
    "watch",
]

class WatcherError(IrisError):
    """The watcher itself could not work (no iris, no usable state command)."""

    exit_code = ExitCode.INCONCLUSIVE


def exit_code_for(state: str) -> int:
    """The watcher's exit code for a terminal state."""
    if state == "succeeded":
        return ExitCode.OK
    if state in FAILED_STATES:
        return ExitCode.CHECK_FAILED
    if state == ABSENT:
        return ExitCode.ERROR
    raise ValueError(f"{state!r} is not a terminal state")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class WatchResult:
    """How the watch ended: the exit code, the last reading, and why."""

    exit_code: int
    observation: Observation | None
    elapsed: float
    reason: str
    polls: int


def _changed(last: Observation | None, now: Observation) -> bool:
    """Worth a line: a new state, or a new error or pending reason within the same state (a
    lost worker's error while its task is retried; why the job still waits)."""
    return last is None or (last.state, last.error, last.pending_reason) != \
        (now.state, now.error, now.pending_reason)


def watch(
    read_state: Callable[[float], Observation],
    *,
    interval: float,
    max_duration: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    on_change: Callable[[float, Observation], None] = lambda _t, _o: None,
    on_retry: Callable[[float, str, float], None] = lambda _t, _m, _d: None,
    max_failures: int = 6,
    backoff_base: float = 2.0,
    backoff_cap: float = 60.0,
    started: float | None = None,
) -> WatchResult:
    """Poll every `interval` seconds until terminal or `max_duration` has passed.

    `read_state` gets the seconds left in the bound and must not take longer (an iris call
    can hang while the controller is unreachable); elapsed time is measured after each call,
    and no call starts with less time left than the last reading took (it could not finish:
    the bound, not the controller, ends such a watch).
    Transient CLI failures are retried with exponential backoff (base, doubling, capped);
    `max_failures` in a row, or the bound, end the watch with ExitCode.INCONCLUSIVE. Any other
    IrisError (iris refused the input) is not retried: it propagates. Output that cannot be
    read (IrisOutputError) is not retried either, since asking again gets the same answer: it
    ends the watch at once with ExitCode.INCONCLUSIVE. `started`: when the
    bound began on `clock` (default: now), if work before the first poll counts against it.
    """
    if interval <= 0 or max_duration <= 0:
        raise ValueError("interval and max_duration must be positive")
    start = clock() if started is None else started
    last: Observation | None = None
    failures = 0
    failing_since = 0.0
    polls = 0
    last_call = 0.0  # how long the last successful reading took
    while True:
        before = clock() - start
        if last is not None and max_duration - before < last_call:
            # no time left for another reading: the bound ends the watch, not the controller
            return _at_bound(last, before, polls, max_duration)
        try:
            polls += 1
            observation = read_state(max_duration - before)
        except IrisOutputError as exc:
            return WatchResult(exit_code=ExitCode.INCONCLUSIVE, observation=last, elapsed=clock() - start,
                               polls=polls, reason=f"cannot read iris's answers: {exc.message}")
        except TransientIrisError as exc:
            elapsed = clock() - start
            failures += 1
            if failures == 1:
                failing_since = before
            delay = min(backoff_cap, backoff_base * 2 ** (failures - 1))
            if failures >= max_failures or elapsed + delay >= max_duration:
                why = (f"iris failed {failures} times in a row" if failures >= max_failures
                       else f"gave up at the bound (--max-duration {max_duration:g}s)")
                return WatchResult(exit_code=ExitCode.INCONCLUSIVE, observation=last, elapsed=elapsed,
                                   polls=polls, reason="cannot reach the controller since "
                                   f"{failing_since:.0f}s into the watch: {why}; last error: {exc.message}")
            on_retry(elapsed, exc.message, delay)
            sleep(delay)
            continue
        elapsed = clock() - start
        last_call = elapsed - before
        failures = 0
        if last and last.state == observation.state and not observation.pending_reason:
            # a reading without the reason (it is read separately, best effort) keeps the last
            observation = dataclasses.replace(observation, pending_reason=last.pending_reason)
        if _changed(last, observation):
            on_change(elapsed, observation)
        last = observation
        if observation.terminal:
            return WatchResult(exit_code=exit_code_for(observation.state), observation=observation,
                               elapsed=elapsed, polls=polls, reason=observation.state)
        if elapsed + interval >= max_duration:
            return _at_bound(observation, elapsed, polls, max_duration)
        sleep(interval)


def _at_bound(observation: Observation, elapsed: float, polls: int,
              max_duration: float) -> WatchResult:
    return WatchResult(exit_code=ExitCode.INCONCLUSIVE, observation=observation, elapsed=elapsed,
                       polls=polls, reason=f"still {observation.state} at the bound "
                       f"(--max-duration {max_duration:g}s)")


def log_window_start(observation: Observation | None, *, watch_started_ms: int,
                     job_timeout_s: int) -> int:
    """Epoch ms to fetch logs from: the submission time when known, else the earliest the
    job could have started (its timeout before the watch began)."""
    if observation is not None and observation.submitted_ms:
        return observation.submitted_ms
    return max(0, watch_started_ms - job_timeout_s * 1000)
