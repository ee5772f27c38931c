"""The cluster job's steps before its first executor run (cluster/jobstart.py), alone.

The whole job runs them in tests/test_kaniko_script.py (stand-in executor) and
tests/test_kaniko_e2e.py (real kaniko and crane); here are their rules, input by input, and
the download's retries against a real HTTP server on loopback behind the fault proxy.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import certifi
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.attest.tool import manifest_key, manifest_sums
from gpurl_tasks.cluster.jobstart import (
    JobStartError,
    download,
    job_inputs,
    main,
    mount_over,
)
from gpurl_tasks.values import SOURCE_ID_PATTERN
from gpurl_tasks.writer.retry import RetryRules
from tests.support.faults import Fault, FaultProxy
from tests.support.rangeserver import serve_files

GITSHA = "0123abc"


def _args(**extra: str) -> argparse.Namespace:
    values = {"source_id": SOURCE_ID_PATTERN, "dockerfile": "docker/Dockerfile.gpu-rl",
              "tag_prefix": "gpu-rl", "floating_tag": "gpu-rl-latest", "retries": 3,
              "retry_max_wait": 30, "wheel_source": "prebuilt-wheelhouse"}
    return argparse.Namespace(**{**values, **extra})


def test_the_rendered_defaults_stand_when_the_environment_sets_nothing() -> None:
    inputs = job_inputs({"GITSHA": GITSHA}, _args())
    assert (inputs.tag, inputs.dockerfile, inputs.floating_tag, inputs.overwrite) == (
        f"gpu-rl-{GITSHA}", "docker/Dockerfile.gpu-rl", None, False)
    assert (inputs.retries, inputs.retry_max_wait, inputs.wheel_source) == (
        3, 30, "prebuilt-wheelhouse")
    assert inputs.rules.attempts == 4 and inputs.rules.max_wait == 30.0


def test_the_environment_overrides_each_default() -> None:
    env = {"GITSHA": f"{GITSHA}-dirty-0123456789ab", "DOCKERFILE": "docker/Dockerfile.x",
           "TAG_PREFIX": "exp", "PUSH_FLOATING": "1", "OVERWRITE_TAG": "1",
           "REGISTRY_RETRIES": "0", "REGISTRY_RETRY_MAX_WAIT": "5", "WHEEL_SOURCE": "wheel-builder"}
    inputs = job_inputs(env, _args())
    assert inputs.tag == f"exp-{GITSHA}-dirty-0123456789ab"
    assert inputs.floating_tag == "exp"  # another prefix floats under its own name
    assert (inputs.dockerfile, inputs.overwrite, inputs.wheel_source) == (
        "docker/Dockerfile.x", True, "wheel-builder")
    assert inputs.rules.attempts == 1 and inputs.rules.max_wait == 5.0
    assert job_inputs({"GITSHA": GITSHA, "PUSH_FLOATING": "1"}, _args()).floating_tag == \
        "gpu-rl-latest"
    assert job_inputs({"GITSHA": GITSHA, "PUSH_FLOATING": "1", "FLOATING_TAG": "mine"},
                      _args()).floating_tag == "mine"


def test_a_profile_without_compiled_wheels_ignores_wheel_source() -> None:
    assert job_inputs({"GITSHA": GITSHA, "WHEEL_SOURCE": "junk"},
                      _args(wheel_source="")).wheel_source is None


@pytest.mark.parametrize(("env", "said"), [
    ({"GITSHA": ""}, "GITSHA is required"),
    ({"GITSHA": "0123ABC"}, "GITSHA must be a lowercase hex commit id"),
    ({"GITSHA": f"{GITSHA}-dirty-x"}, "GITSHA must be a lowercase hex commit id"),
    ({"GITSHA": f"{GITSHA}\n"}, "GITSHA must be a lowercase hex commit id"),
    ({"SINGLE_SNAPSHOT": "1"}, "SINGLE_SNAPSHOT=1 is refused"),
    ({"DOCKERFILE": "/etc/passwd"}, "DOCKERFILE must be a path inside the build context"),
    ({"DOCKERFILE": "docker/../../x"}, "DOCKERFILE must be a path inside the build context"),
    ({"DOCKERFILE": "docker/Dockerfile\nx"}, "DOCKERFILE must be a path inside the build context"),
    ({"DOCKERFILE": "docker/\udcff"}, "DOCKERFILE must be a path inside the build context"),
    ({"TAG_PREFIX": "a b"}, "TAG_PREFIX must be a tag"),
    ({"TAG_PREFIX": "$(id)"}, "TAG_PREFIX must be a tag"),
    ({"TAG_PREFIX": "-x"}, "TAG_PREFIX must be a tag"),
    ({"FLOATING_TAG": "x:y"}, "FLOATING_TAG must be a tag"),
    ({"REGISTRY_RETRIES": "3; rm -rf /"}, "must be whole numbers"),
    ({"REGISTRY_RETRY_MAX_WAIT": "-1"}, "must be whole numbers"),
    ({"WHEEL_SOURCE": "compile"}, "WHEEL_SOURCE must be prebuilt-wheelhouse or wheel-builder"),
])
def test_each_input_is_refused_in_one_line_naming_it(env: dict[str, str], said: str) -> None:
    with pytest.raises(JobStartError) as refused:
        job_inputs({"GITSHA": GITSHA, **env}, _args())
    assert said in str(refused.value) and "\n" not in str(refused.value)


MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
23 22 0:22 / /proc rw,nosuid - proc proc rw
30 22 8:1 /pods/x/volumes/app /app rw,relatime - ext4 /dev/sda1 rw
31 22 8:1 /pods/x/volumes/odd /mnt/with\\040space rw,relatime - ext4 /dev/sda1 rw
"""


@pytest.mark.parametrize(("path", "mount"), [
    ("/opt/workspace", None),  # the root mount is every path's: never a reason to refuse
    ("/app/workspace", "/app"),
    ("/app", "/app"),
    ("/apple/workspace", None),  # a prefix of the name is not the mount
    ("/mnt/with space/ws", "/mnt/with space"),  # mountinfo's octal escapes are read
])
def test_the_workspace_under_a_mount_of_the_job_is_found(path: str, mount: str | None) -> None:
    assert mount_over(path, MOUNTINFO) == mount


@given(st.lists(st.from_regex(r"/[a-z]{1,6}(/[a-z]{1,6}){0,2}", fullmatch=True), max_size=6),
       st.from_regex(r"/[a-z]{1,6}(/[a-z]{1,6}){0,3}", fullmatch=True))
def test_a_found_mount_is_a_whole_leading_part_of_the_path(mounts: list[str], path: str) -> None:
    info = "".join(f"{n} 1 0:1 / {m} rw - ext4 x rw\n" for n, m in enumerate(mounts))
    found = mount_over(path, info)
    expected = [m for m in mounts if path == m or path.startswith(f"{m}/")]
    assert found == (expected[0] if expected else None)


def test_the_manifest_is_read_as_a_wheel_builder_writes_it() -> None:
    manifest = ("# gpurl-abi fork=1 platform=linux_x86_64\n"
                f"{'a' * 64}  vllm-1-cp312-linux_x86_64.whl\n"
                f"{'b' * 64} *flash_attn-2-cp312-linux_x86_64.whl\n")
    assert manifest_key(manifest, "# gpurl-abi ") == "fork=1 platform=linux_x86_64"
    assert manifest_key("no key\n", "# gpurl-abi ") == ""
    sums = manifest_sums(manifest)
    assert sums.get("vllm-1-cp312-linux_x86_64.whl") == "a" * 64
    assert sums.get("flash_attn-2-cp312-linux_x86_64.whl") == "b" * 64  # binary mode
    assert sums.get("vllm-1") is None


@contextmanager
def _behind_faults(tmp_path: Path, *faults: Fault) -> Iterator[str]:
    """`tmp_path/served/file` ("crane bytes") from a real HTTP server on loopback, reached
    through the fault proxy answering the next requests with `faults`; yields its URL."""
    served = tmp_path / "served"
    served.mkdir()
    (served / "file").write_bytes(b"crane bytes")
    with serve_files(served) as url, FaultProxy(int(url.rsplit(":", 1)[1])) as proxy:
        for fault in faults:
            proxy.inject(fault)
        yield f"http://{proxy.host}/file"


def _ca(tmp_path: Path) -> Path:
    """A CA bundle (plain HTTP reads none; the download's TLS context still loads one)."""
    ca = tmp_path / "ca.crt"
    ca.write_bytes(Path(certifi.where()).read_bytes())
    return ca


RULES = RetryRules(attempts=4, max_wait=1)


@pytest.mark.parametrize("fault", [Fault("/file", "503", times=2),
                                   Fault("/file", "429", times=2, retry_after="0"),
                                   Fault("/file", "truncate"), Fault("/file", "drop")])
def test_a_download_is_sent_again_on_a_fault_worth_it_and_lands_whole(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: Fault) -> None:
    faulty = fault.times  # the proxy counts it down
    with _behind_faults(tmp_path, fault) as url:
        download(url, tmp_path / "crane.tgz", RULES, _ca(tmp_path))
    assert (tmp_path / "crane.tgz").read_bytes() == b"crane bytes"
    assert capsys.readouterr().out.count("    retry ") == faulty
    assert not (tmp_path / "crane.tgz.partial").exists()


def test_a_404_is_final_and_leaves_no_file(tmp_path: Path) -> None:
    with _behind_faults(tmp_path) as url, pytest.raises(JobStartError, match="HTTP 404"):
        download(url.replace("/file", "/absent"), tmp_path / "MANIFEST", RULES, _ca(tmp_path))
    assert not (tmp_path / "MANIFEST").exists() and not (tmp_path / "MANIFEST.partial").exists()


def test_retries_run_out_in_one_error(tmp_path: Path) -> None:
    with _behind_faults(tmp_path, Fault("/file", "503", times=5)) as url, \
            pytest.raises(JobStartError, match="HTTP 503"):
        download(url, tmp_path / "w.whl", RetryRules(attempts=2, max_wait=1), _ca(tmp_path))
    assert not (tmp_path / "w.whl").exists() and not (tmp_path / "w.whl.partial").exists()


def test_a_refused_input_stops_the_step_in_one_line_and_exit_1(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 1 and `gpurl job: error:`, as the script's own guards end the job (the watcher
    reads the job's exit code); nothing is written."""
    monkeypatch.delenv("GITSHA", raising=False)
    argv = ["prepare", "--work", str(tmp_path), "--context", str(tmp_path), "--retries", "3",
            "--retry-max-wait", "30",
            *(a for name in ("root", "image-workspace", "image", "source-id", "dockerfile",
                             "tag-prefix", "floating-tag", "crane-url", "crane-sha256",
                             "executor-image", "platform") for a in (f"--{name}", "x"))]
    assert main(argv) == 1
    assert capsys.readouterr().err.splitlines() == [
        "gpurl job: error: GITSHA is required: the image is pushed as the immutable tag "
        "PREFIX-GITSHA"]
    assert list(tmp_path.iterdir()) == []
