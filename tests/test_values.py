"""Issue 24: the grammar of each config value written into an artifact (values.py), and its one
hook in the config cascade (the `check` each config field declares)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpurl_tasks import values
from gpurl_tasks.config import load_config
from gpurl_tasks.errors import ConfigError
from tests.conftest import REPO_ROOT, committed_profiles_and_variants

GOOD_AND_BAD = [
    (values.profile_name, ["gpu-rl", "demo", "a.b_c-1"], ["Demo", "-x", "a/b", "../x", "a b", ""]),
    (values.commit, ["76259c63a", "f" * 40], ["76259c", "F4A6B1A0", "f" * 41, "abc; id"]),
    (values.apt_package, ["ca-certificates", "libstdc++6", "python3:amd64", "git=1:2.39-1"],
     ["git$(id)", "-o", "Git", "a", "git\nRUN x", "git rm"]),
    (values.resource_size, ["512GB", "400G", "1.5Ti", "4096"], ["-512GB", "512 GB", "GB", "1e9"]),
    (values.version, ["2.11.0", "2.8.0+cu128", "0.13.9"],
     ["0.13.9 --index-url http://x", " 1.0", "1.0\n", "latest"]),
    (values.requirement, ["setuptools>=77", "torch==${TORCH_VERSION}", "wheel"],
     ["-r /etc/passwd", "x; rm -rf /", "wheel --index-url=http://x"]),
    (values.git_url, ["https://github.com/open-thoughts/vllm.git", "ssh://git@host/r.git"],
     ["--upload-pack=touch x", "https://a b", "ext::sh -c id", "javascript:x"]),
    (values.image_reference, ["nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04", "scratch"],
     ["Nvidia/CUDA", "a b", "img:$(id)"]),
    (values.registry_host, ["ghcr.io", "127.0.0.1:5005"], ['ghcr.io","evil', "ghcr.io/x", ""]),
    (values.identifier, ["DEFAULT_RL_DOCKER_IMAGE"], ["1X", "a-b", "X; import os"]),
]


@pytest.mark.parametrize(("check", "good", "bad"), GOOD_AND_BAD,
                         ids=[c.__name__ for c, _, _ in GOOD_AND_BAD])
def test_each_grammar_accepts_real_values_and_refuses_hostile_ones(
        check: values.Check, good: list[str], bad: list[str]) -> None:
    for value in good:
        assert check(value, "k") == value
    for value in bad:
        with pytest.raises(ConfigError, match=r"^k must be") as info:
            check(value, "k")
        assert "\n" not in info.value.message


def test_a_path_must_stay_inside_the_repository_symlinks_included(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "docker").mkdir(parents=True)
    (root / "escape").symlink_to(tmp_path)
    assert values.inside_repository(Path("docker/wheelhouse"), root, "k") == "docker/wheelhouse"
    for path in ("../x", "escape/x", "/etc", "docker/a b", "docker/x\ny"):
        with pytest.raises(ConfigError, match="k"):
            values.inside_repository(Path(path), root, "k")


@pytest.mark.parametrize(("variable", "value", "key"), [
    ("GPURL_BUILD_APT_PACKAGES", "git,git$(touch PWNED)", r"build\.apt-packages\[1\]"),
    ("GPURL_BUILD_UV_VERSION", "0.13.9 --index-url http://evil.example/simple",
     r"build\.uv-version"),
    ("GPURL_BUILD_VLLM_FORK_REPO", "--upload-pack=touch PWNED", r"build\.vllm-fork-repo"),
    ("GPURL_BUILD_POST_INSTALL", "harbor @ git+https://h.invalid/h.git@f4a6b1a0; id",
     r"build\.post-install"),
    ("GPURL_CLUSTER_MEMORY", "-1GB", r"cluster\.memory"),
    ("GPURL_PYTHON_EXTRAS", "vllm,$(id)", r"python\.extras\[1\]"),
    ("GPURL_REGISTRY_HOST", 'ghcr.io":{"auth":"x"},"evil', r"registry\.host"),
    ("GPURL_PROFILE", "../gpu-rl", r"profile name"),
])
def test_config_refuses_a_hostile_value_naming_key_and_origin(variable: str, value: str,
                                                              key: str) -> None:
    with pytest.raises(ConfigError, match=key) as info:
        load_config(REPO_ROOT, profile=None, env={variable: value})
    assert variable in info.value.message or variable == "GPURL_PROFILE"


@pytest.mark.parametrize(("profile", "variant"), committed_profiles_and_variants())
def test_every_committed_profile_and_variant_passes(profile: str, variant: str) -> None:
    """Every profile and variant pyproject.toml declares (read from the file) passes the
    value checks, and loading one gives that one."""
    config = load_config(REPO_ROOT, profile=profile, env={}, variant=variant or None)
    assert (config.profile, config.variant.shown) == (profile, variant)


def test_a_source_id_is_spelled_once_and_read_back_to_its_commit() -> None:
    dirty = values.source_id("abc1234", "0123456789ab")
    assert dirty == "abc1234-dirty-0123456789ab"
    assert re.fullmatch(values.SOURCE_ID_PATTERN, dirty)
    assert values.source_id("abc1234") == "abc1234"
    assert values.source_commit(dirty) == "abc1234"
    assert values.source_commit("abc1234 rest") == "abc1234"
    assert values.source_commit("abc123") is None  # too short to be a commit
    assert values.source_commit("abc1234xyz") is None
