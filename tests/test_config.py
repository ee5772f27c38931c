"""The config cascade: defaults -> pyproject -> profile -> environment -> flags."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpurl_tasks.config import DEFAULT_VARIANT, load_config
from gpurl_tasks.errors import ConfigError
from tests.conftest import REPO_ROOT, committed_profiles_and_variants, committed_tool

PYPROJECT = """
[tool.gpurl]
default-profile = "a"
[tool.gpurl.layers]
cap = "4GB"
[tool.gpurl.python]
extras = ["ep"]
[tool.gpurl.profiles.a]
workspace = "ws"
[tool.gpurl.profiles.a.layers]
cap = "2GB"
[tool.gpurl.profiles.b]
workspace = "other"
lock = "locks/uv.lock"
"""


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    return tmp_path


def test_cascade_order(root: Path) -> None:
    assert load_config(root, env={}).layers.cap == 2 * 10**9
    assert load_config(root, env={"GPURL_LAYERS_CAP": "3GB"}).layers.cap == 3 * 10**9
    flags = load_config(root, env={"GPURL_LAYERS_CAP": "3GB"}, overrides={"layers.cap": "500MB"})
    assert flags.layers.cap == 500 * 10**6
    assert load_config(root, env={}, overrides={"layers.cap": None}).layers.cap == 2 * 10**9


def test_profiles_and_paths(root: Path) -> None:
    a = load_config(root, env={})
    assert (a.profile, a.workspace, a.lock) == ("a", root / "ws", root / "ws" / "uv.lock")
    b = load_config(root, profile="b", env={})
    assert b.lock == root / "other" / "locks" / "uv.lock" and b.layers.cap == 4 * 10**9
    assert load_config(root, env={"GPURL_PROFILE": "b"}).profile == "b"
    assert a.python.extras == ("ep",)
    assert load_config(root, env={"GPURL_PYTHON_EXTRAS": "vllm,ep"}).python.extras == ("vllm", "ep")


def test_unknown_keys_suggest_the_right_one(root: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'layers\.capp'") as info:
        load_config(root, env={}, overrides={"layers.capp": "1GB"})
    assert info.value.hint == "did you mean 'layers.cap'?"
    with pytest.raises(ConfigError, match="unknown profile 'aa'"):
        load_config(root, profile="aa", env={})


def test_layer_mode_and_thresholds(root: Path) -> None:
    default = load_config(root, env={}).layers.layout
    assert (default.mode, default.own_layer, default.tail_groups) == ("independent", 20 * 10**6, 32)
    chosen = load_config(root, env={"GPURL_LAYERS_TAIL_GROUPS": "16"},
                         overrides={"layers.own-layer": "50MB"}).layers
    assert (chosen.mode, chosen.own_layer, chosen.tail_groups) == ("independent", 50 * 10**6, 16)
    with pytest.raises(ConfigError) as info:
        load_config(root, env={}, overrides={"layers.mode": "independant"})
    assert info.value.hint == "did you mean 'independent'?"


def test_the_retired_stacked_mode_is_refused_with_what_to_write(root: Path) -> None:
    """layers.mode = "stacked" was retired: a config that still names it gets one error that
    says so and what to write, wherever the value comes from."""
    for overrides, env in (({"layers.mode": "stacked"}, {}), ({}, {"GPURL_LAYERS_MODE": "stacked"})):
        with pytest.raises(ConfigError, match=r"layers\.mode = 'stacked' in .* was retired") as info:
            load_config(root, env=env, overrides=overrides)
        assert (info.value.hint or "").startswith("remove layers.mode")


@pytest.mark.parametrize(("key", "value"), [("layers.cap", "four"), ("layers.cap", "4XB"),
                                            ("layers.basis", "zipped"), ("verify.min-layers", "x"),
                                            ("layers.own-layer", "0"), ("layers.tail-groups", "-1"),
                                            ("cluster.gpus", "0"), ("cluster.gpus", "17"),
                                            ("verify.gpu", "maybe"), ("cluster.gpu-cluster", "a b")])
def test_bad_values_are_rejected(root: Path, key: str, value: str) -> None:
    with pytest.raises(ConfigError):
        load_config(root, env={}, overrides={key: value})


# variant keys -> the setting each one sets (as docs/config.md names them)
_VARIANT_KEY_SETTINGS = {"extras": "python.extras", "groups": "python.groups",
                         "tag-prefix": "registry.tag-prefix",
                         "floating-tag": "registry.floating-tag",
                         "launcher-variable": "launcher.variable",
                         "platform-variable": "launcher.platform-variable"}


def _as_read(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


@pytest.mark.parametrize(("profile", "variant"), committed_profiles_and_variants())
def test_the_repository_config_loads_for_every_profile(profile: str, variant: str) -> None:
    """Every profile and variant of the committed pyproject.toml loads, its files exist, and
    every plain value it sets (the shared table, then the profile's, then the variant's keys
    and its build table) is the value the config holds."""
    tool = committed_tool()
    table = tool["profiles"][profile]
    variants = list(table.get("variants", {}))
    config = load_config(REPO_ROOT, profile=profile, variant=variant or None, env={})
    assert (config.profile, config.variant.shown) == (profile, variant)
    assert [v.name for v in config.variants] == (variants or [DEFAULT_VARIANT])
    assert [v.declared for v in config.variants] == [bool(variants)] * len(config.variants)
    assert config.workspace == (REPO_ROOT / table["workspace"]).resolve()
    assert config.lock.is_file(), config.lock
    assert config.build.dockerfile.is_file(), config.build.dockerfile

    expected: dict[str, Any] = {}
    for source in (tool, table):
        for section, keys in source.items():
            if isinstance(keys, dict) and section not in ("profiles", "variants"):
                expected.update({f"{section}.{k}": _as_read(v) for k, v in keys.items()})
    if variant:
        keys = dict(table["variants"][variant])
        for sub in ("build", "target", "cluster"):  # the variant's own tables
            expected.update({f"{sub}.{k}": _as_read(v) for k, v in keys.pop(sub, {}).items()})
        if variant != variants[0]:  # another image: its own tags unless it names them
            for key in ("tag-prefix", "floating-tag"):
                keys.setdefault(key, f"{expected[f'registry.{key}']}-{variant}")
        if "import-asserts" in keys:  # added to the profile's own checks
            expected["build.import-asserts"] = (*expected.get("build.import-asserts", ()),
                                                *keys.pop("import-asserts"))
        expected.update({_VARIANT_KEY_SETTINGS[k]: _as_read(v) for k, v in keys.items()})
    checked = 0
    for dotted, want in expected.items():
        section, key = dotted.split(".")
        got = getattr(getattr(config, section), key.replace("-", "_"))
        if isinstance(got, Path) or (isinstance(got, int) and isinstance(want, str)):
            continue  # paths resolve against a root, sizes are parsed: covered elsewhere
        assert got == want, f"{dotted} of {profile}/{variant or '-'}: {got!r} != {want!r}"
        checked += 1
    assert checked >= 10  # the comparison ran over the profile's values, not over nothing


def test_cluster_controller_url_from_config_or_environment(root: Path) -> None:
    (root / "pyproject.toml").write_text(PYPROJECT + '[tool.gpurl.cluster]\ncontroller-url = '
                                         '"http://127.0.0.1:18765"\n')
    assert load_config(root, env={}).cluster.controller_url == "http://127.0.0.1:18765"
    env = {"GPURL_CLUSTER_CONTROLLER_URL": "https://iris.example:443/api"}
    assert load_config(root, env=env).cluster.controller_url == "https://iris.example:443/api"
    assert load_config(root, env={"GPURL_CLUSTER_CONTROLLER_URL": ""}).cluster.controller_url == ""


@pytest.mark.parametrize("bad", ["127.0.0.1:18765", "ftp://x", "http://", "http://a b"])
def test_cluster_controller_url_must_be_an_http_url(root: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match=r"cluster\.controller-url in \$GPURL_CLUSTER_CONTROLLER"
                       r"_URL must be an http:// or https:// URL"):
        load_config(root, env={"GPURL_CLUSTER_CONTROLLER_URL": bad})


def test_a_profile_with_variants_reads_pyproject_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every variant is resolved from the same tables in one pass, not by re-loading."""
    from gpurl_tasks import config as config_module

    reads: list[Path] = []
    real = config_module._tool_table

    def counted(root: Path, text: str | None = None) -> object:
        reads.append(root)
        return real(root, text)

    monkeypatch.setattr(config_module, "_tool_table", counted)
    config = load_config(REPO_ROOT, profile="gpu-rl", env={})
    assert [v.name for v in config.variants] == ["standard", "megatron"]
    assert config.variants[1].python != config.variants[0].python
    assert len(reads) == 1


def test_each_key_declares_its_reading_on_its_field() -> None:
    """A size key takes "4GB", a root-relative path resolves from the root, a checked key is
    refused by its grammar: all three read from the field's own declaration."""
    import dataclasses

    from gpurl_tasks.config import BuildSettings, LayerSettings

    keys = {f.name: f.metadata["gpurl"] for f in dataclasses.fields(LayerSettings)
            if "gpurl" in f.metadata}
    assert keys["cap"].size and keys["size_cache"].root_relative
    build = {f.name: f.metadata.get("gpurl") for f in dataclasses.fields(BuildSettings)}
    assert build["dockerfile"].root_relative and build["uv_version"].check is not None


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("GPURL_BUILD_WHEEL_SOURCE", "prebuilt",
     "build.wheel-source in $GPURL_BUILD_WHEEL_SOURCE must be one of 'prebuilt-wheelhouse', "
     "'wheel-builder', not 'prebuilt'"),
    ("GPURL_BUILD_PYTHON_DOWNLOADS", "sometimes",
     "build.python-downloads in $GPURL_BUILD_PYTHON_DOWNLOADS must be one of 'automatic', "
     "'manual', 'never', not 'sometimes'"),
])
def test_a_setting_outside_its_choices_is_refused_by_the_config(
        root: Path, variable: str, value: str, message: str) -> None:
    """The one check of a Literal setting (the recipe trusts the typed config)."""
    with pytest.raises(ConfigError) as caught:
        load_config(root, env={variable: value})
    assert caught.value.message == message


@pytest.mark.parametrize(("env", "needle"), [
    ({"GPURL_WORKSPACE": "ex\x00amples"}, "workspace in $GPURL_WORKSPACE must be text on one line"),
    ({"GPURL_WORKSPACE": "../elsewhere"}, "workspace in $GPURL_WORKSPACE = '../elsewhere' is "
                                          "outside the build context"),
    ({"GPURL_LOCK": "u\nv.lock"}, "lock in $GPURL_LOCK must be text on one line"),
])
def test_workspace_and_lock_paths_are_checked_at_the_edge(env: dict[str, str], needle: str) -> None:
    """A NUL byte once reached Path.resolve() as a traceback; a workspace outside the
    repository would be copied into no build context."""
    from gpurl_tasks.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        load_config(REPO_ROOT, profile="demo", env=env)
    assert needle in err.value.message


@pytest.mark.parametrize(("env", "needle"), [
    ({"GPURL_LAUNCHER_PATH": "../../../elsewhere/launch.py"},
     "launcher.path in $GPURL_LAUNCHER_PATH = "),
    ({"GPURL_BUILD_SLICES": "/tmp/slices"}, "build.slices in $GPURL_BUILD_SLICES = "),
    ({"GPURL_LAUNCHER_PATH": "launch.py\nsecrets/"},
     "launcher.path in $GPURL_LAUNCHER_PATH must be text on one line"),
    ({"GPURL_BUILD_WHEEL_GLOBS": "../../secret-*.whl"},
     "build.wheel-globs[0] must be a glob inside the wheelhouse"),
    ({"GPURL_BUILD_WHEEL_GLOBS": "/etc/*.whl"}, "build.wheel-globs[0] must be a glob inside the wheelhouse"),
])
def test_path_values_stay_inside_the_repository(env: dict[str, str], needle: str) -> None:
    """A path gpurl writes (the launcher it pins, the slice files) or
    that becomes a .dockerignore rule is refused where the config is read when it leaves
    the repository or spans lines; a wheel glob matches inside the wheelhouse only."""
    with pytest.raises(ConfigError) as err:
        load_config(REPO_ROOT, profile="demo", env=env)
    assert needle in err.value.message
    assert "\n" not in err.value.message


def test_every_profile_has_a_variant_and_each_is_typed() -> None:
    """A profile without declared variants has its implicit one, named as the profile's own
    image; the config of any variant is the same as loading it by name."""
    heavy = load_config(REPO_ROOT, profile="heavy", env={})
    (only,) = heavy.variants
    assert (only.name, only.declared, only.shown, only.note) == (DEFAULT_VARIANT, False, "", "")
    assert only.slices == heavy.build.slices / "heavy" and heavy.variant == only
    gpu = load_config(REPO_ROOT, profile="gpu-rl", env={})
    first, second = gpu.variants
    assert second.launcher.variable == \
        committed_tool()["profiles"]["gpu-rl"]["variants"][second.name]["launcher-variable"]
    assert second.slices.parent == first.shared_slices.parent == second.shared_slices.parent
    assert gpu.for_variant(second) == load_config(REPO_ROOT, profile="gpu-rl", env={},
                                                  variant=second.name)


VARIANTS = PYPROJECT + """
[tool.gpurl.profiles.a.registry]
tag-prefix = "img"
[tool.gpurl.profiles.a.variants.one]
[tool.gpurl.profiles.a.variants.two]
launcher-variable = "TWO_IMAGE"
"""


def test_a_later_variant_defaults_to_its_own_image(root: Path) -> None:
    """A variant other than the first gets its own tags and Dockerfile, derived from the
    profile's; a variable or flag still wins over the derived default."""
    (root / "pyproject.toml").write_text(VARIANTS)
    one, two = load_config(root, env={}).variants
    assert (one.registry.tag_prefix, two.registry.tag_prefix) == ("img", "img-two")
    assert two.registry.floating_tag == f"{one.registry.floating_tag}-two"
    assert two.build.dockerfile.name == f"{one.build.dockerfile.name}-two"
    assert (one.launcher.variable, two.launcher.variable) == ("DEFAULT_RL_DOCKER_IMAGE", "TWO_IMAGE")
    mine = load_config(root, env={"GPURL_REGISTRY_TAG_PREFIX": "mine"}).variants
    assert {v.registry.tag_prefix for v in mine} == {"mine"}
    (root / "pyproject.toml").write_text(VARIANTS.replace('launcher-variable = "TWO_IMAGE"\n', ""))
    with pytest.raises(ConfigError, match=r"variants\.two\] has no launcher-variable"):
        load_config(root, env={})


@pytest.mark.parametrize("name", ["../up", "a/b", "Upper"])
def test_a_path_shaped_variant_name_is_one_line(tmp_path: Path, name: str) -> None:
    """A variant name names files and directories: checked against its grammar where the
    config is read, in pyproject and on the command line."""
    (tmp_path / "ws").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.gpurl]\ndefault-profile = "a"\n[tool.gpurl.profiles.a]\nworkspace = "ws"\n'
        f'[tool.gpurl.profiles.a.variants."{name}"]\nextras = []\n')
    with pytest.raises(ConfigError, match="a variant name in") as err:
        load_config(tmp_path, env={})
    assert "\n" not in err.value.message
    with pytest.raises(ConfigError, match="a variant name of profile 'gpu-rl'"):
        load_config(REPO_ROOT, profile="gpu-rl", env={}, variant=name)


PLATFORMS = VARIANTS + """
[tool.gpurl.profiles.a.variants.gb200]
launcher-variable = "TWO_IMAGE"
[tool.gpurl.profiles.a.variants.gb200.target]
arch = "aarch64"
[tool.gpurl.profiles.a.variants.gb200.cluster]
name = "cw-us-east-08a"
[tool.gpurl.profiles.a.variants.gb200.build]
cuda-arch-list = "10.0"
"""


def test_a_variant_has_its_own_platform_cluster_and_crane(root: Path) -> None:
    """A GB200 variant sets target.arch, its cluster and build pins in its own tables; the
    other variants keep the profile's. Variants of another platform share their own slices
    (shared-ARCH), and each job fetches the crane archive of its own arch."""
    (root / "pyproject.toml").write_text(PLATFORMS)
    one, two, gb200 = load_config(root, env={}).variants
    assert (one.target.arch, two.target.arch, gb200.target.arch) == ("x86_64", "x86_64", "aarch64")
    assert (one.target.platform, gb200.target.platform) == ("linux/amd64", "linux/arm64")
    assert (one.cluster.name, gb200.cluster.name) == ("cw-us-east-02a", "cw-us-east-08a")
    assert (one.build.cuda_arch_list, gb200.build.cuda_arch_list) == ("", "10.0")
    assert one.shared_slices == two.shared_slices and one.shared_slices.name == "shared"
    assert gb200.shared_slices == one.shared_slices.with_name("shared-aarch64")
    assert one.crane_archive[0].endswith("_Linux_x86_64.tar.gz")
    assert gb200.crane_archive[0].endswith("_Linux_arm64.tar.gz")
    assert gb200.crane_archive[1] != one.crane_archive[1]
    chosen = load_config(root, env={}, variant="gb200")
    assert (chosen.target.arch, chosen.cluster.name) == ("aarch64", "cw-us-east-08a")
    with pytest.raises(ConfigError, match=r"unknown config key 'target\.archh'"):
        (root / "pyproject.toml").write_text(PLATFORMS.replace('arch = "aarch64"', 'archh = "x"'))
        load_config(root, env={})


@pytest.mark.parametrize(("cluster", "wanted"), [
    ('crane-url = "https://example.test/go-containerregistry_Linux_x86_64.tar.gz"\n'
     f'crane-sha256 = "{"a" * 64}"', r"is not an archive for aarch64"),
    ('crane-url = "https://example.test/crane_Linux_arm64.tar.gz"',
     r"crane-url and cluster\.crane-sha256 go together"),
    ('name = "x"\n[tool.gpurl.profiles.a.variants.gb200.target]\narch = "arm"',
     r"target\.arch.*one of"),
])
def test_a_variants_crane_and_arch_are_checked(root: Path, cluster: str, wanted: str) -> None:
    """An aarch64 job given an x86_64 crane, a crane URL without its sha256, or an arch gpurl
    does not build: one line naming the key, where the config is read."""
    text = PLATFORMS.replace('name = "cw-us-east-08a"', cluster)
    if 'arch = "arm"' in cluster:
        text = text.replace('[tool.gpurl.profiles.a.variants.gb200.target]\narch = "aarch64"\n', "")
    (root / "pyproject.toml").write_text(text)
    with pytest.raises(ConfigError, match=wanted) as err:
        load_config(root, env={})
    assert "\n" not in err.value.message


def test_a_variant_named_like_a_platforms_shared_slices_is_refused(root: Path) -> None:
    (root / "pyproject.toml").write_text(VARIANTS.replace("variants.one]", 'variants."shared-aarch64"]'))
    with pytest.raises(ConfigError, match="is named 'shared-aarch64'"):
        load_config(root, env={})


@pytest.mark.parametrize("glibc", ["x", "2", "3.1", "2.35.1", " 2.35"])
def test_a_glibc_that_names_no_manylinux_tag_is_refused(root: Path, glibc: str) -> None:
    """target.glibc makes the manylinux tags the planner sizes wheels by and uv's
    --python-platform: a value of another form is one line where the config is read."""
    with pytest.raises(ConfigError, match=r"target\.glibc must be a glibc version such as 2\.35"):
        load_config(root, env={"GPURL_TARGET_GLIBC": glibc})
