"""Rendering the kaniko script: byte-reproducible, never committed (an older gpurl's committed
script is a leftover `invoke generate` removes), its templates filled exactly, and
shellcheck-clean (real shellcheck) for every configured variant, every config variant and as
the template files themselves."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.cluster import kaniko
from gpurl_tasks.cluster.kaniko import (
    ROOT_ENV,
    cache_repo,
    prebuilt_wheel_names,
    render_script,
    render_template,
)
from gpurl_tasks.config import Config, load_config, load_profile_names
from gpurl_tasks.dockerfile.generate import StaleFileError, generate_profiles
from gpurl_tasks.errors import BuildError, ConfigError
from tests.conftest import REPO_ROOT
from tests.support.checkout import repo_copy
from tests.support.kaniko_harness import AS_CLUSTER
from tests.support.local_parts import build_source_wheel, shellcheck


def config(**overrides: object) -> Config:
    return load_config(REPO_ROOT, env={}, overrides=overrides)


def cluster_config(profile: str, **overrides: object) -> Config:
    return load_config(REPO_ROOT, profile=profile, env={}, overrides={**AS_CLUSTER, **overrides})


def prebuilt_wheels(script: str) -> list[str]:
    """The wheels the script's `start admit` fetches, in order (its `--wheel` options)."""
    start = script[script.index("\nSTART=("):]
    start = start[:start.index("\n)\n")]
    return [x.split()[1] for x in start.splitlines() if x.startswith("  --wheel ")]


def demo_wheel_names(demo: Config, tmp_path: Path) -> list[str]:
    """The file names the demo's wheel-builder makes: each `./path` wheel spec built by its
    real build backend for the profile's target Python."""
    return [build_source_wheel(demo.root / spec[2:], demo.target.python, tmp_path / str(i)).name
            for i, spec in enumerate(demo.build.wheel_specs)]


def test_the_script_reads_the_root_the_tests_set() -> None:
    """job.sh spells ROOT_ENV itself (a placeholder cannot stand inside `${...:-}`)."""
    assert f'\nROOT="${{{ROOT_ENV}:-}}"\n' in render_script(config())


def test_a_template_and_its_values_must_name_the_same_placeholders() -> None:
    values = {"VENV": "/opt/venv", "LAYER_LEVEL": 6, "COMPILED_WHEELS": ""}
    assert "--venv /opt/venv \\\n  --level 6 " in render_template("compose-env.sh", values)
    with pytest.raises(BuildError,
                       match=r"script/compose-env\.sh .* without a value: \['LAYER_LEVEL'\]"):
        render_template("compose-env.sh", {"VENV": "/opt/venv", "COMPILED_WHEELS": ""})
    with pytest.raises(BuildError, match=r"values without a placeholder: \['EXTRA'\]"):
        render_template("compose-env.sh", {**values, "EXTRA": "x"})


def test_a_value_is_not_searched_for_placeholders() -> None:
    text = render_template("compose-env.sh", {"VENV": "@LAYER_LEVEL@", "LAYER_LEVEL": "@VENV@",
                                              "COMPILED_WHEELS": ""})
    assert "--venv @LAYER_LEVEL@ \\\n  --level @VENV@ " in text


@pytest.mark.parametrize("seed", ["0", "4242"])
def test_rendering_is_byte_reproducible_across_processes(seed: str, tmp_path: Path) -> None:
    """A fresh interpreter (another hash seed, another cwd, a GPURL_* variable set) renders the
    committed config's script byte for byte as this one does (the zipapp's sha256 included):
    nothing in the output depends on who renders it."""
    code = ("import sys; from pathlib import Path; "
            "from gpurl_tasks.cluster.kaniko import render_script; "
            "from gpurl_tasks.config import load_committed_config; "
            f"sys.stdout.write(render_script(load_committed_config(Path({str(REPO_ROOT)!r}), "
            "'gpu-rl')))")
    env = {**os.environ, "PYTHONHASHSEED": seed, "GPURL_REGISTRY_USER": "someone-else",
           "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, check=True)
    assert done.stdout.decode() == render_script(load_config(REPO_ROOT, profile="gpu-rl", env={}))


@pytest.mark.parametrize(("key", "value", "expect"), [
    ("registry.host", "registry.example.com", "REGISTRY_HOST=registry.example.com"),
    ("registry.user", "bob", "DOCKER_USER_ID=\"${DOCKER_USER_ID:-bob}\""),
    ("cluster.cache-repo", "ghcr.io/x/cache2", "CACHE_REPO=ghcr.io/x/cache2"),
    ("build.wheel-base-url", "https://w.example/base/", "--wheel-base-url https://w.example/base\n"),
    ("build.flash-attn-version", "2.9.0", "flash_attn-2.9.0-cp312-cp312-linux_x86_64.whl"),
    ("build.vllm-fork-commit", "deadbeef1", "+gdeadbeef1.cu128"),
    # the node check, the executor's export, every executor run and the MANIFEST's platform
    ("target.arch", "aarch64", "TARGET_ARCH=aarch64\nTARGET_PLATFORM=linux/arm64\n"),
    ("target.arch", "aarch64", "--wheel-platform linux_aarch64\n"),
    ("cluster.name", "cw-elsewhere", "CLUSTER_NAME=cw-elsewhere\n"),
])
def test_config_values_reach_the_script(key: str, value: str, expect: str) -> None:
    assert expect in render_script(config(**{key: value}))


def test_each_script_is_for_its_variants_platform_and_cluster() -> None:
    """The multiarch profile's two scripts: every platform word and the cluster are
    the variant's own (h100 x86_64 on the profile's cluster, gb200 aarch64 on cw-us-east-08a);
    the export, the executor runs and the node check read them from those lines."""
    for variant, arch, oci, cluster in (("h100", "x86_64", "linux/amd64", "cw-us-east-02a"),
                                        ("gb200", "aarch64", "linux/arm64", "cw-us-east-08a")):
        cfg = load_config(REPO_ROOT, profile="multiarch", variant=variant, env={})
        script = render_script(cfg)
        assert f"TARGET_ARCH={arch}\nTARGET_PLATFORM={oci}\nCLUSTER_NAME={cluster}\n" in script
        assert '--executor-image "$EXECUTOR_IMAGE" --platform "$TARGET_PLATFORM"' in script
        assert script.count('"--custom-platform=$TARGET_PLATFORM"') == 2  # env-base/final, compose
        assert '[ "$NODE_ARCH" = "$TARGET_ARCH" ]' in script
        assert script.index("NODE_ARCH=") < script.index("python3")  # before anything else


def test_default_cache_repo_hangs_off_the_image() -> None:
    assert cache_repo(config()) == "ghcr.io/open-thoughts/openthoughts-agent/cache"


@pytest.mark.parametrize("variant", ["standard", "megatron"])
def test_wheel_names_encode_the_abi_inputs(variant: str) -> None:
    """Each compiled wheel's file name carries the pins it was built for, as the config under
    test sets them (a pin bump is a config edit): its version, the fork commit, the CUDA tag,
    and the target's CPython tag and platform."""
    cfg = load_config(REPO_ROOT, profile="gpu-rl", variant=variant, env={})
    b, t = cfg.build, cfg.target
    py, plat = "cp" + t.python.replace(".", ""), f"{t.os}_{t.arch}"
    flash, vllm = prebuilt_wheel_names(cfg)
    assert flash == f"flash_attn-{b.flash_attn_version}-{py}-{py}-{plat}.whl"
    assert vllm == f"vllm-{b.vllm_version}+g{b.vllm_fork_commit}.{b.cuda_tag}-{py}-{py}-{plat}.whl"
    bumped = cfg.with_variant_settings(build=dataclasses.replace(
        b, flash_attn_version="9.9.9", vllm_fork_commit="0123abcde", cuda_tag="cu130"))
    assert prebuilt_wheel_names(bumped) == (
        f"flash_attn-9.9.9-{py}-{py}-{plat}.whl",
        f"vllm-{b.vllm_version}+g0123abcde.cu130-{py}-{py}-{plat}.whl")


@pytest.mark.integration
def test_demo_as_a_cluster_profile_fetches_the_wheel_its_builder_makes(tmp_path: Path) -> None:
    """The demo's script asks for its own compiled wheel (named as its wheel-builder names it),
    not gpu-rl's flash-attn/vLLM pair with empty versions."""
    demo = cluster_config("demo")
    built = demo_wheel_names(demo, tmp_path)
    assert list(prebuilt_wheel_names(demo)) == built
    assert prebuilt_wheels(render_script(demo)) == list(built)
    extra = load_config(REPO_ROOT, profile="demo", variant="extra", env={}, overrides=AS_CLUSTER)
    assert list(prebuilt_wheel_names(extra)) == built  # the variant compiles the same wheel


def compiled_tail(config: Config) -> str:
    """The tags `pip wheel` gives a compiled extension on the config's target."""
    python = "cp" + config.target.python.replace(".", "")
    return f"{python}-{python}-linux_{config.target.arch}.whl"


def test_a_version_written_into_the_glob_names_the_wheel() -> None:
    demo = cluster_config("demo", **{"build.wheel-globs": ["gpurl_demo_ext-7.1-*.whl"]})
    assert prebuilt_wheel_names(demo) == (f"gpurl_demo_ext-7.1-{compiled_tail(demo)}",)


def test_a_profile_without_compiled_wheels_fetches_nothing() -> None:
    heavy = cluster_config("heavy")
    assert heavy.build.wheel_globs == ()
    assert prebuilt_wheel_names(heavy) == ()
    plain, compiled = render_script(heavy), render_script(config())
    wheel_options = {"wheel-source", "wheelhouse", "wheel-base-url", "abi-key", "abi-prefix",
                     "wheel-platform", "wheel"}

    def options(script: str) -> set[str]:
        """The options of the script's `start` steps (its START array, one per line)."""
        return {m[1] for m in re.finditer(r"^  --([a-z-]+) ", script, re.M)}

    def build_args(script: str) -> set[str]:
        return set(re.findall(r'--build-arg "([A-Z_]+)=', script))

    assert wheel_options <= options(compiled) and "WHEEL_SOURCE" in build_args(compiled)
    assert not wheel_options & options(plain) and "WHEEL_SOURCE" not in build_args(plain)
    assert "--wheel-manifest" in compiled and "--wheel-manifest" not in plain


@pytest.mark.parametrize(("profile", "overrides", "key"), [
    # the defect's shape: a glob of the gpu-rl pair in a profile that pins none of it
    ("demo", {"build.wheel-globs": ["gpurl_demo_ext-*.whl", "vllm-*.whl"]}, "build.vllm-version"),
    ("demo", {"build.wheel-globs": ["gpurl_demo_ext-*.whl", "flash_attn-*.whl"]},
     "build.flash-attn-version"),
    ("demo", {"build.wheel-globs": ["gpurl_demo_ext-*.whl", "other_ext-*.whl"]},
     "build.wheel-globs"),  # a glob nothing pins
    ("demo", {"build.wheel-globs": ["gpurl_demo_ext-0.1.x-*.whl"]}, "build.wheel-globs"),
    ("demo", {"build.wheel-globs": ["*demo_ext-*.whl"]}, "build.wheel-globs"),
    ("demo", {"build.wheel-specs": ["gpurl-demo-ext"]}, "build.wheel-globs"),  # spec pins none
    ("gpu-rl", {"build.cuda-tag": "cu-128"}, "build.cuda-tag"),  # would be a malformed name
])
def test_a_name_that_cannot_be_derived_is_refused_in_one_line(
        profile: str, overrides: dict[str, object], key: str) -> None:
    bad = cluster_config(profile, **overrides)
    with pytest.raises(BuildError) as info:
        render_script(bad)
    message = str(info.value)
    assert "\n" not in message
    assert f"cannot name the prebuilt wheels of profile {profile!r} (variant 'standard')" in message
    assert key in message


def test_a_requirement_spec_pins_its_wheel() -> None:
    demo = cluster_config("demo", **{"build.wheel-specs": ["other-ext==3.2.1"],
                                     "build.wheel-globs": ["other_ext-*.whl"]})
    assert prebuilt_wheel_names(demo) == (f"other_ext-3.2.1-{compiled_tail(demo)}",)


def test_unsafe_value_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"registry\.user"):  # at the edge, when read
        config(**{"registry.user": 'x"; rm -rf / #'})
    good = config()
    bad = good.with_variant_settings(registry=dataclasses.replace(  # and again at the writer
        good.registry, user='x"; rm -rf / #'))
    with pytest.raises(BuildError, match=r"registry\.user"):
        render_script(bad)


@pytest.mark.integration
def test_generate_removes_a_script_an_older_gpurl_committed(tmp_path: Path) -> None:
    """Nothing rendered for the job is committed: a kaniko script an older gpurl generated for a
    profile is a leftover, which `generate --check` (doctor's and the build's check) names and
    `invoke generate` removes, and generate writes no script of its own."""
    root = repo_copy(tmp_path / "repo")
    script = root / "docker" / "build_gpu_rl_kaniko.sh"
    listed = sorted(os.listdir(script.parent))
    script.write_text("#!/usr/bin/env bash\n# In-cluster build of the image of profile 'gpu-rl': "
                      "kaniko in an iris job.\n# Generated by `invoke generate` from [tool.gpurl] "
                      "in pyproject.toml; do not edit.\n")
    with pytest.raises(StaleFileError, match=r"build_gpu_rl_kaniko\.sh"):
        generate_profiles(root, "gpu-rl", check=True)
    generate_profiles(root, "gpu-rl", check=False)
    assert sorted(os.listdir(script.parent)) == listed
    generate_profiles(root, "gpu-rl", check=True)


TEMPLATES = sorted((Path(kaniko.__file__).parent / "script").glob("*.sh"))


@pytest.mark.integration
@pytest.mark.parametrize("template", TEMPLATES, ids=[t.name for t in TEMPLATES])
def test_every_template_is_shellcheck_clean_as_it_stands(template: Path) -> None:
    """Each template file, placeholders and all, as the lint checks it (script/.shellcheckrc
    leaves to the rendered script the two checks that need all of it)."""
    proc = subprocess.run([shellcheck(), template.name], cwd=template.parent,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_template_is_rendered() -> None:
    """No template file is left over: each one is read while the variants render."""
    read: set[str] = set()
    real = render_template

    def spy(name: str, values: Mapping[str, str | int]) -> str:
        read.add(name)
        return real(name, values)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kaniko, "render_template", spy)
        for cfg in (config(), cluster_config("heavy")):  # compiled wheels, and none
            render_script(cfg)
    assert read == {t.name for t in TEMPLATES}


CONFIGURED = [(profile, variant.name) for profile in load_profile_names(REPO_ROOT)
              for variant in load_config(REPO_ROOT, profile=profile, env={}).variants
              if load_config(REPO_ROOT, profile=profile, env={}).backend == "iris"]


@pytest.mark.integration
def test_every_configured_variants_script_is_shellcheck_clean(tmp_path: Path) -> None:
    """The script each cluster variant of the repository's config would submit, rendered into a
    directory and checked whole by real shellcheck (what nox's lint did on the committed copies)."""
    assert len(CONFIGURED) >= 6, CONFIGURED  # gpu-rl, multiarch and skyrl, two variants each
    paths = []
    for profile, variant in CONFIGURED:
        path = tmp_path / f"{profile}-{variant}.sh"
        path.write_text(render_script(load_config(REPO_ROOT, profile=profile, variant=variant,
                                                  env={})))
        paths.append(path.name)
    proc = subprocess.run([shellcheck(), "-s", "bash", *paths], cwd=tmp_path,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


_NAME = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)


@pytest.mark.integration
@settings(max_examples=15, deadline=None)
@given(user=_NAME, prefix=_NAME, host=st.sampled_from(["ghcr.io", "registry.example.com:5000"]),
       source=st.sampled_from(["prebuilt-wheelhouse", "wheel-builder"]))
def test_every_variant_is_shellcheck_clean(user: str, prefix: str, host: str,
                                           source: str) -> None:
    program = shellcheck()
    settings = {"registry.user": user, "registry.tag-prefix": prefix, "registry.host": host,
                "build.wheel-source": source}
    for text in (render_script(config(**settings)),  # gpu-rl: the pinned pair
                 render_script(cluster_config("demo", **settings)),  # its own compiled wheel
                 render_script(cluster_config("heavy", **settings)),  # no compiled wheels
                 render_script(config(**settings, **{"target.arch": "aarch64"}))):  # aarch64
        proc = subprocess.run([program, "-s", "bash", "-"], input=text, capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0, proc.stdout
