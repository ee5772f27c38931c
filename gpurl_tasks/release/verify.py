"""The layer rules a pushed image must meet, and their table/JSON rendering (pure).

Why these rules (docs/verify-and-pin.md): containerd pulls a few layers at a time and gives up on
a blob that shows no progress, GHCR caps a layer at 10 GB, and the team's experience is that
images with every layer under ~4 GB and more than 20 layers pull, while one 16.6 GB layer
(the --single-snapshot symptom) does not. The build succeeds either way; only a check of the
pushed manifest catches it before a launch does.

Predicted sizes: layers map to Dockerfile instructions through the config's `history`
(entries without `empty_layer`, in order); the slice layers are the `uv pip install -r
/tmp/gpurl-layers/...` RUNs, and slice i is predicted by `Plan.layers[i]` when the image's
plan-fingerprint label matches; the final `uv sync --inexact` layer is flagged above a few kB.

Recorded sizes: a slice layer gpurl wrote names, in its history entry, the cache tag its record
is kept under (writer/records.record_of). The caller reads those records (release/flow.py); a layer
whose blob is the recorded one has its size known exactly, and one that is not is flagged (the
writer is meant to give one blob per slice on every builder).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Collection, Mapping
from typing import Any

from gpurl_tasks.dockerfile.provenance import LABEL_PLAN_FINGERPRINT
from gpurl_tasks.errors import ExitCode
from gpurl_tasks.oci.image import Descriptor, PulledImage
from gpurl_tasks.plan.layerlimit import CEILING, HARD_LIMIT
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.values import format_bytes
from gpurl_tasks.writer.records import slice_of

__all__ = [
    "UNEXPECTED_CAUSES",
    "Finding",
    "LayerRow",
    "Record",
    "Report",
    "Rules",
    "check_layers",
    "layer_instructions",
    "render_table",
    "report_json",
]

FINAL_SYNC_MARKERS = ("uv sync", "--inexact")  # the one sync after the slices
FINAL_SYNC_SLACK = 64_000  # local packages only; more means the slices missed something
HUGE_SHARE = 0.5  # one layer holding at least this share of the image is the one-layer symptom
UNEXPECTED_CAUSES = (
    "a package cache left in the layer (uv needs --no-cache / UV_NO_CACHE=1 without a cache mount)",
    "a package installed twice (a slice line in another form than the lock records, e.g. "
    "`name @ <wheel url>` for a registry package, which the final sync reinstalls)",
    "bytecode compiled into the layer (--compile-bytecode / UV_COMPILE_BYTECODE)",
)
_BAR = 20
_PARTIAL = " ▏▎▍▌▋▊▉"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Rules:
    """Thresholds from config.layers.cap and config.verify, overridable by flags."""

    cap: int
    hard_limit: int
    min_layers: int
    tolerance: float = 0.25  # a sync layer this much above its prediction is flagged


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Record:
    """The record a written slice layer's history names: its cache tag, and the blob the
    cache repository holds under it (None when the cache no longer has it)."""

    tag: str
    blob: Descriptor | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LayerRow:
    index: int
    digest: str
    size: int
    instruction: str | None  # created_by from history, None when history does not map
    sync_step: int | None = None
    predicted: int | None = None  # by the plan, from wheel sizes
    record: str | None = None  # the cache tag of the record this layer's history names
    recorded: Descriptor | None = None  # the blob that record holds, when the cache has it

    @property
    def exact(self) -> bool:
        """The layer is the very blob gpurl wrote and recorded for its slice."""
        return self.recorded is not None and self.recorded.digest == self.digest

    @property
    def error(self) -> float | None:
        """(actual - predicted) / predicted, None without a prediction."""
        if self.predicted is None or self.predicted <= 0:
            return None
        return (self.size - self.predicted) / self.predicted


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    code: str  # hard-limit | cap | too-few-layers | too-many-layers | near-layer-limit |
    # single-huge-layer | unexpected-content | final-sync-installed | not-the-recorded-blob |
    # missing-blob
    message: str
    failing: bool
    layer: int | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Report:
    reference: str
    top_digest: str
    manifest_digest: str
    is_index: bool
    rules: Rules
    rows: tuple[LayerRow, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...]
    platform: str = ""  # the image's, from its config ("" when the config names none)

    @property
    def ok(self) -> bool:
        return not any(f.failing for f in self.findings)

    @property
    def total(self) -> int:
        return sum(r.size for r in self.rows)

    @property
    def largest(self) -> LayerRow | None:
        return max(self.rows, key=lambda r: r.size, default=None)

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if self.ok else ExitCode.CHECK_FAILED

    @property
    def failure(self) -> str | None:
        """The one stderr line a failing check ends with (also under --json)."""
        return None if self.ok else f"verify-layers: {self.reference} fails the layer rules"

    def human(self) -> str:
        return render_table(self)

    def to_json(self) -> dict[str, Any]:
        return report_json(self)


def layer_instructions(image: PulledImage) -> tuple[list[str | None], str | None]:
    """Each layer's instruction from the config's history (its layer-making entries in order),
    or all None and a note saying why when the history does not map onto the layers."""
    made = [h.created_by for h in image.history if not h.empty_layer]
    if len(made) != len(image.layers):
        note = (f"the image config's history names {len(made)} layer-making instructions for "
                f"{len(image.layers)} layers, so layers are not mapped to instructions")
        return [None] * len(image.layers), note
    return list(made), None


def _predictions(image: PulledImage, instructions: list[str | None], plan: Plan | None,
                 plan_note: str | None) -> tuple[dict[int, tuple[int, int | None]], str | None]:
    """layer index -> (sync step, predicted bytes or None), and a note when none apply."""
    sync = [i for i, text in enumerate(instructions) if slice_of(text) is not None]
    steps: dict[int, tuple[int, int | None]] = {i: (n, None) for n, i in enumerate(sync)}
    label = image.labels.get(LABEL_PLAN_FINGERPRINT)
    if not label:
        return steps, f"the image has no {LABEL_PLAN_FINGERPRINT} label: sizes are not predicted"
    if plan is None:
        return steps, plan_note or "no plan available: sizes are not predicted"
    if plan.fingerprint != label:
        return steps, (f"the image was built from plan {label[:19]}, the config now plans "
                       f"{plan.fingerprint[:19]}: sizes are not predicted")
    if len(sync) != len(plan.layers):
        return steps, (f"the image has {len(sync)} slice layers, the plan {len(plan.layers)}: "
                       "sizes are not predicted")
    return {i: (n, plan.layers[n].compressed_bytes) for n, i in enumerate(sync)}, None


def check_layers(image: PulledImage, rules: Rules, plan: Plan | None = None, *,
                 plan_note: str | None = None,
                 records: Mapping[int, Record] | None = None,
                 records_note: str | None = None,
                 missing: Collection[str] = (), hand_written: str = "") -> Report:
    """Apply the rules to a pulled image; `plan` adds predicted sizes when it matches,
    `records` (layer index -> the record its history names) the exact size of each slice
    gpurl wrote, and `missing` names the blobs of the image (config or layers) the registry
    answered a HEAD for with "not found". `hand_written`: the hand-written Dockerfile the image
    was built from (build.generate = false), whose instruction a layer over a limit is named
    by: gpurl cannot re-layer it, the team splits that instruction."""
    instructions, history_note = layer_instructions(image)
    predicted, prediction_note = _predictions(image, instructions, plan, plan_note)
    records = records or {}
    rows = tuple(
        LayerRow(index=i, digest=d.digest, size=d.size, instruction=instructions[i],
                 sync_step=predicted[i][0] if i in predicted else None,
                 predicted=predicted[i][1] if i in predicted else None,
                 record=records[i].tag if i in records else None,
                 recorded=records[i].blob if i in records else None)
        for i, d in enumerate(image.layers))
    findings: list[Finding] = []
    for row in rows:
        size = format_bytes(row.size)
        if row.size >= rules.hard_limit:
            findings.append(Finding(
                code="hard-limit", layer=row.index, failing=True,
                message=f"layer {row.index} is {size}, at or above the hard limit "
                        f"{format_bytes(rules.hard_limit)}: registries and the cluster's "
                        "containerd cannot move it reliably" + _by_hand(row, hand_written)))
        elif row.size > rules.cap:
            findings.append(Finding(
                code="cap", layer=row.index, failing=True,
                message=f"layer {row.index} is {size}, above the cap {format_bytes(rules.cap)}"
                        + _by_hand(row, hand_written)))
    total = sum(r.size for r in rows)
    largest = max(rows, key=lambda r: r.size, default=None)
    if largest and total and largest.size > rules.cap and largest.size / total >= HUGE_SHARE:
        findings.append(Finding(
            code="single-huge-layer", layer=largest.index, failing=True,
            message=f"single huge layer: layer {largest.index} holds "
                    f"{largest.size / total:.0%} of the image ({format_bytes(largest.size)} of "
                    f"{format_bytes(total)}); this is the --single-snapshot symptom, the image "
                    "will not pull on the cluster (ImagePullBackOff)"))
    if len(rows) < rules.min_layers:
        findings.append(Finding(
            code="too-few-layers", failing=True,
            message=f"{len(rows)} layers, fewer than the minimum {rules.min_layers}: "
                    "the environment is not split into enough layers"))
    findings += _layer_limit(len(rows))
    for row in rows:
        error = row.error
        if error is not None and error > rules.tolerance:
            findings.append(Finding(
                code="unexpected-content", layer=row.index, failing=False,
                message=f"slice {row.sync_step} (layer {row.index}) is {error:.0%} larger "
                        f"than predicted ({format_bytes(row.size)} vs "
                        f"{format_bytes(row.predicted)}): unexpected content; likely "
                        + "; or ".join(UNEXPECTED_CAUSES)))
    for row in rows:
        text = row.instruction or ""
        if all(marker in text for marker in FINAL_SYNC_MARKERS) and row.size > FINAL_SYNC_SLACK:
            findings.append(Finding(
                code="final-sync-installed", layer=row.index, failing=False,
                message=f"the final uv sync (layer {row.index}) added {format_bytes(row.size)}: "
                        "it should find every slice's package in place and add only the local "
                        "packages; the slices missed or misstated something (regenerate them)"))
    findings += _record_findings(rows)
    findings += _missing_findings(image, rows, missing)
    notes = tuple(n for n in (history_note, prediction_note, records_note, _records_note(rows))
                  if n)
    return Report(reference=str(image.ref), top_digest=image.top_digest,
                  manifest_digest=image.manifest_digest, is_index=image.is_index, rules=rules,
                  rows=rows, findings=tuple(findings), notes=notes, platform=image.platform)


def _by_hand(row: LayerRow, dockerfile: str) -> str:
    """For an image built from a hand-written Dockerfile, which instruction of it made the
    layer and what to do; nothing for a generated one (its planner re-layers it)."""
    if not dockerfile:
        return ""
    made = (f"`{_short_instruction(row.instruction, 72)}` of the hand-written {dockerfile}"
            if row.instruction else f"an instruction of the hand-written {dockerfile} (the "
            "history does not map layers to instructions)")
    return (f": it is {made}; split that instruction into several, each under the cap "
            "(gpurl does not re-layer a hand-written Dockerfile)")


def _record_findings(rows: tuple[LayerRow, ...]) -> list[Finding]:
    """A written slice whose layer is not the blob its record holds: the same slice was
    written into different bytes, so nodes pull it again (the writer's promise is broken)."""
    return [Finding(code="not-the-recorded-blob", layer=row.index, failing=False,
                    message=f"layer {row.index} ({format_bytes(row.size)}) is not the blob "
                            f"recorded under {row.record} ({row.recorded.digest[:19]}, "
                            f"{format_bytes(row.recorded.size)}): the slice was written twice "
                            "into different bytes; report it with both blobs")
            for row in rows if row.recorded is not None and not row.exact]


def _missing_findings(image: PulledImage, rows: tuple[LayerRow, ...],
                      missing: Collection[str]) -> list[Finding]:
    """A blob the manifest names that the registry does not hold: no node can pull the image
    (a registry that does not check what a manifest names accepted it)."""
    host = image.ref.host
    findings = []
    if image.config_digest in missing:
        findings.append(Finding(code="missing-blob", failing=True,
                                message=f"the image config {image.config_digest[:19]} is not "
                                        f"in {host}: no node can start the image; rebuild it"))
    findings += [Finding(code="missing-blob", layer=row.index, failing=True,
                         message=f"layer {row.index} ({format_bytes(row.size)}) is blob "
                                 f"{row.digest[:19]}, which {host} does not hold: no node can "
                                 "pull the image; rebuild it")
                 for row in rows if row.digest in missing]
    return findings


def _records_note(rows: tuple[LayerRow, ...]) -> str | None:
    """What the records said: how many slice layers are exactly the blobs gpurl wrote, how
    close the plan's prediction came for them, and how many records the cache lacks."""
    named = [r for r in rows if r.record is not None]
    if not named:
        return None
    exact = [r for r in named if r.exact]
    missing = sum(1 for r in named if r.recorded is None)
    said = f"{len(exact)} of {len(named)} written slice layers are the recorded blobs " \
           "(sizes exact)"
    errors = [r.error for r in exact if r.error is not None]
    if errors:
        said += f"; the plan predicted them within {min(errors):+.1%} to {max(errors):+.1%}"
    if missing:
        said += f"; {missing} record(s) are not in the cache repository (pruned?)"
    return said


def _layer_limit(count: int) -> list[Finding]:
    """Above HARD_LIMIT layers no node runs the image (Docker and containerd stop there); from
    the planning CEILING up it still runs, with little room for the builder's empty layers."""
    if count > HARD_LIMIT:
        return [Finding(code="too-many-layers", failing=True,
                        message=f"{count} layers, more than the {HARD_LIMIT} Docker and "
                                "containerd run: no node can start it; regenerate with fewer "
                                "slices (`invoke generate` fits the plan under the ceiling "
                                f"{CEILING}) and rebuild")]
    if count >= CEILING:
        return [Finding(code="near-layer-limit", failing=False,
                        message=f"{count} layers, at or above the planning ceiling {CEILING} "
                                f"(Docker and containerd stop at {HARD_LIMIT}): a few more "
                                "slices or builder layers and no node can start it")]
    return []


def _bar(size: int, cap: int) -> str:
    if size > cap:
        return "█" * _BAR + "▶"
    eighths = round(size / cap * _BAR * 8) if cap else 0
    full, part = divmod(eighths, 8)
    return ("█" * full + (_PARTIAL[part] if part else "")).ljust(_BAR + 1)


def _short_instruction(text: str | None, width: int = 52) -> str:
    if text is None:
        return ""
    text = re.sub(r"^(RUN )?(\|\d+ (\S+=\S* )*)?/bin/(ba)?sh -c (#\(nop\) ?)?", r"\1",
                  text.strip())
    text = re.sub(r"\s+# buildkit$", "", text)
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render_table(report: Report) -> str:
    """The human table: index, short digest, size, a bar against the cap, predictions."""
    rules = report.rules
    lines = [f"image    {report.reference}"]
    if report.is_index:
        lines.append(f"index    {report.top_digest}")
    lines.append(f"manifest {report.manifest_digest}"
                 + (f" ({report.platform})" if report.platform else ""))
    lines.append(f"rules    cap {format_bytes(rules.cap)} · hard limit "
                 f"{format_bytes(rules.hard_limit)} · at least {rules.min_layers} layers · "
                 f"at most {HARD_LIMIT} layers (warn from {CEILING})")
    lines.append("")
    flagged = {f.layer for f in report.findings if f.layer is not None}
    header = (f"{'#':>3}  {'digest':<12}  {'size':>9}  {'vs cap':<{_BAR + 1}}  "
              f"{'predicted':>9}  {'error':>7}  instruction")
    lines.append(header)
    for row in report.rows:
        if row.exact:  # the record's size: what gpurl wrote is what was pushed
            predicted, error = format_bytes(row.size), "exact"
        else:
            predicted = format_bytes(row.predicted) if row.predicted is not None else ""
            error = f"{row.error:+.1%}" if row.error is not None else ""
        mark = "!" if row.index in flagged else " "
        lines.append(
            f"{row.index:>3}{mark} {row.digest.removeprefix('sha256:')[:12]:<12}  "
            f"{format_bytes(row.size):>9}  {_bar(row.size, rules.cap)}  {predicted:>9}  "
            f"{error:>7}  {_short_instruction(row.instruction)}".rstrip())
    largest = report.largest
    lines.append("")
    lines.append(f"total {format_bytes(report.total)} in {len(report.rows)} layers"
                 + (f", largest {format_bytes(largest.size)} (layer {largest.index})"
                    if largest else ""))
    for note in report.notes:
        lines.append(f"note: {note}")
    for finding in report.findings:
        lines.append(f"{'FAIL' if finding.failing else 'WARN'} [{finding.code}] {finding.message}")
    lines.append("OK: every layer rule holds" if report.ok else "FAILED: see the FAIL lines above")
    return "\n".join(lines)


def report_json(report: Report) -> dict[str, Any]:
    """The machine form of a report (verify-layers --json)."""
    largest = report.largest
    return {
        "reference": report.reference,
        "top_digest": report.top_digest,
        "manifest_digest": report.manifest_digest,
        "is_index": report.is_index,
        "platform": report.platform,
        "ok": report.ok,
        "rules": dataclasses.asdict(report.rules),
        "total_bytes": report.total,
        "layer_count": len(report.rows),
        "layer_limit": {"hard_limit": HARD_LIMIT, "ceiling": CEILING},
        "largest_bytes": largest.size if largest else 0,
        "layers": [
            {"index": r.index, "digest": r.digest, "size": r.size, "instruction": r.instruction,
             "sync_step": r.sync_step, "predicted": r.predicted,
             "error_percent": None if r.error is None else round(r.error * 100, 1),
             "record": r.record,
             "recorded": None if r.recorded is None else {"digest": r.recorded.digest,
                                                          "size": r.recorded.size},
             "exact": r.exact}
            for r in report.rows
        ],
        "findings": [dataclasses.asdict(f) for f in report.findings],
        "notes": list(report.notes),
    }
