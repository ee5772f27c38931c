"""rebuild decisions on the real SkyRL locks (two commits of skyrl-train), when present."""

from __future__ import annotations

import time

from gpurl_tasks.config import BuildSettings, PythonSelection, TargetSpec
from gpurl_tasks.dockerfile.inputs import parse_dockerfile_inputs
from gpurl_tasks.dockerfile.wheels import pins_from_args
from gpurl_tasks.rebuild.fingerprint import Fingerprint, decide, fingerprint
from gpurl_tasks.rebuild.inputs import closure_entries
from tests.conftest import skyrl_lock
from tests.support.rebuild_fixtures import dockerfile

TARGET = TargetSpec(glibc="2.35")


def real_fp(commit: str, extras: tuple[str, ...]) -> Fingerprint:
    inputs = parse_dockerfile_inputs(dockerfile())
    text = skyrl_lock(commit).read_text()
    closure = closure_entries(text, TARGET, PythonSelection(extras=extras))
    return fingerprint(inputs, closure, extras,
                       pins_from_args(inputs.effective_args, BuildSettings(), TARGET))


def test_same_real_lock_needs_nothing() -> None:
    assert decide(real_fp("0b8acf049", ("vllm",)), real_fp("0b8acf049", ("vllm",))).decision \
        == "none"


def test_real_lock_update_with_torch_bump_needs_wheels() -> None:
    start = time.perf_counter()
    old, new = real_fp("021b9d65b", ("vllm",)), real_fp("0b8acf049", ("vllm",))
    result = decide(old, new)
    elapsed = time.perf_counter() - start
    assert result.decision == "wheels+image"
    torch = [r.to_json() for r in result.reasons if r.kind == "torch"]
    assert torch == [{"kind": "torch", "detail": "torch: 2.8.0+cu128 -> 2.9.1+cu128"}]
    assert len(result.reasons) > 50  # a real lock refresh touches many packages
    assert all(r.kind in ("package", "torch") for r in result.reasons)
    assert elapsed < 5.0, f"two real ~200-package closures took {elapsed:.2f}s"


def test_real_lock_extra_switch_is_reported() -> None:
    result = decide(real_fp("0b8acf049", ("vllm",)), real_fp("0b8acf049", ("mcore",)))
    assert result.decision == "image"  # both extras pin the same torch at this commit
    assert {"kind": "extras", "detail": "['vllm'] -> ['mcore']"} in [
        r.to_json() for r in result.reasons]
