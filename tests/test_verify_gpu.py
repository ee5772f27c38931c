"""`invoke verify-gpu` around the check itself: the verdict as an in-toto SLSA Verification
Summary, attached to an image in a real loopback registry and read back (as pin and `invoke
sbom` read it), and every way a GPU job can end without a usable result.

The GPU job itself needs a CoreWeave node: what it hands back (its log, the watch's last
reading) is built here as the pinned iris release and the check script print them
(`[HH:MM:SS] task=/user/name/0 | GPURL-GPU-RESULT {...}`), and the functions that judge it are
the ones `run_verify_gpu` calls. The check script's own output is the gpucheck branch's
(gpu/result.py's `to_json`), not a copy.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.attest import verification as vsa
from gpurl_tasks.cluster.gpujob import (
    APP_ENV,
    check_node,
    find_result,
    gpu_app,
    gpu_job,
    gpu_spec,
    gpu_target,
    no_result,
)
from gpurl_tasks.cluster.iris import Observation
from gpurl_tasks.cluster.watch import WatchResult
from gpurl_tasks.config import Config, load_config
from gpurl_tasks.errors import CheckFailed, ExitCode, GpurlError
from gpurl_tasks.gpu import result as gpu_result
from gpurl_tasks.gpu.check import LINE_PREFIX
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.referrers import fallback_tag, find
from gpurl_tasks.oci.registry import RegistryClient
from gpurl_tasks.release.flow import refuse_failing, verify_image
from gpurl_tasks.release.gpu import attach_summary, latest_verdict
from tests.conftest import REPO_ROOT
from tests.support.pusher import push_image, random_layer, tar_gz_layer
from tests.support.registry_server import RegistryServer

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32
POLICY = vsa.GpuPolicy(gpus=8, gpu_type="H200")
JOB = vsa.JobFacts(job_id="/alice/gpurl-gpu-abababababab", cluster="--cluster=cw-us-east-02a")
PASSING = {"driver": "passed", "kernels": "passed", "launches": "passed",
           "network": "not-run", "build-proof": "not-run"}


def check_result(digest: str = DIGEST, statuses: dict[str, str] | None = None,
                 gpus: int = 8) -> gpu_result.Result:
    """A result as the check writes it on an H200 node (gpu/result.py's own model)."""
    node = gpu_result.Node(hostname="gpu-node-7", driver="570.124.06", driver_cuda="12.8",
                           image_cuda="12.8",
                           gpus=tuple(gpu_result.Gpu(index=i, name="NVIDIA H200",
                                                     capability="9.0") for i in range(gpus)))
    checks = tuple(gpu_result.Check(
        name=name, status=status, reason="" if status == "passed" else f"{name}: the reason",
        figures={"files": 412} if name == "kernels" else {},
        findings=("flash_attn_2_cuda.so holds sm_80 only",) if status == "failed" else ())
        for name, status in (PASSING if statuses is None else statuses).items())
    return gpu_result.Result(image=digest, node=node, checks=checks)


def statement(result: gpu_result.Result, digest: str = DIGEST,
              at: str = "2026-12-03T18:00:00Z") -> bytes:
    return vsa.summary(result, image="ghcr.io/team/img", digest=digest, policy=POLICY, job=JOB,
                       verified_at=at, version="0.1.0")


# --- the summary -----------------------------------------------------------------------------


def test_a_passing_check_is_a_vsa_of_the_image_by_digest() -> None:
    """The fields SLSA's VSA v1 requires, the subject and resource the image by digest, the
    policy's digest that of the policy it carries, and gpurl's whole check document."""
    document = json.loads(statement(check_result()))
    assert document["_type"] == "https://in-toto.io/Statement/v1"
    assert document["predicateType"] == "https://slsa.dev/verification_summary/v1"
    assert document["subject"] == [{"name": "ghcr.io/team/img", "digest": {"sha256": "ab" * 32}}]
    predicate = document["predicate"]
    assert {"verifier", "timeVerified", "resourceUri", "policy", "verificationResult",
            "verifiedLevels"} <= set(predicate)
    assert predicate["verifier"]["id"] == vsa.VERIFIER_ID
    assert predicate["resourceUri"] == f"ghcr.io/team/img@{DIGEST}"
    assert predicate["timeVerified"] == "2026-12-03T18:00:00Z"
    assert predicate["verificationResult"] == "PASSED"
    assert predicate["verifiedLevels"] == ["GPU_CHECKED"]
    assert not any(level.startswith("SLSA_") for level in predicate["verifiedLevels"])
    policy = predicate["gpurl"]["policy"]
    assert policy == {"gpus": 8, "gpu_type": "H200", "required": ["driver", "kernels"]}
    assert predicate["policy"]["digest"]["sha256"] == hashlib.sha256(
        json.dumps(policy, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert gpu_result.parse(json.dumps(predicate["gpurl"]["check"])) == check_result()
    verdict = vsa.read_summary(document, DIGEST)
    assert verdict.passed and verdict.job["id"] == JOB.job_id
    assert verdict.line() == ("GPU check PASSED 2026-12-03T18:00:00Z on gpu-node-7 (8x NVIDIA "
                              "H200); network not run: network: the reason; build-proof not "
                              "run: build-proof: the reason")


def test_a_failing_check_is_failed_and_names_the_check_and_its_reason() -> None:
    failing = check_result(statuses={**PASSING, "kernels": "failed"})
    document = json.loads(statement(failing))
    assert document["predicate"]["verificationResult"] == "FAILED"
    assert document["predicate"]["verifiedLevels"] == ["FAILED"]
    line = vsa.read_summary(document, DIGEST).line()
    assert line.startswith("GPU check FAILED") and "kernels failed: kernels: the reason" in line


@given(st.fixed_dictionaries({}, optional={
    name: st.sampled_from(gpu_result.STATUSES) for name in gpu_result.CHECKS}))
def test_the_verdict_is_passed_exactly_when_the_check_passed(statuses: dict[str, str]) -> None:
    """For every set of checks and statuses: PASSED iff driver and kernels passed and none
    failed; a not-run check never makes a pass; the summary reads back to the same result."""
    result = check_result(statuses=statuses)
    document = json.loads(statement(result))
    wanted = (all(s != "failed" for s in statuses.values())
              and all(statuses.get(n) == "passed" for n in ("driver", "kernels")))
    assert (document["predicate"]["verificationResult"] == "PASSED") is wanted
    verdict = vsa.read_summary(document, DIGEST)
    assert verdict.passed is wanted and verdict.result == result


def test_a_summary_for_another_digest_is_refused_both_ways() -> None:
    """Recording: a result of another image is not written. Reading: a summary whose
    statement, resource or check names another digest proves nothing of this one."""
    with pytest.raises(CheckFailed, match=f"ran {OTHER}, not {DIGEST}"):
        statement(check_result(digest=OTHER))
    other = json.loads(statement(check_result(digest=OTHER), digest=OTHER))
    with pytest.raises(CheckFailed, match=f"is for {OTHER}, not {DIGEST}"):
        vsa.read_summary(other, DIGEST)
    moved = json.loads(statement(check_result()))
    moved["predicate"]["gpurl"]["check"]["image"] = OTHER
    with pytest.raises(CheckFailed, match=f"ran {OTHER}, not {DIGEST}"):
        vsa.read_summary(moved, DIGEST)


def test_a_passed_over_failed_checks_or_a_foreign_statement_is_refused() -> None:
    forged = json.loads(statement(check_result(statuses={**PASSING, "driver": "failed"})))
    forged["predicate"]["verificationResult"] = "PASSED"
    with pytest.raises(GpurlError, match="says 'PASSED' but its checks say failed"):
        vsa.read_summary(forged, DIGEST)
    provenance = {**json.loads(statement(check_result())),
                  "predicateType": "https://slsa.dev/provenance/v1"}
    with pytest.raises(GpurlError, match="not an in-toto statement of"):
        vsa.read_summary(provenance, DIGEST)


# --- what the job hands back --------------------------------------------------------------------


def _log(*lines: str) -> str:
    return "\n".join(f"[18:0{i}:00] task=/alice/gpurl-gpu-abababababab/0 | {line}"
                     for i, line in enumerate(lines))


def test_the_result_is_read_from_the_jobs_log_as_iris_prints_it() -> None:
    line = f"{LINE_PREFIX}{gpu_result.to_json(check_result())}"
    assert find_result(_log("pulling torch", "driver 570.124.06", line)) == check_result()
    assert find_result(_log("no result here")) is None


def test_a_check_killed_mid_run_says_so_and_attaches_nothing() -> None:
    """No result line (the pod was OOM-reaped or killed) or a line cut off mid-write: one line
    each, and the job's end in it."""
    cut = f"{LINE_PREFIX}{gpu_result.to_json(check_result())[:80]}"
    with pytest.raises(GpurlError, match="is not JSON"):
        find_result(_log("kernels: 412 files", cut))
    killed = WatchResult(exit_code=ExitCode.CHECK_FAILED, elapsed=412.0, polls=9,
                         reason="killed", observation=Observation(
                             state="killed", exit_code=137, error="Terminated by user"))
    error = no_result(killed, f"ghcr.io/team/img@{DIGEST}", JOB.job_id)
    assert error.message == (f"the GPU check in {JOB.job_id} printed no result: the job ended "
                             "killed, exit code 137 (Terminated by user); it was killed or "
                             "crashed mid-run")
    assert error.exit_code == ExitCode.CHECK_FAILED


def test_a_job_that_never_starts_ends_at_the_watchs_bound() -> None:
    """Pending past cluster.gpu-timeout + gpu-start-timeout: exit 3 (nothing known of the
    image), and the controller's pending reason is said."""
    stuck = WatchResult(exit_code=ExitCode.INCONCLUSIVE, elapsed=5400.0, polls=180,
                        reason="still pending at the bound of 5400s", observation=Observation(
                            state="pending", pending_reason="Insufficient nvidia.com/gpu"))
    error = no_result(stuck, f"ghcr.io/team/img@{DIGEST}", JOB.job_id)
    assert error.message.startswith(f"the GPU job {JOB.job_id} did not start within 5400s "
                                    "(Insufficient nvidia.com/gpu)")
    assert error.exit_code == ExitCode.INCONCLUSIVE
    assert "cluster.gpu-start-timeout" in (error.hint or "")


def test_a_job_no_node_can_take_says_so() -> None:
    """More GPUs (or another type) than any node of the cluster has: iris ends it unschedulable."""
    refused = WatchResult(exit_code=ExitCode.CHECK_FAILED, elapsed=3.0, polls=1,
                          reason="unschedulable", observation=Observation(
                              state="unschedulable", error="no scale group offers gpu x8"))
    error = no_result(refused, f"ghcr.io/team/img@{DIGEST}", JOB.job_id)
    assert error.message == (f"the GPU job {JOB.job_id} cannot be scheduled: no node offers "
                             "what it asks (no scale group offers gpu x8)")


def test_a_pull_that_fails_names_the_image() -> None:
    """The node's containerd cannot pull (ImagePullBackOff): the job never runs the check."""
    backoff = WatchResult(exit_code=ExitCode.INCONCLUSIVE, elapsed=5400.0, polls=180,
                          reason="still pending at the bound", observation=Observation(
                              state="pending", pending_reason="ImagePullBackOff: Back-off "
                                                              "pulling image"))
    error = no_result(backoff, f"ghcr.io/team/img@{DIGEST}", JOB.job_id)
    assert error.message == (f"the node could not pull ghcr.io/team/img@{DIGEST}: "
                             "ImagePullBackOff: Back-off pulling image")
    assert error.exit_code == ExitCode.CHECK_FAILED


def test_fewer_gpus_than_asked_or_another_digest_is_refused() -> None:
    with pytest.raises(CheckFailed, match=r"gave the check 4 GPU\(s\), 8 were asked"):
        check_node(check_result(gpus=4), digest=DIGEST, gpus=8)
    with pytest.raises(CheckFailed, match=f"result is for {OTHER}, not {DIGEST}"):
        check_node(check_result(digest=OTHER), digest=DIGEST, gpus=8)
    check_node(check_result(gpus=8), digest=DIGEST, gpus=8)  # the node gave what was asked


def test_the_gpu_job_runs_on_the_variants_build_cluster_unless_told() -> None:
    gb200 = load_config(REPO_ROOT, profile="multiarch", variant="gb200", env={})
    assert gpu_target(gb200).args == ("--cluster=cw-us-east-08a",)
    assert gpu_target(load_config(REPO_ROOT, profile="multiarch", env={})).args == (
        f"--cluster={load_config(REPO_ROOT, profile='multiarch', env={}).cluster.name}",)
    moved = load_config(REPO_ROOT, profile="multiarch", variant="gb200",
                        env={"GPURL_CLUSTER_GPU_CLUSTER": "cw-gpu-test",
                             "GPURL_CLUSTER_CONTROLLER_URL": "http://127.0.0.1:1"})
    assert gpu_target(moved).args == ("--cluster=cw-gpu-test",)
    assert gpu_target(moved, "flagged").args == ("--cluster=flagged",)
    assert (gpu_spec(gb200), gpu_spec(load_config(REPO_ROOT, profile="multiarch", env={
        "GPURL_CLUSTER_GPU_TYPE": "H100"}))) == ("8", "H100x8")


def test_doctor_refuses_more_gpus_than_a_node_holds_and_another_platforms_gpu() -> None:
    from gpurl_tasks.cluster.doctor import gpu_settings

    def check(variant: str, **env: str) -> str:
        config = load_config(REPO_ROOT, profile="multiarch", variant=variant, env=env)
        found = gpu_settings(config)
        return f"{found.status}: {found.detail}"

    assert check("gb200", GPURL_CLUSTER_GPU_TYPE="GB200", GPURL_CLUSTER_GPUS="4").startswith("ok")
    assert "a GB200 node holds at most 4" in check("gb200", GPURL_CLUSTER_GPU_TYPE="GB200")
    assert "nodes are x86_64; the variant's image is aarch64" in check(
        "gb200", GPURL_CLUSTER_GPU_TYPE="H100")
    assert check("gb200", GPURL_VERIFY_GPU="off").startswith("skipped")


# --- at the registry -----------------------------------------------------------------------------


def _config(server: RegistryServer, gpu: str) -> Config:
    return load_config(REPO_ROOT, profile="demo", env={
        "GPURL_REGISTRY_HOST": server.host, "GPURL_VERIFY_MIN_LAYERS": "2",
        "GPURL_VERIFY_ATTESTATIONS": "off", "GPURL_VERIFY_GPU": gpu})


def _pushed(server: RegistryServer, config: Config, tag: str, seed: int):  # type: ignore[no-untyped-def]
    push_image(server.url, config.registry.repository, [
        tar_gz_layer({"etc/os-release": b"ID=debian\n"}, "ADD rootfs /"),
        random_layer(20_000, "RUN /bin/sh -c uv sync --frozen", seed=seed)], tag=tag)
    client = RegistryClient(server.host)
    ref = parse_reference(f"{server.host}/{config.registry.repository}:{tag}")
    return client, client.pull(ref)


@pytest.mark.integration
def test_attached_through_the_fallback_tag_read_back_and_judged_by_pin(
        registry: RegistryServer) -> None:
    """Distribution 2.8 has no referrers API (as ghcr.io): the summary is listed under the
    `sha256-<hex>` tag beside nothing else, read back as attached, the latest of two is the
    verdict, and verify_image (pin's check) judges it under each verify.gpu mode."""
    config = _config(registry, "required")
    client, image = _pushed(registry, config, "demo-a1a1a1a1a1a1", 31)
    digest = image.subject
    _, required = verify_image(config, image.ref, client)
    assert [f.code for f in required.findings if f.failing] == ["no-gpu-check"]
    assert "no GPU check ran for" in required.findings[-1].message
    assert "run `invoke verify-gpu --variant standard`" in required.findings[-1].message
    _, lenient = verify_image(_config(registry, "if-present"), image.ref, client)
    assert lenient.ok and any("not required (verify.gpu = if-present)" in n for n in lenient.notes)

    failed = statement(check_result(digest, {**PASSING, "kernels": "failed"}), digest,
                       at="2026-12-03T18:00:00Z")
    attached = attach_summary(client, image.ref, digest, failed)
    assert attached.via == fallback_tag(digest)
    assert [r.digest for r in find(client, image.ref, digest, vsa.MEDIA_TYPE)] == [attached.digest]
    for mode in ("required", "if-present"):
        _, report = verify_image(_config(registry, mode), image.ref, client)
        assert [f.code for f in report.findings if f.failing] == ["gpu-check-failed"], mode
    with pytest.raises(CheckFailed) as refused:  # pin's refusal: which check, and why
        refuse_failing(image.ref, report, force=False)
    assert refused.value.message.startswith(f"refusing to pin {image.ref}: GPU check FAILED ")
    assert "kernels failed: kernels: the reason" in refused.value.message
    assert refused.value.hint == "--force pins it anyway"
    _, off = verify_image(_config(registry, "off"), image.ref, client)
    assert off.ok

    passed = statement(check_result(digest), digest, at="2026-12-03T19:00:00Z")
    attach_summary(client, image.ref, digest, passed)
    verdict = latest_verdict(client, image.ref, digest)
    assert verdict is not None and verdict.passed and verdict.verified_at.startswith("2026-12-03T19")
    _, report = verify_image(config, image.ref, client)
    assert report.ok and any(n.startswith("GPU check PASSED") for n in report.notes)
    client.close()


@pytest.mark.integration
def test_a_summary_of_another_digest_attached_to_the_image_fails_pin(
        registry: RegistryServer) -> None:
    config = _config(registry, "if-present")
    client, image = _pushed(registry, config, "demo-b2b2b2b2b2b2", 32)
    attach_summary(client, image.ref, image.subject, statement(check_result(OTHER), OTHER))
    _, report = verify_image(config, image.ref, client)
    assert [f.code for f in report.findings if f.failing] == ["gpu-unreadable"]
    assert f"is for {OTHER}, not {image.subject}" in report.findings[-1].message
    client.close()


@pytest.mark.integration
def test_invoke_sbom_shows_the_gpu_verdict(registry: RegistryServer, tmp_path: Path) -> None:
    from tests.support.tasks_runner import run_task

    config = _config(registry, "if-present")
    client, image = _pushed(registry, config, "demo-c3c3c3c3c3c3", 33)
    attach_summary(client, image.ref, image.subject,
                   statement(check_result(image.subject), image.subject))
    client.close()
    env = {"GPURL_REGISTRY_HOST": registry.host, "HOME": str(tmp_path)}
    ref = f"{registry.host}/{config.registry.repository}:demo-c3c3c3c3c3c3"
    done = run_task("sbom", "--profile", "demo", "--ref", ref, "--json", env=env)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["gpu"]
    assert shown["passed"] is True and shown["digest"] == image.subject
    assert shown["check"]["node"]["hostname"] == "gpu-node-7"
    from gpurl_tasks.release.attested import sbom_task

    human = sbom_task(config, ref, document=False).human().splitlines()
    assert human[-1] == ("GPU check PASSED 2026-12-03T18:00:00Z on gpu-node-7 (8x NVIDIA H200); "
                         "network not run: network: the reason; build-proof not run: "
                         "build-proof: the reason")
    assert human[1:3] == ["SBOM: none attached", "provenance: none attached"]


@pytest.mark.integration
def test_dry_run_prints_the_job_and_its_shipped_script_runs_here(
        registry: RegistryServer, tmp_path: Path) -> None:
    """`verify-gpu --dry-run` resolves the tag to its digest at the registry and submits
    nothing: one line, the zipapp elided, each build.gpu-asserts entry an `--assert`; `--json`
    (the task as a user runs it) carries the whole argv. The zipapp it ships (gpurl's own
    check modules' files) runs here as the job runs it, its sha256 checked first, with this
    machine's python and no GPU: the configured assert runs, and the result line is what
    `find_result` reads: the job's contract end to end, but for the node."""
    import os

    from gpurl_tasks.cluster.gpujob import run_verify_gpu
    from gpurl_tasks.steps import DryRun
    from tests.support.tasks_runner import run_task

    config = _config(registry, "if-present")
    client, image = _pushed(registry, config, "demo-d4d4d4d4d4d4", 34)
    client.close()
    ref = f"{registry.host}/{config.registry.repository}:demo-d4d4d4d4d4d4"
    env = {"GPURL_REGISTRY_HOST": registry.host, "HOME": str(tmp_path)}
    asserting = load_config(REPO_ROOT, profile="demo", env=env, overrides={
        "build.gpu-asserts": ["import math", "assert math.isclose(1 + 1, 3), 'one plus one'"]})
    planned = run_verify_gpu(asserting, ref, dry_run=True, say=lambda _: None, env=env)
    assert isinstance(planned, DryRun)
    line, = planned.human().splitlines()
    assert line.startswith("iris --cluster=cw-us-east-02a job run ")
    assert f"--task-image {registry.host}/{config.registry.repository}@{image.subject}" in line
    assert " --gpu 8 " in line and " --timeout 3600 " in line and "--no-wait" in line
    # the zipapp, elided: base64 of a zip's first bytes, "PK\x03\x04"
    assert re.search(r" -e GPU_CHECK_PYZ_B64 'UEsDB[A-Za-z0-9+/]{19}\.\.\.<\d+ chars>' ", line), line
    assert line.endswith(" --assert 'import math' --assert 'assert math.isclose(1 + 1, 3), "
                         "'\"'\"'one plus one'\"'\"''")
    shown = json.loads(run_task("verify-gpu", "--profile", "demo", "--ref", ref, "--dry-run",
                                "--json", env=env).stdout)["commands"][0]
    assert shown == [a for a in planned.commands[0] if a not in asserting.build.gpu_asserts
                     and a != "--assert"]  # the committed config has no asserts
    argv = planned.commands[0]
    app = argv[argv.index("GPU_CHECK_PYZ_B64") + 1]
    command = argv[argv.index("--") + 1:]
    assert command[0] == f"{config.build.venv}/bin/python"
    assert command[3:5] == (hashlib.sha256(base64.b64decode(app)).hexdigest(), "gpu-check")
    (tmp_path / "site").mkdir()
    # -S -I: no site-packages (no gpurl installed, as in the image), only the shipped zipapp
    ran = subprocess.run([sys.executable, "-S", "-I", *command[1:], "--root",
                          str(tmp_path / "site")],
                         cwd=tmp_path, env={**os.environ, "GPU_CHECK_PYZ_B64": app,
                                            "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(tmp_path)},
                         capture_output=True, text=True, timeout=60)
    found = find_result(ran.stdout)
    assert found is not None, ran.stderr
    assert found.image == image.subject and not found.passed and found.node.gpus == ()
    launches = found.check("launches")
    assert launches is not None and launches.status == "failed"  # the configured assert ran
    assert any("one plus one" in f for f in (*launches.findings, launches.reason)), launches
    assert ran.returncode == 1  # a check that could not pass is no pass
    assert (tmp_path / "gpurl-gpu-result.json").is_file()


def test_the_outcome_says_the_verdict_and_where_it_is_attached() -> None:
    """What `verify-gpu` prints once a result is attached: exit 0 passed, 1 failed (attached
    either way), and --json the whole verdict with the job and the artifact."""
    from gpurl_tasks.cluster.gpujob import GpuCheckOutcome

    for statuses, code in ((PASSING, ExitCode.OK),
                           ({**PASSING, "launches": "failed"}, ExitCode.CHECK_FAILED)):
        verdict = vsa.read_summary(json.loads(statement(check_result(statuses=statuses))), DIGEST)
        outcome = GpuCheckOutcome(image=f"ghcr.io/team/img@{DIGEST}", job_id=JOB.job_id,
                                  verdict=verdict, attached="sha256:" + "ef" * 32,
                                  via="sha256-" + "ab" * 32)
        assert outcome.exit_code == code
        first, second = outcome.human().splitlines()
        assert first == f"ghcr.io/team/img@{DIGEST}: {verdict.line()}"
        assert second == f"attached as sha256:efefefefefef (sha256-{'ab' * 32}); job {JOB.job_id}"
        payload = outcome.to_json()
        assert (payload["passed"], payload["job_id"], payload["check"]["image"]) == (
            code == ExitCode.OK, JOB.job_id, DIGEST)


@pytest.mark.integration
def test_an_image_of_another_platform_is_refused_before_any_job(registry: RegistryServer) -> None:
    """The variant's GPU node could not run it: refused at once, nothing submitted."""
    from gpurl_tasks.cluster.gpujob import run_verify_gpu

    config = _config(registry, "if-present")
    push_image(registry.url, config.registry.repository,
               [random_layer(1000, "RUN true", seed=35)], tag="demo-e5e5e5e5e5e5",
               architecture="arm64")
    ref = f"{registry.host}/{config.registry.repository}:demo-e5e5e5e5e5e5"
    with pytest.raises(CheckFailed, match=r"is a linux/arm64 image; variant \S+ runs on "
                                          "linux/amd64"):
        run_verify_gpu(config, ref, dry_run=True, say=lambda _: None,
                       env={"GPURL_REGISTRY_HOST": registry.host})


@pytest.mark.integration
def test_a_summary_the_registry_does_not_list_is_an_error(registry: RegistryServer) -> None:
    """A registry that takes the push but does not list it for the image (the fallback tag
    answered with another writer's index, or a listing that lags): the verdict is not
    attached, and that is an error, not a success. The stale listing comes from a fault proxy
    in front of the real registry; the artifact itself was pushed for real."""
    from gpurl_tasks.writer.ocispec import OCI_INDEX, canonical_json
    from tests.support.faults import Fault, FaultProxy

    config = _config(registry, "required")
    client, image = _pushed(registry, config, "demo-f6f6f6f6f6f6", 36)
    client.close()
    digest = image.subject
    stale = canonical_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []})
    with FaultProxy(registry.port) as proxy, RegistryClient(proxy.host) as through:
        proxy.inject(Fault(path=f"/manifests/{fallback_tag(digest)}", kind="serve",
                           method="GET", times=2, body=stale, content_type=OCI_INDEX))
        where = parse_reference(f"{proxy.host}/{config.registry.repository}:demo-f6f6f6f6f6f6")
        with pytest.raises(CheckFailed, match=r"was pushed, but the registry does not list it "
                                              rf"for {digest[:19]} \(sha256-"):
            attach_summary(through, where, digest, statement(check_result(digest), digest))
        assert proxy.faults[0].times == 0  # both reads of the listing were the stale one


def test_the_job_runs_no_zipapp_but_the_one_built_here(tmp_path: Path) -> None:
    """The job's command checks the shipped zipapp's sha256 before it runs a byte of it: the
    value cut on the way (its last base64 quantum), a byte of it altered, or none is one error
    line naming the sha256 expected, exit 1, and no result line or file."""
    config = load_config(REPO_ROOT, profile="demo", env={"HOME": str(tmp_path)})
    app = gpu_app()
    spec = gpu_job(config, "ghcr.io/team/img", DIGEST, target=gpu_target(config), app=app)
    shipped = dict(spec.env)[APP_ENV]
    assert isinstance(shipped, str) and base64.b64decode(shipped) == app.data
    altered = app.data[:-1] + bytes([app.data[-1] ^ 1])
    for value in (shipped[:-4], base64.b64encode(altered).decode(), ""):
        ran = subprocess.run([sys.executable, "-S", "-I", *spec.command[1:]], cwd=tmp_path,
                             env={APP_ENV: value, "TMPDIR": str(tmp_path)},
                             capture_output=True, text=True, timeout=30, check=False)
        error, = ran.stderr.splitlines()
        assert error.startswith("gpurl-gpu-check: error: the shipped zipapp has sha256 "
                                f"{hashlib.sha256(base64.b64decode(value)).hexdigest()}, "
                                f"not {app.sha256}")
        assert (ran.returncode, ran.stdout) == (1, "")
        assert list(tmp_path.iterdir()) == []  # not unpacked, no result written


def test_a_zipapp_too_large_for_one_environment_string_is_refused_before_submit(
        tmp_path: Path) -> None:
    """Linux refuses to start a process with one environment string over 128 KiB (the build
    job's zipapp, 137 kB in base64, is that large); the GPU job's is bounded well below, so a
    closure grown past it is one error at submit, not a job that cannot start."""
    from gpurl_tasks.cluster.jobapp import JobApp
    from gpurl_tasks.errors import BuildError

    config = load_config(REPO_ROOT, profile="demo", env={"HOME": str(tmp_path)})
    grown = JobApp(data=gpu_app().data + bytes(40_000), modules=gpu_app().modules)
    with pytest.raises(BuildError) as refused:
        gpu_job(config, "ghcr.io/team/img", DIGEST, target=gpu_target(config), app=grown)
    encoded = len(base64.b64encode(grown.data))
    assert refused.value.message.startswith(f"the GPU check's zipapp is {encoded} bytes in "
                                            "base64, over the 100000")
