"""The state watcher: the pure loop with a fake clock, and the iris adapter over recorded
outputs of each CLI variant (the summary, list, query and logs outputs of the pinned release
were recorded from a real local controller; see tests/data/iris/README.md). A runner replays
them so every variant and fault is cheap to drive; tests/test_iris_e2e.py runs the real one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.cluster import jobs
from gpurl_tasks.cluster.iris import (
    ABSENT,
    FAILED_STATES,
    ClusterTarget,
    IrisCli,
    IrisOutputError,
    Observation,
    TransientIrisError,
    normalise_job_id,
)
from gpurl_tasks.cluster.watch import (
    WatcherError,
    exit_code_for,
    log_window_start,
    watch,
)
from gpurl_tasks.config import load_config
from gpurl_tasks.errors import ExitCode, IrisError
from gpurl_tasks.proc import CommandFailed, Completed
from tests.conftest import REPO_ROOT

DATA = Path(__file__).parent / "data" / "iris"
JOB = "/alice/gpurl-kaniko-0123abc"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def scripted(*items: Observation | Exception):
    it = iter(items)

    def read(_left: float) -> Observation:
        item = next(it)
        if isinstance(item, Exception):
            raise item
        return item
    return read


def obs(state: str) -> Observation:
    return Observation(state=state)


def test_runs_to_succeeded_printing_each_change_once() -> None:
    clock, changes = FakeClock(), []
    result = watch(scripted(obs("pending"), obs("pending"), obs("running"), obs("running"),
                            obs("succeeded")),
                   interval=60, max_duration=3600, clock=clock, sleep=clock.sleep,
                   on_change=lambda t, o: changes.append((t, o.state)))
    assert result.exit_code == ExitCode.OK
    assert changes == [(0, "pending"), (120, "running"), (240, "succeeded")]
    assert clock.sleeps == [60, 60, 60, 60]


@pytest.mark.parametrize("state", FAILED_STATES)
def test_failed_terminal_states_exit_1(state: str) -> None:
    clock = FakeClock()
    result = watch(scripted(obs("running"), obs(state)), interval=5, max_duration=100,
                   clock=clock, sleep=clock.sleep)
    assert (result.exit_code, result.reason) == (ExitCode.CHECK_FAILED, state)


def test_vanished_job_is_absent_not_waited_on() -> None:
    clock = FakeClock()
    result = watch(scripted(obs("running"), obs(ABSENT)), interval=5, max_duration=10**6,
                   clock=clock, sleep=clock.sleep)
    assert result.exit_code == ExitCode.ERROR and clock.now == 5


def test_transient_failures_back_off_then_recover() -> None:
    clock, retries = FakeClock(), []
    err = TransientIrisError("connection refused")
    result = watch(scripted(err, err, err, obs("running"), obs("succeeded")), interval=30,
                   max_duration=3600, clock=clock, sleep=clock.sleep,
                   on_retry=lambda t, m, d: retries.append(d))
    assert result.exit_code == ExitCode.OK
    assert retries == [2, 4, 8]


def test_persistent_failures_end_with_exit_3() -> None:
    clock = FakeClock()
    result = watch(scripted(*[TransientIrisError("refused")] * 10), interval=30,
                   max_duration=3600, clock=clock, sleep=clock.sleep, max_failures=4)
    assert result.exit_code == ExitCode.INCONCLUSIVE and "4 times in a row" in result.reason


def test_unreadable_output_is_not_retried() -> None:
    """Asking again gets the same unreadable answer: it ends the watch at once."""
    clock, retries = FakeClock(), []
    result = watch(scripted(obs("running"), IrisOutputError("garbage"), obs("succeeded")),
                   interval=30, max_duration=3600, clock=clock, sleep=clock.sleep,
                   on_retry=lambda t, m, d: retries.append(d))
    assert result.exit_code == ExitCode.INCONCLUSIVE and retries == [] and result.polls == 2
    assert result.reason == "cannot read iris's answers: garbage"
    assert result.observation is not None and result.observation.state == "running"
    assert not isinstance(IrisOutputError("x"), TransientIrisError)


def test_max_duration_ends_with_exit_3() -> None:
    clock = FakeClock()
    result = watch(scripted(*[obs("running")] * 100), interval=60, max_duration=300,
                   clock=clock, sleep=clock.sleep)
    assert result.exit_code == ExitCode.INCONCLUSIVE and "still running" in result.reason
    assert clock.now <= 300


def test_no_reading_starts_that_the_bound_would_cut() -> None:
    """Each reading takes 4 s (an iris CLI call here): with 2 s left the watch ends at the
    bound with the last state, instead of starting a call the bound cuts and blaming the
    controller (seen in CI: "cannot reach the controller since 29s" for a pending job)."""
    clock, budgets = FakeClock(), []

    def slow(left: float) -> Observation:
        budgets.append(left)
        if left < 4:
            clock.now += left
            raise TransientIrisError("iris did not answer within the time left")
        clock.now += 4
        return obs("pending")

    result = watch(slow, interval=1, max_duration=31, clock=clock, sleep=clock.sleep)
    assert result.exit_code == ExitCode.INCONCLUSIVE
    assert result.reason.startswith("still pending at the bound")
    assert min(budgets) >= 4 and clock.now <= 31


@given(st.lists(st.sampled_from(["pending", "building", "running"]), max_size=30),
       st.sampled_from(["succeeded", "failed", "killed", "worker_failed", "unschedulable",
                        ABSENT]),
       st.integers(min_value=1, max_value=600))
def test_always_ends_with_the_terminal_states_code(active: list[str], final: str,
                                                   interval: int) -> None:
    clock = FakeClock()
    states = [*active, final]
    result = watch(scripted(*[obs(s) for s in states]), interval=interval,
                   max_duration=10**9, clock=clock, sleep=clock.sleep)
    assert result.exit_code == exit_code_for(final)
    assert result.polls == len(states)
    assert clock.sleeps == [interval] * len(active)


def test_log_window_prefers_submission_time() -> None:
    assert log_window_start(Observation(state="failed", submitted_ms=123),
                            watch_started_ms=10**9, job_timeout_s=18000) == 123
    assert log_window_start(Observation(state="failed"), watch_started_ms=10**8,
                            job_timeout_s=18000) == 10**8 - 18000 * 1000


# --- the adapter over recorded outputs ---------------------------------------------------


class Replay:
    """Stand-in runner: answers `--help` from a recorded help page and state commands
    from a queue of recorded outputs (a str is stdout, an int a non-zero exit + stderr);
    `job list` calls besides the state command's (a pending job's reason, the submission
    time) from `lists`, else "[]"."""

    def __init__(self, job_help: str, states: list[str | tuple[int, str]], log: str = "",
                 lists: list[str] | None = None) -> None:
        self.job_help = (DATA / job_help).read_text()
        self.top_help = (DATA / "help-0.2.35.txt").read_text()
        self.states = list(states)
        self.lists = list(lists or [])
        self.log = log
        self.calls: list[tuple[str, ...]] = []
        self.timeouts: list[float] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> Completed:
        args = tuple(argv)
        self.timeouts.append(timeout)
        self.calls.append(args)
        if args[1:] == ("--help",):
            out = self.top_help
        elif args[1:] == ("job", "--help"):
            out = self.job_help
        elif "logs" in args:
            out = self.log
        elif "list" in args and not str(self.states[:1]).startswith("['list-"):
            out = (DATA / self.lists.pop(0)).read_text() if self.lists else "[]"
        else:
            item = self.states.pop(0)
            if isinstance(item, tuple):
                code, name = item
                err = (DATA / name).read_text()
                raise CommandFailed("iris failed", returncode=code, stdout="", stderr=err)
            out = (DATA / item).read_text()
        return Completed(argv=args, returncode=0, stdout=out, stderr="")


def _cli(replay: Replay) -> IrisCli:
    return IrisCli(replay, program="iris", cluster=ClusterTarget(name="cw-test"))


def _run(replay: Replay, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, object]]:
    clock = FakeClock()
    outcome = jobs.run_watch(load_config(REPO_ROOT, env={}), JOB, interval=60,
                             max_duration=7200, cli=_cli(replay), clock=clock, sleep=clock.sleep)
    return outcome.exit_code, json.loads(json.dumps(outcome.to_json()))


def test_summary_variant_to_success(capsys: pytest.CaptureFixture[str]) -> None:
    replay = Replay("job-help-0.2.35.txt", ["summary-pending.json", "summary-running.json",
                                            "summary-succeeded.json"])
    code, out = _run(replay, capsys)
    assert code == 0 and [e["state"] for e in out["events"]] == ["pending", "running",
                                                                 "succeeded"]
    assert ("iris", "--cluster=cw-test", "job", "summary", JOB, "--json") in replay.calls


def test_summary_variant_failure_prints_the_log_tail_by_time_window(
        capsys: pytest.CaptureFixture[str]) -> None:
    log = "\n".join(f"line {i}" for i in range(100))
    replay = Replay("job-help-0.2.35.txt", ["summary-running.json", "summary-failed.json"],
                    log=log)
    code, out = _run(replay, capsys)
    assert code == 1 and out["error"] == "Exit code: 3. stderr: err-line"
    assert out["job_exit_code"] == 3  # the task's code: the job-level one is always 0
    assert out["log_tail"] == [f"line {i}" for i in range(60, 100)]
    (logs_call,) = [c for c in replay.calls if "logs" in c]
    # the server returns the *earliest* lines unless asked for the tail
    assert "--tail" in logs_call and "--no-tail" not in logs_call and "--since-ms" in logs_call
    assert logs_call[logs_call.index("--max-lines") + 1] == str(jobs.LOG_TAIL_LINES)


def test_job_killed_with_no_final_log_line_still_ends(capsys: pytest.CaptureFixture[str]) -> None:
    """An OOM-reaped job writes nothing at the end; the state says it is over."""
    replay = Replay("job-help-0.2.35.txt", ["summary-running.json", "summary-killed.json"],
                    log="Building wheel for flash-attn ... still running\n")
    code, out = _run(replay, capsys)
    assert code == 1 and out["state"] == "killed"


def test_vanished_job_through_not_found_error(capsys: pytest.CaptureFixture[str]) -> None:
    replay = Replay("job-help-0.2.35.txt", ["summary-running.json",
                                            (1, "summary-not-found.stderr")])
    code, out = _run(replay, capsys)
    assert code == 2 and out["state"] == ABSENT


def test_nonzero_exit_is_retried(capsys: pytest.CaptureFixture[str]) -> None:
    replay = Replay("job-help-0.2.35.txt", [(1, "transient-connection-refused.stderr"),
                                            "summary-running.json", "summary-succeeded.json"])
    code, _ = _run(replay, capsys)
    assert code == 0


def test_garbage_is_exit_3_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    replay = Replay("job-help-0.2.35.txt", ["garbage.html"] * 10)
    code, out = _run(replay, capsys)
    assert code == 3 and str(out["reason"]).startswith("cannot read iris's answers")
    assert len([c for c in replay.calls if "summary" in c]) == 1


def test_query_variant_when_no_job_state_command_exists(
        capsys: pytest.CaptureFixture[str]) -> None:
    replay = Replay("help-0.2.35.txt", ["query-running.csv", "query-unschedulable.csv"])
    code, out = _run(replay, capsys)
    assert code == 1 and out["state"] == "unschedulable"
    assert any(c[2:4] == ("query", "-f") for c in replay.calls)


def test_query_variant_absent(capsys: pytest.CaptureFixture[str]) -> None:
    replay = Replay("help-0.2.35.txt", ["query-empty.csv"])
    assert _run(replay, capsys)[0] == 2


def test_list_variant(capsys: pytest.CaptureFixture[str]) -> None:
    job_help = (DATA / "job-help-0.2.35.txt").read_text().replace("  summary", "  xsummary")
    tmp = DATA / "job-help-0.2.35.txt"
    replay = Replay(tmp.name, ["list-running.json", "list-empty.json"])
    replay.job_help = job_help
    code, _ = _run(replay, capsys)
    assert code == 2
    assert ("iris", "--cluster=cw-test", "job", "list", "--json", "--prefix", JOB) in replay.calls


def test_a_cli_without_state_commands_is_a_watcher_failure(
        capsys: pytest.CaptureFixture[str]) -> None:
    replay = Replay("job-help-0.2.35.txt", [])
    replay.job_help = "Usage: iris job\n\nCommands:\n  run  Submit jobs.\n"
    replay.top_help = "Usage: iris\n\nCommands:\n  job  Manage Iris jobs.\n"
    with pytest.raises(WatcherError) as info:
        _run(replay, capsys)
    assert info.value.exit_code == ExitCode.INCONCLUSIVE and "cannot read job state" in info.value.message


def test_missing_iris_is_exit_2() -> None:
    """A missing tool (as for `invoke kill`), not a watch that could not conclude (3)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "invoke", "watch", JOB, "--interval", "1"],
                          cwd=REPO_ROOT, capture_output=True, text=True, check=False,
                          env={"PATH": "/nonexistent", "HOME": "/tmp"})
    assert proc.returncode == 2
    assert "couldn't find iris in PATH" in proc.stderr


STANDIN_IRIS = r"""#!/usr/bin/env bash
# Stand-in iris CLI: replays recorded outputs; one state file per `job summary` call.
data="$IRIS_DATA"
case "$*" in
  "--help") cat "$data/help-0.2.35.txt" ;;
  "job --help") cat "$data/job-help-0.2.35.txt" ;;
  *" job summary "*)
    n=$(cat "$IRIS_COUNTER" 2>/dev/null || echo 0)
    echo $((n + 1)) >"$IRIS_COUNTER"
    set -- $IRIS_STATES
    shift "$n"
    cat "$data/$1" ;;
  *" job logs "*) printf '%s\n' "$*" >"$IRIS_LOGS_ARGS"; printf 'step 1\nstep 2\n' ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""


@pytest.mark.integration
def test_invoke_watch_through_a_standin_iris_program(tmp_path: Path) -> None:
    """The whole path (invoke -> proc.run -> a real program on PATH); the program replays
    recorded outputs because no iris cluster can run here."""
    import os
    import subprocess
    import sys

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "iris").write_text(STANDIN_IRIS)
    (bindir / "iris").chmod(0o755)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "IRIS_DATA": str(DATA),
           "IRIS_COUNTER": str(tmp_path / "n"), "IRIS_LOGS_ARGS": str(tmp_path / "logs"),
           "IRIS_STATES": "summary-pending.json summary-running.json summary-failed.json"}
    proc = subprocess.run([sys.executable, "-m", "invoke", "watch", JOB, "--interval", "1",
                           "--json"], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=False, env=env, timeout=60)
    assert proc.returncode == 1, proc.stderr
    out = json.loads(proc.stdout)
    assert [e["state"] for e in out["events"]] == ["pending", "running", "failed"]
    assert out["log_tail"] == ["step 1", "step 2"]
    assert "--tail" in (tmp_path / "logs").read_text().split()
    assert "] failed exit=3 error=Exit code: 3. stderr: err-line" in proc.stderr


# --- faults: iris hangs, refuses the input; the kill stays job-scoped ------------------------


def test_a_hanging_iris_cannot_outlast_the_bound() -> None:
    """Each call may take the time left and no more (the iris client retries an unreachable
    controller for 30 minutes); elapsed time is measured after the call."""
    clock, given = FakeClock(), []

    def hangs(left: float) -> Observation:
        given.append(left)
        clock.now += left  # used every second it was given, then timed out
        raise TransientIrisError(f"iris did not answer within {left:.1f}s")

    result = watch(hangs, interval=2, max_duration=8, clock=clock, sleep=clock.sleep)
    assert result.exit_code == ExitCode.INCONCLUSIVE and clock.now <= 8
    assert result.reason.startswith("cannot reach the controller since 0s into the watch")
    assert given == [8]


def test_slow_calls_count_against_the_bound() -> None:
    clock = FakeClock()

    def slow(left: float) -> Observation:
        clock.now += min(left, 50)
        return obs("running")

    result = watch(slow, interval=60, max_duration=300, clock=clock, sleep=clock.sleep)
    assert result.exit_code == ExitCode.INCONCLUSIVE and "still running at the bound" in result.reason
    assert clock.now <= 300 and result.elapsed == clock.now


def test_failures_after_readings_say_since_when() -> None:
    clock = FakeClock()
    err = TransientIrisError("connection refused")
    result = watch(scripted(obs("running"), obs("running"), *[err] * 20), interval=10,
                   max_duration=40, clock=clock, sleep=clock.sleep)
    assert result.exit_code == ExitCode.INCONCLUSIVE
    assert result.reason.startswith("cannot reach the controller since 20s into the watch")
    assert result.observation == obs("running") and clock.now <= 40


def test_the_bound_starts_before_the_first_poll() -> None:
    clock = FakeClock()
    clock.now = 7.0
    result = watch(scripted(*[obs("running")] * 10), interval=1, max_duration=10, started=0.0,
                   clock=clock, sleep=clock.sleep)
    assert result.exit_code == ExitCode.INCONCLUSIVE and clock.now <= 10


def test_a_refused_job_name_is_not_retried() -> None:
    """`job summary /root/gk-abc/` (recorded): iris's ValueError is the input's fault."""
    replay = Replay("job-help-0.2.35.txt", [(1, "summary-bad-name.stderr")])
    with pytest.raises(IrisError) as info:
        _cli(replay).read_state("/root/gk-abc/", within=60)
    assert not isinstance(info.value, TransientIrisError)
    assert "Job name contains empty or whitespace-only component" in info.value.message
    assert sum("summary" in c for c in replay.calls) == 1


@pytest.mark.parametrize("raw", ["/alice/job/", "/alice/job//", " /alice/job "])
def test_job_ids_lose_a_trailing_slash(raw: str) -> None:
    assert normalise_job_id(raw) == "/alice/job"


@pytest.mark.parametrize("raw", ["", "/", "//", "/alice", "alice/job", "/alice//job",
                                 "/alice/ /x", "--all"])
def test_job_ids_iris_would_refuse_are_refused_at_once(raw: str) -> None:
    with pytest.raises(IrisError, match="is not a job id"):
        normalise_job_id(raw)


def test_a_trailing_slash_is_watched_as_the_job(capsys: pytest.CaptureFixture[str]) -> None:
    replay = Replay("job-help-0.2.35.txt", ["summary-succeeded.json"])
    clock = FakeClock()
    outcome = jobs.run_watch(load_config(REPO_ROOT, env={}), JOB + "/", interval=60,
                             max_duration=600, cli=_cli(replay), clock=clock, sleep=clock.sleep)
    assert outcome.exit_code == 0 and outcome.job_id == JOB
    assert ("iris", "--cluster=cw-test", "job", "summary", JOB, "--json") in replay.calls


def test_every_call_gets_no_more_than_the_time_left() -> None:
    replay = Replay("job-help-0.2.35.txt", ["summary-running.json"] * 50)
    clock = FakeClock()
    jobs.run_watch(load_config(REPO_ROOT, env={}), JOB, interval=30, max_duration=200,
                   cli=IrisCli(replay, program="iris", cluster=ClusterTarget(name="cw-test"),
                               clock=clock), clock=clock, sleep=clock.sleep)
    assert replay.timeouts and max(replay.timeouts) <= 200
    assert replay.timeouts[-1] <= 200 - 30 * (len(replay.timeouts) - 2)


def test_the_pending_reason_is_in_the_text(capsys: pytest.CaptureFixture[str]) -> None:
    """Recorded from a real controller: a job pending behind others. `job summary` has no
    reason; `job list` does, and the text a person reads shows it."""
    job = "/root/gk-wait"
    recorded = json.loads((DATA / "list-pending.json").read_text())[0]["pending_reason"]
    replay = Replay("job-help-0.2.35.txt", ["summary-pending.json"] * 3,
                    lists=["list-pending.json"])
    said: list[str] = []
    clock = FakeClock()
    outcome = jobs.run_watch(load_config(REPO_ROOT, env={}), job, interval=60,
                             max_duration=150, cli=_cli(replay), say=said.append, clock=clock,
                             sleep=clock.sleep)
    assert outcome.exit_code == ExitCode.INCONCLUSIVE
    parts = [line.strip() for line in recorded.splitlines() if line.strip()]
    assert len(parts) == 2 and all(part in outcome.human() for part in parts)
    pending = [line for line in said if "] pending" in line]
    assert len(pending) == 1 and all(part in pending[0] for part in parts)  # kept, not repeated
    assert outcome.to_json()["pending_reason"] == outcome.result.observation.pending_reason  # type: ignore[union-attr]


def test_an_error_within_the_same_state_is_shown() -> None:
    """A lost worker: the task's error appears while the job is still running (retried)."""
    clock, changes = FakeClock(), []
    lost = Observation(state="running", error="Worker w-1 failed: heartbeat timeout")
    watch(scripted(obs("running"), lost, lost, obs("succeeded")), interval=5,
          max_duration=100, clock=clock, sleep=clock.sleep,
          on_change=lambda t, o: changes.append((o.state, o.error)))
    assert changes == [("running", ""), ("running", lost.error), ("succeeded", "")]


class KillReplay:
    """Stand-in runner for `invoke kill`: `job list` and `job kill` answered from recorded
    outputs of the real controller (tests/data/iris), optionally edited by the test."""

    def __init__(self, listing: str, killed: str) -> None:
        self.listing, self.killed = listing, killed
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> Completed:
        self.calls.append(tuple(argv))
        out = self.killed if "kill" in argv else self.listing
        return Completed(argv=tuple(argv), returncode=0, stdout=out, stderr="")


def _kill(listing: str, killed: str, job: str = "/root/gk-abc") -> tuple[jobs.KillOutcome,
                                                                         KillReplay]:
    replay = KillReplay(listing, killed)
    cli = IrisCli(replay, program="iris", cluster=ClusterTarget(name="cw-test"))
    return jobs.kill_job(load_config(REPO_ROOT, env={}), job, dry_run=False, cli=cli), replay


SIBLINGS = (DATA / "list-prefix-siblings.json").read_text()
KILLED_ONE = (DATA / "kill-ended-no-include-children.txt").read_text()


def test_kill_of_an_ended_job_is_not_running_and_calls_no_kill() -> None:
    """Recorded: `/root/gk-abc` killed, `/root/gk-abc-dirty-123` running. iris itself would
    print the ended job under "Terminated jobs:" (recorded too), so the state is read first."""
    outcome, replay = _kill(SIBLINGS, KILLED_ONE)
    assert outcome.exit_code == 2 and "not running" in outcome.text
    assert not any("kill" in c for c in replay.calls)


def test_kill_of_a_running_job_spares_its_prefix_sibling() -> None:
    listing = SIBLINGS.replace('"JOB_STATE_KILLED"', '"JOB_STATE_RUNNING"')
    outcome, replay = _kill(listing, KILLED_ONE)
    assert outcome.exit_code == 0 and outcome.terminated == ("/root/gk-abc",)
    assert outcome.text.startswith("killed /root/gk-abc ")
    assert "/root/gk-abc-dirty-123" in outcome.text  # said to be left running
    (kill_call,) = [c for c in replay.calls if "kill" in c]
    assert kill_call[-2:] == ("--no-include-children", "/root/gk-abc")


def test_kill_says_loudly_when_iris_touched_another_job() -> None:
    listing = SIBLINGS.replace('"JOB_STATE_KILLED"', '"JOB_STATE_RUNNING"')
    outcome, _ = _kill(listing, KILLED_ONE + "  /root/gk-abc-dirty-123\n")
    assert outcome.exit_code == 1 and outcome.failure is not None
    assert "also terminated /root/gk-abc-dirty-123" in outcome.failure


def test_kill_refuses_a_job_whose_running_children_would_die_with_it() -> None:
    data = json.loads(SIBLINGS.replace('"JOB_STATE_KILLED"', '"JOB_STATE_RUNNING"'))
    child = {**data[0], "job_id": "/root/gk-abc/worker-0", "name": "/root/gk-abc/worker-0"}
    outcome, replay = _kill(json.dumps([*data, child]), KILLED_ONE)
    assert outcome.exit_code == 1 and "/root/gk-abc/worker-0" in outcome.text
    assert not any("kill" in c for c in replay.calls)


def test_kill_of_an_unknown_job() -> None:
    outcome, replay = _kill("[]", "No running jobs matched.\n", job="/root/nobody")
    assert outcome.exit_code == 2 and "unknown" in outcome.text
    assert not any("kill" in c for c in replay.calls)


def test_ctrl_c_in_any_task_is_exit_130_not_a_failure() -> None:
    from invoke.exceptions import Exit

    from gpurl_tasks import cli

    with pytest.raises(Exit) as info, cli.clean_failures("interrupted: left as it was"):
        raise KeyboardInterrupt
    assert info.value.code == 130 and info.value.message == "interrupted: left as it was"


def test_kill_when_iris_answers_what_cannot_be_read_is_exit_3_like_watch() -> None:
    """A listing that is not JSON (an HTML error page): nothing is known, as `watch` ends on
    the same answer (exit 3, INCONCLUSIVE), with a hint; no kill is sent."""
    garbage = (DATA / "garbage.html").read_text()
    with pytest.raises(jobs.NoAnswer) as info:
        _kill(garbage, KILLED_ONE)
    assert info.value.exit_code == ExitCode.INCONCLUSIVE == 3
    assert "cannot read iris's answer" in info.value.message and info.value.hint
