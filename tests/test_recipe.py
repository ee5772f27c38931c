"""The gpu-rl recipe, inspected through dockerfile-parse (the parsed file, not the template)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import itertools
import shlex
import string
import subprocess
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.config import Config, load_config
from gpurl_tasks.dockerfile import provenance
from gpurl_tasks.dockerfile.lint import lint
from gpurl_tasks.dockerfile.model import DockerfileError, render
from gpurl_tasks.dockerfile.recipe import (
    ASSERTS_RECORD,
    BUILD_ID,
    ENV_BASE_STAGE,
    ENV_CHAIN,
    ENV_COMPILED,
    IB_VERBS_APT,
    WORKDIR,
    render_recipe,
)
from gpurl_tasks.errors import ConfigError
from gpurl_tasks.plan.model import (
    Layer,
    Plan,
    PlannedPackage,
    ProvidedPackage,
    Slice,
)
from gpurl_tasks.plan.profile import plan_for_config
from gpurl_tasks.plan.sizes import PackageSize
from tests.conftest import REPO_ROOT
from tests.support.planning import plan_one

LOCK_SHA = "ab" * 32


# --- parsing helpers: everything below reads the rendered text back -----------------------


@dataclasses.dataclass
class ParsedStage:
    name: str
    base: str
    instructions: list[dict[str, Any]]

    def of(self, kind: str) -> list[str]:
        return [i["value"] for i in self.instructions if i["instruction"] == kind]


@dataclasses.dataclass
class Parsed:
    global_args: dict[str, str]
    stages: list[ParsedStage]

    def stage(self, name: str) -> ParsedStage:
        return next(s for s in self.stages if s.name == name)

    def runtime(self) -> ParsedStage:
        """The image's own instructions as the chain builds it: env-base, env-chain, the
        compiled tree's copy (when the profile has compiled wheels), rl."""
        names = {s.name for s in self.stages}
        parts = [self.stage(n) for n in (ENV_BASE_STAGE, ENV_CHAIN, ENV_COMPILED, "rl")
                 if n in names]
        return ParsedStage(name="rl", base="base",
                           instructions=[i for p in parts for i in p.instructions])


def parse(text: str) -> Parsed:
    structure = DockerfileParser(fileobj=io.BytesIO(text.encode())).structure
    global_args: dict[str, str] = {}
    stages: list[ParsedStage] = []
    for entry in structure:
        kind = entry["instruction"]
        if kind == "FROM":
            base, _, name = entry["value"].partition(" AS ")
            stages.append(ParsedStage(name=name, base=base, instructions=[]))
        elif kind == "COMMENT":
            continue
        elif not stages:
            assert kind == "ARG"
            key, _, value = entry["value"].partition("=")
            global_args[key] = shlex.split(value)[0] if value else ""
        else:
            stages[-1].instructions.append(entry)
    return Parsed(global_args=global_args, stages=stages)


def slice_runs(stage: ParsedStage) -> list[tuple[str, str]]:
    """(the COPY'd slice file, the file the next RUN installs) for every slice, in order."""
    order = [(i["instruction"], i["value"]) for i in stage.instructions]
    out = []
    for k, (kind, value) in enumerate(order):
        if kind == "COPY" and "/tmp/gpurl-layers/" in value:
            run = shlex.split(order[k + 1][1])
            assert run[:5] == ["uv", "pip", "install", "--no-deps", "--require-hashes"] or \
                run[:4] == ["uv", "pip", "install", "--no-deps"], run
            out.append((value.split()[0], run[run.index("-r") + 1]))
    return out


def sync_runs(stage: ParsedStage) -> list[list[str]]:
    """The argv after `uv sync` of every sync RUN, in order."""
    out = []
    for value in stage.of("RUN"):
        words = shlex.split(value)
        if "sync" in words and words[words.index("sync") - 1] == "uv":
            out.append(words[words.index("sync") + 1:])
    return out


def split_sync(argv: list[str]) -> tuple[list[str], list[str]]:
    """(selection flags, exclusions in order) of one `uv sync` argv."""
    selection, exclusions = [], []
    i = 0
    while i < len(argv):
        if argv[i] == "--no-install-package":
            exclusions.append(argv[i + 1])
            i += 2
        else:
            selection.append(argv[i])
            i += 1
    return selection, exclusions


# --- fixtures ---------------------------------------------------------------------------------


@functools.cache
def planned(config: Config) -> Plan:
    """The pure planner's plan for `config` from its real lock (tens of ms)."""
    return plan_for_config(config)


def make_plan(config: Config, layer_names: list[list[str]],
              provided: tuple[str, ...] = (), shared: int = 0) -> Plan:
    """The planner's plan for `config` (its sync selection, local packages, what it installs
    outside the lock, its provided packages), with the slices cut as `layer_names` says:
    slice i (named NN-<its first package>) holds its names. `provided` adds compiled-wheel
    packages (gpu-rl's lock has none of them; skyrl's has); the lowest `shared` slices are
    common to every variant."""
    real = planned(config)
    layers = tuple(
        Layer(slice=Slice(position=i, label=names[0], shared=i < shared),
              packages=tuple(PlannedPackage(name=n, version="1.0",
                                            compressed_bytes=10**6 * (i + 1),
                                            installed_bytes=None, requirement=f"{n}==1.0")
                             for n in names))
        for i, names in enumerate(layer_names))
    return dataclasses.replace(
        real, layers=layers, lower_bound_layers=1,
        provided=(*real.provided, *(ProvidedPackage(name=n, version="1") for n in provided)))


@pytest.fixture(scope="module")
def gpu_config() -> Config:
    return load_config(REPO_ROOT, profile="gpu-rl", env={})


@pytest.fixture(scope="module")
def demo_config() -> Config:
    return load_config(REPO_ROOT, profile="demo", env={})


@pytest.fixture(scope="module")
def gpu(gpu_config: Config) -> Parsed:
    plan = make_plan(gpu_config, [["six"], ["torch"], ["nvidia-cublas-cu12", "nvidia-cudnn-cu12"]])
    return parse(render(render_recipe(gpu_config, plan, lock_sha256=LOCK_SHA)))


# --- structure ---------------------------------------------------------------------------------


def test_stages_in_order(gpu: Parsed) -> None:
    assert [(s.name, s.base) for s in gpu.stages] == [
        ("base", "${BASE_IMAGE}"),
        ("wheel-builder", "base"),
        ("prebuilt-wheelhouse", "scratch"),
        ("wheels", "${WHEEL_SOURCE}"),
        ("env-base", "base"),
        ("env-chain", "env-base"),
        ("env", "${ENV_SOURCE}"),
        ("compiled-wheels", "env"),
        ("env-compiled", "env"),
        ("rl", "${COMPILED_SOURCE}"),
    ]
    assert gpu.global_args["ENV_SOURCE"] == ENV_CHAIN
    assert gpu.stage("wheels").instructions == []
    assert gpu.stage("prebuilt-wheelhouse").of("COPY") == ["docker/wheelhouse/ /wheels/"]


def test_arg_defaults_come_from_config(gpu: Parsed, gpu_config: Config) -> None:
    """Every pin is the config's value (read from it: a pin bump in pyproject is a config
    edit, not a test edit), and every pin gpu-rl sets is non-empty."""
    args = gpu.global_args
    build = gpu_config.build
    pins = {"BASE_IMAGE": build.base_image, "UV_VERSION": build.uv_version,
            "TORCH_VERSION": build.torch_version, "FLASH_ATTN_VERSION": build.flash_attn_version,
            "VLLM_FORK_REPO": build.vllm_fork_repo, "VLLM_FORK_COMMIT": build.vllm_fork_commit,
            "WHEEL_SOURCE": build.wheel_source}
    assert all(pins.values())
    assert {k: args[k] for k in pins} == pins
    assert "INSTALL_MEGATRON" not in args  # a variant is its own Dockerfile, not a build arg
    assert args["MAX_JOBS"] == str(gpu_config.build.max_jobs)
    assert "GITSHA" in args


def test_every_used_arg_is_declared_in_its_stage(gpu: Parsed, gpu_config: Config) -> None:
    plan = make_plan(gpu_config, [["a"], ["b"]])
    assert lint(render_recipe(gpu_config, plan, lock_sha256=LOCK_SHA)) == ()
    builder = gpu.stage("wheel-builder").of("ARG")
    assert {"MAX_JOBS", "TORCH_VERSION", "VLLM_FORK_COMMIT", "FLASH_ATTN_VERSION"} <= set(builder)


def test_rl_apt_set_always_has_ib_verbs(gpu: Parsed, demo_config: Config) -> None:
    def apt_set(parsed: Parsed) -> set[str]:
        runs = [shlex.split(v) for v in parsed.runtime().of("RUN") if "apt-get" in v]
        assert len(runs) == 1
        words = runs[0]
        start = words.index("--no-install-recommends") + 1
        return set(words[start:words.index("&&", start)])

    assert set(IB_VERBS_APT) <= apt_set(gpu)
    assert {"git", "curl"} <= apt_set(gpu)
    assert set(IB_VERBS_APT) == {"rdma-core", "ibverbs-providers", "libibverbs1", "librdmacm1",
                                 "ibverbs-utils"}
    # a profile whose apt set forgets them still gets them
    plan = make_plan(demo_config, [["pyyaml"]])
    demo = parse(render(render_recipe(demo_config, plan, lock_sha256=LOCK_SHA)))
    assert set(IB_VERBS_APT) <= apt_set(demo)


def test_wheel_builder_index_strategy_and_pip_wheel(gpu: Parsed) -> None:
    runs = [shlex.split(v) for v in gpu.stage("wheel-builder").of("RUN")]
    installs = [w for w in runs if w[:3] == ["uv", "pip", "install"]]
    assert len(installs) == 1
    mixing = installs[0]
    assert "--extra-index-url" in mixing
    i = mixing.index("--index-strategy")
    assert mixing[i + 1] == "unsafe-best-match"
    assert "torch==${TORCH_VERSION}" in mixing and "setuptools>=77" in mixing
    wheels = [w for w in runs if w[1:4] == ["-m", "pip", "wheel"]]
    assert len(wheels) == 1
    assert {"--no-cache-dir", "--no-build-isolation"} <= set(wheels[0])
    assert "git+${VLLM_FORK_REPO}@${VLLM_FORK_COMMIT}" in wheels[0]
    assert "flash-attn==${FLASH_ATTN_VERSION}" in wheels[0]
    assert not any(w[:3] == ["uv", "pip", "wheel"] for w in runs)
    assert any("MANIFEST" in w for w in runs)


def test_the_asserts_are_one_run_that_records_them(gpu: Parsed) -> None:
    """One RUN: each assert announced and run in config order, the compiled-wheel check first,
    then the record file (a file-less RUN is an extra empty layer on every cached rebuild)."""
    config = load_config(REPO_ROOT, profile="gpu-rl", env={}, variant="standard")
    runs = [v for v in gpu.runtime().of("RUN") if "build assert" in v]
    assert len(runs) == 1
    commands = [shlex.split(c) for c in runs[0].split(" && ")]
    codes = [c[3] for c in commands if c[:3] == ["python", "-B", "-c"]]
    compiled = codes.pop(0)  # first: the compiled wheels are what is installed, nothing reverted
    assert "'vllm-*g${VLLM_FORK_COMMIT}*.whl'" in compiled  # named by the image's MANIFEST
    assert "open('/etc/gpurl/provenance/wheels.MANIFEST')" in compiled
    assert "m.version(n) != v" in compiled
    post = [a for e in config.build.post_installs for a in e.asserts]
    assert post and codes == [*config.build.import_asserts, *post]  # the post-installs' last
    checks = [c[3] for c in commands if c[:3] == ["python", "-B", "/etc/gpurl/envcheck.py"]]
    assert checks == ["prove", "pip-check"]  # the package set, the `uv pip check` gate
    total = len(codes) + 1 + len(checks)
    assert [c for c in commands if c[0] == "echo"][:-1] == [
        ["echo", f"build assert {i}/{total}"] for i in range(1, total + 1)]
    assert commands[-1] == ["echo", f"{total} build asserts passed", ">", ASSERTS_RECORD]
    assert not [v for v in runs if "megatron" in v]  # the standard variant's Dockerfile


def test_only_the_last_run_sees_the_build_id_and_it_writes_nothing(gpu: Parsed) -> None:
    """The job caches COPY layers, and kaniko unpacks no stage whose every command is cached:
    the runtime stage ends in one RUN under BUILD_ID (new on every job run), declared right
    before it so no other layer's cache key holds it. That RUN comes after the asserts and
    only prints (a RUN that writes a file would be a new layer on every build)."""
    rl = gpu.stage("rl").instructions
    order = [(i["instruction"], i["value"]) for i in rl]
    declared = order.index(("ARG", BUILD_ID))
    runs = [n for n, (kind, _) in enumerate(order) if kind == "RUN"]
    assert runs[-1] == declared + 1
    assert "build assert" in order[runs[-2]][1]
    assert [kind for kind, _ in order[declared + 2:]] == ["ARG", "LABEL"]  # GITSHA, provenance
    assert not [s for s in gpu.stages if s.name != "rl"
                for i in s.instructions if BUILD_ID in i["value"]]
    last = order[runs[-1]][1]
    assert shlex.split(last)[0] == "echo" and ">" not in last and f"${{{BUILD_ID}" in last


def test_the_megatron_variant_is_its_own_planned_dockerfile() -> None:
    """Its sync selects the megatron extra (its slices counted those packages), its assert is
    a plain RUN, and no build arg switches anything."""
    config = load_config(REPO_ROOT, profile="gpu-rl", env={}, variant="megatron")
    assert config.build.dockerfile.name == "Dockerfile.gpu-rl-megatron"
    assert config.registry.tag_prefix == "gpu-rl-megatron"
    assert config.launcher.variable == "DEFAULT_RL_MEGATRON_DOCKER_IMAGE"
    plan = make_plan(config, [["torch"], ["megatron-core"]], provided=("flash-attn", "vllm"),
                     shared=1)
    rl = parse(render(render_recipe(config, plan, lock_sha256=LOCK_SHA))).runtime()
    (final,) = sync_runs(rl)
    assert final[final.index("--extra", final.index("--extra") + 1) + 1] == "megatron"
    assert [s for s, _ in slice_runs(rl)] == ["docker/layers/gpu-rl/shared/00-torch.txt",
                                             "docker/layers/gpu-rl/megatron/01-megatron-core.txt"]
    (asserts,) = [v for v in rl.of("RUN") if "build assert" in v]
    assert "import megatron.core, megatron.bridge, transformer_engine" in asserts
    assert not any("INSTALL_MEGATRON" in v or "$@" in v for v in rl.of("RUN"))


def test_slices_then_wheels_then_the_one_sync_then_the_post_installs(gpu: Parsed) -> None:
    """The post-installs come after the lock: the final sync's proof of equality to the lock
    holds for the lock's set, recorded right after it; then the post-installs, then the proof
    that the environment is that set plus them and their dependencies."""
    rl = gpu.runtime()
    order = [(i["instruction"], i["value"]) for i in rl.instructions]
    slices = [k for k, (kind, v) in enumerate(order) if kind == "RUN" and "-r /tmp/gpurl-layers/" in v]
    syncs = [k for k, (kind, v) in enumerate(order) if kind == "RUN" and "uv sync" in v]
    compiled = [(i["instruction"], i["value"]) for i in gpu.stage("compiled-wheels").instructions]
    assert compiled[0] == ("COPY", "--from=wheels /wheels/ /tmp/wheels/")
    (wheel_run,) = [v for kind, v in compiled if kind == "RUN"]
    wheels_copy = order.index(("COPY", "--from=compiled-wheels /tmp/gpurl-compiled/ /"))
    assert gpu.stage("rl").base == "${COMPILED_SOURCE}"
    assert gpu.global_args["COMPILED_SOURCE"] == "env-compiled"
    assert not [v for _, v in order if "/tmp/wheels" in v]  # no wheel file reaches the image
    lock_set = next(k for k, (_, v) in enumerate(order) if "envcheck.py lock-set" in v)
    post = next(k for k, (_, v) in enumerate(order) if "harbor @ git+" in v)
    prove = next(k for k, (_, v) in enumerate(order) if "envcheck.py prove" in v)
    source = order.index(("COPY", f"rl/ {WORKDIR}/"))
    assert len(syncs) == 1 and len(slices) == 3
    assert slices[-1] < wheels_copy < source < syncs[0] < lock_set < post < prove
    post_argv = shlex.split(order[post][1])
    config = load_config(REPO_ROOT, profile="gpu-rl", env={}, variant="standard")
    assert sorted(post_argv[3:]) == sorted(e.requirement for e in config.build.post_installs)
    prove_argv = shlex.split(order[prove][1].split(" && ")[0] if order[prove][1].startswith(
        "python") else next(c for c in order[prove][1].split(" && ") if "envcheck.py prove" in c))
    assert [prove_argv[k + 1] for k, w in enumerate(prove_argv) if w == "--post-install"] == [
        e.requirement for e in config.build.post_installs]
    assert not any("uv.lock" in v for kind, v in order[:source] if kind == "COPY")  # no slice
    final = sync_runs(rl)[-1]  # depends on the whole lock
    assert "--inexact" in final and "--no-install-project" not in final
    install = next(c for c in wheel_run.split(" && ") if c.startswith("uv pip install"))
    wheel_argv = shlex.split(install)
    assert "/tmp/wheels/flash_attn-${FLASH_ATTN_VERSION}-*.whl" in wheel_argv
    # installed into the tree the rl stage copies onto /: the venv's files under its path
    venv = load_config(REPO_ROOT, profile="gpu-rl", env={}).build.venv
    assert wheel_argv[wheel_argv.index("--prefix") + 1] == f"/tmp/gpurl-compiled{venv}"


def test_no_cache_and_no_bytecode(gpu: Parsed) -> None:
    env = " ".join(gpu.stage("base").of("ENV"))
    assert 'UV_NO_CACHE="1"' in env and 'UV_COMPILE_BYTECODE="0"' in env
    assert 'UV_LINK_MODE="copy"' in env
    for argv in sync_runs(gpu.runtime()):
        assert "--no-cache" in argv and "--frozen" in argv
    assert [s for s, _ in slice_runs(gpu.runtime())] == [
        f"docker/layers/gpu-rl/standard/{n}.txt"
        for n in ("00-six", "01-torch", "02-nvidia-cublas-cu12")]


def test_provenance_labels_come_last(gpu: Parsed) -> None:
    rl = gpu.runtime().instructions
    assert rl[-1]["instruction"] == "LABEL"
    assert rl[-2] == {**rl[-2], "instruction": "ARG", "value": "GITSHA"}
    labels = dict(pair.split("=", 1) for pair in shlex.split(rl[-1]["value"]))
    assert labels[provenance.LABEL_GIT_SHA] == "${GITSHA}"
    assert labels[provenance.LABEL_LOCK_HASH] == LOCK_SHA
    assert labels[provenance.LABEL_PLAN_STEPS] == "3"
    assert labels[provenance.LABEL_PLAN_FINGERPRINT].startswith("sha256:")
    assert labels[provenance.LABEL_GENERATOR].startswith("gpurl ")
    assert labels[provenance.LABEL_OCI_REVISION] == "${GITSHA}"
    assert labels[provenance.LABEL_OCI_SOURCE] == \
        load_config(REPO_ROOT, profile="gpu-rl", env={}).build.source_url != ""


def test_provenance_files_name_the_wheels_and_every_git_source(gpu: Parsed) -> None:
    """The compiled wheels' MANIFEST (sha256 and ABI key) and one line per git source (the
    fork the wheels are built from, each git post-install) under /etc/gpurl/provenance."""
    config = load_config(REPO_ROOT, profile="gpu-rl", env={})
    record = next(v for v in gpu.stage("rl").of("RUN") if "sources.txt" in v)
    commands = [shlex.split(c) for c in record.split(" && ")]
    assert not [c for c in commands if "MANIFEST" in " ".join(c)]  # it came with the wheels
    compiled = gpu.stage("compiled-wheels").of("RUN")[0]
    assert ["cp", "/tmp/wheels/MANIFEST",
            "/tmp/gpurl-compiled/etc/gpurl/provenance/wheels.MANIFEST"] in [
        shlex.split(c) for c in compiled.split(" && ")]
    printf = next(c for c in commands if c[0] == "printf")
    b = config.build
    assert printf[2:-2] == [f"vllm-fork {b.vllm_fork_repo}@{b.vllm_fork_commit}",
                            "harbor https://github.com/laude-institute/harbor.git@f4a6b1a0"]
    assert printf[-2:] == [">", "/etc/gpurl/provenance/sources.txt"]


def test_no_harbor_arg_is_left(gpu: Parsed) -> None:
    """harbor is one post-install entry: a bump of it changes only the layers after the sync."""
    assert not [n for n in gpu.global_args if n.startswith("HARBOR")]


# --- the plan round-trips through the text -------------------------------------------------------

_names = st.text(alphabet=string.ascii_lowercase + string.digits + "-", min_size=1, max_size=12
                 ).filter(lambda s: s[0].isalpha() and not s.endswith("-"))


@st.composite
def layer_partitions(draw: st.DrawFn) -> list[list[str]]:
    names = draw(st.lists(_names, min_size=1, max_size=30, unique=True))
    count = draw(st.integers(min_value=1, max_value=len(names)))
    cuts = sorted(draw(st.lists(st.integers(1, max(1, len(names) - 1)), min_size=count - 1,
                                max_size=count - 1, unique=True))) if len(names) > 1 else []
    bounds = [0, *cuts, len(names)]
    return [names[a:b] for a, b in itertools.pairwise(bounds) if b > a]


@settings(max_examples=60, deadline=None)
@given(partition=layer_partitions(), data=st.data(), extras=st.sampled_from([(), ("ep",)]))
def test_plan_slices_round_trip(gpu_config: Config, partition: list[list[str]],
                                data: st.DataObject, extras: tuple[str, ...]) -> None:
    config = load_config(REPO_ROOT, profile="gpu-rl", env={},
                         overrides={"python.extras": list(extras)})
    shared = data.draw(st.integers(0, len(partition)))
    plan = make_plan(config, partition, provided=("flash-attn", "vllm"), shared=shared)
    rl = parse(render(render_recipe(config, plan, lock_sha256=LOCK_SHA))).runtime()
    assert slice_runs(rl) == [
        (f"docker/layers/gpu-rl/{'shared' if layer.index < shared else 'standard'}/{layer.name}.txt",
         layer.slice.image_path) for layer in plan.layers]
    (final,) = sync_runs(rl)
    selection, exclusions = split_sync(final)
    assert exclusions == ["flash-attn", "vllm"]  # the compiled wheels' packages, every time
    expected = [f for f in plan.sync_flags if not f.startswith("--no-install-")]
    assert selection == [*expected, "--inexact"]


# --- the demo goes through the same code ----------------------------------------------------------


def test_demo_renders_through_the_same_recipe(demo_config: Config) -> None:
    plan = make_plan(demo_config, [["pyyaml", "cffi"], ["lxml"], ["pillow"]])
    parsed = parse(render(render_recipe(demo_config, plan, lock_sha256=LOCK_SHA)))
    assert [s.name for s in parsed.stages] == [
        "base", "wheel-builder", "prebuilt-wheelhouse", "wheels", "env-base", "env-chain", "env",
        "compiled-wheels", "env-compiled", "rl"]
    assert parsed.global_args["BASE_IMAGE"] == demo_config.build.base_image
    assert "INSTALL_MEGATRON" not in parsed.global_args
    builder = parsed.stage("wheel-builder")
    assert builder.of("COPY") == ["examples/demo/ext/ /src/examples/demo/ext/"]
    pip_wheel = next(shlex.split(v) for v in builder.of("RUN") if "pip wheel" in v)
    assert pip_wheel[-1] == "/src/examples/demo/ext" and "--no-build-isolation" in pip_wheel
    install = next(shlex.split(v) for v in builder.of("RUN") if v.startswith("uv pip install"))
    assert "setuptools>=77" in install and "unsafe-best-match" in install
    env = " ".join(parsed.stage("base").of("ENV"))
    assert 'UV_PYTHON="3.11"' in env and 'UV_PYTHON_DOWNLOADS="never"' in env
    assert 'PIP_INDEX_URL="${INDEX_URL}"' in env
    rl = parsed.runtime()
    assert [s for s, _ in slice_runs(rl)] == [  # the first of the demo's variants
        f"docker/layers/demo/standard/{n}.txt" for n in ("00-pyyaml", "01-lxml", "02-pillow")]
    assert rl.of("COPY")[-2:] == [f"examples/demo/ {WORKDIR}/",
                                  "docker/gpurl-envcheck.py /etc/gpurl/envcheck.py"]
    assert not any("harbor" in v for v in rl.of("RUN"))


# --- validation -----------------------------------------------------------------------------------


def test_plan_with_clashing_slice_names_is_rejected(gpu_config: Config) -> None:
    plan = make_plan(gpu_config, [["a"], ["b"]])
    bad = dataclasses.replace(plan, layers=tuple(
        dataclasses.replace(layer, slice=Slice(position=0, label="a")) for layer in plan.layers))
    with pytest.raises(DockerfileError, match="unique NN-label"):
        render_recipe(gpu_config, bad, lock_sha256=LOCK_SHA)


def test_bad_lock_hash_is_rejected(gpu_config: Config) -> None:
    with pytest.raises(DockerfileError, match="64 hex"):
        render_recipe(gpu_config, make_plan(gpu_config, [["a"]]), lock_sha256="nope")


def test_workspace_outside_context_is_rejected(gpu_config: Config, tmp_path: Path) -> None:
    config = dataclasses.replace(gpu_config, workspace=tmp_path)
    with pytest.raises(DockerfileError, match="outside the build context"):
        render_recipe(config, make_plan(gpu_config, [["a"]]), lock_sha256=LOCK_SHA)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("base_image", "Nvidia/CUDA:12", "invalid repository name"),
])
def test_bad_build_settings_are_rejected(gpu_config: Config, field: str, value: str,
                                         message: str) -> None:
    build = dataclasses.replace(gpu_config.build, **{field: value})
    with pytest.raises(DockerfileError, match=message):
        render_recipe(gpu_config.with_variant_settings(build=build),
                      make_plan(gpu_config, [["a"]]), lock_sha256=LOCK_SHA)


def test_downloaded_interpreter_gets_its_own_layer(gpu: Parsed, demo_config: Config) -> None:
    base = gpu.stage("base")
    assert 'uv python install "${UV_PYTHON}"' in base.of("RUN")
    assert 'UV_PYTHON_INSTALL_DIR="/opt/uv-python"' in " ".join(base.of("ENV"))
    demo = parse(render(render_recipe(demo_config, make_plan(demo_config, [["a"]]),
                                      lock_sha256=LOCK_SHA)))
    assert "uv python install" not in demo.stage("base").of("RUN")


# --- plans the real planner produces --------------------------------------------------------------


@st.composite
def planner_plans(draw: st.DrawFn, config: Config) -> Plan:
    names = draw(st.lists(_names, min_size=1, max_size=25, unique=True))
    cap = draw(st.integers(min_value=10, max_value=1000))
    sizes = [PackageSize(name=n, version="1.0", compressed_bytes=draw(st.integers(1, cap)),
                         installed_bytes=None, source="lock", artifact=f"{n}-1.0-py3-none-any.whl")
             for n in names]
    real = planned(config)  # the selection and local packages as the planner derives them
    return plan_one(sizes, cap=cap, basis="compressed", sync_flags=real.sync_flags,
                    local=real.local)


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_planner_plans_round_trip(gpu_config: Config, data: st.DataObject) -> None:
    """For plans from the real planner, the parsed slices are exactly the plan's layers."""
    plan = data.draw(planner_plans(gpu_config))
    rl = parse(render(render_recipe(gpu_config, plan, lock_sha256=LOCK_SHA))).runtime()
    assert [s for s, _ in slice_runs(rl)] == [str(layer.slice.path(gpu_config.variant).relative_to(
        REPO_ROOT)) for layer in plan.layers]
    assert len(sync_runs(rl)) == 1


def test_committed_dockerfiles_match_their_plans() -> None:
    """Every committed Dockerfile (each variant's): one slice per planned layer, provenance
    matches."""
    for profile, variant in (("gpu-rl", "standard"), ("gpu-rl", "megatron"), ("demo", None)):
        config = load_config(REPO_ROOT, profile=profile, env={}, variant=variant)
        plan = plan_for_config(config)
        parsed = parse(config.build.dockerfile.read_text())
        rl = parsed.runtime()
        assert [s for s, _ in slice_runs(rl)] == [
            str(layer.slice.path(config.variant).relative_to(REPO_ROOT))
            for layer in plan.layers], profile
        labels = dict(pair.split("=", 1) for pair in shlex.split(rl.of("LABEL")[-1]))
        assert labels[provenance.LABEL_PLAN_FINGERPRINT] == plan.fingerprint
        assert labels[provenance.LABEL_PLAN_STEPS] == str(len(plan.layers))
        assert labels[provenance.LABEL_LOCK_HASH] == hashlib.sha256(
            config.lock.read_bytes()).hexdigest()


@pytest.mark.parametrize("field", ["index_url", "builder_extra_index_url", "vllm_fork_repo",
                                   "post_install"])
def test_credentials_in_urls_are_refused_without_echoing_them(gpu_config: Config,
                                                               field: str) -> None:
    canary = "gpurl-canary-7f3a9c"
    url = f"https://builder:{canary}@example.invalid/simple"
    value: object = ((f"harbor @ git+{url}@{'a' * 40}",) if field == "post_install" else url)
    build = dataclasses.replace(gpu_config.build, **{field: value})
    with pytest.raises(DockerfileError, match="carries credentials") as err:
        render_recipe(gpu_config.with_variant_settings(build=build),
                      make_plan(gpu_config, [["a"]]), lock_sha256=LOCK_SHA)
    assert canary not in str(err.value) and canary not in repr(err.value)
    assert "example.invalid" in str(err.value)


# --- the compiled wheels' ABI key: written by the wheel-builder, compared before install -----


def _abi_check_and_writer(parsed: Parsed) -> tuple[str, str]:
    """(the compiled wheels' ABI check, the wheel-builder's MANIFEST writer), as their shell
    text."""
    check = next(v for v in parsed.stage("compiled-wheels").of("RUN") if "ABI key" in v)
    writer = next(v for v in parsed.stage("wheel-builder").of("RUN") if "> MANIFEST" in v)
    return check.split(" && uv pip install")[0], writer


@pytest.mark.parametrize("arch", ["8.0;9.0", "8.0;9.0;10.0+PTX"])
def test_the_manifest_the_builder_writes_passes_the_image_check_and_another_fails(
        tmp_path: Path, arch: str) -> None:
    """Run for real under bash: the wheel-builder's MANIFEST line (its ARGs as the build gives
    them) passes the rl stage's check; wheels compiled with another arch list stop the build
    before any install, the message showing both keys."""

    config = load_config(REPO_ROOT, profile="gpu-rl", env={},
                         overrides={"build.cuda-arch-list": arch})
    parsed = parse(render(render_recipe(config, planned(config), lock_sha256=LOCK_SHA)))
    assert parsed.global_args["TORCH_CUDA_ARCH_LIST"] == arch
    builder = parsed.stage("wheel-builder").instructions
    arg_at = next(k for k, i in enumerate(builder) if i["value"] == "TORCH_CUDA_ARCH_LIST")
    wheel_at = next(k for k, i in enumerate(builder) if "pip wheel" in i["value"])
    assert arg_at < wheel_at  # the compile's environment has it
    check, writer = _abi_check_and_writer(parsed)
    (tmp_path / "x.whl").write_bytes(b"wheel")
    env = {"PATH": "/usr/bin:/bin", **{k: parsed.global_args[k] for k in (
        "TORCH_CUDA_ARCH_LIST", "VLLM_FORK_COMMIT", "FLASH_ATTN_VERSION", "TORCH_VERSION")}}

    def run(script: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-c", script.replace("/tmp/wheels/", f"{tmp_path}/")],
                              cwd=tmp_path, env={**env, **extra}, capture_output=True,
                              text=True, check=False)

    assert run(writer).returncode == 0
    manifest = (tmp_path / "MANIFEST").read_text().splitlines()
    assert manifest[0] == ("# gpurl-abi fork=76259c63a flash-attn=2.8.3 torch=2.11.0 cuda=cu128 "
                           f"py=cp312 platform=linux_x86_64 arch-list={arch}")
    assert manifest[1].endswith("  x.whl")
    assert run(check).returncode == 0
    assert run(writer, TORCH_CUDA_ARCH_LIST="8.0").returncode == 0  # a compile given another
    failed = run(check)
    assert failed.returncode == 1
    assert f"expected 'fork=76259c63a flash-attn=2.8.3 torch=2.11.0 cuda=cu128 py=cp312 " \
           f"platform=linux_x86_64 arch-list={arch}'" in failed.stderr
    assert "found 'fork=76259c63a flash-attn=2.8.3 torch=2.11.0 cuda=cu128 py=cp312 " \
           "platform=linux_x86_64 arch-list=8.0'" in failed.stderr


def test_no_arch_list_declares_no_arch_arg(gpu_config: Config) -> None:
    config = load_config(REPO_ROOT, profile="gpu-rl", env={},
                         overrides={"build.cuda-arch-list": ""})
    text = render(render_recipe(config, planned(config), lock_sha256=LOCK_SHA))
    assert "TORCH_CUDA_ARCH_LIST" not in text and "arch-list=-" in text


@pytest.mark.parametrize("bad", ["8.0 9.0", "sm_80", "8.0;;9.0", "8;9"])
def test_a_malformed_arch_list_is_refused(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"build\.cuda-arch-list"):
        load_config(REPO_ROOT, profile="gpu-rl", env={}, overrides={"build.cuda-arch-list": bad})


# --- bounded network waits ---------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["gpu-rl", "demo", "heavy", "skyrl"])
def test_every_apt_get_and_every_stage_waits_a_bounded_time(profile: str) -> None:
    """Each apt-get (update and install, in every stage) carries the configured retries and
    timeouts; the uv/pip timeouts are in base's ENV, which every stage but the scratch
    wheelhouse inherits. The values follow the config."""
    for retries, timeout, http in ((None, None, None), (7, 11, 13)):
        overrides = ({} if retries is None else
                     {"build.apt-retries": retries, "build.apt-timeout": timeout,
                      "build.http-timeout": http, "build.http-retries": retries})
        config = load_config(REPO_ROOT, profile=profile, env={}, overrides=overrides)
        b = config.build
        parsed = parse(render(render_recipe(config, planned(config), lock_sha256=LOCK_SHA)))
        apt_calls = [shlex.split(c) for s in parsed.stages for v in s.of("RUN")
                     for c in v.split(" && ") if "apt-get" in c]
        assert len(apt_calls) >= 4  # base and env-base, update and install each
        for argv in apt_calls:
            pairs = {argv[k + 1] for k, w in enumerate(argv) if w == "-o"}
            assert pairs == {f"Acquire::Retries={b.apt_retries}",
                             f"Acquire::http::Timeout={b.apt_timeout}",
                             f"Acquire::https::Timeout={b.apt_timeout}"}, argv
        env = " ".join(parsed.stage("base").of("ENV"))
        for name, value in (("UV_HTTP_TIMEOUT", b.http_timeout), ("UV_HTTP_RETRIES", b.http_retries),
                            ("PIP_DEFAULT_TIMEOUT", b.http_timeout), ("PIP_RETRIES", b.http_retries)):
            assert f'{name}="{value}"' in env
        assert (b.apt_retries, b.http_timeout) == ((3, 600) if retries is None else (7, 13))
        # every stage is FROM base or a stage of this file, but the scratch wheelhouse (no
        # network) and the ARG-chosen ones (a stage of this file, or the composed environment)
        outside = {st.base for st in parsed.stages} - {st.name for st in parsed.stages}
        wheel_sources = {"scratch", "${WHEEL_SOURCE}", "${COMPILED_SOURCE}"} \
            if b.compiled_wheels else set()
        assert outside == {"${BASE_IMAGE}", "${ENV_SOURCE}", *wheel_sources}
        assert parsed.stages[0].name == "base"
