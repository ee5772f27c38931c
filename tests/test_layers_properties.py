"""Invariants of the planned chain over generated locks (markers, extras, forks, sizes)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpurl_tasks.config import PythonSelection, TargetSpec
from gpurl_tasks.plan.lock import install_closure, parse_lock
from gpurl_tasks.plan.model import Plan, sync_selection_flags
from gpurl_tasks.plan.planner import plan_layers
from gpurl_tasks.plan.sizes import PackageSize, SizeSources, package_sizes
from gpurl_tasks.plan.target import target_tags
from tests.locks import lock_texts

TARGET = TargetSpec()
selections = st.builds(
    PythonSelection,
    extras=st.lists(st.sampled_from(["x", "y"]), unique=True).map(tuple),
    no_dev=st.booleans(),
)


def _plan(text: str, selection: PythonSelection, cap: int) -> tuple[Plan, list[PackageSize]]:
    closure = install_closure(parse_lock(text), TARGET, selection)
    sizes = package_sizes(closure.packages, target_tags(TARGET), SizeSources())
    flags = sync_selection_flags(selection, local_flags=("--no-install-project",))
    return plan_layers(sizes, cap=cap, basis="compressed", sync_flags=flags), sizes


@settings(max_examples=150, deadline=None)
@given(lock_texts(), selections, st.integers(1000, 5000))
def test_chain_invariants(text: str, selection: PythonSelection, cap: int) -> None:
    plan, sizes = _plan(text, selection, cap)
    closure = {s.name for s in sizes}
    installed_by = {}
    for layer in plan.layers:
        for name in layer.names:
            assert name not in installed_by, f"{name} installed twice"
            installed_by[name] = layer.index
    # the union of what the steps install is the closure: the final sync equals the lock
    assert set(installed_by) == closure
    # step k excludes exactly the packages of later layers; exclusions only shrink
    for k, step in enumerate(plan.steps):
        assert set(step.no_install_package) == {n for n, i in installed_by.items() if i > k}
        assert set(step.no_install_package) <= closure
        if k:
            assert set(step.no_install_package) <= set(plan.steps[k - 1].no_install_package)
    assert plan.steps[-1].no_install_package == ()
    assert len(plan.steps) == len(plan.layers) >= plan.lower_bound_layers
    # every layer is within the cap (every single package is, by the strategy's sizes)
    assert all(layer.compressed_bytes <= cap for layer in plan.layers)


@settings(max_examples=75, deadline=None)
@given(lock_texts(), selections, st.integers(1000, 5000), st.randoms())
def test_plan_is_deterministic_and_order_independent(text: str, selection: PythonSelection,
                                                     cap: int, rng: object) -> None:
    plan, sizes = _plan(text, selection, cap)
    again, _ = _plan(text, selection, cap)
    assert again == plan and again.fingerprint == plan.fingerprint
    shuffled = list(sizes)
    rng.shuffle(shuffled)  # type: ignore[attr-defined]
    reordered = plan_layers(shuffled, cap=cap, basis="compressed", sync_flags=plan.sync_flags)
    assert reordered == plan


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(1, 10_000), min_size=1, max_size=60), st.integers(10_000, 40_000))
def test_layer_count_bound(sizes: list[int], cap: int) -> None:
    """LPT only opens bucket k+1 when all k buckets hold more than cap - largest package,
    so it never uses more than floor(total / (cap - largest)) + 1 layers."""
    items = [PackageSize(name=f"p{i}", version="1", compressed_bytes=s, installed_bytes=None,
                         source="lock", artifact=None) for i, s in enumerate(sizes)]
    plan = plan_layers(items, cap=cap, basis="compressed", sync_flags=())
    largest = max(sizes)
    if largest < cap:
        assert len(plan.layers) <= sum(sizes) // (cap - largest) + 1
    assert len(plan.layers) >= plan.lower_bound_layers
