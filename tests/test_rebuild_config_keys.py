"""rebuild-needed decides from the config: every declared key, edited alone and committed, gets
the answer its declared class gives (issue: a pin edited in pyproject.toml answered `none`).

The keys and their classes are read from the declarations (config.declared_bakes), so a key
added later is edited here too, and fails until it has a class and a valid other value below.
Each edit is a real commit in a real git repository (tests/test_rebuild_git.py's small
workspace with a real-format uv.lock); nothing is regenerated, as a user who has not yet run
`invoke generate` has it. A second test pins the classes the runbook names (section 9) so the
declarations themselves cannot drift to `none`.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import pytest

from gpurl_tasks import config as cfg
from gpurl_tasks.rebuild.fingerprint import DECISIONS
from gpurl_tasks.rebuild.inputs import rebuild_needed
from tests.test_rebuild_git import ENV, GPURL_PYPROJECT, Repo

PROFILE = "tool.gpurl.profiles.gpu-rl"
ANSWER = {"wheels": "wheels+image", "image": "image", "none": "none"}

# A valid value other than the fixture's, for every key whose type alone does not give one
# (strings and lists have grammars of their own: values.py).
OTHER: dict[str, Any] = {
    "python.extras": ["ep", "megatron"],
    "python.groups": ["dev"],
    "target.python": "3.13",
    "target.arch": "aarch64",
    "target.glibc": "2.28",
    "registry.host": "registry.example.test",
    "registry.repository": "team/other-image",
    "registry.user": "someone",
    "registry.tag-prefix": "other-prefix",
    "registry.floating-tag": "other-floating",
    "build.base-image": "nvidia/cuda:12.9.1-cudnn-devel-ubuntu22.04",
    "build.torch-version": "2.12.0",
    "build.cuda-tag": "cu129",
    "build.flash-attn-version": "2.8.4",
    "build.vllm-fork-repo": "https://github.com/example/vllm.git",
    "build.vllm-fork-commit": "1111111aa",
    "build.vllm-version": "0.12.0",
    "build.harbor-repo": "https://github.com/example/harbor.git",
    "build.harbor-commit": "2222222bb",
    "build.wheel-base-url": "https://wheels.example.test/gpu-rl",
    "build.apt-packages": ["ca-certificates", "zlib1g"],
    "build.index-url": "https://pypi.example.test/simple",
    "build.uv-version": "0.13.10",
    "build.builder-apt-packages": ["build-essential"],
    "build.builder-extra-index-url": "https://download.example.test/whl/cu129",
    "build.builder-requirements": ["setuptools>=78"],
    "build.wheel-specs": ["flash-attn==2.8.4"],
    "build.wheel-globs": ["flash_attn-*.whl"],
    "build.import-asserts": ["import numpy"],
    "build.gpu-asserts": ["assert torch.ones(1, device='cuda').item() == 1"],
    "build.import-names": ["yaml=pyyaml"],
    "build.cuda-arch-list": "8.0;9.0;10.0",
    "build.source-url": "https://github.com/example/other-repository",
    "build.venv": "/opt/other/envs/rl",
    "build.post-install": ["cloudpickle==3.1.3"],
    "build.pip-check-allow": ["botocore .* has requirement"],
    "build.build-args": ["SOME_ARG=1"],
    "launcher.python-variable": "OTHER_PYTHON",
    "cluster.name": "cw-us-east-08a",
    "cluster.controller-url": "http://127.0.0.1:18765",
    "cluster.memory": "256GB",
    "cluster.disk": "800GB",
    "cluster.task-image": "docker.io/library/ubuntu:24.04",
    "cluster.cache-repo": "ghcr.io/team/cache",
    "cluster.kaniko-executor": "ghcr.io/osscontainertools/kaniko@sha256:" + "c" * 64,
    "cluster.crane-url": "https://mirror.example.test/go-containerregistry_Linux_x86_64.tar.gz",
    "cluster.crane-sha256": "d" * 64,
    "cluster.gpu-cluster": "cw-us-east-08a",
    "cluster.gpu-type": "H200",
    "cluster.gpu-memory": "256GB",
    "launcher.variable": "OTHER_RL_DOCKER_IMAGE",
    "launcher.platform-variable": "OTHER_RL_AMD64_DOCKER_IMAGE",
    "launcher.table": "GPU_RL_IMAGES",
    "launcher.table-key": "(Arch.{ARCH}, Flavor.{VARIANT})",
    "launcher.digest-field": "image_digest",
    "launcher.tag-field": "image_tag",
    "launcher.commit-field": "commit",
    "launcher.commit-variable": "COMMIT",
}
# Paths: another place (a workspace or lock moves with its files, committed in the same edit).
MOVED_PATHS = {"workspace": "rl2", "lock": "moved.lock"}
# Keys whose value follows another's: moving the workspace moves what is relative to it.
FOLLOWS = {"workspace": {"lock", "launcher.path"}}
# Keys set only together (config refuses one without the other): the edit writes both.
TOGETHER = {"cluster.crane-url": "cluster.crane-sha256", "cluster.crane-sha256": "cluster.crane-url"}
# Keys with a single valid value: nothing to edit.
ONE_VALUE = {"target.os": "images are linux only (config refuses any other)",
             "layers.mode": "independent only since stacked was retired (config refuses it)"}


def _declared(dotted: str) -> tuple[Any, dataclasses.Field[Any] | None]:
    """(the key's type, its field; None for a top key)."""
    if "." not in dotted:
        return cfg._hints(cfg.Config)[dotted], None
    section, key = dotted.split(".", 1)
    cls = cfg._SECTIONS[section]
    field = next(f for f in dataclasses.fields(cls) if cfg._key(f.name) == key)
    return cfg._hints(cls)[field.name], field


def _other_value(dotted: str, current: Any) -> Any:
    """A valid TOML value for `dotted` that differs from `current` (its value in the fixture)."""
    if dotted in OTHER:
        return OTHER[dotted]
    if dotted in MOVED_PATHS:
        return MOVED_PATHS[dotted]
    hint, field = _declared(dotted)
    optional = type(None) in get_args(hint)
    base = next(a for a in get_args(hint) if a is not type(None)) if optional else hint
    if field is not None and cfg._key_of(field).size:
        return int(current or 3 * 10**9) * 2
    if get_origin(base) is Literal:
        return next(choice for choice in get_args(base) if choice != current)
    if base is bool:
        return not current
    if base is int:
        return current - 1 if current >= 9 else current + 1  # gzip levels stay within 1..9
    if base is Path:
        return f"{Path(current).as_posix() if current else 'docker/other'}-moved"
    raise AssertionError(f"{dotted}: add a valid other value to OTHER in this test")


def _current(repo: Repo, dotted: str) -> Any:
    """The key's value in the fixture's resolved config (paths relative to the repository)."""
    config = repo.config()
    if "." not in dotted:
        value = getattr(config, dotted)
    else:
        section, key = dotted.split(".", 1)
        value = getattr(getattr(config, section), key.replace("-", "_"))
    return value.relative_to(repo.root) if isinstance(value, Path) else value


def _edit(repo: Repo, dotted: str, value: Any) -> None:
    """Set `dotted` in the profile's table of pyproject.toml (the fixture's only profile)."""
    line = f"{dotted.rsplit('.', 1)[-1]} = {json.dumps(value)}\n"
    if dotted in TOGETHER:
        line += f"{TOGETHER[dotted].rsplit('.', 1)[-1]} = {json.dumps(OTHER[TOGETHER[dotted]])}\n"
    text = GPURL_PYPROJECT
    if "." not in dotted:
        if dotted == "workspace":
            text = text.replace('workspace = "rl"\n', "")
        text += line
    else:
        text += f"\n[{PROFILE}.{dotted.split('.', 1)[0]}]\n{line}"
    repo.write("pyproject.toml", text)
    data = tomllib.loads(text)["tool"]["gpurl"]["profiles"]["gpu-rl"]
    where = data if "." not in dotted else data[dotted.split(".", 1)[0]]
    assert where[dotted.rsplit(".", 1)[-1]] == value
    if dotted == "workspace":
        shutil.copytree(repo.root / "rl", repo.root / str(value))
    if dotted == "lock":
        shutil.copy(repo.root / "rl" / "uv.lock", repo.root / "rl" / str(value))


KEYS = [k for k in cfg.declared_bakes() if k not in ONE_VALUE]


def test_every_key_declares_a_class() -> None:
    """Every key of every section is declared with _field(..., bakes=...) (a plain default
    raises when the declarations are read), and the classes are the three the decision knows."""
    bakes = cfg.declared_bakes()
    assert set(bakes) == set(cfg._known_keys())
    assert set(bakes.values()) <= set(ANSWER)
    assert set(ANSWER.values()) == set(DECISIONS)
    assert set(ONE_VALUE) <= set(bakes)


@pytest.mark.integration
@pytest.mark.parametrize("dotted", KEYS)
def test_a_key_edited_alone_is_answered_by_its_class(tmp_path: Path, dotted: str) -> None:
    repo = Repo(tmp_path / "repo")
    before = _current(repo, dotted)
    value = _other_value(dotted, before)
    _edit(repo, dotted, value)
    repo.commit(f"edit {dotted}")
    assert _current(repo, dotted) != before, f"the edit of {dotted} did not take effect"
    report = rebuild_needed(repo.config(), since="HEAD~1", env=ENV)
    expected = ANSWER[cfg.declared_bakes()[dotted]]
    assert report.verdict == expected, report.human()
    named = {r.detail.split(" ", 1)[0] for r in report.decision.reasons if r.kind == "config"}
    together = {TOGETHER[dotted]} if dotted in TOGETHER else set()
    assert named == {dotted} | FOLLOWS.get(dotted, set()) | together, report.human()


# The runbook's section 9: what a rebuild is required for, and what it is not.
RUNBOOK = {
    "build.vllm-fork-commit": "wheels",
    "build.flash-attn-version": "wheels",
    "build.torch-version": "wheels",
    "build.cuda-tag": "wheels",
    "build.base-image": "wheels",
    "build.post-install": "image",  # harbor at its commit is one entry
    "build.apt-packages": "image",
    "python.extras": "image",
    "cluster.cpu": "none",
    "cluster.timeout": "none",
    "verify.min-layers": "none",
}


def test_the_runbooks_rebuild_list_is_declared_so() -> None:
    bakes = cfg.declared_bakes()
    assert {k: bakes[k] for k in RUNBOOK} == RUNBOOK


def test_the_config_fingerprint_covers_exactly_the_baked_keys(tmp_path: Path) -> None:
    """The label generate writes changes with a baked key, never with a `none` one."""
    repo = Repo(tmp_path / "repo")
    config = repo.config()
    first = cfg.config_fingerprint(config)
    cpu = config.with_variant_settings(cluster=dataclasses.replace(config.cluster, cpu=96))
    assert cfg.config_fingerprint(cpu) == first
    fork = config.with_variant_settings(build=dataclasses.replace(
        config.build, vllm_fork_commit="1111111aa"))
    assert cfg.config_fingerprint(fork) != first
