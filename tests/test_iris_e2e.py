"""The cluster path end to end on a real local iris controller (the pinned marin-iris release).

`invoke build`'s own function submits the real generated kaniko script through the real
`iris job run` (workspace bundle from a real git checkout, `-e` variables, the base64
launcher); the controller runs it as a host process. `invoke watch` and `invoke kill` run
as the user runs them (subprocesses) against `[tool.gpurl.cluster] controller-url`.

Stand-ins, because kaniko and crane cannot run here: `crane` is served from 127.0.0.1 as a
checksum-pinned tarball and its `export` lays down a stand-in kaniko executor
(tests/support/kaniko_harness.py); the job finds them through the script's pins, and the bundle
through a private root whose `app` is the job's $IRIS_WORKDIR (the pod's /app), set up by
the controller HOME's .bash_profile (tests/support/iris_cluster.py). Everything else is real.

Runs in `nox -s iris-e2e` (Python 3.12, the pinned release), which `.ci/run` runs; elsewhere
iris is not importable and the module skips with that reason.
"""

from __future__ import annotations

import base64
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpurl_tasks.cluster import jobs
from gpurl_tasks.cluster.iris import ClusterTarget, IrisCli
from gpurl_tasks.cluster.submit import BuildRequest
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.proc import run
from tests.support.checkout import repo_copy
from tests.support.git import git
from tests.support.iris_cluster import LocalIris, local_iris
from tests.support.kaniko_harness import STANDIN_DIGEST, Rig, rig
from tests.support.local_parts import free_port
from tests.support.registry_server import RegistryServer, require_registry, running_registry

CANARY = "ghp_CANARYe2e5c1f00d"
PIN_ENV = "GPURL_IRIS_CONTRACT"  # set by the iris sessions: there a missing iris fails

if importlib.util.find_spec("iris") is None or importlib.util.find_spec("iris.cli") is None:
    if os.environ.get(PIN_ENV):
        raise RuntimeError(f"{PIN_ENV} is set but iris is not importable")
    pytest.skip("iris (marin-iris, Python >= 3.12) is not installed; run `nox -s iris-e2e`",
                allow_module_level=True)

pytestmark = pytest.mark.integration

# Everything gpurl printed in this module, checked for the canary at the end.
PRINTED: list[str] = []
JOBS: list[str] = []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalIris]:
    # the controller's environment is every task's: no token or gpurl setting leaks in
    start = time.monotonic()
    with local_iris(tmp_path_factory.mktemp("iris"), free_port(), env=_clean_env()) as running:
        print(f"\nlocal iris controller up in {time.monotonic() - start:.1f}s at {running.url}")
        yield running


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real git checkout of this project (its tracked and untracked-unignored files)."""
    root = repo_copy(tmp_path_factory.mktemp("workspace"), untracked=True)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "workspace")
    return root


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    """A real registry on loopback stands where GHCR would: `invoke build` looks the immutable
    tag up there before it submits (a fresh tag: not found)."""
    require_registry()
    with running_registry(tmp_path_factory.mktemp("registry")) as server:
        yield server


@pytest.fixture(scope="module")
def user_env(cluster: LocalIris, workspace: Path, registry: RegistryServer,
             tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The user's shell: the token, KUBECONFIG, the stock iris, the local controller's URL, the
    loopback registry as the push target."""
    kube = tmp_path_factory.mktemp("kube") / "config"
    kube.write_text("apiVersion: v1\n")
    return {**os.environ, "GPURL_REGISTRY_TOKEN": CANARY, "KUBECONFIG": str(kube),
            jobs.IRIS_ENV: str(cluster.iris), "GPURL_CLUSTER_CONTROLLER_URL": cluster.url,
            # invoke build stages the checkout's own slice index, whose slices (torch, ...)
            # cannot be installed offline: the job runs the chain script (the composed one
            # runs in test_kaniko_script, on the rig's slices, and in test_kaniko_e2e)
            "GPURL_CLUSTER_ENV_SOURCE": "chain",
            "GPURL_REGISTRY_HOST": registry.host,
            "HOME": str(cluster.home.parent / "client-home")}


def _config(workspace: Path, env: dict[str, str]) -> Config:
    """The user's config; the rig's pins point the shipped script at its stand-in wheels."""
    return load_config(workspace, env=env)


def submit(workspace: Path, env: dict[str, str], r: Rig, **request: object) -> str:
    """`invoke build` on a new commit (a new sha, so a new job name), as the task runs it."""
    git(workspace, "commit", "-q", "--allow-empty", "-m", f"build {len(JOBS)}")
    said: list[str] = []
    options = {"cpu": 1, "memory": "1GB", "disk": "1GB", "force": True, **request}
    submission = jobs.run_build(_config(workspace, {**env, **r.pin_env}),
                                BuildRequest(**options),  # type: ignore[arg-type]
                                dry_run=False, say=said.append, world=jobs.real_world(env))
    assert isinstance(submission, jobs.Submission)  # not a dry run
    PRINTED.extend([*said, submission.human(), json.dumps(submission.to_json())])
    sha = git(workspace, "rev-parse", "--short", "HEAD").strip()
    assert submission.job_id is not None and submission.job_id.endswith(f"/gpurl-kaniko-{sha}")
    JOBS.append(submission.job_id)
    return submission.job_id


def invoke(workspace: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """An invoke task as the user types it, from the checkout."""
    proc = subprocess.run([sys.executable, "-m", "invoke", *args], cwd=workspace, env=env,
                          capture_output=True, text=True, timeout=400, check=False)
    PRINTED.extend([proc.stdout, proc.stderr])
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def watch(workspace: Path, env: dict[str, str], job_id: str,
          ) -> tuple[subprocess.CompletedProcess[str], dict[str, object]]:
    proc = invoke(workspace, env, "watch", job_id, "--interval", "2", "--max-duration", "300",
                  "--json")
    return proc, json.loads(proc.stdout)


def stored_log(cluster: LocalIris, job_id: str, cwd: Path) -> str:
    """The job's log as the controller stores it, read with the stock client."""
    proc = cluster.client("job", "logs", job_id, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def timed_out_job(cluster: LocalIris, workspace: Path, user_env: dict[str, str],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Submitted first, watched last: the controller sweeps `--timeout` only every 60 s, so
    the other tests run while it waits."""
    with rig(tmp_path_factory.mktemp("rig-timeout"), None, chain=True,
             executor_tail="sleep 300") as r:
        yield submit(workspace, user_env, r, timeout=1)


def test_build_runs_the_real_script_and_watch_follows_it_to_succeeded(
        cluster: LocalIris, workspace: Path, user_env: dict[str, str], timed_out_job: str,
        registry: RegistryServer, tmp_path: Path) -> None:
    with rig(tmp_path, None, chain=True) as r:
        job_id = submit(workspace, user_env, r)
        proc, out = watch(workspace, user_env, job_id)
    assert proc.returncode == 0, proc.stderr
    assert out["state"] == "succeeded" and out["job_exit_code"] == 0
    assert [e["state"] for e in out["events"]][-1] == "succeeded"  # type: ignore[index]
    sha = job_id.rsplit("-", 1)[1]
    image = f"{registry.host}/open-thoughts/openthoughts-agent"
    log = stored_log(cluster, job_id, tmp_path)
    assert f"pushed {image}:gpu-rl-{sha}@{STANDIN_DIGEST}" in log
    (call,) = r.calls("executor")
    assert f"--destination {image}:gpu-rl-{sha}" in call
    assert "--build-arg GITSHA=" + sha in call
    # the script built from its copy of the bundle under /kaniko (kaniko deletes the rest of
    # the job's filesystem between stages), where the wheels were fetched
    assert "--context dir://" in call and "/kaniko/context " in call
    # the token reached the job through `-e` (it is in the auth file the executor saw) ...
    auth = json.loads(r.auth_seen.read_text())["auths"][registry.host]["auth"]
    assert base64.b64decode(auth).decode() == f"penfever:{CANARY}"
    # ... and was gone from the environment, IRIS_JOB_ENV's copy included, before kaniko ran
    assert "token-in-env=\n" in r.log.read_text() and "iris-job-env=\n" in r.log.read_text()
    assert CANARY not in log


def test_a_failing_script_ends_failed_with_the_log_tail(
        cluster: LocalIris, workspace: Path, user_env: dict[str, str], tmp_path: Path) -> None:
    """The MANIFEST checksum check fails inside the job (a wheel changed after MANIFEST)."""
    with rig(tmp_path, None, chain=True) as r:
        (r.served / "wheels" / r.wheels[0]).write_bytes(b"not the wheel MANIFEST names")
        job_id = submit(workspace, user_env, r)
        proc, out = watch(workspace, user_env, job_id)
    assert proc.returncode == 1, proc.stderr
    assert out["state"] == "failed" and out["job_exit_code"] == 1
    assert any(f"checksum mismatch for {r.wheels[0]}" in line
               for line in out["log_tail"])  # type: ignore[attr-defined]
    assert "--- last" in proc.stderr and "checksum mismatch" in proc.stderr
    assert not r.calls("executor")


def test_a_long_log_shows_its_real_tail_redacted(
        cluster: LocalIris, workspace: Path, user_env: dict[str, str], tmp_path: Path) -> None:
    """1500 lines, then a line leaking the token, then the error: the watcher must show the
    end (the server returns its earliest 1000 lines unless asked for the tail), redacted."""
    leaky = ('for i in $(seq 1 1500); do echo "kaniko step $i"; done\n'
             'echo "auth: $(sed -e \'s/.*"auth":"//\' -e \'s/".*//\' '
             '"$DOCKER_CONFIG/config.json" | base64 -d)"\n'
             'echo "error building image: exit status 1" >&2; exit 1')
    with rig(tmp_path, None, chain=True, executor_tail=leaky) as r:
        job_id = submit(workspace, user_env, r)
        JOBS.remove(job_id)  # this one leaks on purpose
        proc, out = watch(workspace, user_env, job_id)
    assert proc.returncode == 1, proc.stderr
    tail = out["log_tail"]
    assert isinstance(tail, list) and len(tail) == jobs.LOG_TAIL_LINES
    # the end of the log, not its first 1000 lines; redacted
    assert any(line.endswith("kaniko step 1500") for line in tail[-3:])
    assert any(line.endswith("auth: ***") for line in tail[-3:])  # user:token redacted whole
    # a real controller sometimes drops the last stderr line of a task that exits right after
    # it; the reason is always in the job's error ("Exit code: 1. stderr: ..."), which watch shows
    assert out["error"] == "Exit code: 1. stderr: error building image: exit status 1"
    assert "error=Exit code: 1. stderr: error building image" in proc.stderr
    assert CANARY in stored_log(cluster, job_id, tmp_path)  # the job did leak it
    assert CANARY not in proc.stdout + proc.stderr


def test_kill_ends_the_job_killed(cluster: LocalIris, workspace: Path, user_env: dict[str, str],
                                  tmp_path: Path) -> None:
    with rig(tmp_path, None, chain=True, executor_tail="sleep 300") as r:
        job_id = submit(workspace, user_env, r)
        iris = IrisCli(lambda argv, timeout: run(argv, echo=None, timeout=timeout),
                       program=str(cluster.iris), cluster=ClusterTarget(controller_url=cluster.url))
        deadline = time.monotonic() + 120
        while not r.calls("executor"):  # the job is inside the (stand-in) kaniko build
            assert iris.read_state(job_id, within=60).state in ("pending", "running")
            assert time.monotonic() < deadline, "the job never reached the executor"
            time.sleep(1)
        killed = invoke(workspace, user_env, "kill", job_id)
        assert killed.returncode == 0 and f"killed {job_id}" in killed.stdout
        proc, out = watch(workspace, user_env, job_id)
    assert proc.returncode == 1 and out["state"] == "killed"
    assert out["error"] == "Terminated by user"
    # iris itself would say "Terminated jobs: <id>" again (with --no-include-children) or
    # kill a running job the id prefixes (without): gpurl reads the state first
    again = invoke(workspace, user_env, "kill", job_id)
    assert again.returncode == 2 and again.stderr.startswith("error: nothing killed")
    assert "already killed" in again.stderr and "\n  hint: " in again.stderr


def test_an_unknown_job_is_absent_not_a_wait(cluster: LocalIris, workspace: Path,
                                             user_env: dict[str, str]) -> None:
    start = time.monotonic()
    proc, out = watch(workspace, user_env, "/root/gpurl-no-such-job")
    assert proc.returncode == 2 and out["result"]["state"] == "absent" and out["hint"]
    assert time.monotonic() - start < 120


def test_a_job_past_its_timeout_ends_failed_with_the_reason(
        cluster: LocalIris, workspace: Path, user_env: dict[str, str], timed_out_job: str) -> None:
    proc, out = watch(workspace, user_env, timed_out_job)
    assert proc.returncode == 1, proc.stderr
    assert out["state"] == "failed" and out["error"] == "Execution timeout exceeded"
    assert "Execution timeout exceeded" in proc.stderr


def _clean_env() -> dict[str, str]:
    """The controller's environment, and so every task's: no token or gpurl setting."""
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("GPURL_", "GHCR_", "DOCKER_"))}


def plain_job(cluster: LocalIris, cwd: Path, name: str, *, cpu: int = 1,
              seconds: int = 300) -> str:
    """A `sleep` job submitted with the stock client (what gpurl watches or kills need not be
    a kaniko build); its id."""
    proc = cluster.client("job", "run", "--cpu", str(cpu), "--memory", "1GB", "--job-name",
                          name, "--no-wait", "--", "sleep", str(seconds), cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip().splitlines()[-1]
    assert job_id.endswith("/" + name)
    return job_id


def stock_state(cluster: LocalIris, job_id: str, cwd: Path) -> str:
    """The job's state as the stock client reads it."""
    proc = cluster.client("job", "summary", job_id, "--json", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return str(json.loads(proc.stdout)["state"])


def stock_kill(cluster: LocalIris, cwd: Path, *job_ids: str) -> None:
    for job_id in job_ids:
        cluster.client("job", "kill", "--no-include-children", job_id, cwd=cwd)


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Background:
    """`invoke ARGS` running in the background, its stderr in a file read while it runs."""

    def __init__(self, workspace: Path, env: dict[str, str], tmp: Path, *args: str) -> None:
        self.err_file = tmp / "stderr.txt"
        self.started = time.monotonic()
        with self.err_file.open("w") as err:
            # Ctrl-C as a terminal delivers it: a shell that ran this suite in the background
            # leaves SIGINT ignored, and an ignored signal stays ignored across exec
            self.proc = subprocess.Popen([sys.executable, "-m", "invoke", *args], cwd=workspace,
                                         env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                         preexec_fn=_sigint_default)

    @property
    def stderr(self) -> str:
        return self.err_file.read_text()

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.stderr:
            assert self.proc.poll() is None, f"ended ({self.proc.returncode}): {self.stderr}"
            assert time.monotonic() < deadline, f"no {text!r} in: {self.stderr}"
            time.sleep(0.2)

    def finish(self, timeout: float) -> tuple[int, str, str]:
        out, _ = self.proc.communicate(timeout=timeout)
        PRINTED.extend([out, self.stderr])
        assert "Traceback" not in self.stderr, self.stderr
        return self.proc.returncode, out, self.stderr


def test_kill_stops_only_the_named_job_not_one_its_id_prefixes(
        cluster: LocalIris, workspace: Path, user_env: dict[str, str], tmp_path: Path) -> None:
    """A clean-tree job name is a prefix of the same commit's dirty-tree job name; iris's own
    `job kill` matches by prefix. Both run; killing the clean one must leave the dirty one."""
    clean = plain_job(cluster, tmp_path, "gpurl-kaniko-fa17ed1")
    dirty = plain_job(cluster, tmp_path, "gpurl-kaniko-fa17ed1-dirty-0badc0de")
    try:
        killed = invoke(workspace, user_env, "kill", clean)
        print(f"\n$ invoke kill {clean}  -> {killed.returncode}\n{killed.stdout}{killed.stderr}")
        assert killed.returncode == 0, killed.stdout + killed.stderr
        assert killed.stdout.startswith(f"killed {clean} ") and dirty in killed.stdout
        assert stock_state(cluster, clean, tmp_path) == "killed"
        assert stock_state(cluster, dirty, tmp_path) in ("pending", "running")
        again = invoke(workspace, user_env, "kill", clean)
        print(f"$ invoke kill {clean}  -> {again.returncode}\n{again.stdout}{again.stderr}")
        assert again.returncode == 2 and again.stderr.startswith("error: ") and "not running" in again.stderr
        assert stock_state(cluster, dirty, tmp_path) in ("pending", "running")
        # a trailing slash (iris: "Job name contains empty ... component") is the same job
        proc = invoke(workspace, user_env, "watch", clean + "/", "--interval", "1",
                      "--max-duration", "60", "--json")
        print(f"$ invoke watch {clean}/ --json  -> {proc.returncode}\n{proc.stderr}")
        out = json.loads(proc.stdout)
        assert proc.returncode == 1 and out["job_id"] == clean and out["state"] == "killed"
        last = invoke(workspace, user_env, "kill", dirty + "/")
        assert last.returncode == 0 and last.stdout.strip() == f"killed {dirty}"
        assert stock_state(cluster, dirty, tmp_path) == "killed"
    finally:
        stock_kill(cluster, tmp_path, dirty)


def test_watch_shows_why_a_job_is_pending(
        cluster: LocalIris, workspace: Path, user_env: dict[str, str], tmp_path: Path) -> None:
    """A job asking for the whole worker waits behind another; the controller says why."""
    blocker = plain_job(cluster, tmp_path, f"gpurl-blocker-{os.getpid()}")
    waiter = plain_job(cluster, tmp_path, f"gpurl-waiter-{os.getpid()}", cpu=8, seconds=1)
    try:
        proc = invoke(workspace, user_env, "watch", waiter, "--interval", "2",
                      "--max-duration", "30")
        print(f"\n$ invoke watch {waiter} --max-duration 30  -> {proc.returncode}\n"
              f"{proc.stdout}{proc.stderr}")
        listed = cluster.client("job", "list", "--json", "--prefix", waiter, cwd=tmp_path)
        reason = json.loads(listed.stdout)[0]["pending_reason"]
    finally:
        stock_kill(cluster, tmp_path, waiter, blocker)
    assert proc.returncode == 3, proc.stderr
    first = reason.splitlines()[0].split("(")[0].strip()  # "Scheduler: Insufficient CPU"
    assert first and first in proc.stdout and f"reason={first}" in proc.stderr
    assert proc.stdout.startswith(f"{waiter}: still pending at the bound")


def test_watch_holds_its_bound_when_the_controller_stops(
        workspace: Path, user_env: dict[str, str], tmp_path: Path) -> None:
    """A second controller, stopped mid-watch: every iris call then hangs (the client retries
    for 30 minutes); the watch still ends at --max-duration, exit 3."""
    bound = 30
    with local_iris(tmp_path / "iris", free_port(), env=_clean_env()) as other:
        job_id = plain_job(other, tmp_path, "gpurl-orphan")
        env = {**user_env, "GPURL_CLUSTER_CONTROLLER_URL": other.url,
               jobs.IRIS_ENV: str(other.iris)}
        watching = Background(workspace, env, tmp_path, "watch", job_id, "--interval", "1",
                              "--max-duration", str(bound))
        watching.wait_for("] running")
    stopped = time.monotonic()  # the controller is gone (SIGTERM, waited for)
    code, out, err = watching.finish(timeout=bound + 60)
    took = time.monotonic() - watching.started
    print(f"\n$ invoke watch {job_id} --interval 1 --max-duration {bound}  -> {code} after "
          f"{took:.1f}s (controller stopped at {stopped - watching.started:.1f}s)\n{out}{err}")
    assert code == 3
    assert "cannot reach the controller since" in out
    assert took < bound + 15  # the bound, plus starting Python and invoke


def test_ctrl_c_ends_a_watch_with_130_and_leaves_the_job_running(
        cluster: LocalIris, workspace: Path, user_env: dict[str, str], tmp_path: Path) -> None:
    job_id = plain_job(cluster, tmp_path, f"gpurl-interrupted-{os.getpid()}")
    try:
        watching = Background(workspace, user_env, tmp_path, "watch", job_id, "--interval", "1")
        watching.wait_for("] running")
        sent = time.monotonic()
        watching.proc.send_signal(signal.SIGINT)
        code, out, err = watching.finish(timeout=30)
        took = time.monotonic() - sent
        print(f"\n$ invoke watch {job_id}  (SIGINT)  -> {code} after {took:.1f}s\n{out}{err}")
        assert code == 130 and "interrupted" in err
        assert took < 10
        assert stock_state(cluster, job_id, tmp_path) == "running"
    finally:
        stock_kill(cluster, tmp_path, job_id)


def test_the_token_never_reaches_stored_logs_or_output(cluster: LocalIris, tmp_path: Path) -> None:
    assert JOBS and PRINTED
    for job_id in JOBS:
        assert CANARY not in stored_log(cluster, job_id, tmp_path), job_id
    assert CANARY not in cluster.log.read_text(errors="replace")
    for text in PRINTED:
        assert CANARY not in text
        with contextlib.suppress(ValueError):
            assert base64.b64encode(CANARY.encode()).decode() not in text


def test_doctor_reads_the_real_pinned_iris_and_reaches_the_controller(
        cluster: LocalIris, user_env: dict[str, str]) -> None:
    """doctor's iris checks on the real pinned install and the real local controller. This
    install is the one the iris sessions make (the pinned release, no controller extra), so
    the verdict is exact: every pin matches, and only the kubernetes client (what the
    CoreWeave platform imports) is missing — the runbook's "broken kubernetes import"."""
    from gpurl_tasks.cluster import doctor
    from gpurl_tasks.cluster.iris_release import IRIS_CONTRACT_PINS

    check = doctor.iris_install({**user_env, jobs.IRIS_ENV: str(cluster.iris)})
    assert "not the pinned release" not in check.detail, check.detail
    if importlib.util.find_spec("kubernetes") is None:
        assert check.failed and "cannot import its kubernetes client" in check.detail
    else:
        assert check.status == "ok", check.detail
        iris_pin = next(p for p in IRIS_CONTRACT_PINS if p.startswith("marin-iris=="))
        assert iris_pin.split("==")[1] in check.detail
    assert doctor.iris_controller(cluster.url).status == "ok"
    down = doctor.iris_controller(f"http://127.0.0.1:{free_port()}")
    assert down.failed and "does not answer" in down.detail


def test_verify_gpu_submits_the_image_by_digest_and_says_why_no_result_came(
        cluster: LocalIris, workspace: Path, user_env: dict[str, str],
        registry: RegistryServer) -> None:
    """`invoke verify-gpu`'s own function against the real controller: the job asks for the
    GPUs of one node, its task image the pushed image by digest. This local cluster has CPU
    workers only (a GPU node cannot run here), so no node takes it: one line says why, and
    nothing is attached to the image."""
    from gpurl_tasks.attest.verification import MEDIA_TYPE
    from gpurl_tasks.cluster.gpujob import run_verify_gpu
    from gpurl_tasks.errors import GpurlError
    from gpurl_tasks.imageref import parse_reference
    from gpurl_tasks.oci.referrers import find
    from gpurl_tasks.oci.registry import RegistryClient
    from tests.support.pusher import push_image, random_layer

    env = {**user_env, "GPURL_CLUSTER_GPU_TIMEOUT": "10", "GPURL_CLUSTER_GPU_START_TIMEOUT": "20"}
    config = load_config(workspace, env=env)
    pushed = push_image(registry.url, config.registry.repository,
                        [random_layer(1000, "RUN true", seed=52)], tag="gpu-check-e2e")
    ref = f"{registry.host}/{config.registry.repository}:gpu-check-e2e"
    said: list[str] = []
    with pytest.raises(GpurlError) as failed:
        run_verify_gpu(config, ref, dry_run=False, say=said.append, interval=2, env=env)
    PRINTED.extend([*said, failed.value.message])
    print("\n".join([*said, f"error: {failed.value.message}", f"  hint: {failed.value.hint}"]))
    assert "\n" not in failed.value.message
    # the pinned release refuses it at submit, naming what its scale groups provide
    assert failed.value.message.startswith(
        f"the GPU job gpurl-gpu-{pushed.manifest_digest[7:19]} cannot be scheduled: no node "
        "offers what it asks (no scaling group provides device gpu:* (available: cpu)")
    assert "cluster.gpus" in (failed.value.hint or "")
    with RegistryClient(registry.host) as client:
        assert find(client, parse_reference(ref), pushed.manifest_digest, MEDIA_TYPE) == []
