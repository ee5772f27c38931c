"""The build job's memory from its measurement (benchmarks/kaniko_scale.py): the need scaled with
the environment, doctor's line when the request is far above it, and the floor a build refuses
below (the runbook's when kaniko snapshots the environment, the measured peak otherwise).
Pure functions and config reads: no cluster, Docker or registry."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.cluster import doctor
from gpurl_tasks.config import load_config
from gpurl_tasks.values import parse_size
from tests.conftest import REPO_ROOT

GIB = 2**30
MARGIN = 2  # the defaults' stated margin over the measured peak (cluster.memory's doc)


@given(st.integers(0, 10**13), st.integers(0, 10**13))
def test_need_grows_with_the_environment_and_never_drops_below_the_measurement(
        a: int, b: int) -> None:
    small, large = sorted((a, b))
    assert doctor.MEASURED_PEAK_BYTES <= doctor.memory_need(small) <= doctor.memory_need(large)


@given(st.integers(1, 64))
def test_need_is_the_measured_peak_in_proportion_above_the_measured_environment(k: int) -> None:
    assert doctor.memory_need(k * doctor.MEASURED_ENV_BYTES) == k * doctor.MEASURED_PEAK_BYTES


@given(env=st.integers(0, 10**13), gib=st.integers(1, 8192))
def test_doctor_speaks_exactly_when_the_request_is_far_above_the_need(env: int, gib: int) -> None:
    memory = f"{gib}GB"  # iris reads GB as GiB
    line = doctor.memory_warning(memory, env)
    assert (line is not None) == (gib * GIB > doctor.FAR_ABOVE * doctor.memory_need(env))
    if line is not None:
        assert "\n" not in line and line.startswith(f"cluster.memory {memory} is ")


def test_the_runbook_request_is_named_far_above_with_the_measured_figure() -> None:
    line = doctor.memory_warning("512GB", doctor.MEASURED_ENV_BYTES)
    assert line is not None
    assert f"{doctor.MEASURED_PEAK_BYTES / GIB:.1f} GiB peak measured" in line
    assert "benchmarks/REPORT.md" in line


def test_the_default_request_covers_the_need_with_its_margin_and_draws_no_warning() -> None:
    for profile in ("gpu-rl", "heavy"):
        memory = load_config(REPO_ROOT, profile=profile, env={}).cluster.memory
        assert parse_size(memory, binary_gb=True) >= MARGIN * doctor.MEASURED_PEAK_BYTES
        assert doctor.memory_warning(memory, doctor.MEASURED_ENV_BYTES) is None
        check = doctor.job_memory(memory, snapshots_environment=False,
                                  env_bytes=doctor.MEASURED_ENV_BYTES)
        assert check.status == "ok" and check.detail == f"the build job asks for {memory}"


def test_the_floor_is_the_runbooks_only_where_kaniko_snapshots_the_environment() -> None:
    assert doctor.job_memory("256GB", snapshots_environment=True).failed
    assert not doctor.job_memory("256GB", snapshots_environment=False).failed
    below = doctor.job_memory("1MB", snapshots_environment=False)
    assert below.failed and "measured peak" in below.detail
    assert not doctor.job_memory("1MB", snapshots_environment=False, force=True).failed
    far = doctor.job_memory("512GB", snapshots_environment=False,
                            env_bytes=doctor.MEASURED_ENV_BYTES)
    assert far.status == "ok" and "measured need" in far.detail


def test_who_snapshots_the_environment_follows_the_config() -> None:
    composed = load_config(REPO_ROOT, profile="gpu-rl", env={})
    chain = load_config(REPO_ROOT, profile="gpu-rl", env={"GPURL_CLUSTER_ENV_SOURCE": "chain"})
    compiled = load_config(REPO_ROOT, profile="demo", env={})  # wheel-source = wheel-builder
    assert not doctor.snapshots_environment(composed)
    assert doctor.snapshots_environment(chain)
    assert doctor.snapshots_environment(compiled)
