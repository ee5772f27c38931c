"""The iris contract: the exact argv `invoke build` produces, parsed by the real iris CLI.

Runs in the `iris-contract` nox session (Python 3.12 with the pinned marin-iris release);
elsewhere iris is not importable and these tests skip with that reason. Parsing alone
proves nothing (`job run` passes unknown options through into the command), so the
*parsed parameters* are compared with what was intended.
"""

from __future__ import annotations

import base64
import importlib.metadata
import importlib.util
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpurl_tasks.cluster import jobs
from gpurl_tasks.cluster.kaniko import render_script
from gpurl_tasks.cluster.submit import JOB_COMMAND, BuildRequest, prepare_build
from gpurl_tasks.config import load_config
from tests.conftest import REPO_ROOT

CANARY = "ghp_CANARYcontract0042"
# Set by the iris-contract session to the pinned requirement; there a missing iris fails.
PIN_ENV = "GPURL_IRIS_CONTRACT"

if importlib.util.find_spec("iris") is None or importlib.util.find_spec("iris.cli") is None:
    if os.environ.get(PIN_ENV):
        raise RuntimeError(f"{PIN_ENV} is set but iris is not importable")
    pytest.skip("iris (marin-iris, Python >= 3.12) is not installed; run `nox -s iris-contract`",
                allow_module_level=True)

from iris.cli.main import iris as iris_group  # noqa: E402


def parse_job_run(argv: Sequence[str]) -> dict[str, Any]:
    """click's make_context on the iris group, then `job`, then `run`; nothing executes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # click's protected_args
        ctx = iris_group.make_context("iris", list(argv))
        rest = [*ctx.protected_args, *ctx.args]
        name, job, rest = iris_group.resolve_command(ctx, rest)
        assert name == "job" and job is not None
        job_ctx = job.make_context("job", rest, parent=ctx)
        rest = [*job_ctx.protected_args, *job_ctx.args]
        name, run, rest = job.resolve_command(job_ctx, rest)  # type: ignore[attr-defined]
        assert name == "run" and run is not None
        run_ctx = run.make_context("run", rest, parent=job_ctx)
    return {"top": ctx.params, **run_ctx.params}


def test_the_pinned_release_is_installed() -> None:
    pin = os.environ.get(PIN_ENV)
    if not pin:
        pytest.skip(f"{PIN_ENV} not set (outside the iris-contract session)")
    name, version = pin.split("==")
    assert importlib.metadata.version(name) == version


@pytest.fixture
def build_argv(tmp_path: Path) -> tuple[str, ...]:
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    env = {"KUBECONFIG": str(kube), "GPURL_REGISTRY_TOKEN": CANARY, "PATH": os.environ["PATH"]}
    config = load_config(REPO_ROOT, env={})
    prepared = prepare_build(config, BuildRequest(), jobs.real_world(env))
    argv = prepared.argv("iris", reveal=True)
    assert argv[0] == "iris"
    return argv[1:]


def test_build_argv_parses_to_the_intended_parameters(build_argv: tuple[str, ...]) -> None:
    params = parse_job_run(build_argv)
    config = load_config(REPO_ROOT, env={})
    assert params["top"]["cluster_name"] == config.cluster.name
    assert params["memory"] == config.cluster.memory
    assert params["cpu"] == config.cluster.cpu
    assert params["disk"] == config.cluster.disk
    assert params["task_image"] == config.cluster.task_image
    assert params["no_sync"] is True
    assert params["no_wait"] is True
    assert params["enable_extra_resources"] is True
    assert params["max_retries"] == 0
    assert params["timeout"] == 18000
    assert params["job_name"].startswith("gpurl-kaniko-")
    env = dict(params["env_vars"])
    assert set(env) == {"DOCKER_USER_ID", "DOCKER_TOKEN", "BUILD_B64", "GITSHA", "GIT_COMMIT",
                        "JOB_NAME"}
    assert env["DOCKER_TOKEN"] == CANARY
    assert env["DOCKER_USER_ID"] == config.registry.user
    assert params["job_name"] == f"gpurl-kaniko-{env['GITSHA']}"
    assert tuple(params["cmd"]) == JOB_COMMAND
    assert params["cmd"][:2] == ("bash", "-lc")


def test_the_megatron_variant_argv_names_its_dockerfile_and_tags(tmp_path: Path) -> None:
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    env = {"KUBECONFIG": str(kube), "GPURL_REGISTRY_TOKEN": CANARY, "PATH": os.environ["PATH"]}
    prepared = prepare_build(load_config(REPO_ROOT, env={}, variant="megatron"), BuildRequest(),
                             jobs.real_world(env))
    params = parse_job_run(prepared.argv("iris", reveal=True)[1:])
    env_vars = dict(params["env_vars"])
    # the variant ships its own script: its Dockerfile and tags are the defaults there
    script = base64.b64decode(env_vars["BUILD_B64"]).decode()
    assert script == render_script(load_config(REPO_ROOT, env={}, variant="megatron"))
    assert "  --dockerfile docker/Dockerfile.gpu-rl-megatron\n" in script
    assert "  --tag-prefix gpu-rl-megatron\n" in script
    assert "INSTALL_MEGATRON" not in env_vars
    assert params["job_name"] == f"gpurl-kaniko-megatron-{prepared.gitsha}"
    assert prepared.image_tag.endswith(f":gpu-rl-megatron-{prepared.gitsha}")


def test_the_gb200_variant_argv_runs_on_its_cluster_with_its_aarch64_script(
        tmp_path: Path) -> None:
    """The multiarch profile's aarch64 variant: the real parser reads its own cluster and the
    gb200 script (linux/arm64 throughout). The pinned `job run` has no platform,
    arch, constraint or node-selector option, so nothing else asks for an arm64 node: the
    cluster name does, and the script's `uname -m` check refuses any other node."""
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    env = {"KUBECONFIG": str(kube), "GPURL_REGISTRY_TOKEN": CANARY, "PATH": os.environ["PATH"]}
    config = load_config(REPO_ROOT, profile="multiarch", env={}, variant="gb200")
    prepared = prepare_build(config, BuildRequest(), jobs.real_world(env))
    params = parse_job_run(prepared.argv("iris", reveal=True)[1:])
    assert params["top"]["cluster_name"] == "cw-us-east-08a" == config.cluster.name
    assert params["job_name"] == f"gpurl-kaniko-gb200-{prepared.gitsha}"
    script = base64.b64decode(dict(params["env_vars"])["BUILD_B64"]).decode()
    assert script == render_script(config)
    assert "TARGET_ARCH=aarch64\nTARGET_PLATFORM=linux/arm64\nCLUSTER_NAME=cw-us-east-08a\n" \
        in script
    options = {opt for p in jobs_run_params() for opt in p}
    assert not options & {"--platform", "--arch", "--constraint", "--node-selector"}, options


def jobs_run_params() -> list[list[str]]:
    """Every option name the pinned `iris job run` accepts."""
    job = iris_group.commands["job"]
    run = job.commands["run"]  # type: ignore[attr-defined]
    return [list(p.opts) for p in run.params]


def test_a_misspelled_option_parses_but_is_passed_through(build_argv: tuple[str, ...]) -> None:
    """Why parameters are checked: `--memroy` is not an error, it becomes part of the command
    and memory silently stays at the 1GB default."""
    argv = list(build_argv)
    i = argv.index("--memory")
    argv[i] = "--memroy"
    params = parse_job_run(argv)
    memory = load_config(REPO_ROOT, env={}).cluster.memory
    assert params["memory"] != memory
    assert params["cmd"][:2] == ("--memroy", memory)


def test_the_gpu_check_argv_parses_to_the_intended_parameters(registry: Any) -> None:
    """`invoke verify-gpu --dry-run`'s exact argv (the GB200 variant's image pushed to a
    loopback registry standing in for GHCR, resolved to its digest): the image itself by
    digest as the task image, the GPUs of one node through `--gpu` (a count, or TYPExCOUNT as
    the pinned release spells it), the check's own timeout, and the shipped zipapp run by the
    image's environment's python, its sha256 checked, with the variant's arch list."""
    from iris.cli.job import parse_gpu_spec

    from gpurl_tasks.cluster.gpujob import APP_ENV, gpu_app, run_verify_gpu
    from gpurl_tasks.steps import DryRun
    from tests.support.pusher import push_image, random_layer

    env = {"GPURL_REGISTRY_HOST": registry.host, "HOME": "/nonexistent"}
    config = load_config(REPO_ROOT, profile="multiarch", env=env, variant="gb200")
    pushed = push_image(registry.url, config.registry.repository,
                        [random_layer(1000, "RUN true", seed=52)], tag="gpu-contract",
                        architecture="arm64")
    digest = pushed.manifest_digest
    ref = f"{registry.host}/{config.registry.repository}:gpu-contract"
    for gpu_type, wanted in (("", ("", 8)), ("GB200", ("GB200", 4))):
        typed = load_config(REPO_ROOT, profile="multiarch", variant="gb200", env={
            **env, "GPURL_CLUSTER_GPU_TYPE": gpu_type, "GPURL_CLUSTER_GPUS": str(wanted[1])})
        planned = run_verify_gpu(typed, ref, dry_run=True, say=lambda _: None, env=env)
        assert isinstance(planned, DryRun)
        argv = planned.commands[0]
        assert argv[0] == "iris"
        params = parse_job_run(argv[1:])
        assert parse_gpu_spec(params["gpu"]) == wanted
        assert params["top"]["cluster_name"] == "cw-us-east-08a" == config.cluster.name
        assert params["task_image"] == f"{registry.host}/{config.registry.repository}@{digest}"
        assert params["enable_extra_resources"] is True and params["no_wait"] is True
        assert (params["timeout"], params["cpu"], params["memory"], params["max_retries"]) == (
            3600, 16, "128GB", 0)
        assert set(dict(params["env_vars"])) == {APP_ENV}
        assert params["cmd"][0] == f"{config.build.venv}/bin/python"
        assert params["cmd"][3:] == (gpu_app().sha256, "gpu-check", "--image-digest", digest,
                                     "--out", "gpurl-gpu-result.json", "--gpus", str(wanted[1]),
                                     "--arch-list", "10.0")
        assert params["job_name"] == "gpurl-gpu-" + digest[7:19]
