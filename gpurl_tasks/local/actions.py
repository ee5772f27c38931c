"""What each step of the local path does: set up, compose, build and push, check the wheels,
generate, verify, pin. Each action returns its value and the one line its step ends with;
which steps run, in which order, and what a dry run shows is local/pipeline.py's.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.generate import generate
from gpurl_tasks.dockerfile.recipe import wheel_source_arg
from gpurl_tasks.dockerfile.wheels import require_compiled_wheels
from gpurl_tasks.errors import BuildError, GpurlError
from gpurl_tasks.local import builder
from gpurl_tasks.local.base_image import image_id
from gpurl_tasks.local.builder import BuildResult, WheelsResult
from gpurl_tasks.local.compose_env import CompiledWheels, compose_environment
from gpurl_tasks.local.composed import ComposedEnv
from gpurl_tasks.local.engine import find_buildkit_client
from gpurl_tasks.local.setup import cache_dir, index_dir, setup_local
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.plan.report import render_plan
from gpurl_tasks.rebuild.inputs import BuildInputs, build_inputs
from gpurl_tasks.rebuild.wheelhouse import WheelReport, check_source
from gpurl_tasks.release import flow as release
from gpurl_tasks.release import reuse
from gpurl_tasks.release.verify import Report, render_table
from gpurl_tasks.steps import timed
from gpurl_tasks.writer.compiled import composed_build_args

__all__ = [
    "WheelsBuilt",
    "build_and_push",
    "build_summary",
    "build_wheels_task",
    "compiled_wheels",
    "compose",
    "ensure_wheels",
    "generate_files",
    "inputs_here",
    "log_dir",
    "pin",
    "plan",
    "record_inputs",
    "setup",
    "verify",
    "wheelhouse_problem",
    "writes_compiled",
]

Say = Callable[[str], None]


def log_dir(config: Config) -> Path:
    """Where a local build's logs go (the cache's logs directory)."""
    return cache_dir(config.root) / "logs"


def setup(config: Config, say: Say | None) -> tuple[None, str]:
    result = setup_local(config, say=say)
    return None, ", ".join(f"{s.name} {s.status}" for s in result.steps)


def plan(planned: Plan, say: Say) -> tuple[Plan, str]:
    say(render_plan(planned))
    return planned, (f"{len(planned.layers)} slice layer(s), lower bound "
                     f"{planned.lower_bound_layers}")


def generate_files(config: Config, planned: Plan) -> tuple[None, str]:
    result = generate(config, planner=lambda _: planned)
    return None, f"{'wrote' if result.changed else 'unchanged'} {result.path.name}"


def writes_compiled(config: Config, build_args: Mapping[str, str]) -> bool:
    """Whether the composition writes the compiled wheels' layer: the profile installs
    compiled wheels (build.wheel-globs) and the build takes them prebuilt from the wheelhouse
    (wheels the wheel-builder stage compiles exist only inside the build)."""
    return bool(config.build.wheel_globs) and \
        build_args.get("WHEEL_SOURCE") == "prebuilt-wheelhouse"


def compiled_wheels(config: Config) -> CompiledWheels:
    """The wheelhouse's compiled wheels, checked against the pins (each wheel's sha256
    against the MANIFEST, the ABI key) before they are written as a layer: the check the
    Dockerfile's compiled stage makes, which a composed build does not run."""
    report = check_source(config, str(config.build.wheelhouse))
    if report.mismatches or not (config.build.wheelhouse / "MANIFEST").is_file():
        problems = "; ".join(f"{m.project}: {m.problem}" for m in report.mismatches) or \
            "no MANIFEST"
        raise BuildError(f"{wheelhouse_problem(config, report)} ({problems})",
                         hint="`invoke build-wheels` compiles them with their MANIFEST, or build "
                              "with --wheel-source wheel-builder")
    return CompiledWheels(wheelhouse=config.build.wheelhouse,
                          wheels=tuple(sorted(n for n in report.found if n.endswith(".whl"))))


def compose(config: Config, planned: Plan, *, git_sha: str, build_args: Mapping[str, str],
            on_line: Say | None, say: Say | None = None) -> tuple[ComposedEnv, str]:
    """The environment composed at the registry from env-base and the slice layers gpurl
    writes (local/compose_env.py), and the prebuilt compiled wheels' layer (writes_compiled)."""
    compiled = compiled_wheels(config) if writes_compiled(config, build_args) else None
    with builder.serving_index(config.build.index_url, index_dir(cache_dir(config.root)),
                               on_wait=say or on_line):
        environment = compose_environment(
            config, planned, client=find_buildkit_client()[0],
            dockerfile=config.build.dockerfile, context=config.root, build_args=build_args,
            log_dir=log_dir(config) / f"env-{config.registry.tag_prefix}-{git_sha}",
            on_line=on_line, compiled=compiled)
    return environment, environment.summary()


def build_and_push(config: Config, *, git_sha: str, build_args: Mapping[str, str],
                   environment: ComposedEnv | None, push_floating: bool, no_cache: bool,
                   on_line: Say | None, force: bool, say: Say | None = None,
                   ) -> tuple[BuildResult, str]:
    """The image built from the generated Dockerfile and pushed (`environment`: its
    ENV_SOURCE; None builds the env-chain stage)."""
    args = dict(build_args)
    if environment is not None:
        args.update(composed_build_args(environment.reference,
                                        compiled=environment.holds_compiled))
    log_file = log_dir(config) / f"build-{config.registry.tag_prefix}-{git_sha}.log"
    log_file.parent.mkdir(parents=True, exist_ok=True)
    built = builder.build_and_push(config, git_sha=git_sha, build_args=args,
                                   push_floating=push_floating, no_cache=no_cache,
                                   on_line=on_line, force=force, log_file=log_file, say=say)
    built = dataclasses.replace(built, environment=environment)
    return built, build_summary(built)


def inputs_here(config: Config, wheel_source: str | None, say: Say | None) -> BuildInputs | None:
    """This tree's inputs key (rebuild/inputs.py), the base named by the engine's image id;
    None, said in one line, when it cannot be read (then nothing is reused or recorded)."""
    try:
        client = find_buildkit_client()[0]
        return build_inputs(
            config, wheel_source=wheel_source_arg(config, wheel_source).get("WHEEL_SOURCE", ""),
            base_digest=lambda ref: image_id(client, ref))
    except GpurlError as exc:
        if say:
            say(f"note: the build's inputs could not be read ({exc.message}): no reuse")
        return None


def record_inputs(config: Config, inputs: BuildInputs | None, digest: str) -> str:
    """The pushed image recorded under its inputs tag: what the step's line adds."""
    if inputs is None:
        return ""
    try:
        return f"; recorded as {reuse.record(config, inputs, digest)}"
    except GpurlError as exc:  # the image is pushed; the next build of it just builds
        return f"; its inputs tag not written ({exc.message})"


def build_summary(built: BuildResult) -> str:
    """One line for a build step's end: what was pushed, steps cached vs ran, the log file."""
    what = "pushed" if built.pushed else "the registry already holds this exact image as"
    runnable = sum(1 for s in built.steps if not s.is_from)
    log = f"; log {built.log_file}" if built.log_file else ""
    env = f"; {built.environment.summary()}" if built.environment else ""
    return (f"{what} {built.reference}: {runnable} steps, {built.cached_steps} cached, "
            f"{runnable - built.cached_steps} ran{env}{log}")


def wheelhouse_problem(config: Config, report: WheelReport) -> str:
    """Why the prebuilt wheelhouse cannot be used: empty, or not matching the pins."""
    path = config.build.wheelhouse
    shown = path.relative_to(config.root) if path.is_relative_to(config.root) else path
    if not any(name.endswith(".whl") for name in report.found):
        return f"no prebuilt wheels in {shown} yet"
    return f"the wheels in {shown} do not match the pins"


def ensure_wheels(config: Config, say: Say) -> tuple[None, str]:
    """The prebuilt wheelhouse matches the Dockerfile's pins; compile it first if it does not."""
    report = check_source(config, str(config.build.wheelhouse))
    if not report.mismatches:
        return None, f"{len(report.found)} prebuilt wheel(s) match the pins"
    say(f"{wheelhouse_problem(config, report)}; building the wheel-builder stage")
    builder.build_wheels(config, build_args={"WHEEL_SOURCE": "wheel-builder"})
    report = check_source(config, str(config.build.wheelhouse))
    if report.mismatches:
        raise BuildError("the freshly built wheels do not match the Dockerfile's pins:\n"
                         + "\n".join(report.lines()),
                         hint="align build.wheel-specs with the pins the lines name, then `invoke generate`")
    return None, f"built {len(report.found)} wheel(s) with the wheel-builder stage"


def verify(config: Config, reference: str, say: Say) -> tuple[Report, str]:
    report = release.verify_reference(config, reference)
    say(render_table(report))
    if not report.ok:
        raise BuildError("the pushed image fails the layer rules; not pinning it",
                         hint="see the FAIL lines above")
    return report, f"{len(report.rows)} layers, every rule holds"


def pin(config: Config, reference: str, today: dt.date) -> tuple[str | None, str]:
    _, change = release.pin_reference(config, reference, force=False, today=today)
    written = release.apply_pin(change)
    shown = change.path.relative_to(config.root) if change.path.is_relative_to(config.root) \
        else change.path
    return (change.value if written else None,
            f"{'pinned' if written else 'already pinned'} {change.value} in {shown}")


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
    require_compiled_wheels(config, "build-wheels")
    with timed(f"build-wheels ({target})", say):
        result = builder.build_wheels(config, target=target, source=source,
                                      build_args={"WHEEL_SOURCE": "wheel-builder"},
                                      on_line=say if stream else None)
    return WheelsBuilt(result=result, report=check_source(config, str(config.build.wheelhouse)))
