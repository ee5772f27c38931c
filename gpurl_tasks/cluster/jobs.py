"""The cluster tasks' one functions: wire the real adapters (environment, git, token, iris)
into doctor, submit, watch and kill, and return outcomes for the task to print.

Progress goes through the `say` callback the task passes; nothing here prints.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpurl_tasks import git
from gpurl_tasks.cluster import kaniko
from gpurl_tasks.cluster.bundle import Bundle, measure_bundle, stage_workspace, staged_env
from gpurl_tasks.cluster.doctor import DoctorReport, run_doctor
from gpurl_tasks.cluster.iris import (
    ABSENT,
    ACTIVE_STATES,
    ClusterTarget,
    IrisCli,
    IrisOutputError,
    Observation,
    TransientIrisError,
    normalise_job_id,
    parse_job_id,
)
from gpurl_tasks.cluster.iris_release import IRIS_ENV, iris_program
from gpurl_tasks.cluster.iris_release import find_iris as _find_iris
from gpurl_tasks.cluster.submit import (
    BuildEnv,
    BuildRequest,
    PreparedBuild,
    guard_immutable_tag,
    prepare_build,
)
from gpurl_tasks.cluster.watch import (
    WatcherError,
    WatchResult,
    log_window_start,
    watch,
)
from gpurl_tasks.config import Config
from gpurl_tasks.errors import BuildError, ConfigError, ExitCode, GpurlError, IrisError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.proc import CommandFailed, run
from gpurl_tasks.rebuild.inputs import BuildInputs, build_inputs
from gpurl_tasks.rebuild.inputs_key import inputs_tag
from gpurl_tasks.redact import TokenSource, find_registry_token, known_secrets, redact
from gpurl_tasks.release.configured import client_settings, existing_digest
from gpurl_tasks.release.reuse import Reused, reuse_pushed
from gpurl_tasks.steps import DryRun

__all__ = [
    "IRIS_ENV",
    "KillOutcome",
    "Submission",
    "WatchOutcome",
    "cluster_target",
    "doctor_task",
    "iris_program",
    "kill_job",
    "real_world",
    "run_build",
    "run_watch",
]

LOG_TAIL_LINES = 40
# Seconds `kill` may spend in all, and each call after a watch (log tail, submission time):
# the iris client retries an unreachable controller for up to 30 minutes on its own.
KILL_BOUND_S = 60.0
AFTER_WATCH_BOUND_S = 60.0
# the bound of --interval and --max-duration (30 days): a larger one overflows the clock
MAX_WATCH_S = 30 * 24 * 3600
Say = Callable[[str], None]


def _quiet(_: str) -> None:
    """The default `say`: progress goes nowhere."""


def _gh_token() -> str | None:
    if shutil.which("gh") is None:
        return None
    try:
        return run(["gh", "auth", "token"], echo=None).stdout.strip() or None
    except CommandFailed:
        return None


def real_world(env: Mapping[str, str]) -> BuildEnv:
    """The production adapters: os.environ, git, the token lookup, the bundle measure."""

    def token() -> TokenSource | None:
        return find_registry_token(env, gh_token=_gh_token)

    def bundle(root: Any) -> Bundle:
        return measure_bundle(root, git.ls_bundle_files)

    return BuildEnv(env=env, token=token, bundle=bundle)


def doctor_task(config: Config, say: Say = _quiet) -> DoctorReport:
    """`invoke doctor`: every prerequisite of `config`'s build, checked in the real world."""
    world = real_world(os.environ)
    return run_doctor(config, world.env, token=world.token, source=world.source, say=say)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Submission:
    """A submitted build job."""

    prepared: PreparedBuild
    program: str
    job_id: str | None = None  # None: iris printed no id
    exit_code: int = ExitCode.OK

    @property
    def watch_command(self) -> str:
        return f"invoke watch {self.job_id or f'/<user>/{self.prepared.spec.job_name}'} --interval 60"

    def human(self) -> str:
        return (f"submitted {self.job_id or self.prepared.spec.job_name} -> "
                f"{self.prepared.image_tag}\nnext: {self.watch_command}")

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "image": self.prepared.image_tag,
                "watch": self.watch_command}


def run_build(config: Config, request: BuildRequest, *, dry_run: bool, say: Say = _quiet,
              world: BuildEnv | None = None) -> Submission | DryRun | Reused:
    """Guard rails, then submit the job (or with `dry_run`, the command, secrets redacted);
    an image of the same inputs already pushed is tagged instead and no job submitted
    (release/reuse.py; `force` builds), and the job is told the inputs tag to record."""
    world = world or real_world(os.environ)
    prepared = prepare_build(config, request, world, dry_run=dry_run)
    inputs = _inputs(config, world, say, resolve_base=not dry_run)
    if inputs is not None and not request.force:  # before any job: no iris, no executor
        reused = reuse_pushed(config, inputs, reference=prepared.image_tag, floating=None,
                              dry_run=dry_run, say=say, env=world.env, lookup=world.tag_digest)
        if reused is not None:
            return reused
    if inputs is not None:  # the job records what it pushes by these inputs
        prepared = dataclasses.replace(prepared, spec=dataclasses.replace(prepared.spec, env=(
            *prepared.spec.env, ("INPUTS_TAG", inputs_tag(inputs.key)))))
    if not dry_run:  # a dry run touches no registry
        lookup = world.tag_digest or (lambda ref: existing_digest(config, ref, world.env))
        prepared = guard_immutable_tag(prepared, lookup(prepared.image_tag), force=request.force)
    program = iris_program(world.env)
    for note in prepared.notes:
        say(f"note: {note}")
    say(f"bundle: {len(prepared.bundle.files)} files, {prepared.bundle.zip_bytes} bytes zipped")
    app = kaniko.job_app()
    say(f"job files staged beside the repository's: {', '.join(sorted(prepared.job_files))} "
        f"(gpurl's own code {kaniko.JOB_APP}: {app.size} bytes, sha256 {app.sha256})")
    for warning in prepared.warnings:
        say(f"warning: {warning}")
    if dry_run:
        return DryRun((prepared.argv(program, reveal=False),),
                      shown=(prepared.display(program),), warnings=prepared.warnings)
    _find_iris(program, world.env)
    with tempfile.TemporaryDirectory(prefix="gpurl-job-") as staged:
        workspace = Path(staged) / "workspace"  # git finds no repository at or above it
        workspace.mkdir()
        repository = tuple(n for n in prepared.bundle.files if n not in prepared.job_files)
        stage_workspace(config.root, repository, prepared.job_files, workspace)
        try:
            result = run(prepared.argv(program, reveal=True), cwd=workspace,
                         env=staged_env(world.env, workspace), secrets=prepared.secrets, echo=say)
        except CommandFailed as exc:
            raise BuildError(f"iris job run failed: {exc.message}",
                             hint="see the output above; nothing was pushed") from None
    say(redact(result.stdout.strip(), prepared.secrets))
    job_id = parse_job_id(result.stdout + "\n" + result.stderr, prepared.spec.job_name)
    return Submission(prepared=prepared, program=program, job_id=job_id)


def _inputs(config: Config, world: BuildEnv, say: Say, *, resolve_base: bool
            ) -> BuildInputs | None:
    """This tree's inputs key, the base resolved at its registry (world.tag_digest stands in
    for the registry; not `resolve_base`, as a dry run: named by its tag); None, said in one
    line, when it cannot be read."""
    def base_digest(image: str) -> str | None:
        if not resolve_base:
            return None
        ref = parse_reference(image, default_host="docker.io")
        if world.tag_digest is not None:
            return world.tag_digest(str(ref))
        once = dataclasses.replace(client_settings(config), attempts=1)  # not waited for
        try:
            with open_client(once, ref, world.env) as client:
                return client.lookup(ref)
        except GpurlError:
            return None

    wheel_source = config.build.wheel_source if config.build.compiled_wheels else ""
    try:
        return build_inputs(config, wheel_source=wheel_source, base_digest=base_digest)
    except GpurlError as exc:
        say(f"note: the build's inputs could not be read ({exc.message}): no reuse")
        return None


def cluster_target(config: Config, flag: str | None) -> ClusterTarget:
    """The cluster to talk to: the `--cluster` flag, else cluster.controller-url, else name."""
    return ClusterTarget.resolve(name=config.cluster.name,
                                 controller_url=config.cluster.controller_url, flag=flag)


def _iris(config: Config, env: Mapping[str, str], cluster: str | None) -> IrisCli:
    program = iris_program(env)
    _find_iris(program, env)
    return IrisCli(lambda argv, timeout: run(argv, echo=None, timeout=timeout), program=program,
                   cluster=cluster_target(config, cluster))


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatchOutcome:
    """How a watch ended (exit codes in watch.py), with the state changes and a log tail."""

    job_id: str
    result: WatchResult
    events: tuple[dict[str, Any], ...]
    log_tail: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return self.result.exit_code

    @property
    def hint(self) -> str | None:
        """What to do when the job is absent (exit 2): the id or the cluster is not iris's."""
        return NOT_RUNNING_HINT if self.exit_code == ExitCode.ERROR else None

    def human(self) -> str:
        obs = self.result.observation
        detail = (obs.error or (obs.pending_reason if obs.state == "pending" else "")) if obs \
            else ""
        why = f" ({detail})" if detail else ""
        code = f", exit code {obs.exit_code}" if obs and obs.exit_code else ""
        return f"{self.job_id}: {self.result.reason}{why}{code} after {self.result.elapsed:.0f}s"

    def to_json(self) -> dict[str, Any]:
        obs = self.result.observation
        return {"job_id": self.job_id, "exit_code": self.exit_code, "reason": self.result.reason,
                "state": obs.state if obs else None,
                "job_exit_code": obs.exit_code if obs else None,
                "error": obs.error if obs else None,
                "pending_reason": obs.pending_reason if obs else None,
                "elapsed_s": round(self.result.elapsed, 1),
                "events": list(self.events), "log_tail": list(self.log_tail)}


def run_watch(config: Config, job_id: str, *, interval: float, max_duration: float,
              say: Say = _quiet, cluster: str | None = None,
              cli: IrisCli | None = None,
              clock: Callable[[], float] = time.monotonic,
              sleep: Callable[[float], None] = time.sleep) -> WatchOutcome:
    """Watch `job_id` by state to a terminal one, within `max_duration` however iris behaves;
    a failed job's log tail is fetched, redacted."""
    for flag, seconds in (("--interval", interval), ("--max-duration", max_duration)):
        if not 0 < seconds <= MAX_WATCH_S:
            raise ConfigError(f"{flag} must be a positive number of seconds up to {MAX_WATCH_S} "
                              f"(30 days), not {seconds:g}",
                              hint=f"leave {flag} out for its default (`invoke watch --help`)")
    job_id = normalise_job_id(job_id)
    start = clock()
    started_ms = int(time.time() * 1000)
    # a missing or unusable iris is a missing tool (exit 2, as for `invoke kill`); an iris
    # without a usable state command leaves the watch unable to conclude (exit 3)
    iris = cli or _iris(config, os.environ, cluster)
    try:
        commands = iris.state_commands(within=max_duration)
    except GpurlError as exc:
        raise WatcherError(exc.message, hint=exc.hint) from None
    say(f"watching {job_id} via `iris {commands[0].value}` every {interval:g}s")
    events: list[dict[str, Any]] = []
    # the job's output can echo the token (a task error carries its stderr): redact all of it
    secrets = known_secrets(os.environ, gh_token=_gh_token, users=[config.registry.user])

    def on_change(elapsed: float, obs: Observation) -> None:
        events.append({"elapsed_s": round(elapsed, 1), "state": obs.state})
        extra = f" exit={obs.exit_code}" if obs.exit_code is not None else ""
        extra += f" error={obs.error}" if obs.error else ""
        extra += f" reason={obs.pending_reason}" if obs.pending_reason else ""
        say(f"[{elapsed:7.0f}s] {obs.state}{extra}")

    def on_retry(elapsed: float, message: str, delay: float) -> None:
        say(f"[{elapsed:7.0f}s] iris failed ({message}); retrying in {delay:g}s")

    def read(left: float) -> Observation:
        obs = iris.read_state(job_id, within=left)
        return dataclasses.replace(obs, error=redact(obs.error, secrets),
                                   pending_reason=redact(obs.pending_reason, secrets))

    result = watch(read, interval=interval, max_duration=max_duration, started=start,
                   clock=clock, sleep=sleep, on_change=on_change, on_retry=on_retry)
    log_tail: list[str] = []
    if result.exit_code == ExitCode.CHECK_FAILED:
        try:
            submitted = (result.observation.submitted_ms if result.observation else None) \
                or iris.submitted_ms(job_id, within=AFTER_WATCH_BOUND_S)
            since = log_window_start(
                dataclasses.replace(result.observation, submitted_ms=submitted)
                if result.observation else None,
                watch_started_ms=started_ms, job_timeout_s=config.cluster.timeout)
            log_tail = iris.log_tail(job_id, since_ms=since, lines=LOG_TAIL_LINES,
                                     within=AFTER_WATCH_BOUND_S).splitlines()[-LOG_TAIL_LINES:]
        except IrisError as exc:
            since = 0
            log_tail = [f"(could not fetch the log: {exc.message})"]
        say(f"--- last {len(log_tail)} log lines (since {since} ms) ---")
        log_tail = [redact(line, secrets) for line in log_tail]
        for line in log_tail:
            say(line)
    return WatchOutcome(job_id=job_id, result=result, events=tuple(events),
                        log_tail=tuple(log_tail))


# `invoke kill` exit codes: OK killed exactly the named job; ERROR it was not running (ended,
# or unknown); CHECK_FAILED refused, or iris touched another job too; INCONCLUSIVE no answer.


NOT_RUNNING_HINT = ("check the id and --cluster; `invoke watch JOB` says how a job ended, "
                    "`iris job list` lists the running ones")


class NoAnswer(IrisError):
    """iris did not answer within the bound: nothing is known (exit 3, as for `watch`)."""

    exit_code = ExitCode.INCONCLUSIVE


@dataclasses.dataclass(frozen=True)
class KillOutcome:
    """A stopped job, or with --dry-run the command that would stop it; `failure` is the loud
    line a refusal, or another job touched, ends with."""

    text: str
    exit_code: int = ExitCode.OK
    failure: str | None = None
    terminated: tuple[str, ...] = ()
    hint: str | None = None  # what to do when it exits 2 (the job was not running)

    def human(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        return {"result": self.text, "exit_code": self.exit_code,
                "terminated": list(self.terminated), "failure": self.failure}


def _kill_argv(job_id: str) -> tuple[str, ...]:
    """The job-scoped kill: without `--no-include-children` iris kills by id *prefix*."""
    return ("job", "kill", "--no-include-children", job_id)


def kill_job(config: Config, job_id: str, *, dry_run: bool, cluster: str | None = None,
             cli: IrisCli | None = None) -> KillOutcome | DryRun:
    """Stop exactly one job, never anything else: its state and every job sharing its id
    prefix are read first; a job with running child jobs (which the controller would kill
    with it) is refused; what iris says it terminated is compared with the id exactly."""
    job_id = normalise_job_id(job_id)
    if dry_run:
        return DryRun((("iris", *cluster_target(config, cluster).args, *_kill_argv(job_id)),))
    iris = cli or _iris(config, os.environ, cluster)
    deadline = time.monotonic() + KILL_BOUND_S
    try:
        related = iris.jobs_with_prefix(job_id, within=KILL_BOUND_S)
        state = (related.get(job_id, ABSENT) if related is not None
                 else iris.read_state(job_id, within=deadline - time.monotonic()).state)
        if state not in ACTIVE_STATES:
            what = "unknown to the controller" if state == ABSENT else f"already {state}"
            return KillOutcome(f"nothing killed: {job_id} is not running ({what})",
                               exit_code=ExitCode.ERROR, hint=NOT_RUNNING_HINT)
        children = sorted(j for j, s in (related or {}).items()
                          if j.startswith(job_id + "/") and s in ACTIVE_STATES)
        if children:
            return KillOutcome(
                f"nothing killed: {job_id} has running child jobs, which the controller would "
                f"kill with it: {', '.join(children)}", exit_code=ExitCode.CHECK_FAILED,
                failure=f"refused: killing {job_id} would also kill {len(children)} other "
                        "job(s); kill them by id first, or use `iris job kill` yourself")
        try:
            terminated = iris.kill(job_id, within=deadline - time.monotonic())
        except TransientIrisError:
            raise
        except IrisError as exc:
            if "--no-include-children" not in exc.message:
                raise
            return KillOutcome(f"nothing killed: this iris CLI's `job kill` cannot be limited to "
                               f"one job ({exc.message})", exit_code=ExitCode.CHECK_FAILED,
                               failure=f"refused: it would kill every running job whose id "
                                       f"starts with {job_id}; install the pinned marin-iris")
    except TransientIrisError as exc:
        raise NoAnswer(f"could not kill {job_id}: {exc.message}",
                        hint="the controller did not answer; `invoke watch` tells the job's "
                             "state once it does") from None
    except IrisOutputError as exc:  # as `watch` ends on it: nothing is known (exit 3)
        raise NoAnswer(f"could not kill {job_id}: cannot read iris's answer: {exc.message}",
                       hint="check the iris CLI against the pinned one (`invoke doctor`); "
                            "`invoke watch` tells the job's state") from None
    others = [t for t in terminated if t != job_id]
    if others:
        return KillOutcome(f"iris terminated {', '.join(terminated)}", exit_code=ExitCode.CHECK_FAILED,
                           terminated=terminated,
                           failure=f"DANGER: iris also terminated {', '.join(others)}, "
                                   f"not only {job_id}")
    if not terminated:
        return KillOutcome(f"nothing killed: {job_id} is not running (it ended before the kill)",
                           exit_code=ExitCode.ERROR, hint=NOT_RUNNING_HINT)
    spared = sorted(j for j, s in (related or {}).items() if j != job_id and s in ACTIVE_STATES)
    note = f" (left running, sharing its id prefix: {', '.join(spared)})" if spared else ""
    return KillOutcome(f"killed {job_id}{note}", terminated=terminated)
