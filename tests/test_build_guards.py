"""Guard rails of `invoke build` on the iris backend: each refusal names its reason and
runs nothing. The cluster is a stand-in `iris` program (it only records its argv); git,
the bundle and the generated script are real, in a throwaway repository."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from gpurl_tasks.cli import say
from gpurl_tasks.cluster import jobs
from gpurl_tasks.cluster.bundle import measure_bundle
from gpurl_tasks.cluster.kaniko import JOB_APP, job_app, render_script
from gpurl_tasks.cluster.submit import BuildEnv, BuildRequest
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.errors import GpurlError
from gpurl_tasks.git import ls_bundle_files, short_sha
from gpurl_tasks.redact import find_registry_token
from tests.conftest import REPO_ROOT
from tests.support.checkout import repo_copy
from tests.support.git import git

CANARY = "ghp_CANARYa1b2c3d4e5"
# What the pinned iris release's `job run --no-wait` printed on a real local controller
# (tests/data/iris/record_job_run.py.txt): the stand-in replays it for the job name it is given.
IRIS_DATA = Path(__file__).parent / "data" / "iris"
RECORDED_NAME = "gpurl-kaniko-0123abc"
RECORDED_USER = (IRIS_DATA / "job-run-no-wait.stdout").read_text().split("/")[1]
STANDIN_IRIS = f"""#!/usr/bin/env bash
printf '%s\\n' "$@" > "$IRIS_CALLED"
# the workspace iris would bundle (its cwd), and whether git finds a repository there
find . -type f | sort > "$IRIS_CALLED.files"
git rev-parse --show-toplevel > "$IRIS_CALLED.git" 2>&1 || echo none >> "$IRIS_CALLED.git"
sha256sum .gpurl/job.pyz > "$IRIS_CALLED.sha256" 2>&1
pwd > "$IRIS_CALLED.pwd"
name=$(for a in "$@"; do [ "$prev" = --job-name ] && echo "$a"; prev="$a"; done)
sed "s/{RECORDED_NAME}/$name/g" "{IRIS_DATA}/job-run-no-wait.stderr" >&2
sed "s/{RECORDED_NAME}/$name/g" "{IRIS_DATA}/job-run-no-wait.stdout"
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docker" / "wheelhouse").mkdir(parents=True)
    for name in ("pyproject.toml", ".dockerignore"):
        shutil.copy(REPO_ROOT / name, root / name)
    for tree in ("rl", "sizes", "docker/layers/gpu-rl"):
        shutil.copytree(REPO_ROOT / tree, root / tree)
    for committed in (REPO_ROOT / "docker").glob("*gpu*rl*"):  # Dockerfiles and kaniko scripts
        shutil.copy(committed, root / "docker" / committed.name)
    (root / ".gitignore").write_text("docker/wheelhouse/*\n!docker/wheelhouse/.keep\n*.whl\n")
    (root / "docker" / "wheelhouse" / ".keep").write_text("")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    iris = bindir / "iris"
    iris.write_text(STANDIN_IRIS)
    iris.chmod(iris.stat().st_mode | stat.S_IXUSR)
    return {"KUBECONFIG": str(kube), "GHCR_TOKEN": CANARY, "IRIS_CALLED": str(tmp_path / "called"),
            "PATH": f"{bindir}:{os.environ['PATH']}"}


def _world(env: dict[str, str], gh: str | None = None, *, real_registry: bool = False) -> BuildEnv:
    """The real adapters; the registry lookup answers "no such tag" unless `real_registry`
    (ghcr.io is not reachable here: the tag guard runs against a real loopback registry in
    test_an_existing_immutable_tag_is_refused_before_submitting)."""
    return BuildEnv(env=env, token=lambda: find_registry_token(env, gh_token=lambda: gh),
                    bundle=lambda root: measure_bundle(root, ls_bundle_files),
                    tag_digest=None if real_registry else lambda ref: None)


def _build(repo: Path, env: dict[str, str], *, dry_run: bool = False, gh: str | None = None,
           config_env: dict[str, str] | None = None, **flags: object) -> None:
    config: Config = load_config(repo, env=config_env or {})
    outcome = jobs.run_build(config, BuildRequest(**flags),  # type: ignore[arg-type]
                             dry_run=dry_run, say=say, world=_world(env, gh))
    print(outcome.human())  # what the task prints


def _refused(repo: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str],
             **flags: object) -> str:
    with pytest.raises(GpurlError) as info:
        _build(repo, env, **flags)
    out = capsys.readouterr()
    assert not Path(env["IRIS_CALLED"]).exists(), "iris ran although the build was refused"
    assert CANARY not in str(info.value) + out.out + out.err
    return str(info.value)


def test_submits_and_prints_the_watch_command(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    _build(repo, env)
    argv = Path(env["IRIS_CALLED"]).read_text().splitlines()
    assert argv[argv.index("DOCKER_TOKEN") + 1] == CANARY  # the real token reaches iris
    out = capsys.readouterr()
    sha = short_sha(repo)
    assert f"next: invoke watch /{RECORDED_USER}/gpurl-kaniko-{sha} --interval 60" in out.out
    assert CANARY not in out.out + out.err


def test_iris_runs_in_a_staged_workspace_of_the_bundle_and_the_jobs_files(
        repo: Path, env: dict[str, str]) -> None:
    """iris bundles the directory it runs in: `invoke build` runs it in a temp dir outside any
    git repository holding the repository's bundle files and the job's own (the zipapp whose
    sha256 the script checks, the slice index, the attestation skeleton), never written into
    the repository, and gone once iris has returned."""
    _build(repo, env)
    called = Path(env["IRIS_CALLED"])
    staged = {line.removeprefix("./") for line in Path(f"{called}.files").read_text().split()}
    job = {".gpurl/job.pyz", ".gpurl/slices", ".gpurl/attest.json"}
    assert staged == set(ls_bundle_files(repo)) | job
    assert Path(f"{called}.git").read_text().endswith("none\n")  # iris bundles the files as-is
    argv = called.read_text().splitlines()
    script = base64.b64decode(argv[argv.index("BUILD_B64") + 1]).decode()
    (sha, _) = Path(f"{called}.sha256").read_text().split()
    assert f'echo "{sha}  $JOB_APP" | sha256sum -c' in script
    assert not any((repo / name).exists() for name in job)
    assert git(repo, "status", "--porcelain") == ""
    assert not Path(Path(f"{called}.pwd").read_text().strip()).exists()


def test_dry_run_prints_redacted_command_and_runs_nothing(
        repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    _build(repo, env, dry_run=True)
    out = capsys.readouterr()
    assert not Path(env["IRIS_CALLED"]).exists()
    assert out.out.startswith("iris --cluster=cw-us-east-02a job run ")
    assert "-e DOCKER_TOKEN '***'" in out.out
    assert CANARY not in out.out + out.err


def test_kubeconfig_unset(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    del env["KUBECONFIG"]
    msg = _refused(repo, env, capsys)
    assert "KUBECONFIG is not set" in msg and "different cluster" in msg


def test_kubeconfig_file_missing(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    env["KUBECONFIG"] = str(repo / "nope")
    assert "does not exist" in _refused(repo, env, capsys)


CHAIN = {"GPURL_CLUSTER_ENV_SOURCE": "chain"}  # kaniko snapshots the environment itself


def test_memory_below_512gb_where_kaniko_snapshots_the_environment(
        repo: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    msg = _refused(repo, env, capsys, memory="256GB", config_env=CHAIN)
    assert "below 512GB" in msg and "dies silently" in msg


def test_memory_below_512gb_with_force_is_allowed(
        repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    _build(repo, env, dry_run=True, memory="256GB", force=True, config_env=CHAIN)
    assert "--memory 256GB" in capsys.readouterr().out


def test_memory_below_the_composed_jobs_measured_peak(
        repo: Path, env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert "measured peak" in _refused(repo, env, capsys, memory="1MB")
    _build(repo, env, dry_run=True, memory="256GB")  # the composed job: no runbook floor
    assert "--memory 256GB" in capsys.readouterr().out


def test_memory_512gib_spelled_differently_is_accepted(
        repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    _build(repo, env, dry_run=True, memory="0.5TiB")
    assert "--memory 0.5TiB" in capsys.readouterr().out


def test_no_token(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    del env["GHCR_TOKEN"]
    msg = _refused(repo, env, capsys)
    assert "no registry token" in msg


def test_token_from_gh_when_env_is_empty(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    del env["GHCR_TOKEN"]
    _build(repo, env, dry_run=True, gh=CANARY)
    out = capsys.readouterr()
    assert "token from `gh auth token`" in out.err and CANARY not in out.out + out.err


def test_docker_hub_token_for_ghcr(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    env["GHCR_TOKEN"] = "dckr_pat_" + CANARY
    msg = _refused(repo, env, capsys)
    assert "Docker Hub token" in msg and "ghcr.io rejects" in msg


def test_no_commit_means_no_gitsha(tmp_path: Path, repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "fresh"
    shutil.copytree(repo, root, ignore=shutil.ignore_patterns(".git"))
    git(root, "init", "-q")
    assert "cannot resolve GITSHA" in _refused(root, env, capsys)


def test_uncommitted_edits_get_a_dirty_tag(
        repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """A tree with tracked edits is not the commit its sha names: its image is tagged
    PREFIX-SHA-dirty-<12 hex of the diff>, and the job's GITSHA says so too."""
    sha = short_sha(repo)
    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text() + "\n")
    _build(repo, env, dry_run=True)
    out = capsys.readouterr()
    assert "uncommitted edits (pyproject.toml)" in out.err
    found = re.search(rf"-e GITSHA ({sha}-dirty-[0-9a-f]{{12}}) ", out.out)
    assert found, out.out
    assert f"the image is tagged gpu-rl-{found.group(1)}, not as commit {sha}" in out.err
    (repo / "pyproject.toml").write_text((repo / "pyproject.toml").read_text() + "\n")
    _build(repo, env, dry_run=True)
    assert found.group(1) not in capsys.readouterr().out  # another diff, another tag


def test_an_edited_launcher_keeps_the_commit_tag(repo: Path, env: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """The launcher never enters the image (.dockerignore), so a pin does not make the tree
    dirty for the tag."""
    assert "rl/cloud/iris/launch_rl_iris.py" in (repo / ".dockerignore").read_text()
    launcher = repo / "rl" / "cloud" / "iris" / "launch_rl_iris.py"
    launcher.write_text("DEFAULT_RL_DOCKER_IMAGE = 'x'\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "launcher")
    launcher.write_text("DEFAULT_RL_DOCKER_IMAGE = 'y'\n")
    _build(repo, env, dry_run=True)
    assert f"-e GITSHA {short_sha(repo)} " in capsys.readouterr().out


def test_an_existing_immutable_tag_is_refused_before_submitting(
        repo: Path, env: dict[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A real `docker-registry` on loopback holds gpu-rl-<sha>: the build is refused before
    iris runs; --force submits and tells the script OVERWRITE_TAG=1 (stand-in iris)."""
    from tests.support.pusher import push_image, random_layer
    from tests.support.registry_server import running_registry

    with running_registry(tmp_path / "registry") as server:
        sha = short_sha(repo)
        image = push_image(server.url, "org/img", [random_layer(1000, "RUN x", seed=1)],
                           tag=f"gpu-rl-{sha}")
        env = {**env, "GPURL_REGISTRY_HOST": server.host, "GPURL_REGISTRY_REPOSITORY": "org/img",
               "HOME": str(tmp_path)}
        config = load_config(repo, env=env)

        def submit(**flags: object) -> None:
            jobs.run_build(config, BuildRequest(**flags),  # type: ignore[arg-type]
                           dry_run=False, say=say, world=_world(env, real_registry=True))

        with pytest.raises(GpurlError) as info:
            submit()
        assert f"{server.host}/org/img:gpu-rl-{sha} already exists as {image.manifest_digest}" \
            in info.value.message and "never moved" in info.value.message
        assert "--force" in (info.value.hint or "")
        assert not Path(env["IRIS_CALLED"]).exists()
        submit(force=True)
        argv = Path(env["IRIS_CALLED"]).read_text().splitlines()
        assert argv[argv.index("OVERWRITE_TAG") + 1] == "1"
        Path(env["IRIS_CALLED"]).unlink()
        free = load_config(repo, env={**env, "GPURL_REGISTRY_REPOSITORY": "org/other"})
        jobs.run_build(free, BuildRequest(), dry_run=False, say=say,
                       world=_world(env, real_registry=True))
        assert "OVERWRITE_TAG" not in Path(env["IRIS_CALLED"]).read_text()


def test_wheel_in_bundle(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "extra").mkdir()
    (repo / "extra" / "x-1.0-py3-none-any.whl").write_bytes(b"PK")
    git(repo, "add", "-f", "extra/x-1.0-py3-none-any.whl")
    msg = _refused(repo, env, capsys)
    assert "wheel file(s): extra/x-1.0-py3-none-any.whl" in msg


def test_bundle_over_25_mib(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    (repo / "big.bin").write_bytes(os.urandom(26 * 1024 * 1024))  # untracked, not ignored
    msg = _refused(repo, env, capsys)
    assert "over iris's hard cap of 25 MiB" in msg


def test_a_stale_generated_file_is_refused(repo: Path, env: dict[str, str],
        capsys: pytest.CaptureFixture[str]) -> None:
    """The build checks the one list of generated files `generate` writes: the package-set
    checker the Dockerfile COPYs is one."""
    checker = repo / "docker" / "gpurl-envcheck.py"
    checker.write_text(checker.read_text() + "# edited\n")
    assert "docker/gpurl-envcheck.py missing or stale" in _refused(repo, env, capsys)


def test_local_backend_dry_run_prints_the_build_and_runs_nothing() -> None:
    """`build --dry-run --json` is the one dry-run shape, and its commands are the very steps
    the build runs (pipeline.build_steps): env-base built, tagged and pushed, one staging
    container per planned slice (its slice file mounted where the image installs it from),
    then the image built from the committed Dockerfile with its tag, then pushed."""
    from gpurl_tasks.dockerfile.generate import fitted_plan
    from gpurl_tasks.dockerfile.wheels import prebuilt_wheel_names
    from gpurl_tasks.local.builder import image_reference
    from tests.support.tasks_runner import head_short_sha

    config = load_config(REPO_ROOT, profile="demo", env={})
    reference = image_reference(config, head_short_sha())
    proc = subprocess.run([sys.executable, "-m", "invoke", "build", "--backend", "local",
                           "--profile", "demo", "--dry-run", "--json"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == {"dry_run", "commands", "warnings"} and out["dry_run"] is True
    setup, env_base, tag, push_base, *slices, build, push, attest = out["commands"]
    # the SBOM's apt packages, read in the pushed image by its own dpkg
    assert attest[:2] == ["docker", "run"] and "dpkg-query" in attest and reference in attest
    assert setup[:2] == ["invoke", "setup-local"]
    assert env_base[:2] == ["docker", "build"] and env_base[env_base.index("--target") + 1] \
        == "env-base"
    assert tag[:2] == ["docker", "tag"] and push_base[:2] == ["docker", "push"]
    assert push_base[-1] == tag[-1] and "/cache:env-base-" in tag[-1]
    layers = fitted_plan(config).layers
    assert [argv[:2] for argv in slices] == [["docker", "run"]] * len(layers)
    mounts = [f"{layer.slice.path(config.variant)}:{layer.slice.image_path}:ro"
              for layer in layers]
    assert [next(a for a in argv if a.endswith(":ro") and "/gpurl-layers/" in a)
            for argv in slices] == mounts
    assert build[build.index("-f") + 1] == str(config.build.dockerfile)
    assert f"WHEEL_SOURCE={config.build.wheel_source}" in build
    assert f"ENV_SOURCE={config.registry.image}@<composed digest>" in build
    assert build[build.index("--tag") + 1] == reference
    assert push == ["docker", "push", reference]
    assert "==> setup-local" not in proc.stderr
    assert not any("COMPILED_SOURCE" in arg for arg in build)  # wheel-builder: the stage copies
    # prebuilt wheels: one more container writes their layer, and the rl stage is FROM env
    prebuilt = subprocess.run([sys.executable, "-m", "invoke", "build", "--backend", "local",
                               "--profile", "demo", "--wheel-source", "prebuilt-wheelhouse",
                               "--dry-run", "--json"], cwd=REPO_ROOT, capture_output=True,
                              text=True, check=False)
    assert prebuilt.returncode == 0, prebuilt.stderr
    *_, compiled, build, _push, _attest = json.loads(prebuilt.stdout)["commands"]
    assert f"{config.build.wheelhouse}:/tmp/wheels:ro" in compiled
    tool = compiled[-1]
    assert "gpurl_tasks.writer.tool compiled /tmp/wheels" in tool
    assert all(f"--wheel {name}" in tool for name in prebuilt_wheel_names(config))
    assert "COMPILED_SOURCE=env" in build
    chain = subprocess.run([sys.executable, "-m", "invoke", "build", "--backend", "local",
                            "--profile", "demo", "--chain", "--push-floating", "--dry-run",
                            "--json"], cwd=REPO_ROOT, capture_output=True, text=True,
                           check=False)
    assert chain.returncode == 0, chain.stderr
    _, build, push, floating, _attest = json.loads(chain.stdout)["commands"]
    assert not any("ENV_SOURCE" in arg for arg in build)  # the Dockerfile's default: env-chain
    floating_tag = f"{config.registry.image}:{config.registry.floating_tag}"
    assert floating_tag in build and floating == ["docker", "push", floating_tag]


def test_the_gb200_dry_run_runs_on_its_own_cluster_with_its_aarch64_script() -> None:
    """`invoke build -p multiarch --variant gb200 --dry-run` (and --json): the iris job goes
    to the variant's cluster, the script it ships is the variant's aarch64 one, and the run
    names the zipapp it stages by sha256 and size (the script checks that sha256)."""
    argv = [sys.executable, "-m", "invoke", "build", "-p", "multiarch", "--variant", "gb200",
            "--dry-run"]
    shown = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("iris --cluster=cw-us-east-08a job run "), shown.stdout
    done = subprocess.run([*argv, "--json"], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    (command,) = json.loads(done.stdout)["commands"]
    assert command[:4] == ["iris", "--cluster=cw-us-east-08a", "job", "run"]
    script = base64.b64decode(command[command.index("BUILD_B64") + 1]).decode()
    assert script == render_script(load_config(REPO_ROOT, profile="multiarch", variant="gb200",
                                               env={}))
    assert "TARGET_PLATFORM=linux/arm64\n" in script
    app = job_app()
    assert f"{JOB_APP}: {app.size} bytes, sha256 {app.sha256})" in shown.stderr
    assert f'echo "{app.sha256}  $JOB_APP" | sha256sum -c' in script


def test_local_only_flags_are_refused_for_the_cluster_backend() -> None:
    proc = subprocess.run([sys.executable, "-m", "invoke", "build", "--backend", "iris",
                           "--no-cache", "--dry-run"], cwd=REPO_ROOT, capture_output=True,
                          text=True, check=False)
    assert proc.returncode != 0
    assert "--no-cache is a local-backend flag" in proc.stderr
    assert "add --backend local" in proc.stderr  # what to do, not only what is wrong


def test_environment_overrides_do_not_make_committed_files_stale(tmp_path: Path) -> None:
    """GPURL_* variables change what a task does, never the committed generated files:
    `build --dry-run` with GPURL_REGISTRY_USER set still passes the script freshness check."""
    kube = tmp_path / "kubeconfig"
    kube.write_text("apiVersion: v1\n")
    env = {**os.environ, "GPURL_REGISTRY_USER": "alice", "GPURL_LAYERS_CAP": "1GB",
           "KUBECONFIG": str(kube), "GPURL_REGISTRY_TOKEN": "ghp_" + "c" * 36 + "canary"}
    for argv in (["generate", "--check"], ["build", "--dry-run"]):
        proc = subprocess.run([sys.executable, "-m", "invoke", *argv], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, (argv, proc.stderr)
        assert "canary" not in proc.stdout + proc.stderr
    assert "DOCKER_USER_ID alice" in proc.stdout


def test_a_lock_bump_without_generate_is_refused(repo: Path, env: dict[str, str],
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A lock edited after `invoke generate` makes the committed Dockerfile and slices stale:
    the build is refused before anything is submitted, in generate --check's words."""
    lock = repo / "rl" / "uv.lock"
    text = lock.read_text()
    assert 'name = "filelock"' in text
    lock.write_text(text.replace('name = "filelock"\nversion = "', 'name = "filelock"\nversion = "9', 1))
    message = _refused(repo, env, capsys)
    assert "docker/Dockerfile.gpu-rl missing or stale for profile 'gpu-rl' variant 'standard'" \
        in message and "invoke generate --profile gpu-rl" in message
    assert not Path(env["IRIS_CALLED"]).exists()


def test_a_stale_slice_is_refused_by_the_local_backend_too(repo: Path) -> None:
    """The local backend refuses the same stale slice set before it starts the engine."""
    from gpurl_tasks.local.pipeline import build_local

    slice_file = next((repo / "docker" / "layers" / "gpu-rl").rglob("*.txt"))
    slice_file.write_text(slice_file.read_text() + "# edited\n")
    with pytest.raises(GpurlError, match=rf"{slice_file.name} missing or stale"):
        build_local(load_config(repo, env={}), git_sha="0123abc")


def test_the_printed_command_is_one_well_formed_shell_line(repo: Path, env: dict[str, str]) -> None:
    """The dry-run line parses back (shlex) into the real argv with the long payload replaced
    whole by its placeholder: nothing is cut inside a quoted word."""
    import shlex

    from gpurl_tasks.cluster.submit import ELIDE_OVER, prepare_build

    prepared = prepare_build(load_config(repo, env={}), BuildRequest(), _world(env))
    words = shlex.split(prepared.display())
    real = prepared.argv("iris", reveal=False)
    assert len(words) == len(real)
    for shown, arg in zip(words, real, strict=True):
        assert shown == arg if len(arg) <= ELIDE_OVER else shown == f"{arg[:24]}...<{len(arg)} chars>"
    assert any(len(arg) > ELIDE_OVER for arg in real)  # the base64 script is elided


def _bump_without_size(lock: Path, slices: Path) -> str:
    """Bump a package the plan installs (the first pinned requirement of the profile's first
    slice file) to a version no size source knows: its version, artifact URLs and file names
    moved on, their sizes gone from the lock. Returns the new `name==version`."""
    first = sorted(slices.rglob("*.txt"))[0]
    requirement = next(line.split()[0] for line in first.read_text().splitlines()
                       if "==" in line and not line.startswith(("#", "-")))
    name, version = requirement.split("==")
    text = lock.read_text()
    start = text.index(f'[[package]]\nname = "{name}"\nversion = "{version}"\n')
    end = text.find("\n[[package]]", start + 1)
    end = len(text) if end < 0 else end
    release = Version(version).release
    bumped = ".".join(str(n) for n in (*release[:-1], release[-1] + 100))  # a newer release
    block = re.sub(r", size = \d+", "", text[start:end].replace(version, bumped))
    lock.write_text(text[:start] + block + text[end:])
    return f"{name}=={bumped}"


@pytest.mark.integration
@pytest.mark.parametrize(("profile", "backend"), [("gpu-rl", "iris"), ("demo", "local")])
def test_a_stale_build_says_stale_first_then_the_size_generate_needs(
        tmp_path: Path, profile: str, backend: str) -> None:
    """A lock bumped after `invoke generate` to a version whose size nothing knows: the build
    is refused as stale first (before any other guard rail: no KUBECONFIG or token is set),
    then names the size `invoke generate` will need."""
    from gpurl_tasks.config import load_committed_config

    root = repo_copy(tmp_path / "repo")
    config = load_committed_config(root, profile)
    bumped = _bump_without_size(config.lock, config.build.slices / profile)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPURL_") and k not in ("KUBECONFIG", "GHCR_TOKEN", "GITHUB_TOKEN")}
    proc = subprocess.run([sys.executable, "-m", "invoke", "build", "--profile", profile,
                           "--backend", backend, "--dry-run"], cwd=root, env=env,
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.returncode != 0
    first, *rest = proc.stderr.splitlines()
    dockerfile = config.build.dockerfile.relative_to(root)
    assert first.startswith(f"error: {dockerfile} stale for profile {profile!r}"), proc.stderr
    assert f"run `invoke generate --profile {profile}`" in first
    assert any(bumped in line and "size" in line for line in rest), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_an_image_of_the_same_inputs_is_tagged_and_no_job_is_submitted(
        repo: Path, env: dict[str, str], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A real `docker-registry` on loopback holds an image under this tree's inputs tag (as a
    job's attest step records it; its labels the generated Dockerfile's): the dry run names
    that tag and touches no registry, the build tags gpu-rl-<sha> on its digest and submits no
    job; --force submits, telling the job the inputs tag to record; with a blob of that image
    gone, a new commit of the same inputs submits and says why (stand-in iris: the cluster is
    not reachable here)."""
    import httpx

    from gpurl_tasks.rebuild.inputs import build_inputs
    from gpurl_tasks.release.reuse import Reused, expected_labels
    from tests.support.pusher import push_image, random_layer
    from tests.support.registry_server import running_registry

    with running_registry(tmp_path / "registry") as server:
        env = {**env, "GPURL_REGISTRY_HOST": server.host, "GPURL_REGISTRY_REPOSITORY": "org/img",
               "GPURL_REGISTRY_RETRIES": "0", "HOME": str(tmp_path)}
        config = load_config(repo, env=env)
        key = build_inputs(config, wheel_source=config.build.wheel_source,
                           base_digest=lambda ref: None).key  # the base's registry: unreachable
        labels = expected_labels(config.build.dockerfile.read_text())
        assert labels  # the generated Dockerfile names its config, lock and plan
        image = push_image(server.url, "org/img", [random_layer(1000, "RUN x", seed=2)],
                           tag=f"inputs-{key}", labels=labels)
        tag = f"{server.host}/org/img:gpu-rl-{short_sha(repo)}"

        def build(**flags: object) -> object:
            return jobs.run_build(config, BuildRequest(**{k: v for k, v in flags.items()
                                                          if k != "dry_run"}),  # type: ignore[arg-type]
                                  dry_run=bool(flags.get("dry_run")), say=say,
                                  world=_world(env, real_registry=True))

        def held(reference: str) -> str | None:
            host, _, rest = reference.partition("/")
            name, _, ref = rest.rpartition(":")
            answer = httpx.head(f"http://{host}/v2/{name}/manifests/{ref}",
                                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
            return answer.headers.get("Docker-Content-Digest") if answer.status_code == 200 else None

        capsys.readouterr()
        planned = build(dry_run=True)  # touches no registry: names the tag it would look up
        assert not isinstance(planned, Reused) and held(tag) is None
        assert f"looks up {server.host}/org/img:inputs-{key}" in capsys.readouterr().err
        done = build()
        assert isinstance(done, Reused) and held(tag) == image.manifest_digest
        assert done.to_json()["reused"] is True and not Path(env["IRIS_CALLED"]).exists()
        assert build().digest == image.manifest_digest  # type: ignore[attr-defined]

        submitted = build(force=True)
        assert not isinstance(submitted, Reused)
        argv = Path(env["IRIS_CALLED"]).read_text().splitlines()
        assert argv[argv.index("INPUTS_TAG") + 1] == f"inputs-{key}"
        Path(env["IRIS_CALLED"]).unlink()

        layer = image.layers[0].digest
        assert httpx.delete(f"{server.url}/v2/org/img/blobs/{layer}").status_code == 202
        git(repo, "commit", "-q", "--allow-empty", "-m", "same inputs, a new tag")
        capsys.readouterr()
        assert not isinstance(build(), Reused)  # never a broken image: submitted
        assert "lacks 1 of its 2 blobs" in capsys.readouterr().err
        assert Path(env["IRIS_CALLED"]).exists()
