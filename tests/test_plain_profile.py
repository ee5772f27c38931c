"""A profile without compiled wheels: its lock is the whole truth, and every generated file and
build path is as plain as that build. The Dockerfile is read back with dockerfile-parse; the
wheel tasks run through the real CLI; rebuild-needed is asked of the real generated files."""

from __future__ import annotations

import io

import pytest
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]

from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile.inputs import parse_dockerfile_inputs
from gpurl_tasks.dockerfile.model import render
from gpurl_tasks.dockerfile.recipe import render_recipe
from gpurl_tasks.dockerfile.wheels import pins_from_args
from gpurl_tasks.plan.profile import plan_for_config
from gpurl_tasks.rebuild.fingerprint import ClosureEntry, decide, fingerprint
from tests.conftest import REPO_ROOT
from tests.support.tasks_runner import run_task

WHEEL_STAGES = {"wheel-builder", "prebuilt-wheelhouse", "wheels", "compiled-wheels"}
NO_WHEELS = {"build.wheel-specs": [], "build.wheel-globs": []}


def _config(profile: str, overrides: dict[str, object]) -> Config:
    return load_config(REPO_ROOT, profile=profile, env={}, overrides=overrides)


def _instructions(config: Config) -> list[dict[str, str]]:
    text = render(render_recipe(config, plan_for_config(config), lock_sha256="ab" * 32))
    return list(DockerfileParser(fileobj=io.BytesIO(text.encode())).structure)


def _stages(structure: list[dict[str, str]]) -> dict[str, str]:
    """{stage name: its FROM}."""
    return {v.partition(" AS ")[2]: v.partition(" AS ")[0]
            for v in (i["value"] for i in structure if i["instruction"] == "FROM")}


def _wheel_traces(structure: list[dict[str, str]]) -> set[str]:
    """Every compiled-wheel part an instruction carries: a wheel stage, the WHEEL_SOURCE or
    TORCH_CUDA_ARCH_LIST ARG, a COPY from the wheel source, the MANIFEST, /tmp/wheels."""
    found = WHEEL_STAGES & set(_stages(structure))
    for entry in structure:
        kind, value = entry["instruction"], entry["value"]
        if kind == "ARG" and value.split("=", 1)[0] in ("WHEEL_SOURCE", "TORCH_CUDA_ARCH_LIST"):
            found.add(f"ARG {value.split('=', 1)[0]}")
        if kind == "COPY" and "--from=wheels" in value.split():
            found.add("COPY --from=wheels")
        if kind in ("RUN", "COPY") and "MANIFEST" in value:
            found.add(f"{kind} MANIFEST")
        if kind in ("RUN", "COPY") and "/tmp/wheels" in value:
            found.add(f"{kind} /tmp/wheels")
    return found


@pytest.mark.parametrize(("profile", "overrides", "compiled"), [
    ("heavy", {}, False),
    ("multiarch", {}, False),
    ("gpu-rl", NO_WHEELS, False),  # the runbook's profile with its wheels taken out
    ("gpu-rl", {}, True),
    ("demo", {}, True),
])
def test_only_a_profile_with_compiled_wheels_has_wheel_stages(
        profile: str, overrides: dict[str, object], compiled: bool) -> None:
    config = _config(profile, overrides)
    assert config.build.compiled_wheels is compiled
    structure = _instructions(config)
    traces = _wheel_traces(structure)
    if compiled:
        assert traces >= WHEEL_STAGES and "ARG WHEEL_SOURCE" in traces, traces
        assert {"COPY --from=wheels", "RUN MANIFEST"} <= traces, traces
    else:
        assert traces == set()
        stages = _stages(structure)
        # what is left is the plain build: bootstrap, environment, runtime, nothing built aside
        assert list(stages) == ["base", "env-base", "env-chain", "env", "rl"]
        assert not {"scratch", "${WHEEL_SOURCE}"} & set(stages.values())


@pytest.mark.integration
@pytest.mark.parametrize("task", [("check-wheels",), ("build-wheels",),
                                  ("build", "--backend", "local", "--dry-run",
                                   "--wheel-source", "wheel-builder")])
def test_a_wheel_task_on_a_profile_without_wheels_says_so_in_one_line(task: tuple[str, ...]) -> None:
    """Refused before any engine or wheelhouse is touched: exit 2, one `error:` line naming
    the profile and what it lacks, and a hint."""
    done = run_task(*task, "--profile", "multiarch")
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "'multiarch'" in errors[0] and "no compiled wheels" in errors[0]
    assert "build.wheel-specs" in errors[0] and "hint:" in done.stderr


def _bumped(closure: list[ClosureEntry], name: str) -> list[ClosureEntry]:
    return [(n, f"{v}.post1", f"{a}0") if n == name else (n, v, a) for n, v, a in closure]


@pytest.mark.parametrize(("profile", "overrides"), [("heavy", {}), ("gpu-rl", NO_WHEELS)])
def test_rebuild_needed_never_answers_wheels_for_a_profile_without_them(
        profile: str, overrides: dict[str, object]) -> None:
    """The changes that invalidate compiled wheels (the lock's torch, a wheel-baked config key)
    rebuild the image alone when there are none; the same changes with wheels configured
    still say wheels+image."""
    config = _config(profile, overrides)
    inputs = parse_dockerfile_inputs(render(render_recipe(
        config, plan_for_config(config), lock_sha256="ab" * 32)))
    assert inputs.wheel_recipe() == frozenset()
    pins = pins_from_args(inputs.effective_args, config.build, config.target)
    closure: list[ClosureEntry] = [("torch", "2.11.0", "sha256:bb"), ("numpy", "2.2.0", "sha256:aa")]
    before = {"target.python": ("wheels", "3.11"), "build.base-image": ("wheels", "a:1")}
    after = {"target.python": ("wheels", "3.12"), "build.base-image": ("wheels", "a:2")}
    for compiled, answer in ((False, "image"), (True, "wheels+image")):
        old = fingerprint(inputs, closure, (), pins, config=before, compiled=compiled)
        new = fingerprint(inputs, _bumped(closure, "torch"), (), pins, config=after,
                          compiled=compiled)
        decision = decide(old, new)
        assert decision.decision == answer, decision.to_json()
        assert {r.kind for r in decision.reasons} >= {"torch", "config"}
        assert (new.wheels == ()) is not compiled


def test_the_committed_plain_dockerfiles_carry_no_wheel_machinery() -> None:
    """What `invoke generate` committed for every variant of the plain profiles."""
    for profile in ("heavy", "multiarch"):
        config = load_config(REPO_ROOT, profile=profile, env={})
        for variant in config.variants:
            text = config.for_variant(variant).build.dockerfile.read_text()
            structure = list(DockerfileParser(fileobj=io.BytesIO(text.encode())).structure)
            assert _wheel_traces(structure) == set(), (profile, variant.name)
