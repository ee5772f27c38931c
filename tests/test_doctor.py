"""`invoke doctor`: each prerequisite checked alone against a real local part.

Real here: `docker-registry` on loopback with Bearer token auth (tests/support/token_auth.py,
a token with push and one without) and with htpasswd Basic auth, a loopback HTTP file server
for the prebuilt wheels, crane's archive and the controller URL, git and the generated files
of a throwaway checkout. Stand-ins, because nothing local exists for them: the cluster's
kubeconfig (a file naming the cluster), and the iris install in the whole-run tests (a
directory on PYTHONPATH holding the pinned releases' dist-info and empty `iris.cli` and
`kubernetes` modules; the probe still runs in a real interpreter). The iris probe's verdicts
are also tested from recorded output of the pinned release (which lacks kubernetes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from gpurl_tasks.cluster import doctor, kaniko
from gpurl_tasks.cluster.iris_release import IRIS_CONTRACT_PINS
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.redact import Secret, TokenSource, find_registry_token
from tests.conftest import REPO_ROOT
from tests.support.git import git
from tests.support.htpasswd import basic_auth_yaml
from tests.support.pusher import push_image, push_index, random_layer
from tests.support.rangeserver import serve_files
from tests.support.registry_server import RegistryServer, running_registry
from tests.support.tasks_runner import run_task
from tests.support.token_auth import TokenService

CANARY = "ghp_CANARYdoctor0a1b2c3"
WRONG = "ghp_CANARYwrong9z8y7"
KUBECONFIG_YAML = """\
apiVersion: v1
kind: Config
clusters:
- cluster:
    server: https://cw.example:6443
    certificate-authority-data: Q0E=
  name: cw-us-east-02a
contexts:
- context:
    cluster: cw-us-east-02a
    user: iris
  name: coreweave-iris-gpu
current-context: coreweave-iris-gpu
users:
- name: iris
  user:
    token: not-a-cluster-name
"""
OTHER_KUBECONFIG = KUBECONFIG_YAML.replace("cw-us-east-02a", "my-laptop-kind")


# --- kubeconfig (a stand-in file: no cluster here) -------------------------------------------


def test_kubeconfig_names_reads_contexts_and_clusters_not_users() -> None:
    assert doctor.kubeconfig_names(KUBECONFIG_YAML) == {"cw-us-east-02a", "coreweave-iris-gpu"}
    as_json = json.dumps({"clusters": [{"name": "a"}],
                          "contexts": [{"name": "b", "context": {"cluster": "c"}}]})
    assert doctor.kubeconfig_names(as_json) == {"a", "b", "c"}
    assert doctor.kubeconfig_names("apiVersion: v1\n") == frozenset()


def test_kubeconfig_checks(tmp_path: Path) -> None:
    unset = doctor.kubeconfig({})
    assert unset.failed and "KUBECONFIG is not set" in unset.detail
    assert doctor.kubeconfig({"KUBECONFIG": str(tmp_path / "nope")}).failed
    good, other = tmp_path / "cw", tmp_path / "kind"
    good.write_text(KUBECONFIG_YAML)
    other.write_text(OTHER_KUBECONFIG)
    assert doctor.kubeconfig({"KUBECONFIG": str(good)}).status == "ok"
    named = doctor.kubeconfig_cluster({"KUBECONFIG": str(good)}, "cw-us-east-02a")
    assert named.status == "ok"
    wrong = doctor.kubeconfig_cluster({"KUBECONFIG": str(other)}, "cw-us-east-02a")
    assert wrong.failed and "names no context or cluster 'cw-us-east-02a'" in wrong.detail
    assert "my-laptop-kind" in wrong.detail and "another cluster" in wrong.detail
    both = doctor.kubeconfig_cluster({"KUBECONFIG": f"{other}:{good}"}, "cw-us-east-02a")
    assert both.status == "ok"  # a KUBECONFIG list merges its files


# --- iris: recorded probe output, and a real interpreter --------------------------------------


def _probe_output(versions: Mapping[str, str | None], kubernetes: str = "") -> str:
    return json.dumps({"versions": versions, "imports": {
        "iris.cli": "", "kubernetes.client": kubernetes, "kubernetes.dynamic": kubernetes}})


PINNED = dict(pin.split("==", 1) for pin in IRIS_CONTRACT_PINS)


def test_iris_probe_verdicts_from_recorded_output() -> None:
    # what the pinned release installed as the iris sessions install it prints (no kubernetes)
    recorded = _probe_output(PINNED, "ModuleNotFoundError: No module named 'kubernetes'")
    check = doctor.parse_iris_probe(recorded, "/venv/bin/iris")
    assert check.failed and "cannot import its kubernetes client" in check.detail
    assert "cannot drive CoreWeave" in check.detail
    older = doctor.parse_iris_probe(_probe_output({**PINNED, "marin-iris": "0.2.20"}), "iris")
    assert older.failed and "marin-iris 0.2.20 (pinned 0.2.35.dev202607030841)" in older.detail
    assert older.fix and "--exclude-newer" in older.fix
    assert doctor.parse_iris_probe(_probe_output(PINNED), "iris").status == "ok"
    assert doctor.parse_iris_probe("Traceback ...", "iris").failed


def test_iris_probe_runs_in_the_programs_own_interpreter(tmp_path: Path) -> None:
    """A console script on this interpreter, which has no marin-iris: named as missing."""
    program = tmp_path / "iris"
    program.write_text(f"#!{sys.executable}\nprint('never run')\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    check = doctor.iris_install({"GPURL_IRIS": str(program), "PATH": os.environ["PATH"]})
    assert check.failed and "marin-iris missing (pinned" in check.detail
    missing = doctor.iris_install({"PATH": str(tmp_path / "empty")})
    assert missing.failed and "couldn't find iris" in missing.detail


def _iris_standin(root: Path) -> dict[str, str]:
    """An iris console script and a PYTHONPATH directory that holds the pinned releases'
    metadata and importable `iris.cli` / `kubernetes` modules (a stand-in install)."""
    site = root / "site"
    for name, version in PINNED.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for module in ("iris/cli.py", "kubernetes/client.py", "kubernetes/dynamic.py"):
        (site / module).parent.mkdir(parents=True, exist_ok=True)
        (site / module).write_text("")
        (site / module).with_name("__init__.py").touch()
    program = root / "iris"
    program.write_text(f"#!{sys.executable}\n")
    program.chmod(0o755)
    return {"GPURL_IRIS": str(program), "PYTHONPATH": str(site)}


# --- push scope: a real registry with token auth and with Basic auth ------------------------


@pytest.fixture(scope="module")
def open_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    with running_registry(tmp_path_factory.mktemp("open-registry")) as server:
        yield server


@contextlib.contextmanager
def _token_registry(workdir: Path, storage: Path, grants: tuple[str, ...] | None
                    ) -> Iterator[RegistryServer]:
    with TokenService(workdir, username="penfever", secret=CANARY, grants=grants) as tokens, \
            running_registry(workdir / "reg", storage=storage,
                             auth_yaml=tokens.auth_yaml()) as server:
        yield server


@pytest.fixture(scope="module")
def push_registry(tmp_path_factory: pytest.TempPathFactory,
                  open_registry: RegistryServer) -> Iterator[RegistryServer]:
    """Token auth over the open registry's storage; its tokens carry every action asked."""
    with _token_registry(tmp_path_factory.mktemp("push"), open_registry.storage, None) as server:
        yield server


@pytest.fixture(scope="module")
def read_only_registry(tmp_path_factory: pytest.TempPathFactory,
                       open_registry: RegistryServer) -> Iterator[RegistryServer]:
    """The same, but its token service grants pull only (a read:packages token)."""
    with _token_registry(tmp_path_factory.mktemp("pull"), open_registry.storage,
                         ("pull",)) as server:
        yield server


def _config(host: str, root: Path = REPO_ROOT, **env: str) -> Config:
    return load_config(root, profile="gpu-rl", env={
        "GPURL_REGISTRY_HOST": host, "GPURL_REGISTRY_REPOSITORY": "org/img", **env})


def _scope(config: Config, token: str) -> doctor.Check:
    return doctor.push_scope(config, config.registry.image, {"GPURL_REGISTRY_TOKEN": token},
                             what="image")


def test_push_scope_with_a_token_that_may_push(push_registry: RegistryServer) -> None:
    check = _scope(_config(push_registry.host), CANARY)
    assert check.status == "ok", check
    assert check.detail == f"{push_registry.host}/org/img: the token service grants push"


def test_push_scope_with_a_read_only_token(read_only_registry: RegistryServer) -> None:
    check = _scope(_config(read_only_registry.host), CANARY)
    assert check.failed
    assert "grants pull on org/img, not push" in check.detail and "write:packages" in str(check.fix)
    assert CANARY not in check.detail + str(check.fix)


def test_push_scope_with_a_refused_token(push_registry: RegistryServer) -> None:
    check = _scope(_config(push_registry.host), WRONG)
    assert check.failed and "refused the credentials" in check.detail
    assert WRONG not in check.detail + str(check.fix)


def test_push_scope_on_a_basic_auth_registry(tmp_path: Path) -> None:
    with running_registry(tmp_path / "basic",
                          auth_yaml=basic_auth_yaml(tmp_path, "penfever", CANARY)) as server:
        good = _scope(_config(server.host), CANARY)
        bad = _scope(_config(server.host), WRONG)
    assert good.status == "ok" and "accepts the credentials (Basic auth)" in good.detail
    assert bad.failed and "asks for authentication" in bad.detail
    assert WRONG not in bad.detail + str(bad.fix)


# --- prebuilt wheels on a loopback file server ------------------------------------------------


# the ABI key gpu-rl's pins and arch list call for (the MANIFEST's first line)
GPU_RL_KEY = ("fork=76259c63a flash-attn=2.8.3 torch=2.11.0 cuda=cu128 py=cp312 "
              "platform=linux_x86_64 arch-list=8.0;9.0")


def _wheel_dir(root: Path, config: Config, *, listed: int, present: int,
               key: str = GPU_RL_KEY) -> tuple[str, ...]:
    names = kaniko.prebuilt_wheel_names(config)
    root.mkdir(parents=True, exist_ok=True)
    for name in names[:present]:
        (root / name).write_bytes(b"PK\x03\x04 wheel " + name.encode())
    (root / "MANIFEST").write_text(f"# gpurl-abi {key}\n"
                                   + "".join(f"{'0' * 64}  {n}\n" for n in names[:listed]))
    return names


def test_prebuilt_wheels_for_another_arch_list_fail_with_both_keys(tmp_path: Path) -> None:
    with serve_files(tmp_path) as url:
        config = _config("127.0.0.1:1", GPURL_BUILD_WHEEL_BASE_URL=url)
        _wheel_dir(tmp_path, config, listed=2, present=2,
                   key=GPU_RL_KEY.replace("8.0;9.0", "8.0;9.0;10.0"))
        check = doctor.prebuilt_wheels(config)
    assert check.failed and "records another ABI key" in check.detail, check
    assert f"expected {GPU_RL_KEY!r}" in check.detail
    assert "found " + repr(GPU_RL_KEY.replace("8.0;9.0", "8.0;9.0;10.0")) in check.detail


@pytest.mark.parametrize(("listed", "present", "expected"), [
    (2, 2, None), (1, 2, "MANIFEST lacks vllm-0.11.1+g76259c63a"),
    (2, 1, "missing: vllm-0.11.1+g76259c63a.cu128-cp312-cp312-linux_x86_64.whl (404)")])
def test_prebuilt_wheels(tmp_path: Path, listed: int, present: int,
                         expected: str | None) -> None:
    with serve_files(tmp_path) as url:
        config = _config("127.0.0.1:1", GPURL_BUILD_WHEEL_BASE_URL=url)
        names = _wheel_dir(tmp_path, config, listed=listed, present=present)
        check = doctor.prebuilt_wheels(config)
    assert len(names) == 2 and names[0].startswith("flash_attn-2.8.3")  # sorted names
    if expected is None:
        assert check.status == "ok" and all(n in check.detail for n in names), check
    else:
        assert check.failed and expected in check.detail, check
        assert "never compile" in check.detail and "build-wheels" in str(check.fix)


def test_prebuilt_wheels_without_a_manifest(tmp_path: Path) -> None:
    with serve_files(tmp_path) as url:
        check = doctor.prebuilt_wheels(_config("127.0.0.1:1", GPURL_BUILD_WHEEL_BASE_URL=url))
    assert check.failed and check.detail.startswith(f"no MANIFEST at {url}")
    assert "HTTP 404" in check.detail


# --- a throwaway checkout: generated files, the tag, and whole runs ---------------------------


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """The gpu-rl profile's committed files in a git repository of its own."""
    root = tmp_path / "repo"
    (root / "docker").mkdir(parents=True)
    for name in ("pyproject.toml", ".dockerignore"):
        shutil.copy(REPO_ROOT / name, root / name)
    for tree in ("rl", "sizes", "docker/layers/gpu-rl"):
        shutil.copytree(REPO_ROOT / tree, root / tree)
    for committed in (REPO_ROOT / "docker").glob("*gpu*rl*"):
        shutil.copy(committed, root / "docker" / committed.name)
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


def test_generated_files_current_then_stale(repo: Path) -> None:
    config = load_config(repo, profile="gpu-rl", env={})
    assert doctor.generated_files(config).status == "ok"
    checker = repo / "docker" / "gpurl-envcheck.py"  # one of the one list generate writes
    checker.write_text(checker.read_text() + "# edited\n")
    stale = doctor.generated_files(config)
    assert stale.failed and "docker/gpurl-envcheck.py missing or stale" in stale.detail
    assert "invoke generate" in stale.detail + str(stale.fix)


def test_a_lock_stale_against_its_pyproject_fails_doctor(repo: Path) -> None:
    """rl/pyproject.toml asks for another torch than rl/uv.lock was resolved for: doctor says
    so without network, naming the package, both specifiers and `uv lock`."""
    pyproject = repo / "rl" / "pyproject.toml"
    text = pyproject.read_text()
    assert '"torch==2.11.0"' in text
    pyproject.write_text(text.replace('"torch==2.11.0"', '"torch==2.12.0"', 1))
    stale = doctor.generated_files(load_config(repo, profile="gpu-rl", env={}))
    assert stale.failed, stale
    assert "rl/uv.lock is stale against rl/pyproject.toml" in stale.detail
    assert "torch: rl/pyproject.toml asks for ==2.12.0, the lock was resolved for ==2.11.0" \
        in stale.detail
    assert "uv lock" in stale.detail + str(stale.fix)


def _healthy(repo: Path, tmp_path: Path, open_registry: RegistryServer,
             push_registry: RegistryServer, files: str) -> dict[str, str]:
    """The environment of a build whose every prerequisite holds here."""
    executor = push_image(open_registry.url, "kaniko/executor",
                          [random_layer(500, "COPY executor /kaniko/", seed=7)], tag="v1")
    kube = tmp_path / "kubeconfig"
    kube.write_text(KUBECONFIG_YAML)
    config = _config(push_registry.host, repo, GPURL_BUILD_WHEEL_BASE_URL=files)
    _wheel_dir(tmp_path / "files", config, listed=2, present=2)
    (tmp_path / "files" / "crane.tar.gz").write_bytes(b"crane")
    return {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KUBECONFIG": str(kube),
            "GPURL_REGISTRY_TOKEN": CANARY, "GPURL_REGISTRY_HOST": push_registry.host,
            "GPURL_REGISTRY_REPOSITORY": "org/img", "GPURL_BUILD_WHEEL_BASE_URL": files,
            "GPURL_CLUSTER_CONTROLLER_URL": files,
            "GPURL_CLUSTER_KANIKO_EXECUTOR":
                f"{open_registry.host}/kaniko/executor@{executor.manifest_digest}",
            "GPURL_CLUSTER_CRANE_URL": f"{files}/crane.tar.gz",
            "GPURL_CLUSTER_CRANE_SHA256": hashlib.sha256(b"crane").hexdigest(),
            **_iris_standin(tmp_path)}


def _doctor(repo: Path, env: dict[str, str]) -> doctor.DoctorReport:
    def token() -> TokenSource | None:
        return find_registry_token(env, gh_token=lambda: None)

    return doctor.run_doctor(load_config(repo, profile="gpu-rl", env=env), env, token=token)


def test_doctor_on_a_healthy_and_a_broken_setup(
        repo: Path, tmp_path: Path, open_registry: RegistryServer,
        push_registry: RegistryServer, read_only_registry: RegistryServer) -> None:
    (tmp_path / "files").mkdir()
    with serve_files(tmp_path / "files") as files:
        env = _healthy(repo, tmp_path, open_registry, push_registry, files)
        healthy = _doctor(repo, env)
        assert healthy.exit_code == 0, healthy.human()
        assert [c.name for c in healthy.checks] == [
            "kubeconfig", "kubeconfig-cluster", "iris", "iris-controller", "memory",
            "registry-token", "registry-user", "push-image", "push-cache", "prebuilt-wheels",
            "generated-files", "immutable-tag", "executor-pin", "crane-url", "gpu-job"]
        assert all(c.status == "ok" for c in healthy.checks), healthy.human()

        # break each prerequisite once
        other = tmp_path / "other-kubeconfig"
        other.write_text(OTHER_KUBECONFIG)
        (tmp_path / "files" / "crane.tar.gz").unlink()
        checker = repo / "docker" / "gpurl-envcheck.py"
        checker.write_text(checker.read_text() + "# edited\n")
        git(repo, "commit", "-qam", "edit a generated file")  # committed: the tag stays clean
        sha = git(repo, "rev-parse", "--short", "HEAD").strip()
        push_image(open_registry.url, "org/img", [random_layer(300, "RUN x", seed=3)],
                   tag=f"gpu-rl-{sha}")
        broken_env = {**env, "KUBECONFIG": str(other),
                      "GPURL_REGISTRY_HOST": read_only_registry.host,
                      "GPURL_CLUSTER_CONTROLLER_URL": "http://127.0.0.1:1",
                      "GPURL_CLUSTER_KANIKO_EXECUTOR":
                          f"{open_registry.host}/kaniko/executor@sha256:{'0' * 64}",
                      "GPURL_IRIS": str(tmp_path / "no-iris"), "GPURL_CLUSTER_GPUS": "12"}
        broken = _doctor(repo, broken_env)
    assert broken.exit_code == 1
    status = {c.name: c for c in broken.checks}
    assert {n for n, c in status.items() if c.failed} == {
        "kubeconfig-cluster", "iris", "iris-controller", "push-image", "push-cache",
        "generated-files", "immutable-tag", "executor-pin", "crane-url", "gpu-job"}, broken.human()
    assert "holds at most 8; the job would never start" in status["gpu-job"].detail
    assert "already exists as sha256:" in status["immutable-tag"].detail
    assert "is not in its registry" in status["executor-pin"].detail
    assert "answers 404" in status["crane-url"].detail
    assert "does not answer" in status["iris-controller"].detail
    text = broken.human()
    for check in broken.problems:  # one line each, then its fix
        assert f"PROBLEM {check.name}" in text
    assert text.count("fix: ") == len(broken.problems)
    for report in (healthy, broken):
        assert CANARY not in report.human() + json.dumps(report.to_json())
    print(f"\n{healthy.human()}\n\n{broken.human()}")  # the two reports, for the record


def test_doctor_dockerhub_token_and_no_token(repo: Path) -> None:
    hub = doctor.registry_token(TokenSource(token=Secret("dckr_pat_" + CANARY),
                                            source="$GHCR_TOKEN"), "ghcr.io")
    assert hub.failed and "Docker Hub token" in hub.detail and CANARY not in hub.detail
    assert doctor.registry_token(None, "ghcr.io").failed
    report = _doctor(repo, {"PATH": os.environ["PATH"]})
    # no token: the push checks are not asked, and listed as skipped with the reason (issue 42:
    # they once vanished from the report)
    skipped = {c.name: c.detail for c in report.checks if c.status == "skipped"}
    for what in ("image", "cache"):
        assert "no usable registry token (see registry-token)" in skipped[f"push-{what}"]
    assert {"kubeconfig", "registry-token"} <= {c.name for c in report.problems}


def test_a_host_this_machine_cannot_reach_is_said_so_not_misread(repo: Path) -> None:
    """A closed port on this machine (a real refused connection): the MANIFEST, the executor
    pin and the crane archive each say the host could not be reached from this machine, with
    that as the fix, never "publish the wheels" nor registry.host for the executor's host."""
    unreachable = "127.0.0.1:9"  # discard: nothing listens on it here
    config = load_config(REPO_ROOT, profile="gpu-rl", env={
        "GPURL_BUILD_WHEEL_BASE_URL": f"http://{unreachable}/wheels",
        "GPURL_CLUSTER_KANIKO_EXECUTOR": f"{unreachable}/kaniko/executor@sha256:" + "a" * 64,
        "GPURL_CLUSTER_CRANE_URL": f"http://{unreachable}/crane.tar.gz",
        "GPURL_CLUSTER_CRANE_SHA256": "b" * 64,
        "GPURL_REGISTRY_INSECURE": "1"})
    checks = (doctor.prebuilt_wheels(config), doctor.executor_pin(config, {}),
              doctor.crane_url(config.variant.crane_archive[0]))
    for check in checks:
        assert check.failed, check
        assert "from this machine" in check.detail and "127.0.0.1" in check.detail, check
        assert check.fix is not None and "check that this machine can reach 127.0.0.1" in check.fix
        assert "publish" not in check.fix


def test_the_executor_pin_must_hold_the_variants_platform(open_registry: RegistryServer) -> None:
    """The pin is read back from a real registry: an image index holding linux/arm64 (as
    linux/arm64/v8, the way upstream kaniko's index lists it) passes an aarch64 variant; an
    amd64-only index and a single amd64 image, which pass the x86_64 variant, fail it naming
    the platform the job exports and what the pin holds."""
    amd64, arm64 = (push_image(open_registry.url, "kaniko/executor",
                               [random_layer(200, f"COPY executor-{arch} /kaniko/", seed=seed)],
                               tag=None, architecture=arch)
                    for arch, seed in (("amd64", 11), ("arm64", 12)))
    both = push_index(open_registry.url, "kaniko/executor",
                      {"linux/amd64": amd64, "linux/arm64/v8": arm64}, tag="both")
    amd64_only = push_index(open_registry.url, "kaniko/executor", {"linux/amd64": amd64},
                            tag="amd64")
    pins = {"index of both": both, "amd64 index": amd64_only,
            "amd64 image": amd64.manifest_digest}

    def check(pin: str, arch: str) -> doctor.Check:
        return doctor.executor_pin(_config(open_registry.host, GPURL_TARGET_ARCH=arch, **{
            "GPURL_CLUSTER_KANIKO_EXECUTOR": f"{open_registry.host}/kaniko/executor@{pins[pin]}"}),
            {})

    for pin in pins:
        x86 = check(pin, "x86_64")
        assert x86.status == "ok" and x86.detail.endswith("holds linux/amd64"), x86
    arm = check("index of both", "aarch64")
    assert arm.status == "ok" and arm.detail.endswith("holds linux/arm64"), arm
    for pin, held in (("amd64 index", "linux/amd64"), ("amd64 image", "linux/amd64")):
        refused = check(pin, "aarch64")
        assert refused.failed, refused
        assert refused.detail == (
            f"{open_registry.host}/kaniko/executor@{pins[pin]} has no linux/arm64 image (it holds "
            f"{held}): the job of profile 'gpu-rl' (variant 'standard') exports the executor for "
            "linux/arm64")
        assert refused.fix is not None and "image index that holds linux/arm64" in refused.fix


def test_invoke_doctor_json_is_one_object_without_the_secret(
        push_registry: RegistryServer) -> None:
    done = run_task("doctor", "--profile", "demo", "--json", env={
        "GPURL_REGISTRY_HOST": push_registry.host, "GPURL_REGISTRY_REPOSITORY": "org/img",
        "GPURL_REGISTRY_TOKEN": CANARY, "GPURL_REGISTRY_USER": "penfever"})
    report = json.loads(done.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["push-image"]["status"] == "ok", done.stdout
    assert checks["registry-token"]["detail"].startswith("a GitHub token from $GPURL_REGISTRY_TOKEN")
    assert done.returncode == (0 if report["ok"] else 1)
    assert CANARY not in done.stdout + done.stderr and "Traceback" not in done.stderr


def test_build_refuses_in_doctors_words_and_notes_another_cluster(
        repo: Path, tmp_path: Path) -> None:
    """`invoke build` runs doctor's checks first: the same refusal text, and a kubeconfig of
    another cluster is a note on the build (the cluster's own kubeconfig is a stand-in)."""
    from gpurl_tasks.cluster.bundle import measure_bundle
    from gpurl_tasks.cluster.submit import BuildEnv, BuildRequest, prepare_build
    from gpurl_tasks.errors import GpurlError
    from gpurl_tasks.git import ls_bundle_files

    def world(env: dict[str, str]) -> BuildEnv:
        return BuildEnv(env=env, token=lambda: find_registry_token(env, gh_token=lambda: None),
                        bundle=lambda root: measure_bundle(root, ls_bundle_files))

    config = load_config(repo, profile="gpu-rl", env={})
    with pytest.raises(GpurlError) as info:
        prepare_build(config, BuildRequest(), world({"GHCR_TOKEN": CANARY}))
    assert info.value.message == doctor.kubeconfig({}).detail
    other = tmp_path / "kind"
    other.write_text(OTHER_KUBECONFIG)
    prepared = prepare_build(config, BuildRequest(),
                             world({"GHCR_TOKEN": CANARY, "KUBECONFIG": str(other)}))
    assert any("names no context or cluster 'cw-us-east-02a'" in n and "invoke doctor" in n
               for n in prepared.notes), prepared.notes


def test_a_registry_that_does_not_answer_is_retried_once_and_said(tmp_path: Path) -> None:
    """A closed loopback port as the registry: push-image retries (each retry said), the
    checks after it that need the same registry say it did not answer instead of retrying
    again, so doctor's time is one check's retries (it took three checks' before)."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again when the block ends
    env = {"GHCR_TOKEN": "canary-doctor-5f1e", "GPURL_REGISTRY_RETRIES": "1"}
    config = load_config(REPO_ROOT, profile="demo", env={
        **env, "GPURL_REGISTRY_HOST": f"127.0.0.1:{port}"})
    said: list[str] = []
    report = doctor.run_doctor(config, env, say=said.append,
                               token=lambda: find_registry_token(env, gh_token=lambda: None))
    checks = {c.name: c for c in report.checks}
    assert checks["push-image"].failed and "cannot reach the registry" in checks["push-image"].detail
    for name in ("push-cache", "immutable-tag"):
        assert checks[name].status == "skipped" and "did not answer" in checks[name].detail
    assert len(said) == 1 and said[0].startswith(f"doctor: the registry 127.0.0.1:{port} did "
                                                 "not answer: retry 1/1")
