"""The `skyrl` profile: a checkout laid out like SkyRL's real repository (examples/skyrl/).

skyrl-train carries SkyRL's real pyproject and uv.lock (commit 0b8acf049; the older 021b9d65b
comes from tests/data/skyrl/), a minimal skyrl_train package, and the sibling project
skyrl-gym reached through the symlink skyrl-train/skyrl-gym -> ../skyrl-gym. Two variants of
conflicting extras with their own compiled-wheel pins: standard (vllm) and megatron (mcore).
Every test here failed on the code before the fixture existed: the final sync could not find
skyrl-gym, asserts and torch were never compared with the lock, a variant could not pin its
own flash-attn, generate wrote files before failing, and harbor was installed twice.

Real parts: uv (the final sync's dry run over the image's layout, laid out from the generated
Dockerfile's own COPY instructions), git (rebuild-needed between two real lock versions), the
task CLI. The cluster is not touched: `build --dry-run` composes the job and runs nothing.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser  # type: ignore[import-untyped]

from gpurl_tasks.cluster.kaniko import render_script
from gpurl_tasks.config import BuildSettings, load_config
from gpurl_tasks.dockerfile.context import ignored_paths
from gpurl_tasks.dockerfile.generate import StaleFileError, generate_profiles, render_variant
from gpurl_tasks.dockerfile.model import DockerfileError
from gpurl_tasks.dockerfile.recipe import WORKDIR
from gpurl_tasks.plan.profile import plan_for_config
from tests.conftest import REPO_ROOT, SKYRL_COMMITS
from tests.support.checkout import SKYRL_PROFILE_HEADER, repo_copy, skyrl_at
from tests.support.git import git
from tests.support.local_parts import python312

VARIANTS = ("standard", "megatron")



@pytest.fixture(scope="module")
def old_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of this checkout with the fixture on SkyRL's older lock, generated."""
    root = repo_copy(tmp_path_factory.mktemp("skyrl-old"), untracked=True)
    skyrl_at(root, SKYRL_COMMITS[0])
    generate_profiles(root, "skyrl", check=False)
    return root


def _root(commit: str, old_checkout: Path) -> Path:
    return REPO_ROOT if commit == SKYRL_COMMITS[-1] else old_checkout


def _image_layout(root: Path, dockerfile: Path, dest: Path) -> Path:
    """The rl stage's context COPYs applied to `dest` as the image's filesystem root, the way
    Docker and kaniko copy: .dockerignore honoured, a symlink copied as a symlink. Returns the
    workdir (recipe.WORKDIR)."""
    parser = DockerfileParser(fileobj=io.BytesIO(dockerfile.read_bytes()))
    ignored = set(ignored_paths(load_config(root, profile="skyrl", env={})))
    in_rl = False
    for item in parser.structure:
        if item["instruction"] == "FROM":
            in_rl = item["value"].endswith(" AS rl")
        if not in_rl or item["instruction"] != "COPY" or "--from" in item["value"]:
            continue
        source, target = item["value"].split()
        if target.startswith("/tmp/"):
            continue  # the slice files: what they install is stood in by the dry run
        src = root / source.rstrip("/")
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(root).as_posix()
            if any(rel == rule or rel.startswith(rule + "/") for rule in ignored):
                continue
            out = dest / target.lstrip("/") / path.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            if path.is_symlink():
                out.symlink_to(os.readlink(path))
            elif path.is_file():
                shutil.copy2(path, out)
    return dest / WORKDIR.lstrip("/")


def _final_sync(config_root: Path, variant: str) -> list[str]:
    config = load_config(config_root, profile="skyrl", variant=variant, env={})
    return list(plan_for_config(config).final_sync_flags)


def _dry_run(app: Path, flags: list[str], venv: Path) -> subprocess.CompletedProcess[str]:
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH"
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(venv)}
    return subprocess.run([uv, "sync", *flags, "--dry-run", "--python", python312()], cwd=app,
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.integration
@pytest.mark.parametrize("commit", SKYRL_COMMITS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_final_sync_finds_every_local_package_in_the_image_layout(
        commit: str, variant: str, old_checkout: Path, tmp_path: Path) -> None:
    """Real uv, the generated Dockerfile's own COPYs: the final sync finds skyrl-gym where the
    lock expects it (<workdir>/skyrl-gym). The workspace copied alone, as before, leaves the link
    dangling and the same dry run fails with uv's `Distribution not found`."""
    root = _root(commit, old_checkout)
    suffix = "" if variant == "standard" else f"-{variant}"
    dockerfile = root / "docker" / f"Dockerfile.skyrl{suffix}"
    app = _image_layout(root, dockerfile, tmp_path / "image")
    assert (app / "skyrl-gym").is_dir() and not (app / "skyrl-gym").is_symlink()
    flags = _final_sync(root, variant)
    done = _dry_run(app, flags, tmp_path / "venv")
    assert done.returncode == 0, done.stderr
    found = done.stdout + done.stderr
    assert f"+ skyrl-gym @ file://{app}/skyrl-gym" in found
    assert f"+ skyrl-train @ file://{app}" in found
    print(f"{commit} {variant}: uv sync {' '.join(flags)} --dry-run\n"
          + "\n".join(line for line in found.splitlines() if not line.startswith(" + ")
                      or "skyrl" in line or "harbor" in line))

    # control: only the workspace, copied as the old recipe did (the link copied as a link)
    bare = tmp_path / "bare" / "app"
    shutil.copytree(root / "examples" / "skyrl" / "skyrl-train", bare, symlinks=True)
    failed = _dry_run(bare, flags, tmp_path / "venv2")
    assert failed.returncode != 0 and "Distribution not found at: file://" in failed.stderr


def test_the_path_source_is_copied_from_its_real_place_and_its_link_kept_out() -> None:
    text = (REPO_ROOT / "docker" / "Dockerfile.skyrl").read_text()
    gym = text.index(f"COPY examples/skyrl/skyrl-gym/ {WORKDIR}/skyrl-gym/")
    assert gym < text.index(f"COPY examples/skyrl/skyrl-train/ {WORKDIR}/") < text.index("RUN uv sync")
    assert "examples/skyrl/skyrl-train/skyrl-gym" in \
        (REPO_ROOT / ".dockerignore").read_text().splitlines()


def test_a_path_source_outside_the_build_context_is_an_error(tmp_path: Path) -> None:
    root = repo_copy(tmp_path / "repo", untracked=True)
    outside = tmp_path / "elsewhere" / "skyrl-gym"
    shutil.copytree(REPO_ROOT / "examples" / "skyrl" / "skyrl-gym", outside)
    link = root / "examples" / "skyrl" / "skyrl-train" / "skyrl-gym"
    link.unlink()
    link.symlink_to(outside)
    before = _snapshot(root)
    with pytest.raises(DockerfileError) as err:
        generate_profiles(root, "skyrl", check=False)
    assert f"skyrl-gym's source 'skyrl-gym' (resolved to {outside})" in err.value.message
    assert "outside the build context" in err.value.message
    assert _snapshot(root) == before


# --- asserts and torch, checked against the lock -----------------------------------------

def _render(variant: str, **overrides: object) -> None:
    config = load_config(REPO_ROOT, profile="skyrl", variant=variant, env={}, overrides=overrides)
    render_variant(config, plan_for_config(config))


def test_an_assert_importing_what_the_variant_does_not_install_is_an_error() -> None:
    """gpu-rl's ep asserts (boto3, torchtitan) on a lock without the ep extra: refused at
    generate, naming the assert, the module and the variant, not at the build's last RUNs."""
    statement = "import boto3, smart_open, s3fs; boto3.client('s3', region_name='us-east-1')"
    with pytest.raises(DockerfileError) as err:
        _render("standard", **{"build.import-asserts": ["import torch", statement]})
    assert f"import assert {statement!r} imports 'boto3'" in err.value.message
    assert "(variant 'standard')" in err.value.message
    _render("standard", **{"build.import-asserts": ["import torch, yaml, PIL, skyrl_gym"]})


def test_the_megatron_asserts_hold_only_for_its_variant() -> None:
    megatron = "import megatron.core, megatron.bridge, transformer_engine"
    _render("megatron")  # its own closure has them
    with pytest.raises(DockerfileError, match=r"imports 'megatron'.*variant 'standard'"):
        _render("standard", **{"build.import-asserts": [megatron]})


MEGATRON_BUILD = "[tool.gpurl.profiles.skyrl.variants.megatron.build]"


@pytest.mark.parametrize(("key", "value", "needle"), [
    ("build.torch-version", "2.11.0", f'{MEGATRON_BUILD} torch-version = "2.9.1" (now "2.11.0": '
                                      "the lock's torch is 2.9.1+cu128"),
    ("build.cuda-tag", "cu130", f'{MEGATRON_BUILD} cuda-tag = "cu128" (now "cu130": the CUDA '
                                "label of the lock's torch 2.9.1+cu128"),
])
def test_the_wheel_builders_torch_must_be_the_locks(key: str, value: str, needle: str) -> None:
    with pytest.raises(DockerfileError) as err:
        _render("megatron", **{key: value})
    assert needle in err.value.message


# --- per-variant build pins ----------------------------------------------------------------

def test_each_variant_carries_its_own_compiled_wheel_pins() -> None:
    """The pins as pyproject.toml sets them (the profile's, and the megatron variant's own
    build table), read from the file: they differ, and each reaches its variant's files."""
    table = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["gpurl"][
        "profiles"]["skyrl"]
    pins = {"standard": table["build"]["flash-attn-version"],
            "megatron": table["variants"]["megatron"]["build"]["flash-attn-version"]}
    assert pins["standard"] != pins["megatron"]
    standard = load_config(REPO_ROOT, profile="skyrl", variant="standard", env={})
    megatron = load_config(REPO_ROOT, profile="skyrl", variant="megatron", env={})
    assert {"standard": standard.build.flash_attn_version,
            "megatron": megatron.build.flash_attn_version} == pins
    assert f'ARG FLASH_ATTN_VERSION="{pins["megatron"]}"' in (
        REPO_ROOT / "docker/Dockerfile.skyrl-megatron").read_text()
    assert f'ARG FLASH_ATTN_VERSION="{pins["standard"]}"' in (
        REPO_ROOT / "docker/Dockerfile.skyrl").read_text()
    scripts = {"standard": render_script(standard), "megatron": render_script(megatron)}
    for variant, pin in pins.items():
        assert f"flash_attn-{pin}-cp312-cp312-linux_x86_64.whl" in scripts[variant]
    assert "  --dockerfile docker/Dockerfile.skyrl-megatron\n" in scripts["megatron"]


def test_a_variants_wrong_pin_names_the_variant_and_writes_nothing(tmp_path: Path) -> None:
    """The megatron variant given the vllm extra's flash-attn: one error naming the variant;
    the standard variant's files (rendered first) are not written either."""
    root = repo_copy(tmp_path / "repo", untracked=True)
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace('flash-attn-version = "2.8.1"', 'flash-attn-version = "2.8.3"'))
    (root / "docker" / "Dockerfile.skyrl").unlink()  # standard's: generate would write it first
    before = _snapshot(root)
    with pytest.raises(DockerfileError) as err:
        generate_profiles(root, "skyrl", check=False)
    assert f'{MEGATRON_BUILD} flash-attn-version = "2.8.1" (now "2.8.3": flash-attn 2.8.3 ' \
           "(compiled) does not satisfy skyrl-train's requirement flash-attn==2.8.1" \
           in err.value.message
    assert _snapshot(root) == before


def test_an_unknown_key_in_a_variants_build_table_names_the_table(tmp_path: Path) -> None:
    from gpurl_tasks.errors import ConfigError

    root = repo_copy(tmp_path / "repo")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(
        'flash-attn-version = "2.8.1"', 'flash-atn-version = "2.8.1"'))
    with pytest.raises(ConfigError) as err:
        load_config(root, profile="skyrl", variant="megatron", env={})
    assert "unknown config key 'build.flash-atn-version' in " \
           "[tool.gpurl.profiles.skyrl.variants.megatron.build]" in err.value.message
    assert "build.flash-attn-version" in (err.value.hint or "")


def test_a_removed_variant_leaves_no_generated_file(tmp_path: Path) -> None:
    root = repo_copy(tmp_path / "repo", untracked=True)
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    start = text.index("[tool.gpurl.profiles.skyrl.variants.megatron]")
    end = text.index("[tool.gpurl.profiles.skyrl.python]")
    pyproject.write_text(text[:start] + text[end:])
    gone = [root / "docker" / "Dockerfile.skyrl-megatron",
            *(root / "docker" / "layers" / "skyrl" / "megatron").glob("*.txt")]
    assert all(p.exists() for p in gone) and len(gone) > 2
    with pytest.raises(StaleFileError, match=r"docker/Dockerfile\.skyrl-megatron, .* left over "
                                              r"\(no current variant or plan calls for it\)"):
        generate_profiles(root, "skyrl", check=True)
    generate_profiles(root, "skyrl", check=False)
    assert not any(p.exists() for p in gone)
    assert not (root / "docker" / "layers" / "skyrl" / "megatron").exists()
    generate_profiles(root, "skyrl", check=True)


# --- harbor: from the lock when the lock has it ---------------------------------------------

def test_harbor_comes_from_the_lock_when_the_closure_has_it(old_checkout: Path) -> None:
    new = (REPO_ROOT / "docker" / "Dockerfile.skyrl").read_text()
    assert "harbor @ git+${HARBOR_REPO}" not in new and "HARBOR_COMMIT" not in new
    slices = (REPO_ROOT / "docker" / "layers" / "skyrl").rglob("*.txt")  # in the slices
    assert any("harbor @ git+https://github.com/laude-institute/harbor@8c040e1b" in p.read_text()
               for p in slices)
    old = (old_checkout / "docker" / "Dockerfile.skyrl").read_text()  # no harbor extra there
    assert '"harbor @ git+https://github.com/laude-institute/harbor.git@f4a6b1a0"' in old
    shown = _invoke(old_checkout, "plan", "--profile", "skyrl", "--variant", "standard")
    assert shown.returncode == 0, shown.stderr
    assert ("outside the lock (its dependencies resolved at build time; `invoke "
            "lock-post-install` pins them): harbor @ git+"
            "https://github.com/laude-institute/harbor.git@f4a6b1a0") in shown.stdout


# --- pins live in config, not code ------------------------------------------------------------

def test_the_code_keeps_generic_defaults_and_gpu_rl_pins_live_in_pyproject() -> None:
    generic = BuildSettings()
    assert (generic.vllm_fork_commit, generic.vllm_version, generic.torch_version,
            generic.post_install, generic.wheel_globs, generic.import_asserts) == \
        ("", "", "", (), (), ())
    gpu_rl = load_config(REPO_ROOT, profile="gpu-rl", env={}).build
    pinned = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["gpurl"][
        "profiles"]["gpu-rl"]["build"]
    assert (gpu_rl.vllm_fork_commit, gpu_rl.torch_version, gpu_rl.post_install) == (
        pinned["vllm-fork-commit"], pinned["torch-version"], tuple(pinned["post-install"]))
    assert all((gpu_rl.vllm_fork_commit, gpu_rl.torch_version, gpu_rl.post_install))


def test_a_pin_the_recipe_uses_but_nobody_set_is_an_error() -> None:
    """The demo sets no fork commit; a glob that needs one is refused, naming the key."""
    config = load_config(REPO_ROOT, profile="demo", variant="standard", env={}, overrides={
        "build.wheel-globs": ["gpurl_demo_ext-*.whl", "vllm-*g${VLLM_FORK_COMMIT}*.whl"]})
    with pytest.raises(DockerfileError, match=r"build.vllm-fork-commit is not set but the recipe "
                                               r"uses \$\{VLLM_FORK_COMMIT\} \(variant 'standard'\)"):
        render_variant(config, plan_for_config(config))


# --- the task CLI on the fixture ----------------------------------------------------------

def _invoke(root: Path, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GPURL_")}
    return subprocess.run([sys.executable, "-m", "invoke", *args], cwd=root,
                          env={**clean, **(env or {})}, capture_output=True, text=True, timeout=300)


@pytest.mark.integration
@pytest.mark.parametrize("variant", VARIANTS)
def test_build_dry_run_ships_each_variants_own_script(variant: str, tmp_path: Path) -> None:
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    done = _invoke(REPO_ROOT, "build", "--profile", "skyrl", "--variant", variant, "--dry-run",
                   "--json", env={"KUBECONFIG": str(kube), "HOME": str(tmp_path),
                                  "GPURL_REGISTRY_TOKEN": "ghp_" + "x" * 36})
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) == {"dry_run", "commands", "warnings"}  # the one dry-run shape
    (argv,) = out["commands"]  # the one iris command
    env = {argv[i + 1]: argv[i + 2] for i, a in enumerate(argv) if a == "-e"}
    script = base64.b64decode(env["BUILD_B64"]).decode()
    assert script == render_script(load_config(REPO_ROOT, profile="skyrl", variant=variant, env={}))
    name = argv[argv.index("--job-name") + 1]
    assert name.startswith("gpurl-kaniko-" + ("" if variant == "standard" else f"{variant}-"))


@pytest.mark.integration
def test_rebuild_needed_across_the_two_real_lock_versions(tmp_path: Path) -> None:
    """A git history whose skyrl fixture moves from SkyRL's older lock to the newer one (torch
    2.8.0/2.7.1 -> 2.9.1, vLLM 0.11.0/0.10.1.1 -> 0.16.0): each variant needs new wheels."""
    root = repo_copy(tmp_path / "repo", untracked=True)
    committed = (root / "pyproject.toml").read_text()
    skyrl_at(root, SKYRL_COMMITS[0])
    generate_profiles(root, "skyrl", check=False)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "skyrl at the older lock")
    old = git(root, "rev-parse", "HEAD").strip()
    (root / "pyproject.toml").write_text(committed)
    skyrl_at(root, SKYRL_COMMITS[-1])
    generate_profiles(root, "skyrl", check=False)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "skyrl at the newer lock")
    done = _invoke(root, "rebuild-needed", "--profile", "skyrl", "--since", old)
    assert done.returncode == 11, done.stdout + done.stderr
    assert "standard: wheels+image" in done.stdout + done.stderr
    assert "megatron: wheels+image" in done.stdout + done.stderr
    assert SKYRL_PROFILE_HEADER.strip() in committed


def _snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under docker/ and of .dockerignore."""
    files = [*sorted((root / "docker").rglob("*")), root / ".dockerignore"]
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in files if p.is_file()}
