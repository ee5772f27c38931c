"""The order of the local path: which steps `invoke build --backend local` and `invoke demo`
run, and what each executes.

Each step is a `steps.Step`: the commands it runs and its action (local/actions.py does the
work). `steps.Steps` runs them in order; a dry run is `steps.dry_run` of the very same steps,
so what it shows cannot drift from what runs. Nothing here does a step's work.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import platform
from collections.abc import Callable
from typing import Any

from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.context import source_id
from gpurl_tasks.dockerfile.generate import check_committed, fitted_plan
from gpurl_tasks.dockerfile.recipe import wheel_source_arg
from gpurl_tasks.dockerfile.wheels import prebuilt_wheel_names, require_compiled_wheels
from gpurl_tasks.errors import BuildError, ExitCode
from gpurl_tasks.local import actions, builder
from gpurl_tasks.local.attest import apt_command, attest_build
from gpurl_tasks.local.builder import BuildResult
from gpurl_tasks.local.compose_env import CompiledWheels, compose_commands
from gpurl_tasks.local.composed import ComposedEnv
from gpurl_tasks.local.engine import find_buildkit_client
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.rebuild.inputs import BuildInputs
from gpurl_tasks.rebuild.wheelhouse import check_source
from gpurl_tasks.release.reuse import Reused, reuse_pushed
from gpurl_tasks.release.verify import Report, report_json
from gpurl_tasks.steps import Argv, DryRun, Step, StepRecord, Steps, dry_run_of
from gpurl_tasks.writer.compiled import composed_build_args

__all__ = [
    "DRY_RUN_CLIENT",
    "LocalBuild",
    "PipelineResult",
    "Reused",
    "build_local",
    "build_steps",
    "build_task",
    "demo_steps",
    "demo_task",
]

Say = Callable[[str], None]
# The engine client a dry run names; a real run uses the one setup-local found (docker or
# podman, engine.find_buildkit_client).
DRY_RUN_CLIENT = "docker"


def _task(name: str, config: Config, *extra: str) -> Argv:
    """A step that is one of the tasks, as its command line."""
    variant = ("--variant", config.variant.shown) if config.variant.shown else ()
    return ("invoke", name, "--profile", config.profile, *variant, *extra)


def build_steps(config: Config, *, git_sha: str, wheel_source: str | None = None,
                push_floating: bool = False, no_cache: bool = False, on_line: Say | None = None,
                force: bool = False, chain: bool = False, say: Say | None = None,
                setup: bool = True, inputs: BuildInputs | None = None) -> tuple[Step[Any], ...]:
    """`invoke build --backend local`: setup-local (`setup`), the environment composed at the
    registry from env-base and the slice layers gpurl writes (or with `chain` built as the
    env-chain stage, as kaniko builds it), then the image built from the generated Dockerfile
    and pushed. `no_cache` rebuilds every step of the final build; written slices are named
    by their inputs and reused. The pushed image is recorded under `inputs` (read before the
    build when not given)."""
    args = {**wheel_source_arg(config, wheel_source), "GITSHA": git_sha}
    steps: list[Step[Any]] = []
    if setup:
        steps.append(Step("setup-local", (_task("setup-local", config),),
                          lambda: actions.setup(config, say)))
    composed: list[ComposedEnv] = []
    shown_args = dict(args)
    if not chain:
        planned = fitted_plan(config)

        def compose() -> tuple[ComposedEnv, str]:
            environment, line = actions.compose(config, planned, git_sha=git_sha,
                                                build_args=args, on_line=on_line, say=say)
            composed.append(environment)
            return environment, line

        # the compiled wheels' layer as the names the wheelhouse must hold (the run checks it)
        compiled = CompiledWheels(wheelhouse=config.build.wheelhouse,
                                  wheels=prebuilt_wheel_names(config)) \
            if actions.writes_compiled(config, args) else None
        steps.append(Step("compose environment", compose_commands(
            config, planned, client=DRY_RUN_CLIENT, dockerfile=config.build.dockerfile,
            context=config.root, build_args=args, compiled=compiled), compose))
        shown_args.update(composed_build_args(f"{config.registry.image}@<composed digest>",
                                              compiled=compiled is not None))
    argv, reference, floating = builder.final_build(
        config, client=DRY_RUN_CLIENT, git_sha=git_sha, build_args=shown_args,
        push_floating=push_floating, no_cache=no_cache)
    pushes = tuple(tuple(builder.push_command(DRY_RUN_CLIENT, ref))
                   for ref in (reference, floating) if ref)
    built: list[BuildResult] = []

    def build_and_push() -> tuple[BuildResult, str]:
        found = inputs or actions.inputs_here(config, wheel_source, say)  # before the build runs
        result, line = actions.build_and_push(
            config, git_sha=git_sha, build_args=args, environment=composed[0] if composed else None,
            push_floating=push_floating, no_cache=no_cache, on_line=on_line, force=force,
            say=say)
        built.append(result)
        return result, line + actions.record_inputs(config, found, result.digest)

    steps.append(Step("build + push", (tuple(argv), *pushes), build_and_push))
    # the SBOM and provenance, attached at the registry; returns the build (the last value)
    steps.append(Step("attest", (tuple(apt_command(DRY_RUN_CLIENT, reference)),),
                      lambda: attest_build(config, built[0], client=find_buildkit_client()[0])))
    return tuple(steps)


def _run(steps: tuple[Step[Any], ...], runner: Steps) -> list[Any]:
    return [runner.run(step) for step in steps]


def build_local(config: Config, *, git_sha: str, wheel_source: str | None = None,
                push_floating: bool = False, no_cache: bool = False,
                on_line: Say | None = None, force: bool = False, chain: bool = False,
                ) -> BuildResult:
    """The local build without setup-local: compose (unless `chain`), build and push. A stale
    Dockerfile or slice set is refused first, with generate --check's message."""
    check_committed(config)
    steps = build_steps(config, git_sha=git_sha, wheel_source=wheel_source,
                        push_floating=push_floating, no_cache=no_cache, on_line=on_line,
                        force=force, chain=chain, setup=False)
    built: BuildResult = _run(steps, Steps(None))[-1]
    return built


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalBuild:
    """`invoke build --backend local`'s outcome."""

    result: BuildResult
    profile: str
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        r = self.result
        verb = "pushed" if r.pushed else "already in the registry (same image, nothing pushed):"
        return (f"{verb} {r.reference}\ndigest {r.digest}\n"
                f"next: invoke verify-layers --profile {self.profile} --ref {r.reference}")

    def to_json(self) -> dict[str, Any]:
        return _build_json(self.result) | {"pinned": self.result.pinned,
                                           "pushed": self.result.pushed}


def _build_json(r: BuildResult) -> dict[str, Any]:
    return {"reference": r.reference, "digest": r.digest, "cached_steps": r.cached_steps,
            "steps": sum(1 for s in r.steps if not s.is_from),
            "stages": sorted(r.stages), "stages_run": sorted(r.stages_run),
            "seconds": round(r.seconds, 1),
            "environment": r.environment.to_json() if r.environment else None}


def build_task(config: Config, *, dry_run: bool, wheel_source: str | None, push_floating: bool,
               no_cache: bool, say: Say, stream: bool, force: bool = False,
               chain: bool = False) -> LocalBuild | DryRun | Reused:
    """setup-local, then build and push (or with `dry_run`, the commands those steps run); a
    stale Dockerfile or slice set is refused first, the dry run's too, and so is a variant of
    another platform than this machine's, and --wheel-source for a profile without compiled
    wheels. An image of the same inputs already pushed is tagged instead, no step run
    (release/reuse.py; a dry run names the tag it would look up); `force` and `no_cache`
    build."""
    if wheel_source is not None:
        require_compiled_wheels(config, f"--wheel-source {wheel_source}")
    check_native(config, platform.machine())
    check_committed(config)
    git_sha = source_id(config)
    inputs = None
    if not (force or no_cache):
        inputs = actions.inputs_here(config, wheel_source, say)
        floating = f"{config.registry.image}:{config.registry.floating_tag}" \
            if push_floating else None
        reused = inputs and reuse_pushed(config, inputs, dry_run=dry_run, say=say,
                                         reference=builder.image_reference(config, git_sha),
                                         floating=floating)
        if reused:
            return reused
    steps = build_steps(config, git_sha=git_sha, wheel_source=wheel_source,
                        push_floating=push_floating, no_cache=no_cache,
                        on_line=say if stream else None, force=force, chain=chain, say=say,
                        inputs=inputs)
    if dry_run:
        return dry_run_of(steps)
    return LocalBuild(result=_run(steps, Steps(say))[-1], profile=config.profile)


def check_native(config: Config, machine: str) -> None:
    """The local engine builds for its own machine only: an image of another platform would
    need emulation, which gpurl does not use (an aarch64 variant's RUN steps on an x86_64 engine
    would install x86_64 wheels, or not run at all)."""
    if config.target.arch != machine:
        raise BuildError(
            f"variant {config.variant.name!r} is a {config.target.platform} image and this machine "
            f"is {machine}: the local engine cannot build it (no emulation)",
            hint=f"build it on its cluster ({config.cluster.name}, backend iris); its slices can "
                 "still be written here (`invoke write-slices`)")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PipelineResult:
    plan: Plan
    build: BuildResult
    report: Report
    pinned: str | None  # the value written into the launcher (None: already pinned there)
    steps: tuple[StepRecord, ...]
    profile: str
    exit_code: int = ExitCode.OK

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
        build = _build_json(self.build)
        return {"reference": build.pop("reference"), "digest": build.pop("digest"),
                "pinned": self.pinned, "plan": self.plan.to_json(), "build": build,
                "verify": report_json(self.report), "steps": [s.to_json() for s in self.steps]}


def _prepare_steps(config: Config, planned: Plan, *, wheel_source: str,
                   say: Say) -> tuple[Step[Any], ...]:
    """The demo's steps before the build: setup-local, plan, generate, the wheels."""
    steps: list[Step[Any]] = [
        Step("setup-local", (_task("setup-local", config),), lambda: actions.setup(config, say)),
        Step("plan", (_task("plan", config),), lambda: actions.plan(planned, say)),
        Step("generate", (("invoke", "generate", "--profile", config.profile),),
             lambda: actions.generate_files(config, planned)),
    ]
    if wheel_source == "prebuilt-wheelhouse" and config.build.compiled_wheels:
        report = check_source(config, str(config.build.wheelhouse))
        steps.append(Step("wheels", (
            _task("check-wheels", config),
            *((_task("build-wheels", config),) if report.mismatches else ())),
            lambda: actions.ensure_wheels(config, say)))
    return tuple(steps)


def _release_steps(config: Config, *, git_sha: str, wheel_source: str, say: Say,
                   today: dt.date) -> tuple[Step[Any], ...]:
    """The demo's steps from the build on: build and push, verify-layers, pin."""
    reference = builder.image_reference(config, git_sha)
    return (*build_steps(config, git_sha=git_sha, wheel_source=wheel_source, setup=False),
            Step("verify-layers", (_task("verify-layers", config, "--ref", reference),),
                 lambda: actions.verify(config, reference, say)),
            Step("pin", (_task("pin", config, "--ref", reference),),
                 lambda: actions.pin(config, reference, today)))


def demo_steps(config: Config, *, wheel_source: str = "prebuilt-wheelhouse",
               say: Say) -> tuple[Step[Any], ...]:
    """Every step of `invoke demo` as it would run now (its dry run)."""
    planned = fitted_plan(config)
    return (*_prepare_steps(config, planned, wheel_source=wheel_source, say=say),
            *_release_steps(config, git_sha=source_id(config), wheel_source=wheel_source,
                            say=say, today=dt.date.today()))


def run_pipeline(config: Config, *, say: Say, today: dt.date | None = None,
                 wheel_source: str = "prebuilt-wheelhouse") -> PipelineResult:
    """Run every step in order; each prints its name, what it did and its duration. The
    image's tag is the source id after `generate` (which may rewrite tracked files)."""
    runner = Steps(say)
    planned = fitted_plan(config)
    _run(_prepare_steps(config, planned, wheel_source=wheel_source, say=say), runner)
    *_, built, report, pinned = _run(_release_steps(
        config, git_sha=source_id(config), wheel_source=wheel_source, say=say,
        today=today or dt.date.today()), runner)
    total = sum(t.seconds for t in runner.records)
    say(f"done in {total:.1f}s: {built.reference} -> {built.digest}")
    return PipelineResult(plan=planned, build=built, report=report, pinned=pinned,
                          steps=tuple(runner.records), profile=config.profile)


def demo_task(config: Config, *, wheel_source: str, dry_run: bool, say: Say,
              ) -> PipelineResult | DryRun:
    """`invoke demo`: the whole pipeline, or with `dry_run` the commands of every step."""
    if dry_run:
        return dry_run_of(demo_steps(config, wheel_source=wheel_source, say=say))
    return run_pipeline(config, say=say, wheel_source=wheel_source)
