"""rebuild-needed end to end on real git repositories with real uv.lock files.

Each test builds a small repository in a temporary directory (gpurl config, a generated-style
Dockerfile, a workspace pyproject + uv.lock in uv's format version 1 revision 3, some source
and a launcher), commits a change, and asks for the decision against the previous commit.
The lock's install closure comes from gpurl_tasks.lock, as in production.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.config import Config, PythonSelection, TargetSpec, load_config
from gpurl_tasks.errors import LockError
from gpurl_tasks.git import GitError
from gpurl_tasks.rebuild.inputs import closure_entries, provenance_commit, rebuild_needed
from gpurl_tasks.release.pin import Provenance, provenance_comment, rewrite_assignment
from tests.support.rebuild_fixtures import APT, dockerfile

ENV: dict[str, str] = {}
_T = TypeVar("_T")
# name -> (version, dependencies); markers and extras are set per test
BASE_PACKAGES: dict[str, tuple[str, list[str]]] = {
    "numpy": ("2.2.0", []),
    "torch": ("2.11.0", ["numpy", "filelock"]),
    "filelock": ("3.16.1", []),
    "transformers": ("4.57.0", ["numpy", "filelock"]),
    "torchtitan": ("0.2.0", ["torch"]),
    "tyro": ("0.9.1", []),
    "pytest": ("8.3.4", ["iniconfig"]),
    "iniconfig": ("2.0.0", []),
    "appnope": ("0.1.4", []),
    "megatron-core": ("0.14.0", ["numpy"]),
}


def _hash(name: str, version: str, salt: str = "") -> str:
    rng = random.Random(f"{name}=={version}{salt}")
    return "sha256:" + "".join(rng.choice("0123456789abcdef") for _ in range(64))


def lock_text(packages: dict[str, tuple[str, list[str]]], *,
              root_deps: list[tuple[str, str | None]],
              extras: dict[str, list[str]], dev: list[str],
              salts: dict[str, str] | None = None, reverse: bool = False,
              rng: random.Random | None = None) -> str:
    """A uv.lock (version 1, revision 3) for the workspace root `skyrl-train`.

    `reverse` writes packages and dependency lists in the opposite order, and more blank
    lines: the same lock to uv, different bytes; `rng` shuffles them instead.
    """
    salts = salts or {}
    gap = "\n\n" if reverse else "\n"

    def order(items: list[_T]) -> list[_T]:
        if rng is not None:
            return rng.sample(items, len(items))
        return list(reversed(items)) if reverse else list(items)

    def dep_list(deps: list[tuple[str, str | None]]) -> str:
        rows = []
        for name, marker in order(deps):
            rows.append(f'    {{ name = "{name}"' + (f', marker = "{marker}"' if marker else "")
                        + " },")
        return "[\n" + "\n".join(rows) + "\n]"

    blocks = [
        "[[package]]\nname = \"skyrl-train\"\nversion = \"0.1.0\"\n"
        "source = { editable = \".\" }\n"
        f"dependencies = {dep_list(root_deps)}\n\n"
        "[package.optional-dependencies]\n"
        + "".join(f"{e} = {dep_list([(d, None) for d in ds])}\n" for e, ds in extras.items())
        + "\n[package.dev-dependencies]\n"
        + f"dev = {dep_list([(d, None) for d in dev])}\n"
    ]
    for name in order(sorted(packages)):
        version, deps = packages[name]
        file = name.replace("-", "_")
        h = _hash(name, version, salts.get(name, ""))
        base = f"https://files.example.test/{file}"
        block = (f"[[package]]\nname = \"{name}\"\nversion = \"{version}\"\n"
                 "source = { registry = \"https://pypi.org/simple\" }\n")
        if deps:
            block += f"dependencies = {dep_list([(d, None) for d in deps])}\n"
        sdist_hash = _hash(name, version, "s")
        block += (f"sdist = {{ url = \"{base}-{version}.tar.gz\", hash = \"{sdist_hash}\""
                  ", size = 1000 }\n"
                  "wheels = [\n"
                  f"    {{ url = \"{base}-{version}-py3-none-any.whl\", hash = \"{h}\", "
                  "size = 2000, upload-time = \"2025-01-01T00:00:00Z\" },\n]\n")
        blocks.append(block)
    head = 'version = 1\nrevision = 3\nrequires-python = ">=3.12"\n'
    if rng is not None:
        blocks = order(blocks)
    return head + gap + gap.join(blocks[1:] + blocks[:1] if reverse else blocks)


def root_deps(extra: list[tuple[str, str | None]] | None = None) -> list[tuple[str, str | None]]:
    return [("numpy", None), ("torch", None), ("transformers", None),
            ("appnope", "sys_platform == 'darwin'"), *(extra or [])]


def default_lock(packages: dict[str, tuple[str, list[str]]] | None = None,
                 extras: dict[str, list[str]] | None = None, reverse: bool = False,
                 rng: random.Random | None = None) -> str:
    """The base lock with some packages replaced or added, or the ep/megatron extras changed."""
    extras = extras or {"ep": ["torchtitan", "tyro"], "megatron": ["megatron-core"]}
    return lock_text({**BASE_PACKAGES, **(packages or {})}, root_deps=root_deps(),
                     extras=extras, dev=["pytest"], reverse=reverse, rng=rng)


GPURL_PYPROJECT = """[project]
name = "buildrepo"
version = "0"

[tool.gpurl]
default-profile = "gpu-rl"
[tool.gpurl.python]
extras = ["ep"]
no-dev = true
[tool.gpurl.build]
dockerfile = "docker/Dockerfile.gpu-rl"
[tool.gpurl.launcher]
path = "cloud/launch_rl.py"
[tool.gpurl.profiles.gpu-rl]
workspace = "rl"
"""

WORKSPACE_PYPROJECT = """[project]
name = "skyrl-train"
version = "0.1.0"
requires-python = ">=3.12"
dependencies = ["numpy", "torch", "transformers", "appnope; sys_platform == 'darwin'"]

[project.optional-dependencies]
ep = ["torchtitan", "tyro"]
megatron = ["megatron-core"]

[dependency-groups]
dev = ["pytest"]
"""


class Repo:
    """A real git repository in a temporary directory, committed file by file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        exe = shutil.which("git")
        if exe is None:
            if os.environ.get("CI"):
                pytest.fail("git is missing")
            pytest.skip("git is missing")
        self.git_exe = exe
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "ci@example.test")
        self.git("config", "user.name", "ci")
        self.write("pyproject.toml", GPURL_PYPROJECT)
        self.write("docker/Dockerfile.gpu-rl", dockerfile())
        self.write("rl/pyproject.toml", WORKSPACE_PYPROJECT)
        self.write("rl/uv.lock", default_lock())
        self.write("rl/skyrl_train/__init__.py", "VALUE = 1\n")
        self.write("rl/cloud/launch_rl.py", 'DEFAULT_RL_DOCKER_IMAGE = "ghcr.io/x/y@sha256:00"\n')
        self.commit("initial")

    def git(self, *args: str) -> str:
        return subprocess.run([self.git_exe, "-C", str(self.root), *args], check=True,
                              capture_output=True, text=True).stdout.strip()

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def config(self) -> Config:
        return load_config(self.root, env=ENV)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return Repo(tmp_path / "repo")


def decide_after(repo: Repo, change: Callable[[Repo], None]) -> dict[str, object]:
    change(repo)
    repo.commit("change")
    return rebuild_needed(repo.config(), since="HEAD~1", env=ENV).to_json()


def reasons(payload: dict[str, object]) -> list[dict[str, str]]:
    found = payload["reasons"]
    assert isinstance(found, list)
    return found


def test_source_only_change_needs_nothing(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("rl/skyrl_train/__init__.py", "VALUE = 2\n")
        r.write("rl/examples/run.py", "print('hi')\n")
        r.write("rl/pyproject.toml", WORKSPACE_PYPROJECT + "\n[tool.ruff]\nline-length = 99\n")

    payload = decide_after(repo, change)
    assert payload["decision"] == "none" and reasons(payload) == []


def test_lock_change_outside_the_closure_needs_nothing(repo: Repo) -> None:
    """A dev-only and a macOS-only package change; neither is installed in the image."""
    def change(r: Repo) -> None:
        r.write("rl/uv.lock", default_lock(packages={"pytest": ("8.4.0", ["iniconfig"]),
                                                     "appnope": ("0.1.5", [])}))
        # regenerating the Dockerfile records the new lock bytes in a provenance label
        r.write("docker/Dockerfile.gpu-rl", dockerfile(lock_sha="1" * 64))

    before = (repo.root / "rl/uv.lock").read_text()
    payload = decide_after(repo, change)
    assert (repo.root / "rl/uv.lock").read_text() != before
    assert payload["decision"] == "none", payload


def test_version_bump_inside_the_closure_needs_image(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("rl/uv.lock", default_lock(packages={"filelock": ("3.17.0", [])}))

    payload = decide_after(repo, change)
    assert payload["decision"] == "image"
    assert reasons(payload) == [{"kind": "package", "detail": "filelock: 3.16.1 -> 3.17.0"}]


def test_package_added_by_the_ep_extra_needs_image(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("rl/uv.lock", default_lock(
            packages={"docstring-parser": ("0.16", [])},
            extras={"ep": ["torchtitan", "tyro", "docstring-parser"],
                    "megatron": ["megatron-core"]}))

    payload = decide_after(repo, change)
    assert payload["decision"] == "image"
    assert reasons(payload) == [{"kind": "package", "detail": "docstring-parser: added (0.16)"}]


def test_megatron_extra_not_selected_needs_nothing(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("rl/uv.lock", default_lock(packages={"megatron-core": ("0.15.0", ["numpy"])}))

    assert decide_after(repo, change)["decision"] == "none"


def test_harbor_bump_needs_image(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("docker/Dockerfile.gpu-rl", dockerfile({"HARBOR_COMMIT": "a1b2c3d4"}))

    payload = decide_after(repo, change)
    assert payload["decision"] == "image"
    assert reasons(payload) == [{"kind": "harbor", "detail": "HARBOR_COMMIT: f4a6b1a0 -> a1b2c3d4"}]


def test_apt_package_added_needs_image(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("docker/Dockerfile.gpu-rl", dockerfile(apt=(*APT, "infiniband-diags")))

    payload = decide_after(repo, change)
    assert payload["decision"] == "image"
    assert reasons(payload) == [{"kind": "apt", "detail": "stage rl: added infiniband-diags"}]


@pytest.mark.parametrize(("arg", "value", "kind"), [
    ("VLLM_FORK_COMMIT", "0badc0ffee", "vllm-fork-commit"),
    ("FLASH_ATTN_VERSION", "2.8.4", "flash-attn"),
    ("TORCH_VERSION", "2.12.0", "torch"),
])
def test_wheel_pin_bumps_need_wheels(repo: Repo, arg: str, value: str, kind: str) -> None:
    def change(r: Repo) -> None:
        r.write("docker/Dockerfile.gpu-rl", dockerfile({arg: value}))

    payload = decide_after(repo, change)
    assert payload["decision"] == "wheels+image"
    found = reasons(payload)
    assert found[0]["kind"] == kind
    assert found[0]["detail"].endswith(f" -> {value}")
    if arg != "TORCH_VERSION":  # torch is not in the wheel names, the ARG reason carries it
        assert any(r["kind"] == "prebuilt-wheels" for r in found)
        expected = payload["expected_wheels"]
        assert isinstance(expected, dict)
        assert any(value in name for name in expected.values())


def test_lock_torch_bump_needs_wheels(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("rl/uv.lock", default_lock(packages={"torch": ("2.12.0", ["numpy", "filelock"])}))

    payload = decide_after(repo, change)
    assert payload["decision"] == "wheels+image"
    assert reasons(payload) == [{"kind": "torch", "detail": "torch: 2.11.0 -> 2.12.0"}]


def test_reformatted_and_reordered_inputs_need_nothing(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("rl/uv.lock", default_lock(reverse=True))
        r.write("docker/Dockerfile.gpu-rl", dockerfile(
            apt=tuple(reversed(APT)), sep="  \\\n\t  ", quote='"'))

    payload = decide_after(repo, change)
    assert payload["decision"] == "none", payload


def test_extras_selection_change_in_config(repo: Repo) -> None:
    def change(r: Repo) -> None:
        r.write("pyproject.toml", GPURL_PYPROJECT.replace('extras = ["ep"]',
                                                          'extras = ["ep", "megatron"]'))

    payload = decide_after(repo, change)
    assert payload["decision"] == "image"
    assert {r["kind"] for r in reasons(payload)} == {"config", "package"}
    assert any(r["detail"] == "python.extras added megatron (image)" for r in reasons(payload))
    assert {"kind": "package", "detail": "megatron-core: added (0.14.0)"} in reasons(payload)


def test_default_since_is_the_pinned_images_commit(repo: Repo) -> None:
    built = repo.git("rev-parse", "HEAD")
    repo.write("docker/Dockerfile.gpu-rl", dockerfile({"HARBOR_COMMIT": "a1b2c3d4"}))
    repo.commit("harbor bump")
    repo.write("rl/cloud/launch_rl.py",
               f"# built from gpurl-git-sha: {built[:12]} on 2026-01-01\n"
               'DEFAULT_RL_DOCKER_IMAGE = "ghcr.io/x/y@sha256:00"\n')
    repo.commit("pin")
    report = rebuild_needed(repo.config(), env=ENV)
    assert report.since_commit == built
    assert "provenance" in report.since_source
    assert report.decision.decision == "image"  # the harbor bump two commits back


def test_default_since_falls_back_to_previous_commit(repo: Repo) -> None:
    repo.write("docker/Dockerfile.gpu-rl", dockerfile({"HARBOR_COMMIT": "a1b2c3d4"}))
    repo.commit("harbor bump")
    repo.write("rl/skyrl_train/__init__.py", "VALUE = 3\n")
    repo.commit("source")
    report = rebuild_needed(repo.config(), env=ENV)
    assert report.since_ref == "HEAD~1" and report.decision.decision == "none"


def test_uncommitted_working_tree_is_compared(repo: Repo) -> None:
    repo.write("docker/Dockerfile.gpu-rl", dockerfile({"VLLM_FORK_COMMIT": "1234567abc"}))
    report = rebuild_needed(repo.config(), since="HEAD", env=ENV)
    assert report.decision.decision == "wheels+image"


def test_unknown_ref_is_a_clear_error(repo: Repo) -> None:
    with pytest.raises(GitError, match="does not name a commit"):
        rebuild_needed(repo.config(), since="no-such-ref", env=ENV)


def test_provenance_comment_parsing() -> None:
    text = ("IMAGE_NOTES = 1\n# gpu-rl-e03896b7  gpurl-git-sha: E03896B7aa\n"
            "DEFAULT_RL_DOCKER_IMAGE: str = (\n  'ghcr.io/x@sha256:00')\n")
    assert provenance_commit(text, "DEFAULT_RL_DOCKER_IMAGE", "gpu-rl") == "e03896b7aa"
    far = "# gpurl-git-sha: abcdef12\n" + "\n" * 20 + "DEFAULT_RL_DOCKER_IMAGE = 'x'\n"
    assert provenance_commit(far, "DEFAULT_RL_DOCKER_IMAGE", "gpu-rl") is None
    assert provenance_commit("X = 1 # gpurl-git-sha: abcdef12\n", "DEFAULT_RL_DOCKER_IMAGE",
                             "gpu-rl") is None


def test_provenance_from_the_comment_invoke_pin_writes() -> None:
    """The comment comes from the real pin module's writer, not a copy of its format."""
    comment = provenance_comment(Provenance(tag="gpu-rl-e03896b7", layer_count=48,
                                            largest_bytes=3_460_000_000,
                                            total_bytes=22_660_000_000,
                                            date=dt.date(2026, 1, 1)))
    pinned = rewrite_assignment('DEFAULT_RL_DOCKER_IMAGE = "old"\n', "DEFAULT_RL_DOCKER_IMAGE",
                                "ghcr.io/x/y@sha256:" + "0" * 64, comment)
    assert provenance_commit(pinned, "DEFAULT_RL_DOCKER_IMAGE", "gpu-rl") == "e03896b7"
    assert provenance_commit(pinned, "DEFAULT_RL_DOCKER_IMAGE", "other-prefix") is None


def test_dockerfile_absent_at_since_is_one_reason(repo: Repo) -> None:
    repo.git("rm", "-q", "docker/Dockerfile.gpu-rl")
    repo.commit("before the generated Dockerfile")
    repo.write("docker/Dockerfile.gpu-rl", dockerfile())
    repo.commit("generated Dockerfile")
    payload = rebuild_needed(repo.config(), since="HEAD~1", env=ENV).to_json()
    assert payload["decision"] == "wheels+image"
    assert reasons(payload) == [{"kind": "missing-dockerfile",
                                 "detail": "the dockerfile is absent at --since; "
                                           "nothing to compare with"}]


def test_missing_lock_in_working_tree_is_a_clear_error(repo: Repo) -> None:
    (repo.root / "rl/uv.lock").unlink()
    with pytest.raises(LockError, match=r"the lock .* does not exist"):
        rebuild_needed(repo.config(), since="HEAD", env=ENV)


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_closure_is_stable_under_toml_reordering(rng: random.Random) -> None:
    """Real lock parsing: shuffled [[package]] tables and dependency lists, same closure."""
    config = TargetSpec()
    selection = PythonSelection(extras=("ep",))
    base = closure_entries(default_lock(), config, selection)
    shuffled = closure_entries(default_lock(rng=rng), config, selection)
    assert sorted(base) == sorted(shuffled)
    assert {name for name, _, _ in base} == {"filelock", "numpy", "torch", "torchtitan",
                                             "transformers", "tyro"}


PY312 = Path("/root/.pyenv/versions/3.12.1/bin/python3.12")


@pytest.mark.integration
@pytest.mark.parametrize("lock", [
    default_lock(),
    default_lock(packages={"pytest": ("8.4.0", ["iniconfig"]), "appnope": ("0.1.5", [])}),
    default_lock(packages={"docstring-parser": ("0.16", [])},
                 extras={"ep": ["torchtitan", "tyro", "docstring-parser"],
                         "megatron": ["megatron-core"]}),
], ids=["base", "dev-and-macos-bump", "ep-adds-a-package"])
def test_real_uv_installs_exactly_the_closure(tmp_path: Path, lock: str) -> None:
    """The hand-written locks are real: uv's own frozen dry run installs the same set."""
    from uv import find_uv_bin

    python = str(PY312) if PY312.exists() else shutil.which("python3.12")
    if python is None:
        if os.environ.get("CI"):
            pytest.fail("python3.12 is missing")
        pytest.skip("python3.12 is missing")
    (tmp_path / "pyproject.toml").write_text(WORKSPACE_PYPROJECT)
    (tmp_path / "uv.lock").write_text(lock)
    done = subprocess.run(
        [find_uv_bin(), "sync", "--frozen", "--dry-run", "--no-dev", "--extra", "ep",
         "--python", python], cwd=tmp_path, capture_output=True, text=True, check=True,
        env={**os.environ, "UV_OFFLINE": "1", "UV_NO_CONFIG": "1"})
    installed = {line.split()[1].split("==")[0] for line in done.stderr.splitlines()
                 if line.startswith(" + ") and "==" in line}
    ours = {name for name, _, _ in closure_entries(lock, TargetSpec(),
                                                   PythonSelection(extras=("ep",)))}
    assert installed == ours


def test_a_change_to_the_sources_the_wheel_builder_copies_needs_wheels(tmp_path: Path) -> None:
    """The demo's wheel-builder copies examples/demo/ext/ (a C extension): an edit there
    compiles another wheel, while an edit to the workspace's own source needs nothing."""
    from tests.support.checkout import repo_copy
    from tests.support.git import git

    root = repo_copy(tmp_path / "repo")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "base")
    config = load_config(root, profile="demo", env=ENV)
    ext = next(p for p in sorted((root / "examples/demo/ext").rglob("*.c")))
    ext.write_text(ext.read_text() + "\n/* an edit */\n")
    report = rebuild_needed(config, since="HEAD", env=ENV)
    assert report.verdict == "wheels+image"
    assert [r.to_json() for r in report.decision.reasons] == [{
        "kind": "wheel-source",
        "detail": "files the wheel-builder copies changed: ~" + ext.relative_to(root).as_posix()}]
    git(root, "checkout", "-q", "--", ".")
    new_file = root / "examples/demo/ext/NOTES.txt"  # untracked, but in the build context
    new_file.write_text("x\n")
    assert rebuild_needed(config, since="HEAD", env=ENV).verdict == "wheels+image"
    new_file.unlink()
    source = next(p for p in sorted((root / "examples/demo/src").rglob("*.py")))
    source.write_text(source.read_text() + "\n# an edit\n")
    assert rebuild_needed(config, since="HEAD", env=ENV).verdict == "none"


def test_each_pin_reads_its_own_comment_when_pins_sit_together() -> None:
    """The index pin and each platform's pin are lines apart and pinned at other commits:
    each variable's commit is its own comment's, never a neighbour's."""
    text = ("# gpurl pin: multiarch-aaaaaaa-index, image index, linux/amd64 5 layers\n"
            'DEFAULT_RL_DOCKER_IMAGE = "r/x@sha256:00"\n'
            "# gpurl pin: multiarch-bbbbbbb, linux/amd64, 5 layers\n"
            'DEFAULT_RL_AMD64_DOCKER_IMAGE = "r/x@sha256:01"\n'
            "# gpurl pin: multiarch-gb200-ccccccc, linux/arm64, 5 layers\n"
            'DEFAULT_RL_ARM64_DOCKER_IMAGE = "r/x@sha256:02"\n')
    assert provenance_commit(text, "DEFAULT_RL_DOCKER_IMAGE", "multiarch") == "aaaaaaa"
    assert provenance_commit(text, "DEFAULT_RL_AMD64_DOCKER_IMAGE", "multiarch") == "bbbbbbb"
    assert provenance_commit(text, "DEFAULT_RL_ARM64_DOCKER_IMAGE", "multiarch-gb200") == "ccccccc"
    assert provenance_commit(text, "DEFAULT_RL_DOCKER_IMAGE", "multiarch-gb200") is None
    assert provenance_commit(text, "DEFAULT_RL_AMD64_DOCKER_IMAGE", "multiarch-gb200") is None
