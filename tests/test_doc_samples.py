"""The samples of README.md and docs/*.md against real output, so they cannot drift.

Each sample (tests/support/doc_samples.py) is run for real with today's code: read-only
commands on this checkout (`invoke build --dry-run` with a stand-in KUBECONFIG file and token: a
dry run touches no cluster and no registry; `invoke plan` on the real SkyRL lock of the skyrl
fixture), and the ones that need a git history in a scratch copy the sample names. No sample
builds an image. The README's exit-code table is checked against the enum and the module map
against the tree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpurl_tasks.errors import ExitCode
from gpurl_tasks.values import parse_size
from tests.conftest import REPO_ROOT
from tests.support.checkout import repo_copy, skyrl_at
from tests.support.doc_samples import ELIDED, Sample, fits, normalize, samples
from tests.support.git import git
from tests.support.pusher import push_image, random_layer, tar_gz_layer
from tests.support.registry_server import running_registry

DOCS = ("README.md", *sorted(p.relative_to(REPO_ROOT).as_posix()
                             for p in (REPO_ROOT / "docs").glob("*.md")))
ALL = samples(REPO_ROOT, DOCS)


def _run(root: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPURL_", "GHCR_"))}
    return subprocess.run([sys.executable, "-m", *argv], cwd=root, env={**base, **env},
                          capture_output=True, text=True, timeout=300, check=False)


def _committed(root: Path, message: str) -> Path:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)
    return root


def _skyrl_lock_bump(root: Path) -> Path:
    """SkyRL's older real lock with its generated files committed, then this checkout's lock
    and generated files on top (a real lock bump, regenerated as the workflow says)."""
    repo_copy(root)
    skyrl_at(root, "021b9d65b")
    done = _run(root, ["invoke", "generate", "--profile", "skyrl"], {})
    assert done.returncode == 0, done.stderr
    git(root, "init", "-q")
    _committed(root, "the older lock")
    for name in ("pyproject.toml", "examples/skyrl/skyrl-train/uv.lock",
                 "examples/skyrl/skyrl-train/pyproject.toml"):
        shutil.copy(REPO_ROOT / name, root / name)
    shutil.rmtree(root / "docker")
    shutil.copytree(REPO_ROOT / "docker", root / "docker", symlinks=True)
    return _committed(root, "the lock bump")


def _skyrl_source_edit(root: Path) -> Path:
    """This checkout, then one commit that edits only the skyrl workspace's Python source."""
    repo_copy(root)
    git(root, "init", "-q")
    _committed(root, "this checkout")
    source = root / "examples" / "skyrl" / "skyrl-train" / "skyrl_train" / "__init__.py"
    source.write_text(source.read_text() + "\nTRAINING_STEPS = 2\n")
    return _committed(root, "a source-only change")


def _gpu_rl_fork_edit(root: Path) -> Path:
    """This checkout, then one commit that edits only gpu-rl's fork commit in pyproject.toml
    (README workflow 2, step 1: before `invoke generate`)."""
    repo_copy(root)
    git(root, "init", "-q")
    _committed(root, "this checkout")
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text()
    pin = 'vllm-fork-commit = "76259c63a"'
    assert text.count(pin) == 2, "gpu-rl's and skyrl's pins"
    pyproject.write_text(text.replace(pin, 'vllm-fork-commit = "1111111aa"', 1))
    return _committed(root, "a fork bump")


# The registry host a page writes; a sample in the `registry` scenario talks to its own.
DOC_REGISTRY = "127.0.0.1:5005"


@dataclasses.dataclass(frozen=True)
class Setting:
    root: Path
    registry: str = ""  # the real host standing for DOC_REGISTRY


def _registry_image(tmp: Path, stack: contextlib.ExitStack) -> Setting:
    """A loopback registry of its own holding one image shaped like a small slice build (its
    layers made by the test's own pusher, not by gpurl), one slice layer over a 1 MB cap."""
    server = stack.enter_context(running_registry(tmp / "registry"))
    run = "RUN /bin/sh -c "
    install = run + "uv pip install --no-deps --require-hashes -r /tmp/gpurl-layers/"
    push_image(server.url, "org/img", [
        tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs.tar /"),
        random_layer(300_000, run + "apt-get update && apt-get install -y ca-certificates", seed=1),
        tar_gz_layer({"tmp/gpurl-layers/pyyaml.txt": b"pyyaml==6.0.3\n"},
                     "COPY docker/layers/demo/shared/09-pyyaml.txt /tmp/gpurl-layers/pyyaml.txt"),
        random_layer(800_000, install + "pyyaml.txt", seed=2),
        random_layer(1_500_000, install + "pillow.txt", seed=3),
        tar_gz_layer({"app/README": b"demo\n"}, "COPY . /app"),
    ], tag="demo-1111111")
    return Setting(REPO_ROOT, registry=server.host)


SCENARIOS: dict[str, Callable[[Path, contextlib.ExitStack], Setting]] = {
    "skyrl-lock-bump": lambda tmp, _: Setting(_skyrl_lock_bump(tmp)),
    "skyrl-source-edit": lambda tmp, _: Setting(_skyrl_source_edit(tmp)),
    "gpu-rl-fork-edit": lambda tmp, _: Setting(_gpu_rl_fork_edit(tmp)),
    "registry-image": _registry_image,
}


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Setting]]:
    with contextlib.ExitStack() as stack:
        @functools.cache
        def make(name: str) -> Setting:
            return SCENARIOS[name](tmp_path_factory.mktemp(name), stack) if name \
                else Setting(REPO_ROOT)
        yield make


def test_the_samples_are_found() -> None:
    """The parser sees the samples the pages are known to hold (a broken parser finds none)."""
    docs = {s.doc for s in ALL}
    assert {"README.md", "docs/plan.md", "docs/build.md", "docs/rebuild.md"} <= docs
    assert set(SCENARIOS) == {s.scenario for s in ALL if s.scenario}, "a scenario no sample uses"
    for sample in ALL:
        assert sample.command.startswith("invoke "), f"{sample.id}: only invoke samples run"
        assert any(line != ELIDED for line in sample.expected), f"{sample.id} shows no output"


@pytest.mark.integration
@pytest.mark.parametrize("sample", ALL, ids=[s.id for s in ALL])
def test_sample_is_the_real_output(sample: Sample, tmp_path: Path,
                                   setting: Callable[[str], Setting]) -> None:
    here = setting(sample.scenario)
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    command = sample.command.replace(DOC_REGISTRY, here.registry or DOC_REGISTRY)
    done = _run(here.root, shlex.split(command),
                {"KUBECONFIG": str(kube), "HOME": str(tmp_path),
                 "GPURL_REGISTRY_TOKEN": "ghp_" + "x" * 36})
    assert done.returncode == sample.exit_code, done.stderr
    stdout = done.stdout.replace(here.registry, DOC_REGISTRY) if here.registry else done.stdout
    real = normalize(stdout, (here.root, REPO_ROOT)).strip("\n").splitlines()
    expected = [normalize(line, (REPO_ROOT,)) for line in sample.expected]
    assert fits(expected, real), f"{sample.id}: the real output is\n" + "\n".join(real)


def test_elision_matches_only_what_it_stands_for() -> None:
    assert fits(["a", ELIDED, "d"], ["a", "b", "c", "d"])
    assert fits(["a", ELIDED, "b"], ["a", "b"])
    assert not fits(["a", ELIDED, "d"], ["a", "b", "c"])
    assert not fits(["a", "b"], ["a", "b", "c"])
    assert not fits(["b", ELIDED], ["a", "b"])


def test_exit_code_table_is_the_enum() -> None:
    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("## Exit codes"):]
    section = section[:section.index("\n## ", 1)]
    rows = re.findall(r"^\| *(\d+) *\| *([A-Z_]+) *\| *(\S.*?) *\|$", section, re.M)
    assert {(int(code), name) for code, name, _ in rows} == {(e.value, e.name) for e in ExitCode}
    assert len(rows) == len(ExitCode)


def test_module_map_lists_every_module() -> None:
    """docs/architecture.md's table names each module under gpurl_tasks/ once, with a purpose."""
    text = (REPO_ROOT / "docs" / "architecture.md").read_text()
    rows = re.findall(r"^\| `([\w/]+\.py)` \| *(.*?) *\|$", text, re.M)
    listed = [name for name, _ in rows]
    package = REPO_ROOT / "gpurl_tasks"
    tree = sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py"))
    assert sorted(listed) == tree, {"missing": sorted(set(tree) - set(listed)),
                                    "gone": sorted(set(listed) - set(tree))}
    assert len(listed) == len(set(listed))
    assert all(purpose for _, purpose in rows)


def test_config_reference_is_current() -> None:
    """docs/config.md is what `invoke generate` renders from today's fields, one row per key."""
    from gpurl_tasks import config
    from gpurl_tasks.configdoc import PAGE, render

    page = (REPO_ROOT / PAGE).read_text()
    assert page == render(), "docs/config.md is stale: run `invoke generate`"
    rows = re.findall(r"^\| `([a-z0-9.-]+)` \| (.+?) \| (.+?) \| (.+?) \| `(GPURL_\w+)` \|", page, re.M)
    assert [key for key, *_ in rows] == list(config._known_keys())
    for key, _type, _default, _where, variable in rows:
        assert config.environment_value(key, {variable: "x"}) == "x", key  # the real variable
    # a size's default reads back as the field's default (the one parser of sizes)
    defaults = {key: default.strip("`") for key, _, default, _, _ in rows}
    for section, cls in config._SECTIONS.items():
        for field in dataclasses.fields(cls):
            key = f"{section}.{field.name.replace('_', '-')}"
            if config._key_of(field).size and field.default is not None:
                assert parse_size(defaults[key]) == field.default, key


def test_ci_runs_the_test_command_the_readme_writes() -> None:
    """.ci/run runs "the README's test command": the README must still write it."""
    ci = (REPO_ROOT / ".ci" / "run").read_text().splitlines()
    command = next(line for line in reversed(ci) if line.strip() and not line.startswith("#"))
    assert command in (REPO_ROOT / "README.md").read_text()
