"""verify-layers rules and rendering on hand-built images and plans (pure, no registry)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpurl_tasks.dockerfile.provenance import LABEL_PLAN_FINGERPRINT
from gpurl_tasks.imageref import ImageRef
from gpurl_tasks.oci.image import Descriptor, HistoryEntry, PulledImage
from gpurl_tasks.plan.model import Layer, Plan, PlannedPackage, Slice
from gpurl_tasks.release.verify import (
    UNEXPECTED_CAUSES,
    Record,
    Rules,
    check_layers,
    render_table,
    report_json,
)
from gpurl_tasks.writer.blob import compressor
from gpurl_tasks.writer.records import recorded_history, slice_key

GB = 10**9
RULES = Rules(cap=4 * GB, hard_limit=8 * GB, min_layers=20)
REF = ImageRef(host="ghcr.io", repository="org/img", tag="gpu-rl-abc1234")


def digest(n: int) -> str:
    return "sha256:" + f"{n:064x}"


def image(sizes: list[int], *, instructions: list[str] | None = None,
          labels: dict[str, str] | None = None, empty: int = 0) -> PulledImage:
    instructions = instructions or [f"RUN step {i}" for i in range(len(sizes))]
    history = [HistoryEntry(created_by="ENV X=1", empty_layer=True)] * empty + [
        HistoryEntry(created_by=text, empty_layer=False) for text in instructions]
    return PulledImage(
        ref=REF, top_digest=digest(999), top_media_type="application/vnd.oci.image.index.v1+json",
        manifest_digest=digest(998),
        layers=tuple(Descriptor(media_type="x", digest=digest(i + 1), size=s)
                     for i, s in enumerate(sizes)),
        config_digest=digest(997), labels=labels or {}, history=tuple(history))


def plan(layer_sizes: list[int]) -> Plan:
    layers = tuple(
        Layer(slice=Slice(position=i, label=f"pkg{i}"),
              packages=(PlannedPackage(name=f"pkg{i}", version="1.0", compressed_bytes=size,
                                       installed_bytes=None),))
        for i, size in enumerate(layer_sizes))
    return Plan(cap_bytes=4 * GB, basis="compressed", sync_flags=("--frozen", "--no-cache"),
                layers=layers, local=("app",), lower_bound_layers=len(layers))


def codes(report: object) -> list[str]:
    return [f.code for f in report.findings]  # type: ignore[attr-defined]


def test_the_known_good_image_passes() -> None:
    """The runbook's pinned image: 48 layers, max 3.46 GB, 22.66 GB total."""
    sizes = [3_460_000_000] + [400_000_000] * 47
    report = check_layers(image(sizes), RULES)
    assert report.ok and report.findings == ()
    assert report.largest is not None and report.largest.size == 3_460_000_000


def test_single_snapshot_image_is_named_as_the_single_huge_layer() -> None:
    """The failure from the runbook: 13 layers, one of 16.6 GB."""
    sizes = [16_600_000_000] + [400_000_000] * 12
    report = check_layers(image(sizes), RULES)
    assert not report.ok
    assert codes(report) == ["hard-limit", "single-huge-layer", "too-few-layers"]
    huge = report.findings[1]
    assert "single huge layer" in huge.message and "layer 0" in huge.message
    assert "--single-snapshot" in huge.message


def test_boundaries_cap_is_exclusive_hard_limit_inclusive() -> None:
    at_cap = check_layers(image([4 * GB] + [GB] * 19), RULES)
    assert at_cap.ok
    above_cap = check_layers(image([4 * GB + 1] + [GB] * 19), RULES)
    assert codes(above_cap) == ["cap"]
    at_hard = check_layers(image([8 * GB] + [GB] * 19), RULES)
    assert codes(at_hard) == ["hard-limit"]


def test_too_few_layers() -> None:
    report = check_layers(image([GB] * 19), RULES)
    assert codes(report) == ["too-few-layers"]
    assert "19 layers" in report.findings[0].message


sizes_st = st.lists(st.integers(min_value=0, max_value=12 * GB), min_size=0, max_size=40)


@given(sizes=sizes_st, cap=st.integers(1, 6 * GB), hard=st.integers(1, 10 * GB),
       minimum=st.integers(0, 30))
def test_ok_exactly_when_every_rule_holds(sizes: list[int], cap: int, hard: int,
                                          minimum: int) -> None:
    rules = Rules(cap=cap, hard_limit=hard, min_layers=minimum)
    report = check_layers(image(sizes), rules)
    expected = all(s <= cap and s < hard for s in sizes) and len(sizes) >= minimum
    assert report.ok is expected
    assert report.total == sum(sizes)
    flagged = {f.layer for f in report.findings if f.code in ("cap", "hard-limit")}
    assert flagged == {i for i, s in enumerate(sizes) if s > cap or s >= hard}


SLICE = "RUN /bin/sh -c uv pip install --no-deps --require-hashes -r /tmp/gpurl-layers/"


def sync_image(sync_sizes: list[int], fingerprint: str | None) -> PulledImage:
    sizes = [80_000_000, 1_000_000, *sync_sizes, 5_000_000]
    instructions = (["ADD rootfs /", "RUN /bin/sh -c uv venv /opt/venv"]
                    + [f"{SLICE}{i:02d}-pkg{i}.txt" for i in range(len(sync_sizes))]
                    + ["COPY . /app"])
    labels = {LABEL_PLAN_FINGERPRINT: fingerprint} if fingerprint else {}
    return image(sizes, instructions=instructions, labels=labels, empty=2)


def test_predictions_line_up_with_sync_layers_when_the_fingerprint_matches() -> None:
    p = plan([3 * GB, 2 * GB, GB])
    report = check_layers(sync_image([3_030_000_000, 2 * GB, 1_300_000_000], p.fingerprint),
                          Rules(cap=4 * GB, hard_limit=8 * GB, min_layers=1), p)
    sync_rows = [r for r in report.rows if r.sync_step is not None]
    assert [r.index for r in sync_rows] == [2, 3, 4]
    assert [r.predicted for r in sync_rows] == [3 * GB, 2 * GB, GB]
    assert [round(r.error * 100) for r in sync_rows if r.error is not None] == [1, 0, 30]
    assert report.ok  # unexpected content warns but is not a failing rule
    unexpected = [f for f in report.findings if f.code == "unexpected-content"]
    assert [f.layer for f in unexpected] == [4]
    for cause in ("package cache", "installed twice", "bytecode"):
        assert cause in unexpected[0].message
    table = render_table(report)
    assert "+30.0%" in table and "1.00 GB" in table
    assert report.notes == ()


def test_exactly_25_percent_is_not_flagged() -> None:
    p = plan([GB])
    report = check_layers(sync_image([1_250_000_000], p.fingerprint), RULES, p)
    assert "unexpected-content" not in codes(report)


@pytest.mark.parametrize(("fingerprint", "use_plan", "note"), [
    (None, True, "no org.gpurl.plan-fingerprint label"),
    ("sha256:" + "0" * 64, True, "built from plan sha256:000000000000"),
    ("MATCH", False, "planner unavailable"),
])
def test_no_prediction_cases_say_why(fingerprint: str | None, use_plan: bool, note: str) -> None:
    p = plan([GB, GB])
    label = p.fingerprint if fingerprint == "MATCH" else fingerprint
    report = check_layers(sync_image([GB, GB], label), RULES, p if use_plan else None,
                          plan_note="planner unavailable")
    assert all(r.predicted is None for r in report.rows)
    assert [r.sync_step for r in report.rows if r.sync_step is not None] == [0, 1]
    assert len(report.notes) == 1 and note in report.notes[0]


def test_sync_count_differs_from_plan() -> None:
    p = plan([GB, GB, GB])
    report = check_layers(sync_image([GB, GB], p.fingerprint), RULES, p)
    assert "2 slice layers, the plan 3" in report.notes[0]


def test_history_that_does_not_map_is_a_note_not_a_guess() -> None:
    broken = image([GB] * 3, instructions=["RUN a", "RUN b"])
    report = check_layers(broken, RULES)
    assert all(r.instruction is None for r in report.rows)
    assert "2 layer-making instructions for 3 layers" in report.notes[0]


def test_table_and_json_agree() -> None:
    sizes = [16_600_000_000, 300_000_000, 1_000]
    report = check_layers(image(sizes), RULES)
    table = render_table(report)
    lines = table.splitlines()
    assert lines[0] == "image    ghcr.io/org/img:gpu-rl-abc1234"
    row0 = next(line for line in lines if line.startswith("  0!"))
    assert "16.60 GB" in row0 and "▶" in row0
    assert "FAILED" in lines[-1]
    data = json.loads(json.dumps(report_json(report)))
    assert data["ok"] is False and data["layer_count"] == 3
    assert [layer["size"] for layer in data["layers"]] == sizes
    assert {f["code"] for f in data["findings"]} == {"hard-limit", "single-huge-layer",
                                                     "too-few-layers"}


def test_bar_is_proportional_to_the_cap() -> None:
    report = check_layers(image([2 * GB, 4 * GB, 0] + [GB] * 17), RULES)
    rows = render_table(report).splitlines()
    half = next(line for line in rows if line.startswith("  0 "))
    full = next(line for line in rows if line.startswith("  1 "))
    assert half.count("█") == 10 and full.count("█") == 20


@pytest.mark.parametrize(("symptom", "remedy"), [
    ("package cache", "--no-cache"), ("package cache", "UV_NO_CACHE=1"),
    ("installed twice", "`name @ <wheel url>`"), ("bytecode", "--compile-bytecode")])
def test_causes_are_the_three_named_in_the_design(symptom: str, remedy: str) -> None:
    """The design's three known causes of a slice layer larger than its wheels (DESIGN.md
    sections 3 and 4), each with the flag or form to look for, in the finding the user reads."""
    cause = [c for c in UNEXPECTED_CAUSES if symptom in c]
    assert len(cause) == 1 and remedy in cause[0]
    p = plan([GB])
    report = check_layers(sync_image([2 * GB], p.fingerprint),
                          Rules(cap=4 * GB, hard_limit=8 * GB, min_layers=1), p)
    (finding,) = [f for f in report.findings if f.code == "unexpected-content"]
    assert cause[0] in finding.message


@pytest.mark.parametrize(("size", "flagged"), [(2_000, False), (64_000, False), (900_000, True)])
def test_the_final_sync_is_not_a_planned_layer_and_is_flagged_when_it_installs(
        size: int, flagged: bool) -> None:
    """The generated Dockerfile ends with `uv sync --inexact` to install the workspace source;
    only the slices map to plan layers, and a final sync layer beyond a few kB means the slices
    missed something (a warning naming the layer, not a failing rule)."""
    p = plan([GB, GB])
    base = sync_image([GB, GB], p.fingerprint)
    extra = HistoryEntry(created_by="RUN /bin/sh -c uv sync --frozen --no-cache --inexact",
                         empty_layer=False)
    with_local = dataclasses.replace(
        base, history=(*base.history, extra),
        layers=(*base.layers, Descriptor(media_type="x", digest=digest(77), size=size)))
    report = check_layers(with_local, Rules(cap=4 * GB, hard_limit=8 * GB, min_layers=1), p)
    assert [r.sync_step for r in report.rows if r.sync_step is not None] == [0, 1]
    assert [r.predicted for r in report.rows if r.predicted is not None] == [GB, GB]
    assert report.rows[-1].sync_step is None
    found = [f for f in report.findings if f.code == "final-sync-installed"]
    assert [f.layer for f in found] == ([len(report.rows) - 1] if flagged else [])
    assert report.ok


@pytest.mark.parametrize(("count", "code", "failing"), [
    (119, None, False), (120, "near-layer-limit", False), (127, "near-layer-limit", False),
    (128, "too-many-layers", True)])
def test_the_layer_limit_fails_above_127_and_warns_from_the_ceiling(
        count: int, code: str | None, failing: bool) -> None:
    report = check_layers(image([10**6] * count), Rules(cap=4 * GB, hard_limit=8 * GB,
                                                        min_layers=1))
    limit = [f for f in report.findings if f.code in ("near-layer-limit", "too-many-layers")]
    assert [f.code for f in limit] == ([code] if code else [])
    assert report.ok is not failing
    table = render_table(report)
    assert "at most 127 layers (warn from 120)" in table
    if code:
        assert f"{'FAIL' if failing else 'WARN'} [{code}] {count} layers" in table
    body = report_json(report)
    assert body["layer_count"] == count
    assert body["layer_limit"] == {"hard_limit": 127, "ceiling": 120}
    assert [(f["code"], f["failing"]) for f in body["findings"]
            if f["code"] == code] == ([(code, failing)] if code else [])


def _written(sizes: list[int]) -> tuple[PulledImage, dict[int, Record]]:
    """An image whose layers 1.. are written slices naming their records, and those records
    as the cache holds them (each the layer's own blob)."""
    tags = [slice_key(label=f"pkg{i}", slice_text=b"%d" % i, created_by="x", python="3.11.2",
                      venv="/opt/venv", uv="uv 0.9.0", compressor=compressor(6), arch="x86_64")
            for i in range(len(sizes))]
    texts = ["RUN apt-get install python3"] + [
        recorded_history(f"gpurl: uv pip install -r {Slice.IMAGE_DIR}/{i:02d}-pkg{i}.txt",
                         tags[i]) for i in range(1, len(sizes))]
    pulled = image(sizes, instructions=texts)
    return pulled, {i: Record(tag=tags[i], blob=pulled.layers[i]) for i in range(1, len(sizes))}


def test_a_written_slice_that_is_its_recorded_blob_has_an_exact_size() -> None:
    pulled, records = _written([GB] + [10**8] * 20)
    report = check_layers(pulled, RULES, records=records)
    assert report.ok and codes(report) == []
    assert [r.exact for r in report.rows] == [False] + [True] * 20
    assert "20 of 20 written slice layers are the recorded blobs (sizes exact)" in report.notes
    table = render_table(report).splitlines()
    assert sum(1 for line in table if "exact" in line.split()) == 20
    assert report_json(report)["layers"][3]["recorded"] == {"digest": digest(4), "size": 10**8}


def test_a_written_slice_that_is_not_its_recorded_blob_is_flagged() -> None:
    """Another blob under the same record: the slice was written twice into different bytes."""
    pulled, records = _written([GB] + [10**8] * 20)
    records[5] = dataclasses.replace(records[5], blob=dataclasses.replace(
        pulled.layers[5], digest=digest(500), size=10**8 + 1))
    records[7] = dataclasses.replace(records[7], blob=None)  # the cache lost this record
    report = check_layers(pulled, RULES, records=records)
    assert codes(report) == ["not-the-recorded-blob"] and report.ok  # a warning: it still runs
    assert report.findings[0].layer == 5 and digest(500)[:19] in report.findings[0].message
    assert not report.rows[5].exact and not report.rows[7].exact
    note = next(n for n in report.notes if "written slice layers" in n)
    assert note.startswith("18 of 20") and "1 record(s) are not in the cache" in note
    assert report_json(report)["layers"][7]["record"] == records[7].tag
