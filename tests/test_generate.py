"""generate: golden text, byte-reproducibility, atomic writes, --check, hadolint on the output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from gpurl_tasks.config import Config, load_config, load_profile_names
from gpurl_tasks.dockerfile.generate import (
    StaleFileError,
    generate,
    render_dockerfile,
)
from gpurl_tasks.dockerfile.model import DockerfileError
from gpurl_tasks.errors import LockError
from gpurl_tasks.files import write_atomic
from gpurl_tasks.plan.lock import load_lock, lock_staleness
from gpurl_tasks.plan.model import Layer, Plan, PlannedPackage, Slice, sync_selection_flags
from tests.conftest import REPO_ROOT
from tests.support.checkout import repo_copy
from tests.support.demo_tree import copy_tree, invoke
from tests.support.local_parts import build_source_wheel

GOLDEN = Path(__file__).parent / "golden"

SMALL_PYPROJECT = textwrap.dedent("""\
    [project]
    name = "small"
    version = "0"

    [tool.gpurl]
    default-profile = "small"

    [tool.gpurl.python]
    extras = ["ep"]

    [tool.gpurl.profiles.small]
    workspace = "ws"
    build.dockerfile = "docker/Dockerfile.small"
    build.base-image = "debian:bookworm-slim"
    build.index-url = "http://127.0.0.1:5006/simple"
    """)
SMALL_LOCK = b'version = 1\nrequires-python = ">=3.12"\n'


def hand_plan(config: Config) -> Plan:
    """A fixed three-layer plan (the planner's output shape, built by hand)."""
    def pkg(name: str, size: int) -> PlannedPackage:
        return PlannedPackage(name=name, version="1.0", compressed_bytes=size, installed_bytes=None,
                              requirement=f"{name}==1.0 --hash=sha256:{'0' * 64}",
                              index="http://127.0.0.1:5006/simple")

    layers = (Layer(slice=Slice(position=0, label="nvidia-cudnn-cu12"),
                    packages=(pkg("nvidia-cudnn-cu12", 2_900_000_000),)),
              Layer(slice=Slice(position=1, label="torch"), packages=(pkg("torch", 3_100_000_000),)),
              Layer(slice=Slice(position=2, label="tail"),
                    packages=(pkg("six", 11_050), pkg("pyyaml", 828_016))))
    flags = sync_selection_flags(config.python, local_flags=("--no-install-project",))
    return Plan(cap_bytes=4 * 10**9, basis="compressed", sync_flags=flags,
                layers=layers, local=("small",), lower_bound_layers=2)


@pytest.fixture
def small_root(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(SMALL_PYPROJECT)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "pyproject.toml").write_text('[project]\nname = "small"\n')
    (tmp_path / "ws" / "uv.lock").write_bytes(SMALL_LOCK)
    return tmp_path


def test_golden_small_config(small_root: Path) -> None:
    """Reviewers see the rendered text change in diffs; UPDATE_GOLDEN=1 rewrites the file."""
    config = load_config(small_root, env={})
    text = render_dockerfile(config, hand_plan(config))
    golden = GOLDEN / "Dockerfile.small"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        write_atomic(golden, text)
    assert text == golden.read_text(), "rendering changed: rerun with UPDATE_GOLDEN=1 and review"


def test_generate_refuses_a_launcher_whose_python_is_elsewhere(small_root: Path) -> None:
    """The launcher's RL_PYTHON (or the variable launcher.python-variable names) must be in
    build.venv: otherwise every task dies on a missing python. Both paths are named, nothing
    is written; a launcher that names no python passes."""
    launcher = small_root / "ws" / "cloud" / "iris" / "launch_rl_iris.py"
    launcher.parent.mkdir(parents=True)
    launcher.write_text('X = 1\nRL_PYTHON = "/opt/openthoughts/envs/rl/bin/python"\n')
    config = load_config(small_root, env={})
    assert config.build.venv == "/opt/venv"
    with pytest.raises(DockerfileError) as caught:
        generate(config, planner=hand_plan)
    assert caught.value.message == (
        "ws/cloud/iris/launch_rl_iris.py:2: RL_PYTHON = '/opt/openthoughts/envs/rl/bin/python' "
        "is not in the image's environment /opt/venv: every task would fail with 'No such file "
        "or directory'")
    assert 'build.venv = "/opt/openthoughts/envs/rl"' in str(caught.value.hint)
    assert not config.build.dockerfile.exists()
    moved = load_config(small_root, env={}, overrides={"build.venv": "/opt/openthoughts/envs/rl"})
    generate(moved, planner=hand_plan)
    assert 'UV_PROJECT_ENVIRONMENT="/opt/openthoughts/envs/rl"' in moved.build.dockerfile.read_text()
    launcher.write_text('RL_ENV_DIR = "/srv/env"\n')
    other = load_config(small_root, env={}, overrides={"launcher.python-variable": "RL_ENV_DIR"})
    with pytest.raises(DockerfileError, match="RL_ENV_DIR = '/srv/env' is not in"):
        generate(other, planner=hand_plan)


def test_generate_writes_then_check_passes_then_fails_when_stale(small_root: Path) -> None:
    config = load_config(small_root, env={})
    path = config.build.dockerfile
    with pytest.raises(StaleFileError, match="missing"):
        generate(config, check=True, planner=hand_plan)
    first = generate(config, planner=hand_plan)
    assert first.changed and first.steps == 3 and path.exists()
    before = path.read_bytes()
    again = generate(config, planner=hand_plan)
    assert not again.changed and path.read_bytes() == before
    assert not generate(config, check=True, planner=hand_plan).changed
    path.write_bytes(before.replace(b"02-tail", b"02-tails", 1))
    with pytest.raises(StaleFileError, match="stale") as err:
        generate(config, check=True, planner=hand_plan)
    assert err.value.exit_code != 0 and "invoke generate --profile small" in str(err.value)
    assert sorted(p.name for p in path.parent.iterdir()) == ["Dockerfile.small", "gpurl-envcheck.py",
                                                          "layers"]
    slices = path.parent / "layers" / "small"
    assert sorted(p.name for p in slices.iterdir()) == [
        "00-nvidia-cudnn-cu12.txt", "01-torch.txt", "02-tail.txt"]  # no temp files
    generate(config, planner=hand_plan)
    tail = slices / "02-tail.txt"
    tail.write_text(tail.read_text().replace("six==1.0", "six==0.9"))
    with pytest.raises(StaleFileError, match=r"02-tail\.txt"):  # a stale slice fails the check
        generate(config, check=True, planner=hand_plan)
    (slices / "07-old.txt").write_text("# left from an older plan\n")
    generate(config, planner=hand_plan)  # rewrites the slice, removes the leftover
    assert not (slices / "07-old.txt").exists() and "six==1.0" in tail.read_text()
    assert generate(config, check=True, planner=hand_plan).slices == ()


def test_lock_change_makes_the_file_stale(small_root: Path) -> None:
    config = load_config(small_root, env={})
    generate(config, planner=hand_plan)
    (small_root / "ws" / "uv.lock").write_bytes(SMALL_LOCK + b"# changed\n")
    with pytest.raises(StaleFileError):
        generate(config, check=True, planner=hand_plan)


def test_missing_lock_is_one_actionable_error(small_root: Path) -> None:
    (small_root / "ws" / "uv.lock").unlink()
    config = load_config(small_root, env={})
    with pytest.raises(LockError, match=r"no uv\.lock") as err:
        generate(config, planner=hand_plan)
    assert err.value.hint and "uv lock" in err.value.hint
    assert not config.build.dockerfile.exists()


def test_write_atomic_replaces_and_reports(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file"
    assert write_atomic(target, "a\n")
    assert not write_atomic(target, "a\n")
    assert write_atomic(target, "b\n")
    assert target.read_text() == "b\n"
    assert [p.name for p in target.parent.iterdir()] == ["file"]


_RENDER_SNIPPET = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_generate import hand_plan
from gpurl_tasks.config import load_config
from gpurl_tasks.dockerfile.model import DockerfileError
from gpurl_tasks.dockerfile.generate import render_dockerfile
config = load_config(Path({root!r}), profile={profile!r}, env={{}})
sys.stdout.write(render_dockerfile(config, hand_plan(config)))
"""


@pytest.mark.parametrize("profile", ["gpu-rl", "demo"])
def test_byte_identical_across_processes(profile: str) -> None:
    """Different hash seeds must not reorder anything (sets, dicts) in the output."""
    outputs = set()
    for seed in ("0", "1", "12345"):
        code = _RENDER_SNIPPET.format(tests=str(Path(__file__).parent), root=str(REPO_ROOT),
                                      profile=profile)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed})
        outputs.add(done.stdout)
    (text,) = outputs  # one text, whatever the seed
    assert text.startswith(b"# ") and text.count(b"\nFROM ") >= 3  # a whole Dockerfile


def test_every_profile_has_its_own_dockerfile() -> None:
    profiles = load_profile_names(REPO_ROOT)
    assert set(profiles) >= {"gpu-rl", "demo"}
    paths = {load_config(REPO_ROOT, profile=p, env={}).build.dockerfile for p in profiles}
    assert len(paths) == len(profiles)


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(found).exists():
        if os.environ.get("CI"):
            pytest.fail("hadolint is missing (install the lint dependency group)")
        pytest.skip("hadolint not installed (dependency group lint)")
    return found


@pytest.mark.integration
@pytest.mark.parametrize(("profile", "variant"), [("gpu-rl", None), ("demo", None),
                                                  ("multiarch", "h100"), ("multiarch", "gb200")])
def test_hadolint_is_clean_on_rendered_recipes(profile: str, variant: str | None,
                                               tmp_path: Path) -> None:
    """The real hadolint with the repository's .hadolint.yaml passes on each profile's file
    (the multiarch profile's amd64 and arm64 variants both)."""
    config = load_config(REPO_ROOT, profile=profile, variant=variant, env={})
    target = tmp_path / f"Dockerfile.{profile}"
    target.write_text(render_dockerfile(config, hand_plan(config)))
    done = subprocess.run([_hadolint(), "--config", str(REPO_ROOT / ".hadolint.yaml"),
                           str(target)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _invoke(root: Path, *args: str,
            env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURL_")} | (env_extra or {})
    return subprocess.run([sys.executable, "-m", "invoke", "generate", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.integration
def test_cli_check_passes_on_the_committed_files() -> None:
    done = _invoke(REPO_ROOT, "--check", "--json")
    assert done.returncode == 0, done.stderr
    assert '"changed": false' in done.stdout and "Dockerfile.demo" in done.stdout


@pytest.mark.integration
def test_cli_check_fails_on_a_stale_copy_and_generate_repairs_it(tmp_path: Path) -> None:
    root = repo_copy(tmp_path / "repo")
    target = root / "docker" / "Dockerfile.demo"
    target.write_text(target.read_text().replace("--require-hashes", "--require-hash", 1))
    stale = _invoke(root, "--check")
    assert stale.returncode == 1
    assert "docker/Dockerfile.demo missing or stale for profile 'demo'" in stale.stderr
    assert "invoke generate --profile demo" in stale.stderr
    assert "Traceback" not in stale.stderr
    assert _invoke(root, "--profile", "demo").returncode == 0
    assert target.read_bytes() == (REPO_ROOT / "docker" / "Dockerfile.demo").read_bytes()
    assert _invoke(root, "--check").returncode == 0


@pytest.mark.integration
def test_cli_unknown_profile_is_one_line(tmp_path: Path) -> None:
    done = _invoke(REPO_ROOT, "--check", "--profile", "gpu-lr")
    assert done.returncode != 0
    assert "unknown profile 'gpu-lr'" in done.stderr and "Traceback" not in done.stderr


def test_every_profiles_launcher_is_kept_out_of_the_build_context() -> None:
    """The image must not contain its own pin (issue 13): the committed .dockerignore lists
    each profile's launcher, so pin-then-rebuild gives the same digest."""
    from gpurl_tasks.config import load_committed_config
    from gpurl_tasks.dockerfile.context import context_rules, read_dockerignore, updated_dockerignore

    rules = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    for name in load_profile_names(REPO_ROOT):
        config = load_committed_config(REPO_ROOT, name)
        assert config.launcher.path.relative_to(REPO_ROOT).as_posix() in rules
        assert updated_dockerignore(read_dockerignore(REPO_ROOT), context_rules(config)) is None


@pytest.mark.integration
def test_generate_adds_a_missing_launcher_rule_and_check_refuses_it(tmp_path: Path) -> None:
    """In a committed copy whose .dockerignore lost the demo launcher's rule (and its final
    newline): `invoke generate --check` refuses it, `invoke generate` puts it back without
    touching the other lines, and a second run changes nothing."""
    tree = copy_tree(tmp_path / "tree")
    launcher = "examples/demo/cloud/iris/launch_rl_iris.py"
    ignore = tree / ".dockerignore"
    kept = [line for line in ignore.read_text().splitlines() if line != launcher]
    ignore.write_text("\n".join(kept))  # no trailing newline: the append must not join lines
    checked = invoke(tree, "generate", "--check", "--profile", "demo")
    assert checked.returncode != 0 and "would contain its own pin" in checked.stderr, checked.stderr
    assert ignore.read_text() == "\n".join(kept)  # --check writes nothing
    written = invoke(tree, "generate", "--profile", "demo")
    assert written.returncode == 0, written.stderr
    text = ignore.read_text()
    assert text.startswith("\n".join(kept) + "\n") and launcher in text.splitlines()
    again = invoke(tree, "generate", "--profile", "demo")
    assert again.returncode == 0, again.stderr
    assert ignore.read_text() == text


# The demo profile configured for the cluster in a copy's pyproject.toml: the iris backend, a
# registry user and where its prebuilt wheels are published.
_DEMO_AS_CLUSTER = [
    ('workspace = "examples/demo"\nbackend = "local"\n',
     'workspace = "examples/demo"\nbackend = "iris"\n'),
    ('tag-prefix = "demo"\nfloating-tag = "demo"\nuser = ""\n',
     'tag-prefix = "demo"\nfloating-tag = "demo"\nuser = "gpurl"\n'),
    ("[tool.gpurl.profiles.demo.build]\n",
     '[tool.gpurl.profiles.demo.build]\nwheel-base-url = "https://wheels.example/demo"\n'),
]


def _edit(path: Path, edits: list[tuple[str, str]]) -> None:
    text = path.read_text()
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path.write_text(text)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.integration
@pytest.mark.parametrize(("globs", "key"), [
    ('["gpurl_demo_ext-*.whl", "vllm-*.whl"]', "build.vllm-version"),  # an empty version
    ('["gpurl_demo_ext-*.whl", "other_ext-*.whl"]', "build.wheel-globs"),  # nothing pins it
])
def test_demo_as_a_cluster_profile_fetches_its_own_wheel_and_a_bad_pin_writes_nothing(
        tmp_path: Path, globs: str, key: str) -> None:
    from gpurl_tasks.cluster.kaniko import render_script
    from gpurl_tasks.config import load_committed_config

    root = repo_copy(tmp_path / "repo")
    _edit(root / "pyproject.toml", _DEMO_AS_CLUSTER)
    done = _invoke(root, "--profile", "demo")
    assert done.returncode == 0, done.stderr
    demo = load_committed_config(root, "demo")
    built = [build_source_wheel(root / spec[2:], demo.target.python, tmp_path / str(i)).name
             for i, spec in enumerate(demo.build.wheel_specs)]  # what its wheel-builder makes
    for variant in demo.variants:
        script = render_script(demo.for_variant(variant))
        # the wheels `start admit` fetches: the START array's last options
        assert "".join(f"  --wheel {name}\n" for name in built) + ")\n" in script, variant.name
    (committed,) = [line for line in (root / "pyproject.toml").read_text().splitlines()
                    if line.startswith("wheel-globs = ") and "gpurl_demo_ext" in line]
    _edit(root / "pyproject.toml", [(committed + "\n", f"wheel-globs = {globs}\n")])
    before = _tree(root)
    refused = _invoke(root)
    assert refused.returncode != 0
    error, hint = refused.stderr.splitlines()  # one error line and its hint
    assert error.startswith("error: ") and hint.startswith("  hint: set the key it names")
    assert "cannot name the prebuilt wheels of profile 'demo' (variant 'standard')" in refused.stderr
    assert key in refused.stderr and "Traceback" not in refused.stderr
    assert _tree(root) == before


# --- every pin mismatch of every variant in one run; a lock stale against its pyproject ------


@pytest.mark.integration
def test_every_pin_mismatch_of_every_variant_is_named_in_one_run(tmp_path: Path) -> None:
    """The adoption hit one mismatch per run, four runs in a row: now one run names them all,
    each with the table, the key and the value to set (the lock's), and writes nothing."""
    root = repo_copy(tmp_path / "repo")
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    section = text[text.index("[tool.gpurl.profiles.skyrl.build]"):]
    wrong = (section.replace('torch-version = "2.9.1"', 'torch-version = "2.8.0"', 1)
             .replace('cuda-tag = "cu128"', 'cuda-tag = "cu126"', 1)
             .replace('vllm-version = "0.16.0"', 'vllm-version = "0.11.0"', 1))
    text = text.replace(section, wrong).replace(
        'flash-attn-version = "2.8.1"  # the mcore extra', 'flash-attn-version = "2.8.3"  # the mcore extra')
    pyproject.write_text(text)
    before = (root / "docker" / "Dockerfile.skyrl").read_bytes()
    done = _invoke(root, "--profile", "skyrl")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    err = done.stderr
    standard, megatron = ("[tool.gpurl.profiles.skyrl.build]",
                          "[tool.gpurl.profiles.skyrl.variants.megatron.build]")
    for line in (f'{standard} torch-version = "2.9.1" (now "2.8.0"',
                 f'{standard} cuda-tag = "cu128" (now "cu126"',
                 f'{standard} vllm-version = "0.16.0" (now "0.11.0"',
                 f'{megatron} torch-version = "2.9.1" (now "2.8.0"',
                 f'{megatron} flash-attn-version = "2.8.1" (now "2.8.3"'):
        assert line in err, err
    assert "build pin(s) contradict the lock" in err
    assert (root / "docker" / "Dockerfile.skyrl").read_bytes() == before


@pytest.mark.integration
def test_a_lock_stale_against_its_pyproject_fails_generate_check_offline(tmp_path: Path) -> None:
    """As `uv lock --check` would say, without network: a requirement added, dropped or given
    another specifier since the lock was resolved."""
    root = repo_copy(tmp_path / "repo")
    workspace = root / "examples" / "demo" / "pyproject.toml"
    workspace.write_text(workspace.read_text().replace('"pyyaml>=6",', '"pyyaml>=6.1",\n  "rich>=13",'))
    done = _invoke(root, "--check", "--profile", "demo", env_extra={"UV_OFFLINE": "1"})
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert ("examples/demo/uv.lock is stale against examples/demo/pyproject.toml (2 "
            "difference(s)): pyyaml: examples/demo/pyproject.toml asks for >=6.1, the lock was "
            "resolved for >=6; rich: examples/demo/pyproject.toml asks for >=13, the lock was "
            "resolved for nothing") in done.stderr
    assert "run `uv lock` in examples/demo" in done.stderr


def test_the_staleness_check_agrees_with_every_committed_lock() -> None:
    """No finding on a lock uv resolved for its pyproject (the skyrl fixture's conflicting
    extras rewrite markers in the lock's record; markers are not compared)."""
    for name in load_profile_names(REPO_ROOT):
        config = load_config(REPO_ROOT, profile=name, env={})
        assert lock_staleness((config.workspace / "pyproject.toml").read_text(),
                              load_lock(config.lock)) == [], name


@pytest.mark.integration
def test_a_file_every_variant_renders_alike_is_written_and_reported_once(tmp_path: Path) -> None:
    """The envcheck copy and a shared slice belong to both skyrl variants: one line each."""
    root = repo_copy(tmp_path / "repo")
    envcheck = root / "docker" / "gpurl-envcheck.py"
    shared = root / "docker" / "layers" / "skyrl" / "shared" / "01-torch.txt"
    envcheck.unlink()
    shared.write_text(shared.read_text() + "# edited\n")
    done = _invoke(root, "--profile", "skyrl")
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if "gpurl-envcheck.py" in line] == \
        ["docker/gpurl-envcheck.py: written"], done.stdout
    assert sum("1 slice file(s) written" in line for line in done.stdout.splitlines()) == 1, \
        done.stdout
    assert envcheck.read_bytes() == (REPO_ROOT / "docker" / "gpurl-envcheck.py").read_bytes()
    assert shared.read_bytes() == (REPO_ROOT / shared.relative_to(root)).read_bytes()


# --- compiled wheels: what the variants' config must agree on, refused before any write -----

_MEGATRON_BUILD = "\n[tool.gpurl.profiles.gpu-rl.variants.megatron.build]\n"


@pytest.mark.integration
@pytest.mark.parametrize(("edit", "names"), [
    # no arch list: the MANIFEST would record arch-list=- for both variants
    (lambda text: text.replace('cuda-arch-list = "8.0;9.0"', "", 1),
     ("'standard', 'megatron'", "build.cuda-arch-list")),
    # another arch list is another ABI key, but the same wheelhouse and wheel-base-url
    (lambda text: text + _MEGATRON_BUILD + 'cuda-arch-list = "9.0"\n',
     ("'standard', 'megatron'", "build.wheelhouse", "arch-list=9.0", "'megatron'")),
    # the ABI keys agree, the wheelhouses differ: the shared wheel-base-url is the conflict
    (lambda text: text + _MEGATRON_BUILD
     + 'cuda-arch-list = "9.0"\nwheelhouse = "docker/wheelhouse-megatron"\n',
     ("'standard', 'megatron'", "build.wheel-base-url")),
    # one fork commit, two vLLM versions
    (lambda text: text + _MEGATRON_BUILD + 'vllm-version = "0.11.2"\n',
     ("'standard', 'megatron'", "76259c63a", "'0.11.1'", "'0.11.2'", "build.vllm-version")),
    # a fork commit whose version nobody states
    (lambda text: text.replace('vllm-version = "0.11.1"', "", 1),
     ("'standard', 'megatron'", "76259c63a", "build.vllm-version")),
], ids=["no-arch-list", "shared-wheelhouse", "shared-wheel-base-url", "one-fork-two-versions",
        "fork-without-version"])
def test_a_compiled_wheel_config_the_variants_cannot_share_is_refused_writing_nothing(
        tmp_path: Path, edit: Callable[[str], str], names: tuple[str, ...]) -> None:
    """Through the real CLI: exit 2, one `error:` line naming the variants and the key, a hint
    naming the table to edit, and not one file of the checkout changed."""
    root = repo_copy(tmp_path / "repo")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(edit(pyproject.read_text()))
    before = {p: p.read_bytes() for p in (root / "docker").rglob("*") if p.is_file()}
    done = _invoke(root)
    assert done.returncode == 2, done.stdout + done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    for name in names:
        assert name in errors[0], errors[0]
    assert "hint:" in done.stderr and "[tool.gpurl.profiles.gpu-rl" in done.stderr
    after = {p: p.read_bytes() for p in (root / "docker").rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.integration
def test_variants_of_one_abi_key_share_a_location_and_the_generated_files_stay_put(
        tmp_path: Path) -> None:
    """The counterpart: megatron restating the profile's own pins (one ABI key, one vLLM
    version) shares the wheelhouse and URL, and `generate --check` holds."""
    root = repo_copy(tmp_path / "repo")
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + _MEGATRON_BUILD
                         + 'cuda-arch-list = "8.0;9.0"\nvllm-version = "0.11.1"\n')
    done = _invoke(root, "--profile", "gpu-rl", "--check")
    assert done.returncode == 0, done.stderr
