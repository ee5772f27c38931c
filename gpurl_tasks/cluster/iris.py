"""iris CLI adapter: compose `job run`, read job state, fetch logs, kill one job.

The pinned release (iris-release.toml) reads a job's state three ways: `job summary --json`,
`job list --json` and `iris query`. `IrisCli.state_commands()` reads `iris job --help` once
and picks the best one it offers. Parsers are pure functions over the CLI's text, tested on
outputs recorded from that release (tests/data/iris/). A job the controller has no record of
reads as `absent`.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import enum
import io
import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from gpurl_tasks.errors import IrisError, shown
from gpurl_tasks.proc import CommandFailed, Completed
from gpurl_tasks.redact import Secret

__all__ = [
    "ABSENT",
    "ACTIVE_STATES",
    "FAILED_STATES",
    "STATES",
    "TERMINAL_STATES",
    "ClusterTarget",
    "IrisCli",
    "IrisOutputError",
    "JobSpec",
    "Observation",
    "StateCommand",
    "TransientIrisError",
    "choose_state_commands",
    "is_not_found",
    "job_run_argv",
    "normalise_job_id",
    "one_line",
    "parse_command_list",
    "parse_job_id",
    "parse_kill_output",
    "parse_list_json",
    "parse_prefix_list",
    "parse_query_csv",
    "parse_summary_json",
    "query_sql",
    "refusal",
]

ACTIVE_STATES = ("pending", "building", "running")
FAILED_STATES = ("failed", "killed", "worker_failed", "unschedulable")
ABSENT = "absent"
TERMINAL_STATES = ("succeeded", *FAILED_STATES, ABSENT)
STATES = (*ACTIVE_STATES, *TERMINAL_STATES)
# JobState enum numbers as stored in the controller database (`iris query`).
_STATE_NUMBERS = {1: "pending", 2: "building", 3: "running", 4: "succeeded", 5: "failed",
                  6: "killed", 7: "worker_failed", 8: "unschedulable"}
_NOT_FOUND = re.compile(r"not[ _]found|no such job|unknown job|does not exist", re.IGNORECASE)


class TransientIrisError(IrisError):
    """The CLI failed in a way that may pass (network, controller restart): retry."""


class IrisOutputError(IrisError):
    """The CLI printed something we cannot read as a job state: not retried, since asking
    again gets the same answer (a CLI that changed its output, not a network blip)."""


# the hint of an answer of the CLI that gpurl cannot read
_UNREADABLE_HINT = ("iris printed something gpurl cannot read: use the release iris-release.toml "
                    "pins (`invoke doctor` checks it)")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Observation:
    """One reading of a job's state; `submitted_ms` and `pending_reason` (why the controller
    has not scheduled it yet) are known to some commands only."""

    state: str
    exit_code: int | None = None
    error: str = ""
    submitted_ms: int | None = None
    pending_reason: str = ""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES


class StateCommand(enum.Enum):
    """The ways to read a job's state, best first."""

    SUMMARY = "job summary --json"
    LIST = "job list --json"
    QUERY = "query"


# --- which cluster ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ClusterTarget:
    """The cluster every iris call goes to: a named cluster, or a controller URL."""

    name: str = ""
    controller_url: str = ""

    @classmethod
    def resolve(cls, *, name: str, controller_url: str, flag: str | None) -> ClusterTarget:
        """A `--cluster` flag wins; else the configured controller URL; else the name."""
        if flag:
            return cls(name=flag)
        if controller_url:
            return cls(controller_url=controller_url)
        return cls(name=name)

    @property
    def args(self) -> tuple[str, ...]:
        """The iris global option that selects this cluster."""
        if self.controller_url:
            return (f"--controller-url={self.controller_url}",)
        return (f"--cluster={self.name}",)


# --- composing `job run` ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class JobSpec:
    """Everything `iris job run` needs for a job: the kaniko build, or the GPU check."""

    cluster: ClusterTarget
    task_image: str
    cpu: int | float
    memory: str
    disk: str
    job_name: str
    max_retries: int
    timeout: int
    env: tuple[tuple[str, str | Secret], ...]
    command: tuple[str, ...]
    extra_resources: bool = True
    no_sync: bool = True
    no_wait: bool = True
    gpu: str = ""  # iris `--gpu`: COUNT or TYPExCOUNT, the GPUs of one node ("": none)


def _number(value: int | float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def job_run_argv(spec: JobSpec, *, reveal: bool) -> tuple[str, ...]:
    """`--cluster=X job run ... -- CMD`; secrets are revealed only when `reveal` is set."""
    argv = [*spec.cluster.args, "job", "run", "--task-image", spec.task_image]
    if spec.no_sync:
        argv.append("--no-sync")
    if spec.extra_resources:
        argv.append("--enable-extra-resources")
    if spec.gpu:
        argv += ["--gpu", spec.gpu]
    argv += ["--cpu", _number(spec.cpu), "--memory", spec.memory, "--disk", spec.disk,
             "--job-name", spec.job_name, "--max-retries", str(spec.max_retries),
             "--timeout", str(spec.timeout)]
    for key, value in spec.env:
        shown = value.reveal() if isinstance(value, Secret) and reveal else str(value)
        argv += ["-e", key, shown]
    if spec.no_wait:
        argv.append("--no-wait")
    return (*argv, "--", *spec.command)


def normalise_job_id(text: str) -> str:
    """A job id as iris takes it, `/USER/NAME[/...]`, with a trailing `/` dropped; anything
    iris would refuse (an empty or blank component) is refused here, at once."""
    job_id = text.strip()
    trimmed = job_id.rstrip("/") if job_id != "/" else job_id
    parts = trimmed.split("/")[1:]
    if not trimmed.startswith("/") or len(parts) < 2 or any(not p.strip() for p in parts) \
            or any(c.isspace() or not c.isprintable() for c in trimmed):
        raise IrisError(f"{shown(text)} is not a job id like /USER/NAME (one line, no spaces)",
                        hint="pass the id `invoke build` printed, e.g. /alice/gpurl-kaniko-0123abc")
    return trimmed


_JOB_ID = re.compile(r"(?<![\w/])(/[A-Za-z0-9_.@-]+/[A-Za-z0-9_.@/-]+)")


def parse_job_id(stdout: str, job_name: str) -> str | None:
    """The `/<user>/<name>` id `job run` prints, preferring one that ends in `job_name`."""
    found: list[str] = _JOB_ID.findall(stdout)
    for candidate in found:
        if candidate.rstrip("/").endswith("/" + job_name):
            return candidate.rstrip("/")
    return None


# --- which state commands exist ----------------------------------------------------------


def parse_command_list(help_text: str) -> set[str]:
    """Sub-command names from a click `--help` page's `Commands:` section."""
    names: set[str] = set()
    in_commands = False
    for line in help_text.splitlines():
        if line.strip() == "Commands:":
            in_commands = True
            continue
        if in_commands:
            match = re.match(r"^  (\S+)", line)
            if match:
                names.add(match.group(1))
            elif line.strip() and not line.startswith(" "):
                in_commands = False
    return names


def choose_state_commands(
    job_commands: set[str], top_commands: set[str]
) -> tuple[StateCommand, ...]:
    """The state commands this CLI offers, best first (empty: none we can use)."""
    chosen = []
    if "summary" in job_commands:
        chosen.append(StateCommand.SUMMARY)
    if "list" in job_commands:
        chosen.append(StateCommand.LIST)
    if "query" in top_commands:
        chosen.append(StateCommand.QUERY)
    return tuple(chosen)


# --- parsing state -----------------------------------------------------------------------


def _normalise(raw: Any, source: str) -> str:
    if isinstance(raw, int) and not isinstance(raw, bool):
        if raw in _STATE_NUMBERS:
            return _STATE_NUMBERS[raw]
        raise IrisOutputError(f"{source}: unknown job state number {raw!r}",
                              hint=_UNREADABLE_HINT)
    text = str(raw).strip().lower().removeprefix("job_state_")
    if text.isdigit():
        return _normalise(int(text), source)
    if text not in STATES or text == ABSENT:
        raise IrisOutputError(f"{source}: unknown job state {raw!r}",
                              hint=_UNREADABLE_HINT)
    return text


def _int_or_none(value: Any) -> int | None:
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _load_json(text: str, source: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        snippet = text.strip()[:80]
        raise IrisOutputError(f"{source}: not JSON ({exc.msg}): {snippet!r}",
                              hint=_UNREADABLE_HINT) from None


def one_line(text: str) -> str:
    """A multi-line message (a pending reason: "Scheduler: ...\\n\\nAutoscaler: ...") as one
    line, its non-blank lines joined by "; "."""
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def _task_exit_code(data: dict[str, Any]) -> int | None:
    """The job's real exit code: a real controller reports the job-level `exit_code` as 0
    for failed, killed and timed-out jobs alike, and the task's code only in `tasks[]`."""
    codes = [_int_or_none(t.get("exit_code")) for t in data.get("tasks", []) or []
             if isinstance(t, dict)]
    nonzero = [c for c in codes if c]
    if nonzero:
        return nonzero[0]
    if any(c == 0 for c in codes):
        return 0
    return _int_or_none(data.get("exit_code"))


_ERROR_EXIT = re.compile(r"^Exit code:? (-?\d+)")


def _real_exit_code(state: str, reported: int | None, error: str) -> int | None:
    """`job list` and `iris query` report no task codes, and a real controller's job-level
    code is 0 (list) or empty (query) even for a failed job; its error starts `Exit code: N`."""
    if state in ACTIVE_STATES:
        return None
    if state == "succeeded" and reported is None:
        return 0
    match = _ERROR_EXIT.match(error)
    if match and not reported:
        return int(match.group(1))
    return reported


def parse_summary_json(text: str) -> Observation:
    """`iris job summary ID --json`: lowercase `state`, `error`, `tasks[]` with exit codes."""
    data = _load_json(text, "job summary")
    if not isinstance(data, dict) or "state" not in data:
        raise IrisOutputError("job summary: JSON has no 'state'",
                              hint=_UNREADABLE_HINT)
    state = _normalise(data["state"], "job summary")
    exit_code = _task_exit_code(data) if state not in ACTIVE_STATES else None
    error = str(data.get("error") or "")
    if not error:
        error = next((str(t.get("error")) for t in data.get("tasks", [])
                      if isinstance(t, dict) and t.get("error")), "")
    return Observation(state=state, exit_code=exit_code, error=error,
                       pending_reason=one_line(str(data.get("pending_reason") or "")))


def parse_list_json(text: str, job_id: str) -> Observation:
    """`iris job list --json`: a list of JobStatus dicts; the job missing means `absent`."""
    data = _load_json(text, "job list")
    if not isinstance(data, list):
        raise IrisOutputError("job list: JSON is not a list",
                              hint=_UNREADABLE_HINT)
    for item in data:
        if isinstance(item, dict) and item.get("job_id") == job_id:
            state = _normalise(item.get("state", "JOB_STATE_UNSPECIFIED"), "job list")
            submitted = item.get("submitted_at")
            submitted_ms = (_int_or_none(submitted.get("epoch_ms"))
                            if isinstance(submitted, dict) else None)
            error = str(item.get("error") or "")
            exit_code = _real_exit_code(state, _int_or_none(item.get("exit_code")), error)
            return Observation(state=state, exit_code=exit_code, error=error,
                               submitted_ms=submitted_ms,
                               pending_reason=one_line(str(item.get("pending_reason") or "")))
    return Observation(state=ABSENT)


def query_sql(job_id: str) -> str:
    """The SQL for `iris query`; the id is quoted as an SQL string literal."""
    literal = job_id.replace("'", "''")
    return ("SELECT job_id, state, exit_code, error, submitted_at_ms FROM jobs "
            f"WHERE job_id = '{literal}'")


def parse_query_csv(text: str) -> Observation:
    """`iris query -f csv`: a header and zero or one row; no row means `absent`."""
    rows = list(csv.reader(io.StringIO(text.strip())))
    if not rows or "state" not in rows[0]:
        raise IrisOutputError(f"query: no CSV header with 'state' in {text.strip()[:80]!r}",
                              hint=_UNREADABLE_HINT)
    header = rows[0]
    if len(rows) == 1:
        return Observation(state=ABSENT)
    record = dict(zip(header, rows[1], strict=False))
    state = _normalise(record.get("state", ""), "query")
    error = record.get("error", "") or ""
    return Observation(
        state=state,
        exit_code=_real_exit_code(state, _int_or_none(record.get("exit_code")), error),
        error=error,
        submitted_ms=_int_or_none(record.get("submitted_at_ms")),
    )


# Each way of reading a job's state, once: the arguments it adds after `iris [target]` for a
# job id, and how its output reads (output, job id) -> Observation.
_STATE_READERS: dict[StateCommand, tuple[Callable[[str], tuple[str, ...]],
                                         Callable[[str, str], Observation]]] = {
    StateCommand.SUMMARY: (lambda job: ("job", "summary", job, "--json"),
                           lambda out, _job: parse_summary_json(out)),
    StateCommand.LIST: (lambda job: ("job", "list", "--json", "--prefix", job), parse_list_json),
    StateCommand.QUERY: (lambda job: ("query", "-f", "csv", query_sql(job)),
                         lambda out, _job: parse_query_csv(out)),
}


def is_not_found(stderr: str) -> bool:
    """Does a failed command say the controller has no record of the job?"""
    return bool(_NOT_FOUND.search(stderr))


# --- the adapter -------------------------------------------------------------------------

# (argv, seconds the call may take) -> its result; proc.run in production.
Runner = Callable[[Sequence[str], float], Completed]
# What iris prints when it refuses the *input* (a bad job name, an unknown option): retrying
# cannot help. Its Python exceptions end the traceback it prints; click's usage errors start
# with "Error: ".
_REFUSED = re.compile(r"^(?:[\w.]*(?:ValueError|TypeError)|Error: (?:No such (?:option|command)|"
                      r"Invalid value|Missing argument|Got unexpected extra))\b:?\s*(.*)$",
                      re.MULTILINE)
_TERMINATED = re.compile(r"^Terminated jobs:\s*$")


_RETRYING = re.compile(r"failed \(attempt \d+/\d+, [\d.]+s elapsed\), retrying in [\d.]+s: (.*)$")


def _last_words(stderr: str) -> str:
    """What a timed-out call last said: the iris client logs each retry of an unreachable
    controller ("... retrying in 1.9s: Request failed: ... Connection refused")."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if not lines:
        return ""
    match = _RETRYING.search(lines[-1])
    text = match.group(1) if match else lines[-1].strip()
    return text if len(text) <= 160 else text[:77] + " ... " + text[-78:]


def refusal(text: str) -> str | None:
    """The reason when iris refused its input (not a transient failure), else None."""
    match = _REFUSED.search(text)
    return match.group(0).strip() if match else None


def parse_kill_output(text: str) -> tuple[str, ...]:
    """The job ids `iris job kill` says it terminated (none: "No running jobs matched.")."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if _TERMINATED.match(line):
            return tuple(item.strip() for item in lines[index + 1:] if item.strip())
        if line.strip() == "No running jobs matched.":
            return ()
    raise IrisOutputError(f"job kill: neither 'Terminated jobs:' nor 'No running jobs matched.' "
                          f"in {text.strip()[:80]!r}",
                          hint=_UNREADABLE_HINT)


def parse_prefix_list(text: str) -> dict[str, str]:
    """`iris job list --json --prefix P`: every job id under the (string) prefix -> its state."""
    data = _load_json(text, "job list")
    if not isinstance(data, list):
        raise IrisOutputError("job list: JSON is not a list",
                              hint=_UNREADABLE_HINT)
    return {str(item["job_id"]): _normalise(item.get("state", "JOB_STATE_UNSPECIFIED"),
                                            "job list")
            for item in data if isinstance(item, dict) and "job_id" in item}


class IrisCli:
    """Runs the iris CLI for one cluster through `runner` (proc.run in production).

    Every method takes `within`, the seconds it may spend in all: each iris call gets what
    is left of it (the iris client itself retries an unreachable controller for up to 30
    minutes, so an unbounded call can outlast any bound of the caller)."""

    def __init__(self, runner: Runner, *, program: str = "iris", cluster: ClusterTarget,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._run = runner
        self._base = (program, *cluster.args)
        self._program = program
        self._clock = clock
        self._commands: tuple[StateCommand, ...] | None = None

    def _exec(self, argv: Sequence[str], deadline: float) -> Completed:
        """One iris call within the time left; a refusal of the input is not transient."""
        left = deadline - self._clock()
        if left <= 0:
            raise TransientIrisError(f"no time left for `{' '.join(argv[1:3])}`",
                                     hint="the cluster is slow to answer: "
                                          "try again (watch: raise --max-duration)")
        try:
            return self._run(argv, left)
        except CommandFailed as exc:
            refused = refusal(exc.stderr) or refusal(exc.stdout)
            if refused and not is_not_found(refused):
                raise IrisError(f"iris refused {' '.join(argv[len(self._base):][:2])}: "
                                f"{refused}",
                                hint="fix what iris names (the job id, the cluster: "
                                     "--cluster, cluster.name)") from None
            if exc.returncode is None:  # timed out: the time left ran out
                said = _last_words(exc.stderr)
                raise TransientIrisError(f"iris did not answer within {left:.1f}s"
                                         + (f" ({said})" if said else ""),
                                         hint="the cluster is slow to answer: try again; "
                                              "`invoke doctor` checks it") from exc
            raise TransientIrisError(exc.message,
                                     hint="the cluster may be restarting or unreachable: try again; "
                                          "`invoke doctor` checks it") from exc

    def _call(self, *args: str, within: float) -> Completed:
        return self._exec([*self._base, *args], self._clock() + within)

    def state_commands(self, *, within: float) -> tuple[StateCommand, ...]:
        """Detected once from `iris job --help` (and `iris --help` only when that offers no
        job-level command: each CLI call costs seconds of imports)."""
        if self._commands is None:
            deadline = self._clock() + within
            try:
                job = parse_command_list(self._exec([self._program, "job", "--help"],
                                                    deadline).stdout)
                top = (set() if job & {"summary", "list"} else
                       parse_command_list(self._exec([self._program, "--help"],
                                                     deadline).stdout))
            except IrisError as exc:
                raise IrisError(f"`iris --help` failed: {exc.message}",
                                hint="check the iris installation") from None
            self._commands = choose_state_commands(job, top)
            if not self._commands:
                raise IrisError("this iris CLI has none of `job summary`, `job list`, "
                                "`query`: cannot read job state",
                                hint="install a supported marin-iris release")
        return self._commands

    def read_state(self, job_id: str, *, within: float) -> Observation:
        """The job's state through the best available command; a pending job's reason too
        (`job summary` has none: `job list` tells it, when the CLI has it)."""
        deadline = self._clock() + within
        commands = self.state_commands(within=within)
        command = commands[0]
        argv, parse = _STATE_READERS[command]
        try:
            result = self._exec([*self._base, *argv(job_id)], deadline)
        except TransientIrisError as exc:
            failed = exc.__cause__
            if isinstance(failed, CommandFailed) and (is_not_found(failed.stderr)
                                                      or is_not_found(failed.stdout)):
                return Observation(state=ABSENT)
            raise
        observation = parse(result.stdout, job_id)
        if command is StateCommand.SUMMARY and observation.state == "pending" \
                and StateCommand.LIST in commands:
            list_argv, parse_list = _STATE_READERS[StateCommand.LIST]
            with contextlib.suppress(IrisError):  # the reason is extra: never a failure
                listed = self._exec([*self._base, *list_argv(job_id)], deadline)
                reason = parse_list(listed.stdout, job_id).pending_reason
                observation = dataclasses.replace(observation, pending_reason=reason)
        return observation

    def submitted_ms(self, job_id: str, *, within: float) -> int | None:
        """When the job (this run of its name) was submitted, from a command that tells;
        None when none does. `job summary` does not."""
        deadline = self._clock() + within
        for command in self.state_commands(within=within):
            if command in (StateCommand.LIST, StateCommand.QUERY):
                argv, parse = _STATE_READERS[command]
                try:
                    result = self._exec([*self._base, *argv(job_id)], deadline)
                    observation = parse(result.stdout, job_id)
                except IrisError:
                    continue
                if observation.submitted_ms:
                    return observation.submitted_ms
        return None

    def log_tail(self, job_id: str, *, since_ms: int, lines: int, within: float) -> str:
        """The job's last `lines` log lines from `since_ms` on, oldest first.

        `--tail` matters: without it the server returns the *earliest* lines, at most 1000
        by default, so a long build's tail (where its error is) would never be shown.
        `since_ms` keeps out an earlier run of a reused job name, whose lines stay in the log.
        """
        return self._call("job", "logs", job_id, "--since-ms", str(since_ms), "--tail",
                          "--max-lines", str(lines), within=within).stdout

    def jobs_with_prefix(self, prefix: str, *, within: float) -> dict[str, str] | None:
        """Every job whose id starts with `prefix` (a plain string prefix, as iris matches
        it), with its state; None when this CLI has no `job list`."""
        try:
            result = self._call("job", "list", "--json", "--prefix", prefix, within=within)
        except IrisError as exc:
            if "No such command" in exc.message:
                return None
            raise
        return parse_prefix_list(result.stdout)

    def kill(self, job_id: str, *, within: float) -> tuple[str, ...]:
        """`iris job kill --no-include-children ID`: the ids iris says it terminated.

        Without that option iris terminates every *running* job whose id merely starts with
        `job_id` (a dirty tree's `NAME-dirty-<hash>` job included). The controller itself
        still cascades to the job's child jobs (`ID/...`): the caller checks for those."""
        try:
            said = self._call("job", "kill", "--no-include-children", job_id, within=within)
        except TransientIrisError as exc:
            failed = exc.__cause__
            if isinstance(failed, CommandFailed) and is_not_found(failed.stderr):
                return ()  # gone since the caller looked
            raise
        return parse_kill_output(said.stdout)
