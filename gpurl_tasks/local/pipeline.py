"""The main job on one machine: setup-local, plan, generate, wheels, build + push, verify, pin.

Every step is the same code the individual tasks run (nothing here re-implements a step); this
module only orders them, times them and collects what a user or a test needs to see.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shlex
from collections.abc import Callable
from typing import Any, TypeVar

from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.context import source_id
from gpurl_tasks.dockerfile.generate import check_committed, fitted_plan, generate
from gpurl_tasks.dockerfile.recipe import ENV_BASE_STAGE
from gpurl_tasks.errors import BuildError, GpurlError
from gpurl_tasks.local import builder
from gpurl_tasks.local.builder import BuildResult, WheelsResult
from gpurl_tasks.local.compose_env import compose_environment
from gpurl_tasks.local.engine import find_buildkit_client
from gpurl_tasks.local.setup import cache_dir, index_dir, setup_local
from gpurl_tasks.oci import release
from gpurl_tasks.oci.tags import cache_repository
from gpurl_tasks.oci.verify import Report, render_table, report_json
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.report import render_plan
from gpurl_tasks.rebuild.wheelhouse import WheelReport, check_source
from gpurl_tasks.steps import DryRun, StepRecord, timed

__all__ = [
    "LocalBuild",
    "PipelineResult",
    "WheelsBuilt",
    "build_local",
    "build_summary",
    "build_task",
    "build_wheels_task",
    "demo_task",
    "describe_local_build",
    "describe_pipeline",
    "ensure_wheels",
    "run_pipeline",
    "wheelhouse_problem",
]

Say = Callable[[str], None]
T = TypeVar("T")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineResult:
    plan: Plan
    build: BuildResult
    report: Report
    pinned: str | None  # the value written into the launcher (None: already pinned there)
    steps: tuple[StepRecord, ...]
    profile: str
    exit_code: int = 0

    def human(self) -> str:
        """What to run next for what was built (the steps printed their own progress)."""
        ref, profile = self.build.reference, self.profile
        return "\n".join([
            "next:",
            f"  invoke verify-layers --profile {profile} --ref {ref}   # or: nox -s verify-layers -- {ref}",
            f"  invoke pin --profile {profile} --ref {ref}",
            f"  invoke rebuild-needed --profile {profile}",
        ])

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.build.reference,
            "digest": self.build.digest,
            "pinned": self.pinned,
            "plan": self.plan.to_json(),
            "build": {"cached_steps": self.build.cached_steps,
                      "steps": sum(1 for s in self.build.steps if not s.is_from),
                      "stages": sorted(self.build.stages),
                      "stages_run": sorted(self.build.stages_run),
                      "seconds": round(self.build.seconds, 1),
                      "environment": (self.build.environment.to_json()
                                      if self.build.environment else None)},
            "verify": report_json(self.report),
            "steps": [s.to_json() for s in self.steps],
        }


def wheelhouse_problem(config: Config, report: WheelReport) -> str:
    """Why the prebuilt wheelhouse cannot be used: empty, or not matching the pins."""
    path = config.build.wheelhouse
    shown = path.relative_to(config.root) if path.is_relative_to(config.root) else path
    if not any(name.endswith(".whl") for name in report.found):
        return f"no prebuilt wheels in {shown} yet"
    return f"the wheels in {shown} do not match the pins"


def ensure_wheels(config: Config, say: Say) -> str:
    """The prebuilt wheelhouse matches the Dockerfile's pins; compile it first if it does not."""
    report = check_source(config, str(config.build.wheelhouse))
    if not report.mismatches:
        return f"{len(report.found)} prebuilt wheel(s) match the pins"
    say(f"{wheelhouse_problem(config, report)}; building the wheel-builder stage")
    builder.build_wheels(config, build_args={"WHEEL_SOURCE": "wheel-builder"})
    report = check_source(config, str(config.build.wheelhouse))
    if report.mismatches:
        raise BuildError("the freshly built wheels do not match the Dockerfile's pins:\n"
                         + "\n".join(report.lines()))
    return f"built {len(report.found)} wheel(s) with the wheel-builder stage"


def build_local(config: Config, *, git_sha: str, wheel_source: str | None = None,
                push_floating: bool = False, no_cache: bool = False,
                on_line: Say | None = None, force: bool = False, chain: bool = False,
                ) -> BuildResult:
    """`invoke build --backend local`: the generated Dockerfile, the cluster path's build args.
    A stale Dockerfile or slice set is refused with generate --check's message. The
    environment is composed at the registry from env-base and the slice layers gpurl writes
    (local/compose_env.py), or with
    `chain` built as one layer chain (the env-chain stage, as kaniko builds it). `no_cache`
    rebuilds every step of the final build; written slices are named by their inputs and
    reused (with `chain`, the environment is rebuilt too)."""
    check_committed(config)
    args = {"WHEEL_SOURCE": wheel_source or config.build.wheel_source, "GITSHA": git_sha}
    logs = cache_dir(config.root) / "logs"
    log_file = logs / f"build-{config.registry.tag_prefix}-{git_sha}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    environment = None
    if not chain:
        with builder.serving_index(config.build.index_url, index_dir(cache_dir(config.root))):
            environment = compose_environment(
                config, fitted_plan(config), client=find_buildkit_client()[0],
                dockerfile=config.build.dockerfile, context=config.root, build_args=args,
                log_dir=logs / f"env-{config.registry.tag_prefix}-{git_sha}", on_line=on_line)
        args["ENV_SOURCE"] = environment.reference
    built = builder.build_and_push(config, git_sha=git_sha, build_args=args,
                                   push_floating=push_floating, no_cache=no_cache,
                                   on_line=on_line, force=force, log_file=log_file)
    return dataclasses.replace(built, environment=environment)


class _Steps:
    """Runs named steps, printing each one's start, outcome and duration."""

    def __init__(self, say: Say) -> None:
        self.say = say
        self.times: list[StepRecord] = []

    def run(self, name: str, action: Callable[[], tuple[T, str]]) -> T:
        with timed(name, self.say) as record:
            value, record.detail = action()
        self.times.append(record)
        return value


def describe_local_build(config: Config, *, git_sha: str, wheel_source: str | None = None,
                         push_floating: bool = False, no_cache: bool = False,
                         chain: bool = False) -> list[str]:
    """What `build_local` would run, as printable lines (no engine, registry or index touched)."""
    args = {"WHEEL_SOURCE": wheel_source or config.build.wheel_source, "GITSHA": git_sha}
    builder.check_build_args(args)
    reference = builder.image_reference(config, git_sha)
    lines = []
    if not chain:
        lines = [f"compose the environment: build {ENV_BASE_STAGE} and push it to "
                 f"{cache_repository(config)}; stage and write (in containers of "
                 f"{ENV_BASE_STAGE}) each slice whose slice-<label>-<hash> tag it lacks, push "
                 f"its blob there; write {config.registry.image}:env-<hash> from their layers",
                 ]
        args["ENV_SOURCE"] = f"{config.registry.image}@<composed digest>"
    argv = builder.build_command("docker", dockerfile=config.build.dockerfile,
                                     context=config.root, build_args=args, target=None,
                                     tags=[reference], no_cache=no_cache)
    lines += ["DOCKER_BUILDKIT=1 " + shlex.join(argv), f"docker push {reference}"]
    if push_floating:
        lines.append(f"docker push {config.registry.image}:{config.registry.floating_tag}")
    return lines


def describe_pipeline(config: Config, *, wheel_source: str = "prebuilt-wheelhouse") -> list[str]:
    """`invoke demo --dry-run`: every step and what it would do; reads, never writes."""
    git_sha = source_id(config)
    lines = ["setup-local:"]
    lines += [f"  {s.name:<16} {s.status:<10} {s.detail}"
              for s in setup_local(config, dry_run=True).steps]
    planned = fitted_plan(config)
    lines.append(f"plan: {len(planned.layers)} slice layer(s) under {planned.cap_bytes:,} bytes")
    try:
        generate(config, check=True, planner=lambda _: planned)
        lines.append(f"generate: {config.build.dockerfile.name} is up to date")
    except GpurlError:
        lines.append(f"generate: would rewrite {config.build.dockerfile.name}")
    if wheel_source == "prebuilt-wheelhouse":
        report = check_source(config, str(config.build.wheelhouse))
        lines.append("wheels: the wheelhouse matches the pins" if not report.mismatches else
                     f"wheels: {wheelhouse_problem(config, report)}; would build the "
                     "wheel-builder stage into it")
    lines += [f"build + push: {line}" for line in
              describe_local_build(config, git_sha=git_sha, wheel_source=wheel_source)]
    reference = builder.image_reference(config, git_sha)
    lines.append(f"verify-layers: {reference}")
    lines.append(f"pin: {config.launcher.variable} in {config.launcher.path}")
    return lines


def run_pipeline(config: Config, *, say: Say, today: dt.date | None = None,
                 wheel_source: str = "prebuilt-wheelhouse") -> PipelineResult:
    """Run every step in order; each prints its name, what it did and its duration."""
    steps = _Steps(say)

    def setup() -> tuple[None, str]:
        result = setup_local(config, say=say)
        return None, ", ".join(f"{s.name} {s.status}" for s in result.steps)

    def plan() -> tuple[Plan, str]:
        planned = fitted_plan(config)
        say(render_plan(planned))
        return planned, (f"{len(planned.layers)} slice layer(s), lower bound "
                         f"{planned.lower_bound_layers}")

    steps.run("setup-local", setup)
    planned = steps.run("plan", plan)
    steps.run("generate", lambda: (None, _generate(config, planned)))
    if wheel_source == "prebuilt-wheelhouse":
        steps.run("wheels", lambda: (None, ensure_wheels(config, say)))
    git_sha = source_id(config)
    built = steps.run("build + push", lambda: _build(config, git_sha, wheel_source))
    report = steps.run("verify-layers", lambda: _verify(config, built.reference, say))
    pinned = steps.run("pin", lambda: _pin(config, built.reference, today or dt.date.today()))
    total = sum(t.seconds for t in steps.times)
    say(f"done in {total:.1f}s: {built.reference} -> {built.digest}")
    return PipelineResult(plan=planned, build=built, report=report, pinned=pinned,
                          steps=tuple(steps.times), profile=config.profile)


def _generate(config: Config, planned: Plan) -> str:
    result = generate(config, planner=lambda _: planned)
    return f"{'wrote' if result.changed else 'unchanged'} {result.path.name}"


def _build(config: Config, git_sha: str, wheel_source: str) -> tuple[BuildResult, str]:
    built = build_local(config, git_sha=git_sha, wheel_source=wheel_source)
    return built, build_summary(built)


def build_summary(built: BuildResult) -> str:
    """One line for a build step's end: what was pushed, steps cached vs ran, the log file."""
    what = "pushed" if built.pushed else "the registry already holds this exact image as"
    runnable = sum(1 for s in built.steps if not s.is_from)
    log = f"; log {built.log_file}" if built.log_file else ""
    env = f"; {built.environment.summary()}" if built.environment else ""
    return (f"{what} {built.reference}: {runnable} steps, {built.cached_steps} cached, "
            f"{runnable - built.cached_steps} ran{env}{log}")


def _verify(config: Config, reference: str, say: Say) -> tuple[Report, str]:
    report = release.verify_reference(config, reference)
    say(render_table(report))
    if not report.ok:
        raise BuildError("the pushed image fails the layer rules; not pinning it",
                         hint="see the FAIL lines above")
    return report, f"{len(report.rows)} layers, every rule holds"


def _pin(config: Config, reference: str, today: dt.date) -> tuple[str | None, str]:
    _, change = release.pin_reference(config, reference, force=False, today=today)
    written = release.apply_pin(change)
    shown = change.path.relative_to(config.root) if change.path.is_relative_to(config.root) \
        else change.path
    return (change.value if written else None,
            f"{'pinned' if written else 'already pinned'} {change.value} in {shown}")


def demo_task(config: Config, *, wheel_source: str, dry_run: bool, say: Say,
              ) -> PipelineResult | DryRun:
    """`invoke demo`: the whole pipeline, or with `dry_run` what each step would do."""
    if dry_run:
        return DryRun(tuple(describe_pipeline(config, wheel_source=wheel_source)))
    return run_pipeline(config, say=say, wheel_source=wheel_source)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalBuild:
    """`invoke build --backend local`'s outcome."""

    result: BuildResult
    profile: str
    exit_code: int = 0

    def human(self) -> str:
        r = self.result
        verb = "pushed" if r.pushed else "already in the registry (same image, nothing pushed):"
        return (f"{verb} {r.reference}\ndigest {r.digest}\n"
                f"next: invoke verify-layers --profile {self.profile} --ref {r.reference}")

    def to_json(self) -> dict[str, Any]:
        r = self.result
        return {"reference": r.reference, "digest": r.digest, "pinned": r.pinned,
                "pushed": r.pushed, "cached_steps": r.cached_steps,
                "steps": sum(1 for s in r.steps if not s.is_from),
                "stages": sorted(r.stages), "stages_run": sorted(r.stages_run),
                "seconds": round(r.seconds, 1),
                "environment": r.environment.to_json() if r.environment else None}


def build_task(config: Config, *, dry_run: bool, wheel_source: str | None, push_floating: bool,
               no_cache: bool, say: Say, stream: bool, force: bool = False,
               chain: bool = False) -> LocalBuild | DryRun:
    """setup-local, then build and push (or with `dry_run`, the commands it would run); a
    stale Dockerfile or slice set is refused first, the dry run's too."""
    if dry_run:
        check_committed(config)  # build_local checks the real build's
        return DryRun(tuple(describe_local_build(
            config, git_sha=source_id(config), wheel_source=wheel_source,
            push_floating=push_floating, no_cache=no_cache, chain=chain)), key="commands")
    git_sha = source_id(config)
    with timed("setup-local", say) as record:
        record.detail = ", ".join(f"{s.name} {s.status}"
                                  for s in setup_local(config, say=say).steps)
    with timed("build + push", say) as record:
        result = build_local(config, git_sha=git_sha, wheel_source=wheel_source,
                             push_floating=push_floating, no_cache=no_cache,
                             on_line=say if stream else None, force=force, chain=chain)
        record.detail = build_summary(result)
    return LocalBuild(result=result, profile=config.profile)


@dataclasses.dataclass(frozen=True, kw_only=True)
class WheelsBuilt:
    """`invoke build-wheels`' outcome: the exported files and the wheel check on them."""

    result: WheelsResult
    report: WheelReport

    @property
    def exit_code(self) -> int:
        return self.report.exit_code

    def human(self) -> str:
        return "\n".join([*(f"  {path}" for path in self.result.files), self.report.human()])

    def to_json(self) -> dict[str, Any]:
        return {"files": [str(p) for p in self.result.files],
                "seconds": round(self.result.seconds, 1), "check": self.report.to_json()}


def build_wheels_task(config: Config, *, target: str, source: str, say: Say,
                      stream: bool) -> WheelsBuilt:
    """Build the wheel-builder stage, export its wheels into the wheelhouse, check them."""
    with timed(f"build-wheels ({target})", say):
        result = builder.build_wheels(config, target=target, source=source,
                                      build_args={"WHEEL_SOURCE": "wheel-builder"},
                                      on_line=say if stream else None)
    return WheelsBuilt(result=result, report=check_source(config, str(config.build.wheelhouse)))
