"""The layer limit: the count from the Dockerfile model, the planner's slice budget, and the
refusal of a plan over the ceiling by `invoke plan` and `invoke generate` (nothing written)."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser
from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.config import Config, Layout, load_config
from gpurl_tasks.dockerfile.generate import generate_profiles, layer_count
from gpurl_tasks.dockerfile.layers import Builder, composes, count_layers
from gpurl_tasks.dockerfile.model import render
from gpurl_tasks.dockerfile.recipe import render_recipe
from gpurl_tasks.plan.layerlimit import CEILING, HARD_LIMIT, TooManyLayers
from gpurl_tasks.plan.model import sync_selection_flags
from gpurl_tasks.plan.profile import plan_for_config
from gpurl_tasks.plan.sizes import PackageSize
from tests.conftest import REPO_ROOT
from tests.support.checkout import repo_copy
from tests.support.planning import plan_one
from tests.support.tasks_runner import run_task

LOCK_SHA = "0" * 64
MB = 10**6
# the instructions each builder turns into a layer, by their Dockerfile keyword: the oracle
_KEYWORDS: dict[Builder, set[str]] = {"docker": {"COPY", "RUN", "ADD", "WORKDIR"},
                                      "kaniko": {"COPY", "RUN", "ADD", "WORKDIR"},
                                      "kaniko-fork": {"COPY", "RUN", "ADD", "WORKDIR", "ARG",
                                                      "ENV", "LABEL"}}


def _sizes(weights: list[int]) -> list[PackageSize]:
    return [PackageSize(name=f"p{i:03d}", version="1", compressed_bytes=w, installed_bytes=None,
                        source="lock", artifact=None) for i, w in enumerate(weights)]


def _text_count(text: str, builder: Builder, target: str = "rl",
                args: dict[str, str] | None = None) -> int:
    """Layer-making instructions of the target's lineage, read back from the rendered text
    (an independent reading: dockerfile-parse, FROM ${ARG} by the global ARG's default or
    `args`). A WORKDIR whose directory a RUN of its stage made (`mkdir -p`) makes none with
    upstream kaniko (the fork's is an empty layer, Docker's a layer of the directory); a RUN
    under BUILD_ID (a build arg new on every cluster build) writes nothing and kaniko never
    takes it from its cache, so upstream makes none for it (the fork an empty one, BuildKit
    one of `etc/`)."""
    parser = DockerfileParser(fileobj=io.BytesIO(text.encode()))
    values: dict[str, str] = {}
    stages: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    current = None
    for ins in parser.structure:
        if ins["instruction"] == "FROM":
            base, _, name = ins["value"].partition(" AS ")
            current = name.strip()
            stages[current] = (base.strip(), [])
        elif current is None and ins["instruction"] == "ARG":
            key, _, value = ins["value"].partition("=")
            values[key] = value.strip('"')
        elif current is not None:
            stages[current][1].append((ins["instruction"], ins["value"]))
    values |= args or {}
    total, name = 0, target
    while True:
        base, keywords = stages[name]
        made = {w for k, v in keywords if k == "RUN" for w in re.findall(r"mkdir -p (\S+)", v)}
        total += sum(k in _KEYWORDS[builder] and not (
            k == "WORKDIR" and v in made and builder == "kaniko")
            # under BUILD_ID, new each cluster build: kaniko runs it, and it writes no file
            and not (k == "RUN" and "${BUILD_ID" in v and builder == "kaniko")
            for k, v in keywords)
        name = re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], base)
        if name not in stages:
            return total


def _composed_text_count(text: str, builder: Builder, slices: int) -> int:
    """The composed image read back: the final stages FROM an image (ENV_SOURCE), env-base's
    lineage, and one layer per slice."""
    return (_text_count(text, builder, args={"ENV_SOURCE": "registry/env@sha256:x"})
            + _text_count(text, builder, target="env-base") + slices)


@pytest.fixture(scope="module")
def gpu_config() -> Config:
    return load_config(REPO_ROOT, profile="gpu-rl", env={})


@settings(max_examples=40, deadline=None)
@given(weights=st.lists(st.integers(1, 60 * MB), min_size=1, max_size=40),
       groups=st.integers(1, 8), builder=st.sampled_from(["docker", "kaniko", "kaniko-fork"]))
def test_the_count_is_the_lineages_layer_making_instructions(
        gpu_config: Config, weights: list[int], groups: int, builder: Builder) -> None:
    """For recipes of generated plans: the model's count equals the instructions read back
    from the rendered text, and each slice costs the same layers."""
    layout = Layout(own_layer=20 * MB, tail_groups=groups)
    flags = sync_selection_flags(gpu_config.python, local_flags=("--no-install-project",))
    plan = plan_one(_sizes(weights), cap=4 * 10**9, basis="compressed", sync_flags=flags,
                    layout=layout)
    model = render_recipe(gpu_config, plan, lock_sha256=LOCK_SHA)
    count = count_layers(model, base_layers=20, builder=builder)
    assert count.instructions == _text_count(render(model), builder)
    assert count.total == 20 + count.instructions
    assert count.slices == len(plan.layers)
    assert count.per_slice == 2  # the chain's COPY and RUN of each slice
    composed = count_layers(model, base_layers=20, builder=builder, composed=True)
    assert composed.instructions == _composed_text_count(render(model), builder, len(plan.layers))
    assert (composed.slices, composed.per_slice) == (len(plan.layers), 1)
    fewer = render_recipe(gpu_config, dataclasses.replace(plan, layers=plan.layers[:1]),
                          lock_sha256=LOCK_SHA)
    alone = count_layers(fewer, base_layers=20, builder=builder)
    assert count.instructions - alone.instructions == 2 * (len(plan.layers) - 1)
    one = count_layers(fewer, base_layers=20, builder=builder, composed=True)
    assert composed.instructions - one.instructions == len(plan.layers) - 1


@settings(max_examples=60, deadline=None)
@given(weights=st.lists(st.integers(1, 80 * MB), min_size=1, max_size=80),
       groups=st.integers(1, 32), budget=st.integers(1, 40))
def test_the_planner_fits_its_slices_to_a_budget(weights: list[int], groups: int,
                                                 budget: int) -> None:
    """With a slice budget, independent layers never exceed it when one group can hold the
    lighter packages (cap splits aside), and a budget the configured layout meets changes
    nothing."""
    sizes = _sizes(weights)
    cap = 4 * 10**9
    layout = Layout(own_layer=20 * MB, tail_groups=groups)
    free = plan_one(sizes, cap=cap, basis="compressed", sync_flags=(), layout=layout)
    fitted = plan_one(sizes, cap=cap, basis="compressed", sync_flags=(),
                      layout=dataclasses.replace(layout, max_slices=budget))
    assert sorted(p.name for p in fitted.closure) == sorted(s.name for s in sizes)
    assert len(fitted.layers) <= max(budget, 1)
    if len(free.layers) <= budget:
        assert [la.names for la in fitted.layers] == [la.names for la in free.layers]
    else:
        assert fitted.layout.own_layer >= layout.own_layer
        assert fitted.layout.tail_groups <= groups


def test_the_committed_images_fit_under_the_ceiling() -> None:
    for profile in ("gpu-rl", "skyrl", "demo", "heavy"):
        config = load_config(REPO_ROOT, profile=profile, env={})
        for variant in config.variants:
            one = config.for_variant(variant)
            text = one.build.dockerfile.read_text()
            count = layer_count(one, plan_for_config(one))
            assert count.fits() and count.budget <= CEILING, (profile, variant.name, count)
            builder: Builder = "docker" if one.backend == "local" else "kaniko"
            assert count.instructions == (
                _composed_text_count(text, builder, len(plan_for_config(one).layers))
                if composes(one) else _text_count(text, builder))


def test_invoke_plan_refuses_an_image_over_the_ceiling_in_one_line() -> None:
    done = run_task("plan", "--profile", "gpu-rl",
                    env={"GPURL_BUILD_BASE_IMAGE_LAYERS": "110"})
    assert done.returncode == 2, done.stdout
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if x.startswith("error: "))
    assert re.search(r"profile 'gpu-rl' variant '(standard|megatron)' would have \d+ layers "
                     r"\(base 110 \+ \d+ instructions, kaniko\), over the layer budget 100 "
                     r"\(layers.max-image-layers; Docker and containerd stop at 127\)", line), line
    hint = done.stderr.split(line, 1)[1]
    assert "raise the cap or the budget" in hint and "layers.max-image-layers" in hint
    assert "[tool.gpurl.profiles.gpu-rl.layers]" in hint


def test_invoke_plan_shows_the_image_layers() -> None:
    done = run_task("plan", "--profile", "heavy")
    assert done.returncode == 0, done.stderr
    assert re.search(r"image layers: \d+ layers \(base 1 \+ \d+ instructions, 36 slice\(s\) of "
                     r"1; docker\); budget 100 \(layers.max-image-layers\), Docker/containerd limit 127",
                     done.stdout)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.parts}


def test_generate_refuses_an_image_over_the_ceiling_and_writes_nothing(tmp_path: Path) -> None:
    """A base of 105 layers leaves no room for skyrl's slices: the whole profile is refused
    before anything is written: every file byte-identical, none removed."""
    root = repo_copy(tmp_path / "repo", untracked=True)
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    table = "[tool.gpurl.profiles.skyrl.build]\n"
    pyproject.write_text(text.replace(table, table + "base-image-layers = 105\n"))
    (root / "docker" / "Dockerfile.skyrl").unlink()  # standard's: would be written first
    before = _snapshot(root)
    with pytest.raises(TooManyLayers) as err:
        generate_profiles(root, "skyrl", check=False)
    assert "profile 'skyrl' variant 'standard' would have" in err.value.message
    assert "(base 105 + " in err.value.message
    assert "layer budget 100" in err.value.message and str(HARD_LIMIT) in err.value.message
    assert _snapshot(root) == before


_HEAVY_BASE = 'base-image = "gpurl/bookworm-python:3.11"\nbase-image-layers = 1'


@pytest.mark.parametrize(("profile", "variant", "base", "slices"),
                         [("skyrl", "megatron", 60, 42), ("heavy", "", 70, 36)])
def test_generate_fits_an_over_budget_profile_afresh(tmp_path: Path, profile: str, variant: str,
                                                     base: int, slices: int) -> None:
    """A profile whose committed slices (`slices` of them) would exceed the layer budget (100)
    on a base of `base` layers is planned to the budget instead of refused: fewer slices,
    under the budget (skyrl: variants planned together; heavy: one plan)."""
    root = repo_copy(tmp_path / "repo", untracked=True)
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    if profile == "heavy":
        head, tail = text.rsplit(_HEAVY_BASE, 1)
        text = head + _HEAVY_BASE.replace("= 1", f"= {base}") + tail
    else:
        table = f"[tool.gpurl.profiles.{profile}.build]\n"
        text = text.replace(table, table + f"base-image-layers = {base}\n")
    pyproject.write_text(text)
    summary = generate_profiles(root, profile, check=False)
    config = load_config(root, profile=profile, variant=variant or None, env={})
    count = layer_count(config, plan_for_config(config))
    assert count.base == base and count.total <= config.layers.max_image_layers
    assert max(r.steps for r in summary.results) < slices
