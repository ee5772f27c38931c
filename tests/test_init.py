"""`gpurl init` (issue 49): it adopts a scratch copy of the team fixture (examples/team) in one
command, from the real lock uv wrote, and the config it writes loads as the variants asked for;
the pyproject edit keeps every other byte; bad input is one `error:` line, a hint, exit 2 and
no file written; what it cannot tell is named all at once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.adopt.init import (
    InitRequest,
    PlannedVariant,
    adopt,
    find_pin_table,
    lock_platforms,
    parse_variant,
    plan_adoption,
    python_of,
    render_block,
    with_tool_tables,
)
from gpurl_tasks.adopt.shims import SHIMS
from gpurl_tasks.config import load_config
from gpurl_tasks.errors import ConfigError, GpurlError
from tests.conftest import REPO_ROOT
from tests.support.local_parts import need, uv
from tests.support.team_fixture import TEAM, fetch_pypi_wheels, serve_team

TEAM_VARIANTS = ("standard=vllm,fsdp", "megatron=vllm,megatron")


@pytest.fixture
def team(tmp_path: Path) -> Path:
    """A scratch copy of the team fixture: the user's repository."""
    root = tmp_path / "team"
    shutil.copytree(TEAM, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _init(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`invoke init ARGS` as a user runs it in their repository (cwd), gpurl's tasks from this
    checkout (--search-root: the installed `gpurl` entry point is another engineer's)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPURL_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run([sys.executable, "-m", "invoke", "--search-root", str(REPO_ROOT), "init",
                           *args], cwd=root, env=env, capture_output=True, text=True, timeout=120)


# --- pure parts ---------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "minor"), [
    ("==3.12.*", "3.12"), (">=3.11,<3.12", "3.11"), ("~=3.10.4", "3.10"), (">=3.10", None),
    (None, None), ("", None), ("not a specifier", None)])
def test_the_image_python_is_the_one_requires_python_allows(spec: str | None,
                                                            minor: str | None) -> None:
    assert python_of(spec) == minor


def test_a_variant_is_a_name_and_its_extras() -> None:
    assert parse_variant("standard=vllm,fsdp") == ("standard", ("vllm", "fsdp"))
    assert parse_variant("plain=") == ("plain", ())
    assert parse_variant("m=Flash_Attn") == ("m", ("flash-attn",))  # normalized as the lock
    for bad in ("standard", "Bad Name=vllm", "=vllm"):
        with pytest.raises(ConfigError):
            parse_variant(bad)


_KEY = st.from_regex(r"[a-z][a-z0-9-]{0,8}", fullmatch=True)
_VALUE = st.one_of(st.integers(-5, 5).map(str), st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12).map(
        lambda s: json.dumps(s, ensure_ascii=False)))
_TABLE_NAME = st.sampled_from(["project", "tool.uv", "tool.ruff", "build-system", "tool.other",
                               "tool.gpurlish", "project.optional-dependencies"])


@st.composite
def _pyprojects(draw: st.DrawFn) -> str:
    """A pyproject of distinct tables with keys, comments and blank lines (no [tool.gpurl])."""
    parts = []
    for name in draw(st.lists(_TABLE_NAME, unique=True, max_size=5)):
        if draw(st.booleans()):
            parts.append(f"# about {name}\n")
        parts.append(f"[{name}]\n")
        for key in draw(st.lists(_KEY, unique=True, max_size=4)):
            parts.append(f"{key} = {draw(_VALUE)}\n")
        parts.append(draw(st.sampled_from(["", "\n", "\n\n", "# trailing note\n\n"])))
    return "".join(parts)


_BLOCKS = st.sampled_from([
    '# gpurl\n[tool.gpurl]\ndefault-profile = "a"\n',
    '[tool.gpurl]\ndefault-profile = "b"\n\n[tool.gpurl.profiles.b]\nworkspace = "."\n',
])


@given(_pyprojects(), _BLOCKS, _BLOCKS)
def test_the_pyproject_edit_keeps_every_other_byte(text: str, block: str, again: str) -> None:
    written = with_tool_tables(text, block)
    assert written.startswith(text.rstrip("\n"))  # the user's text, byte for byte
    assert written.endswith(block)
    assert tomllib.loads(written)["tool"]["gpurl"] == tomllib.loads(block)["tool"]["gpurl"]
    rewritten = with_tool_tables(written, again)  # --force: only the gpurl tables change
    assert rewritten == with_tool_tables(text, again)


@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20))
def test_any_workspace_path_is_written_as_valid_toml(path: str) -> None:
    block = render_block(profile="p", workspace=Path(path), python="3.12", registry="ghcr.io/o/i",
                         variants=(PlannedVariant(name="s", extras=("x",), arch="x86_64"),),
                         clusters={}, arch_list=None, table=None)
    assert tomllib.loads(block)["tool"]["gpurl"]["profiles"]["p"]["workspace"] == \
        (Path(path).as_posix() or ".")


def test_tables_after_the_gpurl_ones_stay_in_place() -> None:
    text = ('[project]\nname = "x"\n\n# ours\n[tool.gpurl]\nworkspace = "old"\n\n'
            '[tool.gpurl.python]\nextras = []\n\n# about ruff\n[tool.ruff]\nline-length = 1\n')
    written = with_tool_tables(text, '[tool.gpurl]\nworkspace = "new"\n')
    assert written == ('[project]\nname = "x"\n\n\n# about ruff\n[tool.ruff]\nline-length = 1\n'
                       '\n[tool.gpurl]\nworkspace = "new"\n')


def test_an_inline_gpurl_table_is_refused() -> None:
    with pytest.raises(ConfigError, match="cannot edit"):
        with_tool_tables('[tool]\ngpurl = { workspace = "." }\n', '[tool.gpurl]\nworkspace = "."\n')


def test_the_team_pin_table_is_found() -> None:
    table = find_pin_table(TEAM, None)
    assert table is not None
    assert table.path == Path("cloud/iris/gpu_rl_images.py")
    assert table.table == "GPU_RL_IMAGES"
    assert table.repository == "ghcr.io/team-example/teamrl"
    assert table.commits == ("SOURCE_COMMIT", "HARBOR_COMMIT")
    assert set(table.clusters.values()) == {"amd64", "arm64"}


def test_the_platforms_are_the_linux_machines_the_lock_was_resolved_for() -> None:
    from gpurl_tasks.plan.lock import load_lock, parse_lock

    assert lock_platforms(load_lock(TEAM / "uv.lock"), "3.11") == ("x86_64", "aarch64")  # not macOS
    universal = parse_lock('version = 1\nrevision = 3\nrequires-python = ">=3.11"\n')
    assert lock_platforms(universal, "3.11") == ("x86_64", "aarch64")


def test_two_pin_tables_are_not_chosen_between(team: Path) -> None:
    table = team / "cloud" / "iris" / "gpu_rl_images.py"
    (team / "cloud" / "sft_images.py").write_text(table.read_text().replace("teamrl", "sft"))
    with pytest.raises(ConfigError, match="several pin table modules") as refused:
        find_pin_table(team, None)
    assert refused.value.hint is not None and "--pin-table" in refused.value.hint
    chosen = find_pin_table(team, "cloud/sft_images.py")
    assert chosen is not None and chosen.repository == "ghcr.io/team-example/sft"


# --- init on the team fixture -------------------------------------------------------------


def test_init_adopts_the_team_repository(team: Path) -> None:
    before = (team / "pyproject.toml").read_text()
    adoption = adopt(InitRequest(root=team, variants=TEAM_VARIANTS))
    after = (team / "pyproject.toml").read_text()
    assert after.startswith(before)  # the user's text untouched, the config appended
    config = load_config(team, profile=None, env={})
    by_name = {v.name: v for v in config.variants}
    assert list(by_name) == ["standard", "megatron", "standard-arm64", "megatron-arm64"]
    assert [v.name for v in adoption.variants] == list(by_name)
    table = find_pin_table(team, None)
    assert table is not None
    for variant in config.variants:
        base, _, oci = variant.name.partition("-")
        extras = dict(parse_variant(v) for v in TEAM_VARIANTS)[base]
        assert variant.python.extras == extras
        assert variant.target.arch == {"": "x86_64", "arm64": "aarch64"}[oci]
        assert variant.target.python == "3.11"  # requires-python ==3.11.*
        assert table.clusters[variant.cluster.name] == (oci or "amd64")
        assert f"{variant.registry.host}/{variant.registry.repository}" == table.repository
    assert config.workspace == team.resolve()
    for path, text in SHIMS.items():
        assert (team / path).read_text() == text


def test_dry_run_prints_the_config_and_writes_nothing(team: Path) -> None:
    before = _snapshot(team)
    done = _init(team, *[f"--variant={v}" for v in TEAM_VARIANTS], "--dry-run", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert _snapshot(team) == before
    assert document["dry_run"] is True
    assert set(document["files"].values()) == {"would write"}
    written = with_tool_tables(before["pyproject.toml"].decode(), document["config"])
    (team / "pyproject.toml").write_text(written)  # what it would write is a loadable config
    assert len(load_config(team, profile=None, env={}).variants) == 4


def test_a_lock_in_a_subdirectory_is_the_workspace(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    shutil.copytree(TEAM, repository / "rl")
    (repository / "pyproject.toml").write_text('[project]\nname = "umbrella"\nversion = "0"\n')
    adopt(InitRequest(root=repository, variants=("standard=vllm",), platforms=("amd64",),
                      registry="registry.example:5000/org/rl"))
    config = load_config(repository, profile=None, env={})
    assert config.workspace == (repository / "rl").resolve()
    assert config.lock == (repository / "rl" / "uv.lock").resolve()
    assert [(v.name, v.target.arch) for v in config.variants] == [("standard", "x86_64")]
    assert config.variant.registry.host == "registry.example:5000"
    assert config.variant.registry.repository == "org/rl"


def _refused(team: Path, *args: str) -> str:
    """The one error init answers `args` with; nothing in the repository changed."""
    before = _snapshot(team)
    done = _init(team, *args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("  hint: ")
    assert _snapshot(team) == before
    return done.stderr


def test_an_unknown_extra_is_refused(team: Path) -> None:
    error = _refused(team, "--variant", "standard=vlm,fsdp")
    assert "'vlm'" in error and "did you mean 'vllm'" in error


def test_conflicting_extras_are_refused(team: Path) -> None:
    error = _refused(team, "--variant", "mixed=cpu,vllm")
    assert "conflicting" in error and "'cpu'" in error and "'vllm'" in error


def test_a_platform_the_lock_was_not_resolved_for_is_refused(team: Path) -> None:
    """A real lock of the fixture's root project resolved for x86_64 only (no dependencies,
    so uv locks it offline)."""
    pyproject = team / "pyproject.toml"
    text = pyproject.read_text()
    text = re.sub(r"(?ms)^dependencies = .*?$", "dependencies = []", text, count=1)
    text = re.sub(r"(?ms)^\[project.optional-dependencies\].*?(?=^\[build-system\])", "", text)
    text = re.sub(r"(?ms)^conflicts = \[.*?^\]\n", "", text)
    text = re.sub(r"(?ms)^\[tool.uv.sources\].*?(?=^\[\[tool.uv.index\]\])", "", text)
    text = text.replace("  \"sys_platform == 'linux' and platform_machine == 'aarch64'\",\n", "")
    pyproject.write_text(text)
    subprocess.run([uv(), "lock", "--offline"], cwd=team, check=True, capture_output=True,
                   env={**os.environ, "UV_CACHE_DIR": str(team.parent / "uv-cache")})
    error = _refused(team, "--platform", "arm64")
    assert "not resolved for linux aarch64" in error and "environments" in error


def test_a_project_without_a_lock_is_refused(team: Path) -> None:
    (team / "uv.lock").unlink()
    assert "uv lock" in _refused(team, "--variant", "standard=vllm")


def test_a_variant_named_like_another_ones_platform_image_is_refused(team: Path) -> None:
    assert "also the name" in _refused(team, "--variant", "standard=vllm",
                                       "--variant", "standard-arm64=fsdp")


def test_a_pyproject_that_is_not_toml_is_refused(team: Path) -> None:
    (team / "pyproject.toml").write_text((team / "pyproject.toml").read_text() + "[broken\n")
    assert "is not valid TOML" in _refused(team, "--variant", "standard=vllm")


def test_an_adopted_repository_changes_only_with_force(team: Path) -> None:
    adopt(InitRequest(root=team, variants=TEAM_VARIANTS))
    assert "--force" in _refused(team, "--variant", "standard=vllm")
    done = _init(team, "--variant", "standard=vllm", "--platform", "x86_64", "--force")
    assert done.returncode == 0, done.stderr
    config = load_config(team, profile=None, env={})
    assert [(v.name, v.python.extras) for v in config.variants] == [("standard", ("vllm",))]


def test_every_missing_input_is_named_in_one_run(team: Path) -> None:
    """No pin table (so no registry, no clusters), and flash-attn with no wheel for x86_64 in
    the lock (its wheel entry removed: the image would build it from source)."""
    (team / "cloud" / "iris" / "gpu_rl_images.py").unlink()
    lock = (team / "uv.lock").read_text()
    wheel = re.search(r'(?m)^    \{ url = "[^"]*flash_attn-[^"]*x86_64\.whl", hash = "[^"]*" \},\n', lock)
    assert wheel is not None
    (team / "uv.lock").write_text(lock.replace(wheel.group(0), ""))
    error = _refused(team, *[f"--variant={v}" for v in TEAM_VARIANTS])
    first = error.splitlines()[0]
    assert "3 thing(s)" in first
    assert "--registry" in first and "--cuda-arch-list" in first and "flash-attn" in first
    assert "--cluster aarch64=" in first
    done = _init(team, *[f"--variant={v}" for v in TEAM_VARIANTS], "--registry=ghcr.io/o/i",
                 "--cuda-arch-list=9.0;10.0", "--cluster=aarch64=gb200-cluster")
    assert done.returncode == 0, done.stderr
    config = load_config(team, profile=None, env={})
    assert {v.build.cuda_arch_list for v in config.variants} == {"9.0;10.0"}
    assert {v.cluster.name for v in config.variants if v.target.arch == "aarch64"} == {"gb200-cluster"}


def test_a_differing_tasks_py_is_kept_unless_forced(team: Path) -> None:
    mine = "from invoke import task\n\n@task\ndef hello(c):\n    pass\n"
    (team / "tasks.py").write_text(mine)
    (team / "noxfile.py").write_text(SHIMS["noxfile.py"])
    adoption = adopt(InitRequest(root=team, variants=TEAM_VARIANTS))
    assert (team / "tasks.py").read_text() == mine
    assert adoption.files == {"tasks.py": "kept (differs from gpurl's)", "noxfile.py": "unchanged"}
    assert "merge by hand: 'from gpurl_tasks.collection import ns" in adoption.human()
    adopt(InitRequest(root=team, variants=TEAM_VARIANTS, force=True))
    assert (team / "tasks.py").read_text() == SHIMS["tasks.py"]


def test_init_plans_without_touching_a_file(team: Path) -> None:
    before = _snapshot(team)
    adoption = plan_adoption(InitRequest(root=team, variants=TEAM_VARIANTS))
    assert _snapshot(team) == before
    assert adoption.registry == "ghcr.io/team-example/teamrl"
    assert adoption.registry_from == "cloud/iris/gpu_rl_images.py"


# --- the first generate after init --------------------------------------------------------


@pytest.mark.integration
def test_the_first_generate_names_what_is_missing_then_succeeds(team: Path, tmp_path: Path) -> None:
    """After init, generate names every size the lock lacks in one run (URL wheels and the
    hashless torch carry none); `sizes --probe` fetches them from the fixture's loopback servers
    for every variant; then generate writes the Dockerfiles. Called through the modules with
    the scratch repository as root (today's CLI works on gpurl's own checkout only)."""
    from gpurl_tasks.dockerfile.generate import generate_profiles
    from gpurl_tasks.plan.probe import survey_sizes

    adopt(InitRequest(root=team, variants=TEAM_VARIANTS))
    with pytest.raises(GpurlError) as missing:
        generate_profiles(team, None, check=False, repack=False)
    for name in ("flash-attn==2.8.3", "torch==2.13.0+cu132", "vllm=="):
        assert name in missing.value.message
    try:
        pypi = fetch_pypi_wheels(tmp_path / "pypi")
    except GpurlError as exc:
        need(False, f"cannot download the fixture's PyPI wheels: {exc}")
    assert pypi
    with serve_team(tmp_path / "pypi", tmp_path / "serve"):
        configs = tuple(load_config(team, profile=None, env={}, variant=variant.name)
                        for variant in load_config(team, profile=None, env={}).variants)
        assert survey_sizes(configs, probe=True, dry_run=False, progress=lambda _: None).exit_code == 0
    generate_profiles(team, None, check=False, repack=False)
    assert (team / "docker" / "Dockerfile.gpu-rl").is_file()
