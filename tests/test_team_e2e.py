"""The team fixture adopted and released end to end on this machine (issue 49, tests 3-5): a
scratch copy of examples/team/ as its own repository, `gpurl init` through the real CLI, then
a real local build of the amd64 standard image pushed to the loopback registry, its layers
verified, its digest pinned into the image table (checked byte for byte) and
`rebuild-needed` asked after a source edit (`none`) and after a real `uv lock` bump (`image`).
The fixture's release assets and package index are served on 127.0.0.1
(tests/support/team_fixture.py).

Stand-in: the local Docker engine for the cluster's kaniko. A user trying the build on their
own machine sets what the local path needs, and the test sets the same: `GPURL_BACKEND=local`
in the environment, and for the x86_64 standard variant the local base image (Debian's
python3.11, one layer, no Python download), only the apt package the image needs, and a
loopback index (`build.index-url`, the build's UV_DEFAULT_INDEX: every install of the image
comes from it) standing in for PyPI and the team's index, which the build's containers cannot
reach here: setup-local fills it, with uv, pip and the build backend from PyPI and the lock's
wheels from the fixture's index (the hashless torch is on no public index). The fixture's 7
slices are far below the default minimum of 20 layers, so `verify.min-layers` is lowered.

The package run is this checkout's (`python -m gpurl_tasks`); tests/test_adopt_doc.py runs the
installed wheel.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpurl_tasks.errors import GpurlError
from tests.conftest import REPO_ROOT
from tests.support.git import git
from tests.support.image_table import evaluate
from tests.support.local_parts import BASE_IMAGE, docker_ready, need, uv
from tests.support.team_fixture import LOCK_BUMP, fetch_pypi_wheels, serve_team, team_repository

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slow]

REGISTRY = "127.0.0.1:5005"  # setup-local's loopback registry (it starts one when none answers)
INDEX_PORT = 5011  # the local index of the image's tools (fixed: the build's cache keys name it)
REPOSITORY = "gpurl/team"
TABLE = Path("cloud/iris/gpu_rl_images.py")
PINNED = ("AMD64", "STANDARD")  # the entry of the standard variant's amd64 image
PIN_FIELDS = ("digest", "tag", "source_commit")
# What the registry may hold under a tag, asked for by name here rather than through gpurl's code
MANIFESTS = ", ".join(f"application/vnd.{kind}" for kind in (
    "oci.image.manifest.v1+json", "oci.image.index.v1+json",
    "docker.distribution.manifest.v2+json", "docker.distribution.manifest.list.v2+json"))
# Kept between runs, as the checkout's own .cache/gpurl is (the local index's wheels, the
# written slices' records), apart from it: its index holds the fixture's fake torch
CACHE = REPO_ROOT / ".cache" / "gpurl-team-e2e"


def _local_settings() -> str:
    """What the local build needs, appended to the pyproject `gpurl init` wrote."""
    return f'''
[tool.gpurl.profiles.default.variants.standard.build]
base-image = "{BASE_IMAGE}"
base-image-layers = 1
python-downloads = "never"
apt-packages = ["ca-certificates"]
index-url = "http://127.0.0.1:{INDEX_PORT}/simple"

[tool.gpurl.profiles.default.verify]
min-layers = 3
'''


class Session:
    """The scratch repository and the environment every command there runs in; each command's
    duration is recorded (the test prints them)."""

    def __init__(self, repo: Path, env: dict[str, str]) -> None:
        self.repo, self.env = repo, env
        self.timings: list[tuple[str, float]] = []

    def run(self, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        start = time.monotonic()
        done = subprocess.run(argv, cwd=self.repo, env=self.env, capture_output=True, text=True,
                              timeout=timeout, check=False)
        self.timings.append((" ".join(argv[2:] if argv[0] == sys.executable else argv),
                             time.monotonic() - start))
        return done

    def gpurl(self, *args: str, code: int = 0, timeout: float = 300) -> str:
        done = self.run(sys.executable, "-m", "gpurl_tasks", *args, timeout=timeout)
        assert done.returncode == code, (args, done.returncode, (done.stdout + done.stderr)[-4000:])
        return done.stdout

    def commit(self, message: str) -> str:
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-qm", message)
        return git(self.repo, "rev-parse", "HEAD").strip()


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    docker_ready()
    pypi = tmp_path / "pypi"
    try:
        fetch_pypi_wheels(pypi, extra=(LOCK_BUMP,))
    except GpurlError as exc:
        need(False, f"cannot download the fixture's PyPI wheels: {exc}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPURL_", "VIRTUAL_ENV"))}
    env.update(GPURL_BACKEND="local", GPURL_CACHE_DIR=str(CACHE),
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])),
               UV_CACHE_DIR=str(tmp_path / "uv-cache"), GIT_AUTHOR_NAME="t",
               GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    with serve_team(pypi, tmp_path / "serve"):
        made = Session(team_repository(tmp_path / "team"), env)
        yield made
    print("\n".join(f"{seconds:7.1f}s  {command}" for command, seconds in made.timings))


def _value_spans(text: str, key: tuple[str, str]) -> list[tuple[int, int]]:
    """The character spans of the PIN_FIELDS values of the table entry `key`."""
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    wanted = f"(ImageArchitecture.{key[0]}, ImageVariant.{key[1]})"
    (table,) = [node.value for node in ast.parse(text).body if isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name) and node.target.id == "GPU_RL_IMAGES"]
    assert isinstance(table, ast.Dict)
    (entry,) = [v for k, v in zip(table.keys, table.values, strict=True)
                if k is not None and ast.unparse(k) == wanted]
    assert isinstance(entry, ast.Call)
    values = {k.arg: k.value for k in entry.keywords}
    spans = []
    for field in PIN_FIELDS:
        node = values[field]
        assert node.end_lineno is not None and node.end_col_offset is not None
        spans.append((starts[node.lineno - 1] + node.col_offset,
                      starts[node.end_lineno - 1] + node.end_col_offset))
    return spans


def _outside(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """`text` cut at `spans`: what lies between and around them."""
    cuts = [0, *(i for span in spans for i in span), len(text)]
    return [text[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True)]


def _registry_digest(reference: str) -> str:
    """The manifest digest the loopback registry serves for `reference`'s tag, over HTTP."""
    name, _, tag = reference.removeprefix(f"{REGISTRY}/").rpartition(":")
    answer = httpx.head(f"http://{REGISTRY}/v2/{name}/manifests/{tag}",
                        headers={"Accept": MANIFESTS}, timeout=30)
    answer.raise_for_status()
    return answer.headers["Docker-Content-Digest"]


def test_the_team_repository_built_verified_pinned_and_asked(session: Session) -> None:
    repo = session.repo
    session.gpurl("init", "--variant", "standard=vllm,fsdp", "--variant", "megatron=vllm,megatron",
                  "--registry", f"{REGISTRY}/{REPOSITORY}")
    with (repo / "pyproject.toml").open("a") as pyproject:
        pyproject.write(_local_settings())
    session.gpurl("sizes", "--probe")
    session.gpurl("generate")
    head = session.commit("Adopt gpurl, build locally")

    built = json.loads(session.gpurl("build", "--variant", "standard", "--json", timeout=900))
    reference = built["reference"]
    repository, _, tag = reference.rpartition(":")
    assert repository == f"{REGISTRY}/{REPOSITORY}"
    assert head[:7] in tag  # the image is tagged with its commit
    digest = _registry_digest(reference)
    assert built["digest"] == digest
    session.gpurl("verify-layers", "--variant", "standard")

    before = (repo / TABLE).read_text()
    session.gpurl("pin", "--variant", "standard")
    after = (repo / TABLE).read_text()
    # byte for byte: only the pinned entry's digest, tag and source commit values changed
    old_spans, new_spans = _value_spans(before, PINNED), _value_spans(after, PINNED)
    assert _outside(after, new_spans) == _outside(before, old_spans)
    written = [ast.literal_eval(after[a:b]) for a, b in new_spans]
    assert written == [digest, tag, head]
    # what the launcher reads: the new digest for its key, the others' values as they were
    old, new = evaluate(before), evaluate(after)
    assert new[PINNED]["digest"] == digest
    assert new[PINNED]["source_commit"] == head
    assert {k: v for k, v in new.items() if k != PINNED} == {
        k: v for k, v in old.items() if k != PINNED}
    assert git(repo, "status", "--porcelain") == f" M {TABLE}\n"
    session.commit("Pin the standard amd64 image")

    source = repo / "skyrl-train" / "src" / "skyrl_train" / "__init__.py"
    source.write_text(source.read_text() + "\nTRAINER_NOTE = 'a source edit'\n")
    session.commit("Edit the trainer")
    said = session.gpurl("rebuild-needed", "--variant", "standard")
    assert said.startswith("rebuild: none"), said

    bumped = session.run(uv(), "lock", "--upgrade-package", "filelock")
    assert bumped.returncode == 0, bumped.stderr
    assert git(repo, "status", "--porcelain") == " M uv.lock\n"
    session.commit("Bump filelock")
    said = session.gpurl("rebuild-needed", "--variant", "standard", code=10)
    assert said.startswith("rebuild: image"), said
    assert f"filelock: 3.16.1 -> {LOCK_BUMP.partition('==')[2]}" in said
