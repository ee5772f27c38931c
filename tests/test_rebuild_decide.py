"""The rebuild decision from fingerprints: one example per rule, and hypothesis invariants.

The closure part is fed as plain (name, version, artifact) tuples here; test_rebuild_git.py
derives it from real uv.lock files in real git repositories.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.config import BuildSettings, TargetSpec, load_config
from gpurl_tasks.dockerfile.inputs import parse_dockerfile_inputs
from gpurl_tasks.dockerfile.wheels import expected_filenames, pins_from_args
from gpurl_tasks.rebuild.fingerprint import ClosureEntry, Decision, Fingerprint, decide, fingerprint
from tests.conftest import REPO_ROOT
from tests.support.rebuild_fixtures import APT, ARGS, SYNC_EXCLUSIONS, dockerfile

CLOSURE: tuple[ClosureEntry, ...] = (
    ("numpy", "2.2.0", "sha256:aa"),
    ("torch", "2.11.0+cu128", "sha256:bb"),
    ("transformers", "4.57.0", "sha256:cc"),
    ("torchtitan", "0.2.0", "sha256:dd"),
    ("tyro", "0.9.1", "sha256:ee"),
)


def fp(text: str | None = None, closure: tuple[ClosureEntry, ...] = CLOSURE,
       extras: tuple[str, ...] = ("ep",)) -> Fingerprint:
    inputs = parse_dockerfile_inputs(dockerfile() if text is None else text)
    pins = pins_from_args(inputs.effective_args, BuildSettings(), TargetSpec())
    return fingerprint(inputs, closure, extras, pins)


def kinds(decision: Decision) -> set[str]:
    return {r.kind for r in decision.reasons}


def test_identical_inputs_need_nothing() -> None:
    result = decide(fp(), fp())
    assert result.decision == "none" and result.reasons == () and result.exit_code == 0


def test_closure_version_bump_needs_image() -> None:
    bumped = tuple(("transformers", "4.57.1", "sha256:c2") if e[0] == "transformers" else e
                   for e in CLOSURE)
    result = decide(fp(), fp(closure=bumped))
    assert result.decision == "image" and result.exit_code == 10
    assert [r.to_json() for r in result.reasons] == [
        {"kind": "package", "detail": "transformers: 4.57.0 -> 4.57.1"}]


def test_same_version_new_artifact_needs_image() -> None:
    rehashed = tuple(("numpy", "2.2.0", "sha256:a2") if e[0] == "numpy" else e for e in CLOSURE)
    result = decide(fp(), fp(closure=rehashed))
    assert result.decision == "image"
    assert result.reasons[0].detail == "numpy 2.2.0: artifact sha256:aa -> sha256:a2"


def test_package_added_and_removed() -> None:
    result = decide(fp(closure=CLOSURE[:3]), fp(closure=(*CLOSURE[:2], *CLOSURE[3:])))
    assert result.decision == "image"
    assert {r.detail for r in result.reasons} == {
        "transformers: removed (was 4.57.0)", "torchtitan: added (0.2.0)", "tyro: added (0.9.1)"}


def test_lock_torch_bump_invalidates_the_wheels() -> None:
    bumped = tuple(("torch", "2.12.0+cu128", "sha256:b2") if e[0] == "torch" else e
                   for e in CLOSURE)
    result = decide(fp(), fp(closure=bumped))
    assert result.decision == "wheels+image" and result.exit_code == 11
    assert result.reasons[0].to_json() == {"kind": "torch",
                                           "detail": "torch: 2.11.0+cu128 -> 2.12.0+cu128"}


def test_extras_selection_change_needs_image() -> None:
    result = decide(fp(), fp(extras=("ep", "megatron")))
    assert result.decision == "image"
    assert result.reasons[0].to_json() == {"kind": "extras",
                                           "detail": "['ep'] -> ['ep', 'megatron']"}


def test_harbor_bump_needs_image_only() -> None:
    result = decide(fp(), fp(dockerfile({"HARBOR_COMMIT": "0123abcd"})))
    assert result.decision == "image"
    assert [r.to_json() for r in result.reasons] == [
        {"kind": "harbor", "detail": "HARBOR_COMMIT: f4a6b1a0 -> 0123abcd"}]


def test_apt_package_added_needs_image() -> None:
    result = decide(fp(), fp(dockerfile(apt=(*APT, "numactl"))))
    assert result.decision == "image"
    assert [r.to_json() for r in result.reasons] == [
        {"kind": "apt", "detail": "stage rl: added numactl"}]


def test_layer_plan_change_needs_image() -> None:
    plan = (SYNC_EXCLUSIONS[0], ("torch", "nvidia-nccl-cu12"), ())
    result = decide(fp(), fp(dockerfile(exclusions=plan)))
    assert result.decision == "image"
    assert [r.to_json() for r in result.reasons] == [
        {"kind": "layer-plan", "detail": "stage rl: step 2 exclusions added nvidia-nccl-cu12"}]


def test_the_builders_base_image_is_a_wheel_input_even_with_the_same_cuda() -> None:
    """The wheel-builder is FROM ${BASE_IMAGE}: a new base (another Ubuntu, the same CUDA)
    compiles different wheels, so the published ones no longer describe the recipe."""
    new = "nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04"
    result = decide(fp(), fp(dockerfile({"BASE_IMAGE": new})))
    assert result.decision == "wheels+image"
    assert kinds(result) == {"base-image"}


def test_base_image_with_new_cuda_invalidates_the_wheels() -> None:
    new = "nvidia/cuda:12.9.1-cudnn-devel-ubuntu22.04"
    result = decide(fp(), fp(dockerfile({"BASE_IMAGE": new})))
    assert result.decision == "wheels+image"
    assert kinds(result) == {"base-image", "prebuilt-wheels"}
    wheel_details = [r.detail for r in result.reasons if r.kind == "prebuilt-wheels"]
    assert len(wheel_details) == 1  # the vLLM wheel carries the CUDA label
    assert ".cu128-" in wheel_details[0] and ".cu129-" in wheel_details[0]


def test_vllm_fork_commit_bump_needs_wheels() -> None:
    result = decide(fp(), fp(dockerfile({"VLLM_FORK_COMMIT": "9abcdef01"})))
    assert result.decision == "wheels+image"
    assert result.reasons[0].to_json() == {
        "kind": "vllm-fork-commit", "detail": "VLLM_FORK_COMMIT: 76259c63a -> 9abcdef01"}
    assert any("+g9abcdef01." in r.detail for r in result.reasons
               if r.kind == "prebuilt-wheels")


def test_flash_attn_and_torch_arg_bumps_need_wheels() -> None:
    fa = decide(fp(), fp(dockerfile({"FLASH_ATTN_VERSION": "2.8.4"})))
    torch = decide(fp(), fp(dockerfile({"TORCH_VERSION": "2.12.0"})))
    assert fa.decision == torch.decision == "wheels+image"
    assert "flash-attn" in kinds(fa) and "torch" in kinds(torch)


def test_wheel_builder_recipe_change_needs_wheels() -> None:
    result = decide(fp(), fp(dockerfile(builder_flags="--no-build-isolation -v")))
    assert result.decision == "wheels+image"
    assert kinds(result) == {"wheel-recipe-instructions"}


def test_inert_args_are_ignored() -> None:
    assert decide(fp(), fp(dockerfile({"MAX_JOBS": "32"}))).decision == "none"


def test_json_shape() -> None:
    payload = decide(fp(), fp(dockerfile({"HARBOR_COMMIT": "x"}))).to_json()
    assert set(payload) == {"decision", "reasons"}
    assert all(set(r) == {"kind", "detail"} for r in payload["reasons"])


# --- invariants ------------------------------------------------------------------------

_seps = st.sampled_from([" \\\n    ", " \\\n\t", "  \\\n  ", " ", "   ", " \\\n    \\\n  "])


@st.composite
def formatting(draw: st.DrawFn) -> str:
    """The same baked inputs, written with other spacing, continuations, quotes and order."""
    args = dict(draw(st.permutations(list(ARGS.items()))))
    apt = tuple(draw(st.permutations(APT)))
    plan = tuple(tuple(draw(st.permutations(step))) for step in SYNC_EXCLUSIONS)
    return dockerfile(args=args, apt=apt, exclusions=plan, sep=draw(_seps),
                      quote=draw(st.sampled_from(["", '"'])),
                      lock_sha=draw(st.text("0123456789abcdef", min_size=64, max_size=64)))


@given(formatting(), st.permutations(CLOSURE), st.permutations(("ep",)))
def test_fingerprint_ignores_formatting_and_order(text: str, closure: list[ClosureEntry],
                                                  extras: list[str]) -> None:
    other = fp(text, tuple(closure), tuple(extras))
    assert other.digest == fp().digest
    assert decide(fp(), other).decision == "none"


_changes = st.one_of(
    st.builds(lambda k, v: ("arg", k, v),
              st.sampled_from(sorted(set(ARGS) - {"MAX_JOBS"})),
              st.from_regex(r"[a-z0-9.]{1,10}", fullmatch=True)),
    st.builds(lambda p: ("apt", p, ""), st.from_regex(r"[a-z][a-z0-9-]{1,10}", fullmatch=True)),
    st.builds(lambda p: ("exclude", p, ""), st.from_regex(r"[a-z][a-z0-9-]{1,10}",
                                                          fullmatch=True)),
    st.builds(lambda n, v: ("closure", n, v), st.sampled_from([e[0] for e in CLOSURE]),
              st.from_regex(r"[0-9]\.[0-9]{1,2}\.[0-9]", fullmatch=True)),
    st.builds(lambda n, v: ("add", n, v), st.from_regex(r"[a-z]{2,10}", fullmatch=True),
              st.just("1.0")),
    st.builds(lambda e: ("extra", e, ""), st.from_regex(r"[a-z]{2,8}", fullmatch=True)),
)


@given(_changes)
def test_any_baked_change_changes_the_fingerprint(change: tuple[str, str, str]) -> None:
    what, key, value = change
    base = fp()
    text, closure = dockerfile(), CLOSURE
    extras: tuple[str, ...] = ("ep",)
    if what == "arg":
        if ARGS[key] == value:
            return
        text = dockerfile({key: value})
    elif what == "apt":
        if key in APT:
            return
        text = dockerfile(apt=(*APT, key))
    elif what == "exclude":
        if key in SYNC_EXCLUSIONS[1]:
            return
        text = dockerfile(exclusions=(SYNC_EXCLUSIONS[0], (*SYNC_EXCLUSIONS[1], key), ()))
    elif what == "closure":
        closure = tuple((n, value if n == key else v, h) for n, v, h in CLOSURE)
        if closure == CLOSURE:
            return
    elif what == "add":
        if key in {e[0] for e in CLOSURE}:
            return
        closure = (*CLOSURE, (key, value, "sha256:ff"))
    elif key != "ep":
        extras = ("ep", key)
    else:
        return
    changed = fp(text, closure, extras)
    assert changed.digest != base.digest
    result = decide(base, changed)
    assert result.decision in ("image", "wheels+image")
    assert result.reasons


def test_stage_level_arg_defaults_feed_the_pins() -> None:
    text = dockerfile().replace("ARG VLLM_FORK_COMMIT=76259c63a\n", "").replace(
        "ARG VLLM_FORK_COMMIT\n", "ARG VLLM_FORK_COMMIT=0fedcba98\n")
    inputs = parse_dockerfile_inputs(text)
    assert inputs.effective_args["VLLM_FORK_COMMIT"] == "0fedcba98"
    assert ("wheel-builder/VLLM_FORK_COMMIT", "0fedcba98") in inputs.args
    result = decide(fp(), fp(text))
    assert result.decision == "wheels+image"
    assert {"kind": "vllm-fork-commit",
            "detail": "wheel-builder/VLLM_FORK_COMMIT: (unset) -> 0fedcba98"} in [
        r.to_json() for r in result.reasons]


def test_generated_dockerfile_in_the_repository_parses(repo_root: Path) -> None:
    """The Dockerfile `invoke generate` committed: the inputs rebuild-needed relies on."""
    path = repo_root / "docker" / "Dockerfile.gpu-rl"
    if not path.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{path} is missing: run invoke generate")
        pytest.skip(f"{path} not generated in this checkout")
    inputs = parse_dockerfile_inputs(path.read_text())
    args = inputs.effective_args
    for name in ("BASE_IMAGE", "TORCH_VERSION", "FLASH_ATTN_VERSION", "VLLM_FORK_COMMIT",
                 "TORCH_CUDA_ARCH_LIST"):
        assert args.get(name), name
    assert inputs.target == "rl" and "wheel-builder" not in inputs.image_stages()
    rl = next(s for s in inputs.stages if s.name == "rl")
    env_base = next(s for s in inputs.stages if s.name == "env-base")
    assert {"env-base", "env-chain", "env"} <= inputs.image_stages()
    assert {"rdma-core", "libibverbs1"} <= set(env_base.apt)
    assert rl.syncs and rl.syncs[-1][1] == ()  # the last sync excludes nothing
    pins = pins_from_args(args, BuildSettings(), TargetSpec())
    names = expected_filenames(pins)
    assert len(inputs.wheel_globs) == 2
    assert all(any(fnmatch.fnmatchcase(n, g) for n in names.values())
               for g in inputs.wheel_globs)


# --- the generated demo Dockerfiles: slice steps are image inputs, the recipe is not -------

DEMO = (REPO_ROOT / "docker" / "Dockerfile.demo").read_text()
DEMO_EXTRA = (REPO_ROOT / "docker" / "Dockerfile.demo-extra").read_text()
SLICE_STEP = ("COPY docker/layers/demo/shared/00-group-04.txt /tmp/gpurl-layers/group-04.txt\n"
              "RUN uv pip install --no-deps --require-hashes -r /tmp/gpurl-layers/group-04.txt\n")
OWN_STEP = ("COPY docker/layers/demo/extra/10-own-06.txt /tmp/gpurl-layers/own-06.txt\n"
            "RUN uv pip install --no-deps --require-hashes -r /tmp/gpurl-layers/own-06.txt\n")


def demo_fp(text: str, closure: tuple[ClosureEntry, ...] = CLOSURE) -> Fingerprint:
    inputs = parse_dockerfile_inputs(text)
    config = load_config(REPO_ROOT, profile="demo", env={})
    return fingerprint(inputs, closure, (), pins_from_args(inputs.effective_args, config.build,
                                                           config.target))


def _replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, f"{old!r} is not in the generated file any more"
    return text.replace(old, new)


@pytest.mark.parametrize("edit", [
    pytest.param(lambda t: _replace_once(t, SLICE_STEP, ""), id="slice-removed"),
    pytest.param(lambda t: _replace_once(t, SLICE_STEP, SLICE_STEP + SLICE_STEP.replace(
        "00-group-04", "10-polars").replace("group-04", "polars")), id="slice-added"),
    pytest.param(lambda t: t.replace("shared/00-group-04.txt", "shared/00-group-07.txt"),
                 id="slice-moved-to-another-group"),
    pytest.param(lambda t: t.replace("docker/layers/demo/shared/", "docker/layers/demo/common/"),
                 id="shared-slices-directory-moved"),
])
def test_a_slice_change_needs_the_image_only(edit: Callable[[str], str]) -> None:
    """Slices are the environment's (env-chain's steps, and the composed image's layers),
    outside the wheel recipe: adding, dropping or moving one never sends a user to compile
    wheels."""
    changed = edit(DEMO)
    assert changed != DEMO
    result = decide(demo_fp(DEMO), demo_fp(changed))
    assert result.decision == "image", result.reasons
    assert not any(r.kind.startswith("wheel-recipe") for r in result.reasons)


def test_a_variants_own_slice_is_an_image_input() -> None:
    """The extra variant's own slice (docker/layers/demo/extra/) dropped: image only."""
    result = decide(demo_fp(DEMO_EXTRA), demo_fp(_replace_once(DEMO_EXTRA, OWN_STEP, "")))
    assert result.decision == "image"
    assert {r.detail.split(":")[0] for r in result.reasons} == {"stage env-chain"}, result.reasons


@pytest.mark.parametrize(("old", "new", "kind"), [
    pytest.param('ARG BASE_IMAGE="gpurl/bookworm-python:3.11"',
                 'ARG BASE_IMAGE="gpurl/trixie-python:3.13"', "base-image", id="builder-base"),
    pytest.param("      gcc \\\n", "      gcc \\\n      g++ \\\n", "wheel-recipe-apt",
                 id="builder-apt-set"),
    pytest.param('"setuptools>=77"', '"setuptools>=80"', "wheel-recipe-instructions",
                 id="builder-requirements"),
])
def test_a_change_the_compiled_wheels_depend_on_needs_wheels(old: str, new: str,
                                                             kind: str) -> None:
    """The other direction: the wheel-builder's base image, its apt set and what it installs
    to compile against are the wheel recipe."""
    result = decide(demo_fp(DEMO), demo_fp(_replace_once(DEMO, old, new)))
    assert result.decision == "wheels+image"
    assert kind in kinds(result)


def test_the_torch_the_wheels_compile_against_needs_wheels() -> None:
    """The lock's torch (what the builder installs as TORCH_VERSION) moved."""
    bumped = tuple(("torch", "2.12.0+cu128", "sha256:b2") if e[0] == "torch" else e
                   for e in CLOSURE)
    assert decide(demo_fp(DEMO), demo_fp(DEMO, bumped)).decision == "wheels+image"
