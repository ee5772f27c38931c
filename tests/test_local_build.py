"""The local backend: real BuildKit builds on the real engine, pushed to a real loopback registry.

The Dockerfile here is a small hand-written stand-in for the generated one with the same
shape: a base stage that installs uv from the loopback index, a `wheel-builder` stage that
compiles a C extension, a `prebuilt-wheelhouse` stage, a `final` stage that runs
`uv sync --frozen` from a lock recorded against the loopback index, and a build assert.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.config import Config, load_config
from gpurl_tasks.errors import BuildError, ConfigError, GpurlError
from gpurl_tasks.local import base_image, builder, download, engine, pyindex, registry_server, setup
from gpurl_tasks.local.build_log import parse_plain_progress, stages_run, vertex_output
from gpurl_tasks.oci.image import ACCEPT_MANIFESTS
from tests.conftest import REPO_ROOT
from tests.support.local_parts import free_port, need

# --- pure parts --------------------------------------------------------------------------

_LOG = """\
#4 [base 1/2] FROM docker.io/library/x:1
#4 DONE 0.0s

#6 [final 1/2] RUN echo hi
#5 [base 2/2] RUN make
#6 CACHED
#5 sha256:180dc57b
#5 DONE 2.1s

#8 [wheel-builder 1/1] RUN cc -o x x.c
#8 ERROR: executor failed running [/bin/sh -c cc -o x x.c]: exit code: 1
#9 [2/2] COPY a /a
#9 CACHED
"""


def test_plain_progress_groups_interleaved_vertices() -> None:
    steps = {s.vertex: s for s in parse_plain_progress(_LOG)}
    assert steps[6].status == "cached" and steps[6].stage == "final"
    assert steps[5].status == "done" and (steps[5].index, steps[5].total) == (2, 2)
    assert steps[8].status == "error" and steps[8].stage == "wheel-builder"
    assert steps[9].stage == "" and steps[9].instruction == "COPY a /a"
    assert steps[4].is_from
    assert stages_run(list(steps.values())) == {"base"}


def test_vertex_output_is_one_steps_lines_without_timestamps() -> None:
    log = "#8 [s 1/1] RUN x\n#8 0.12 compiling\n#9 0.1 other\n#8 1.5 error: boom\n#8 ERROR: x\n"
    assert vertex_output(log, 8).splitlines() == ["[s 1/1] RUN x", "compiling", "error: boom",
                                                 "ERROR: x"]


_SHA = st.text(alphabet="0123456789abcdef", min_size=7, max_size=40)


def _config(tmp: Path, **overrides: str) -> Config:
    values = {"registry.host": "127.0.0.1:5999", "registry.repository": "t/r",
              "registry.tag-prefix": "demo", "registry.floating-tag": "demo",
              "build.index-url": "", **overrides}
    return load_config(REPO_ROOT, profile="demo", env={}, overrides=values)


@given(sha=_SHA)
def test_reference_is_the_immutable_prefix_sha_tag(sha: str) -> None:
    reference = builder.image_reference(_config(Path()), sha)
    assert reference == f"127.0.0.1:5999/t/r:demo-{sha}"
    assert not reference.endswith(":demo")


@pytest.mark.parametrize("sha", ["", "latest", "ABCDEF12", "abc", "g" * 8, "a" * 41])
def test_reference_rejects_what_is_not_a_git_sha(sha: str) -> None:
    with pytest.raises(ConfigError):
        builder.image_reference(_config(Path()), sha)


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_single_snapshot_is_refused(value: str) -> None:
    with pytest.raises(BuildError, match="one layer"):
        builder.check_build_args({"SINGLE_SNAPSHOT": value})
    builder.check_build_args({"SINGLE_SNAPSHOT": "0", "WHEEL_SOURCE": "wheel-builder"})


def test_build_command_uses_host_network_and_plain_progress() -> None:
    argv = builder.build_command("/usr/bin/docker", dockerfile=Path("D"), context=Path("."),
                                     build_args={"B": "2", "A": "1"}, target="final",
                                     tags=["r:t"])
    assert argv[:6] == ["/usr/bin/docker", "build", "--network", "host", "--progress", "plain"]
    assert argv[argv.index("--target") + 1] == "final"
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--build-arg"] == ["A=1", "B=2"]
    assert argv[-1] == "."


# --- real engine, registry, index ---------------------------------------------------------

DOCKERFILE = """\
ARG BASE_IMAGE
ARG WHEEL_SOURCE=prebuilt-wheelhouse
FROM ${BASE_IMAGE} AS base
ARG INDEX_URL
ARG SESSION
ENV UV_NO_CACHE=1 UV_PYTHON_DOWNLOADS=never PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN echo "$SESSION" > /session && python3 -m venv /opt/uv \\
 && /opt/uv/bin/pip install --index-url "$INDEX_URL" uv==UV_VERSION

FROM base AS wheel-builder
ARG INDEX_URL
COPY ext/ /src/ext/
RUN /opt/uv/bin/python -m pip wheel --no-deps --index-url "$INDEX_URL" -w /wheels /src/ext \\
 && cd /wheels && sha256sum *.whl > MANIFEST

FROM base AS prebuilt-wheelhouse
COPY wheelhouse/ /wheels/

FROM ${WHEEL_SOURCE} AS wheels

FROM base AS final
ARG FAIL=0
WORKDIR /app
COPY project/pyproject.toml project/uv.lock /app/
RUN /opt/uv/bin/uv sync --frozen --python /usr/bin/python3
COPY --from=wheels /wheels/ /wheels/
RUN /opt/uv/bin/uv pip install --python /app/.venv/bin/python --no-deps --no-index \\
    /wheels/*.whl
RUN /app/.venv/bin/python -c "import iniconfig, tinyext; assert tinyext.answer() == 42; \\
assert '$FAIL' != '1', 'deliberately broken build assert'; print('build asserts OK')"
"""

EXT_C = """\
#include <Python.h>
static PyObject *answer(PyObject *self, PyObject *args) { return PyLong_FromLong(42); }
static PyMethodDef methods[] = {{"answer", answer, METH_NOARGS, "42"}, {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tinyext", NULL, -1, methods};
PyMODINIT_FUNC PyInit_tinyext(void) { return PyModule_Create(&module); }
"""


@dataclass
class Workspace:
    config: Config
    client: str
    context: Path
    cache: Path
    session: str

    def args(self, **extra: str) -> dict[str, str]:
        return {"BASE_IMAGE": self.config.build.base_image, "INDEX_URL":
                self.config.build.index_url, "SESSION": self.session, **extra}


def _uv() -> str:
    from uv import find_uv_bin

    return find_uv_bin()


@pytest.fixture(scope="module")
def client() -> str:
    need(engine.engine_answers("docker") or engine.engine_answers("/usr/bin/docker"),
         "no Docker engine answers (run `invoke setup-local`)")
    try:
        return engine.find_buildkit_client()[0]
    except BuildError as exc:
        need(False, str(exc))
        raise


@pytest.fixture(scope="module")
def registry_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """A real docker-registry of our own on a free port, stopped afterwards."""
    import shutil

    need(shutil.which("docker-registry"), "docker-registry is not installed")
    port = free_port()
    paths = registry_server.RegistryPaths(tmp_path_factory.mktemp("registry"), port)
    pid = registry_server.start_registry(paths, port)
    yield port
    os.kill(pid, signal.SIGTERM)


@pytest.fixture(scope="module")
def workspace(client: str, registry_port: int,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    root = tmp_path_factory.mktemp("local-build")
    # the Dockerfile and wheelhouse are config paths, which must lie inside the repository
    (REPO_ROOT / ".cache" / "tests").mkdir(parents=True, exist_ok=True)
    context = Path(tempfile.mkdtemp(prefix="local-build-", dir=REPO_ROOT / ".cache" / "tests"))
    cache = root / "cache"
    index_port = free_port()
    config = load_config(REPO_ROOT, profile="demo", env={}, overrides={
        "registry.host": f"127.0.0.1:{registry_port}",
        "registry.repository": f"gpurl-test/{uuid.uuid4().hex[:10]}",
        "build.index-url": f"http://127.0.0.1:{index_port}/simple",
        "build.dockerfile": str(context / "Dockerfile"),
        "build.wheelhouse": str(context / "wheelhouse"),
    })
    base = config.build.base_image
    if base_image.image_id(client, base) is None:
        need(engine.can_self_install(), f"base image {base} is absent and cannot be built here")
        base_image.debootstrap_import(client, base, mirror=base_image.debian_mirror())

    wheels = setup.index_dir(cache)
    try:
        download.download([*setup.image_tool_pins(), "iniconfig==2.0.0"], wheels,
                         target=download.DownloadTarget.for_target(python="3.11", glibc="2.36",
                                                                 arch="x86_64"))
    except GpurlError as exc:
        need(False, f"cannot download wheels for the index: {exc}")

    uv_version = setup.image_tool_pins()[0].split("==")[1]
    (context / "wheelhouse").mkdir(parents=True)
    (context / "Dockerfile").write_text(DOCKERFILE.replace("UV_VERSION", uv_version))
    (context / "ext").mkdir()
    (context / "ext" / "tinyext.c").write_text(EXT_C)
    (context / "ext" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=70.1"]\nbuild-backend = '
        '"setuptools.build_meta"\n[project]\nname = "tinyext"\nversion = "0.1.0"\n'
        '[tool.setuptools]\next-modules = [{name = "tinyext", sources = ["tinyext.c"]}]\n')
    project = context / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "tiny"\nversion = "0.1.0"\nrequires-python = ">=3.11"\n'
        'dependencies = ["iniconfig==2.0.0"]\n[tool.uv]\npackage = false\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_")}
    with pyindex.serve(wheels, port=index_port) as server:  # lock against the fixed URL
        subprocess.run([_uv(), "lock", "--python", sys.executable, "--default-index",
                        server.url], cwd=project, check=True, capture_output=True,
                       env={**env, "UV_NO_CACHE": "1"})
    yield Workspace(config=config, client=client, context=context, cache=cache,
                    session=uuid.uuid4().hex)
    images = subprocess.run([client, "images", "--format", "{{.Repository}}:{{.Tag}}",
                             config.registry.image], capture_output=True, text=True).stdout
    for image in images.split():
        subprocess.run([client, "rmi", image], capture_output=True)
    shutil.rmtree(context, ignore_errors=True)


def _build(ws: Workspace, sha: str, **kwargs: object) -> builder.BuildResult:
    return builder.build_and_push(
        ws.config, git_sha=sha, client=ws.client, context=ws.context, cache=ws.cache,
        target="final", **kwargs,  # type: ignore[arg-type]
    )


def _registry_manifest(ws: Workspace, tag: str) -> httpx.Response:
    registry = ws.config.registry
    return httpx.get(f"http://{registry.host}/v2/{registry.repository}/manifests/{tag}",
                     headers={"Accept": ACCEPT_MANIFESTS})


@pytest.fixture(scope="module")
def wheels(workspace: Workspace) -> builder.WheelsResult:
    return builder.build_wheels(workspace.config, client=workspace.client,
                                    context=workspace.context, cache=workspace.cache,
                                    build_args=workspace.args(WHEEL_SOURCE="wheel-builder"))


@pytest.fixture(scope="module")
def prebuilt(workspace: Workspace, wheels: builder.WheelsResult) -> builder.BuildResult:
    return _build(workspace, "abc1234",
                  build_args=workspace.args(WHEEL_SOURCE="prebuilt-wheelhouse"))


@pytest.mark.integration
@pytest.mark.docker
def test_build_wheels_exports_compiled_wheel_and_manifest(
        workspace: Workspace, wheels: builder.WheelsResult) -> None:
    names = {p.name for p in wheels.files}
    wheel = next(p for p in wheels.files if p.suffix == ".whl")
    assert re.match(r"tinyext-0\.1\.0-cp311-cp311-linux_x86_64\.whl$", wheel.name)
    assert "MANIFEST" in names
    assert wheel.parent == workspace.config.build.wheelhouse
    manifest = (wheel.parent / "MANIFEST").read_text().split()
    assert manifest[0] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert "wheel-builder" in stages_run(list(wheels.steps))
    assert "final" not in {s.stage for s in wheels.steps}


@pytest.mark.integration
@pytest.mark.docker
def test_prebuilt_build_skips_wheel_builder_and_pushes_the_registry_digest(
        workspace: Workspace, prebuilt: builder.BuildResult) -> None:
    assert "wheel-builder" not in prebuilt.stages  # not even a cached step of it in the log
    assert {"final", "prebuilt-wheelhouse"} <= prebuilt.stages
    assert "final" in prebuilt.stages_run
    assert "build asserts OK" in prebuilt.log
    tag = prebuilt.reference.rsplit(":", 1)[1]
    assert tag == "demo-abc1234"
    response = _registry_manifest(workspace, tag)
    assert response.status_code == 200
    assert response.headers["Docker-Content-Digest"] == prebuilt.digest
    assert "sha256:" + hashlib.sha256(response.content).hexdigest() == prebuilt.digest
    assert prebuilt.pinned == f"{workspace.config.registry.image}@{prebuilt.digest}"


@pytest.mark.integration
@pytest.mark.docker
def test_floating_tag_is_pushed_only_when_asked(
        workspace: Workspace, prebuilt: builder.BuildResult) -> None:
    floating = workspace.config.registry.floating_tag
    assert prebuilt.floating is None
    assert _registry_manifest(workspace, floating).status_code == 404
    again = _build(workspace, "abc1234", push_floating=True,
                   build_args=workspace.args(WHEEL_SOURCE="prebuilt-wheelhouse"))
    assert again.floating == f"{workspace.config.registry.image}:{floating}"
    assert _registry_manifest(workspace, floating).headers["Docker-Content-Digest"] \
        == again.digest


@pytest.mark.integration
@pytest.mark.docker
def test_second_build_comes_from_the_cache(
        workspace: Workspace, prebuilt: builder.BuildResult) -> None:
    second = _build(workspace, "abc1235",
                    build_args=workspace.args(WHEEL_SOURCE="prebuilt-wheelhouse"))
    runnable = [s for s in second.steps if not s.is_from]
    assert second.stages_run == frozenset()
    assert second.cached_steps == len(runnable) >= 6
    assert prebuilt.cached_steps < second.cached_steps


@pytest.mark.integration
@pytest.mark.docker
def test_wheel_builder_source_runs_that_stage_and_its_wheel_imports(
        workspace: Workspace, wheels: builder.WheelsResult) -> None:
    wheelhouse = workspace.config.build.wheelhouse
    aside = wheelhouse.with_name("wheelhouse.aside")
    wheelhouse.rename(aside)  # an empty wheelhouse proves the wheel came from the stage
    wheelhouse.mkdir()
    try:
        result = _build(workspace, "abc1236", build_args=workspace.args(
            WHEEL_SOURCE="wheel-builder", SESSION=uuid.uuid4().hex))  # a fresh cache key
    finally:
        wheelhouse.rmdir()
        aside.rename(wheelhouse)
    assert {"wheel-builder", "final"} <= result.stages_run
    assert "prebuilt-wheelhouse" not in result.stages
    assert "build asserts OK" in result.log


@pytest.mark.integration
@pytest.mark.docker
def test_a_broken_build_assert_fails_the_build(workspace: Workspace,
                                               prebuilt: builder.BuildResult) -> None:
    with pytest.raises(BuildError, match=r"docker build failed at \[final 6/6\]") as caught:
        _build(workspace, "abc1237", build_args=workspace.args(
            WHEEL_SOURCE="prebuilt-wheelhouse", FAIL="1"))
    assert "deliberately broken build assert" in caught.value.message  # the step's own output
    assert caught.value.message.count("\n") <= 6
    assert _registry_manifest(workspace, "demo-abc1237").status_code == 404


@pytest.mark.integration
@pytest.mark.docker
def test_an_immutable_tag_is_never_moved(workspace: Workspace,
                                         prebuilt: builder.BuildResult) -> None:
    """Two different images under one immutable tag on a real loopback registry: the second
    is refused before its push; the same image again pushes nothing; --force overwrites."""
    from gpurl_tasks.oci.tags import TagMoveRefused

    first = _build(workspace, "abc1240", build_args=workspace.args(
        WHEEL_SOURCE="prebuilt-wheelhouse"))
    assert first.pushed
    other = workspace.args(WHEEL_SOURCE="prebuilt-wheelhouse", SESSION=uuid.uuid4().hex)
    with pytest.raises(TagMoveRefused) as caught:
        _build(workspace, "abc1240", build_args=other)
    assert f"{first.reference} already exists as {first.digest}" in caught.value.message
    assert "never moved" in caught.value.message and "--force" in (caught.value.hint or "")
    assert _registry_manifest(workspace, "demo-abc1240").headers["Docker-Content-Digest"] \
        == first.digest
    same = _build(workspace, "abc1240", build_args=workspace.args(
        WHEEL_SOURCE="prebuilt-wheelhouse"))
    assert (same.digest, same.pushed) == (first.digest, False)
    forced = _build(workspace, "abc1240", build_args=other, force=True)
    assert forced.pushed and forced.digest != first.digest
    assert _registry_manifest(workspace, "demo-abc1240").headers["Docker-Content-Digest"] \
        == forced.digest
