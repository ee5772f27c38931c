"""The in-job GPU check (gpurl_tasks/gpu/check.py) on its paths that need no GPU: each check
fed the facts of a node without torch, GPUs or IB (stand-ins for what this machine lacks; the
real run on an H200 is benchmarks/gpu/h200-run*.log), the reader's verdicts on the real kernels
in tests/data/fatbin, bad arguments, and the result written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpurl_tasks.gpu import check
from gpurl_tasks.gpu import result as gr

DATA = Path(__file__).parent / "data" / "fatbin"
LOG = Path(__file__).parent.parent / "benchmarks" / "gpu" / "h200-run1.log"
DIGEST = "sha256:" + "0f" * 32
H200 = gr.Gpu(index=0, name="NVIDIA H200", capability="9.0")


def _facts(**changes: Any) -> check.Facts:
    base: dict[str, Any] = {"gpus": (H200,), "driver": "580.159.04", "driver_cuda": "13.0",
                            "image_cuda": "13.0", "expected_gpus": 1}
    return check.Facts(**{**base, **changes})


@pytest.mark.parametrize(("changes", "status", "says"), [
    ({}, "passed", "driver CUDA 13.0 >= image CUDA 13.0; 1 GPU(s): NVIDIA H200 (9.0)"),
    ({"driver_cuda": "", "driver_error": "libcuda.so.1: cannot open"}, "failed", "did not load"),
    ({"torch_error": "ModuleNotFoundError: torch"}, "not-run", "torch does not import"),
    ({"driver_cuda": "12.8", "image_cuda": "13.0"}, "failed", "older than the image's CUDA 13.0"),
    ({"driver_cuda": "12.10", "image_cuda": "12.8"}, "passed", ""),
    ({"gpus": ()}, "failed", "torch sees no GPU"),
    ({"expected_gpus": 8}, "failed", "torch sees 1 GPUs, the job was given 8"),
])
def test_the_driver_check(changes: dict[str, Any], status: str, says: str) -> None:
    outcome = check.check_driver(_facts(**changes))
    assert (outcome.status, says in outcome.reason) == (status, True)


def test_the_kernels_check_names_each_file_that_cannot_run_on_the_node() -> None:
    outcome = check.check_kernels(check.scan([DATA]), [H200])
    assert outcome.status == "failed"
    assert sorted(f.split("/")[-1] for f in outcome.findings) == [
        "add_one_sm100.so: holds SASS sm_100: none runs on sm_90",
        "add_one_sm80.so: holds SASS sm_80: none runs on sm_90"]
    assert outcome.figures["files"] == 4 and outcome.figures["sass"] == "sm_80 sm_90 sm_100"


def test_the_kernels_check_passes_what_runs_and_reports_the_configured_archs_it_lacks(
        tmp_path: Path) -> None:
    for name in ("add_one_sm90.so", "add_one_ptx80.so"):
        (tmp_path / name).write_bytes((DATA / name).read_bytes())
    found = check.scan([tmp_path])
    assert check.check_kernels(found, [H200]).status == "passed"
    outcome = check.check_kernels(found, [H200], ["8.0", "9.0", "10.0"])
    assert outcome.status == "failed"
    assert [f.split("/")[-1] for f in outcome.findings] == [
        "add_one_sm90.so: configured arch 8.0, but it holds SASS sm_90",
        "add_one_sm90.so: configured arch 10.0, but it holds SASS sm_90"]
    assert outcome.figures["arch_list_missing"] == "10.0:1 8.0:1"


def test_the_kernels_check_without_a_gpu_is_not_run_and_an_unreadable_file_fails(
        tmp_path: Path) -> None:
    assert check.check_kernels(check.scan([DATA]), []).status == "not-run"
    broken = (DATA / "add_one_sm90.so").read_bytes()[:0x2100]  # cut inside its .nv_fatbin
    (tmp_path / "broken.so").write_bytes(broken)
    outcome = check.check_kernels(check.scan([tmp_path]), [H200])
    assert outcome.status == "failed" and "broken.so: the fatbin cannot be read" in outcome.findings[0]


def test_configured_asserts_run_in_process_and_each_failure_is_named() -> None:
    ran = check.run_asserts(["assert 1 + 1 == 2", "assert torch is None, 'no torch here'",
                             "import json\njson.loads('{')", "x = 1 +"], torch=None)
    assert [error.split(":")[0] for _, error in ran] == ["", "", "JSONDecodeError", "SyntaxError"]
    outcome = check.check_launches(None, ran)
    assert outcome.status == "failed" and len(outcome.findings) == 2
    assert outcome.findings[0].startswith("assert 3 (import json): JSONDecodeError")


def test_without_torch_no_launch_is_passed() -> None:
    assert check.check_launches(None, []).status == "not-run"
    assert check.check_launches(None, [("assert 1 (x)", "")]).status == "not-run"
    assert check.check_launches(("built-in", ""), []).status == "passed"


def test_the_transport_is_read_off_the_real_nccl_log_of_the_h200_run() -> None:
    """NCCL said `NET/IB : No device found` then `Using network Socket` there (a VM)."""
    found, lines = check.transport(LOG.read_text().splitlines())
    assert found == "Socket"
    assert any("NET/IB : No device found" in line for line in lines)


def _allreduce(transport: str = "Socket", error: str = "") -> check.Allreduce:
    return check.Allreduce(ranks=1, bytes=256 << 20, seconds=0.001, transport=transport,
                           error=error)


@pytest.mark.parametrize(("ib", "verbs_error", "allreduce", "status", "says"), [
    ([], "", _allreduce(), "not-run", "no IB device on this node"),
    ([], "libibverbs.so.1: cannot open", None, "not-run", "torch does not import"),
    (["uverbs0"], "libibverbs.so.1: cannot open", _allreduce(), "failed", "NET/Socket"),
    (["uverbs0"], "", _allreduce("Socket"), "failed", "used Socket network, not NET/IB"),
    (["uverbs0"], "", _allreduce("IB"), "passed", "used NET/IB"),
    (["uverbs0"], "", _allreduce("IBext"), "passed", "used NET/IB"),
    (["uverbs0"], "", _allreduce(error="DistBackendError: NCCL error"), "failed", "failed: Dist"),
    (["uverbs0"], "", None, "not-run", "torch does not import"),
])
def test_the_network_check(ib: list[str], verbs_error: str, allreduce: check.Allreduce | None,
                           status: str, says: str) -> None:
    outcome = check.check_network(ib, verbs_error, allreduce)
    assert (outcome.status, says in outcome.reason) == (status, True), outcome.reason


def test_a_one_gpu_all_reduce_reports_its_figures_and_no_bus_bandwidth() -> None:
    figures = check.check_network([], "", _allreduce()).figures
    assert figures["busbw_gbps"] == 0.0 and figures["algbw_gbps"] == pytest.approx(268.435, 1e-3)


def test_only_uverbs_devices_count_as_ib(tmp_path: Path) -> None:
    """The H200 VM's /dev/infiniband held only rdma_cm, and NCCL found no IB device."""
    (tmp_path / "rdma_cm").touch()
    assert check.ib_devices(tmp_path) == []
    (tmp_path / "uverbs0").touch()
    assert check.ib_devices(tmp_path) == ["uverbs0"]
    assert check.ib_devices(tmp_path / "absent") == []


def _main(argv: list[str], tmp_path: Path) -> int:
    return check.main(argv, torch_loader=lambda: (None, "ModuleNotFoundError: torch"),
                      ib_root=tmp_path / "no-ib")


def test_a_run_without_torch_writes_the_result_it_prints(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    code = _main(["--out", str(out), "--image-digest", DIGEST, "--root", str(DATA),
                  "--assert", "assert False, 'the configured assert'"], tmp_path)
    printed = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and len(printed) == 1 and printed[0].startswith(check.LINE_PREFIX)
    from_line = gr.parse(printed[0].removeprefix(check.LINE_PREFIX))
    assert gr.parse(out.read_text()) == from_line and not from_line.passed
    status = {c.name: c.status for c in from_line.checks}
    assert status["kernels"] == "not-run" and status["launches"] == "failed"
    assert status["build-proof"] == "not-run" and from_line.image == DIGEST
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]  # no temp file left


def test_a_failed_write_leaves_the_old_result_no_temp_file_and_one_error_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    out.write_text("the old result")

    def broken(*_: object) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "replace", broken)
    code = _main(["--out", str(out), "--image-digest", DIGEST, "--root", str(tmp_path)], tmp_path)
    printed = capsys.readouterr()
    assert code == 2 and printed.out.startswith(check.LINE_PREFIX)
    assert printed.err.strip().splitlines() == [
        f"gpurl-gpu-check: error: cannot write the result to {out}: No space left on device"]
    assert out.read_text() == "the old result" and [p.name for p in tmp_path.iterdir()] == [
        "result.json"]


@pytest.mark.parametrize(("argv", "says"), [
    ([], "required: --out"),
    (["--out", "{out}"], "--image-digest (or GPURL_IMAGE_DIGEST) must be sha256"),
    (["--out", "{out}", "--image-digest", "sha256:abc"], "must be sha256:<64 hex>"),
    (["--out", "{tmp}/absent/r.json", "--image-digest", DIGEST], "does not exist"),
    (["--out", "{out}", "--image-digest", DIGEST, "--root", "{tmp}/absent"], "is not a folder"),
    (["--out", "{out}", "--image-digest", DIGEST, "--arch-list", "8.0;sm_90"], "--arch-list"),
    (["--out", "{out}", "--image-digest", DIGEST, "--gpus", "0"], "at least 1"),
    (["--out", "{out}", "--image-digest", DIGEST, "--gpus", "two"], "invalid int value"),
    (["--out", "{out}", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_arguments_exit_2_with_one_error_line(argv: list[str], says: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPURL_IMAGE_DIGEST", raising=False)
    argv = [a.format(out=tmp_path / "r.json", tmp=tmp_path) for a in argv]
    with pytest.raises(SystemExit) as exited:
        _main(argv, tmp_path)
    err = capsys.readouterr().err.strip().splitlines()
    assert exited.value.code == 2 and len(err) == 1
    assert err[0].startswith("gpurl-gpu-check: error: ") and says in err[0]
    assert not (tmp_path / "r.json").exists()


def test_the_digest_comes_from_the_environment_when_not_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GPURL_IMAGE_DIGEST", DIGEST)
    _main(["--out", str(tmp_path / "r.json"), "--root", str(tmp_path)], tmp_path)
    assert json.loads((tmp_path / "r.json").read_text())["image"] == DIGEST
    capsys.readouterr()


def test_torch_without_a_gpu_launches_nothing_and_says_why(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """A stand-in for a CPU-only torch (this machine has none): it imports, sees no GPU."""
    from types import SimpleNamespace
    cpu_torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False),
                                version=SimpleNamespace(cuda=None))
    code = check.main(["--out", str(tmp_path / "r.json"), "--image-digest", DIGEST,
                       "--root", str(tmp_path)], torch_loader=lambda: (cpu_torch, ""),
                      ib_root=tmp_path)
    result = gr.parse((tmp_path / "r.json").read_text())
    launches, network = result.check("launches"), result.check("network")
    assert code == 1 and launches is not None and network is not None
    assert launches.reason == "torch sees no GPU: no kernel could be launched"
    assert network.status == "not-run" and "torch sees no GPU, no all-reduce ran" in network.reason
    capsys.readouterr()


def test_a_check_that_breaks_is_its_own_failure_not_a_lost_result() -> None:
    def broken() -> gr.Check:
        raise KeyError("capability")
    outcome = check._guarded("kernels", broken)
    assert outcome.status == "failed" and outcome.reason.startswith("the check broke: KeyError")


def test_the_scan_reads_a_library_s_own_fatbins_only_when_its_nv_fatbin_falls_short(
        tmp_path: Path) -> None:
    from gpurl_tasks.gpu.fatbin import EMBEDDED, Entry
    from tests.test_gpu_fatbin import _container, _elf
    stub = _container([(Entry(kind="sass", sm=75, compressed=True), b"\1" * 8, 0)])
    kept = _container([(Entry(kind="sass", sm=90, compressed=True), b"\2" * 24, 0)])
    (tmp_path / "libfft.so").write_bytes(_elf({".nv_fatbin": stub, ".data": kept})[0])
    assert EMBEDDED not in check.scan([tmp_path]).holds[0][1].sections
    found = check.scan([tmp_path], [(9, 0)])
    assert check.check_kernels(found, [H200]).status == "passed"
    assert check.check_kernels(found, [H200], ["8.0"]).status == "failed"  # holds no sm_80
