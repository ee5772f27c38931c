"""The verify-then-pin flow behind `invoke verify-layers` and `invoke pin`.

Glue only: it turns the config into a reference, a registry client and rules, asks the
registry for the image, applies the pure checks in verify.py and prepares the launcher edit
in pin.py. The tasks print and exit; nothing here does.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.generate import check_launcher, fitted_plan
from gpurl_tasks.dockerfile.provenance import LABEL_PLAN_FINGERPRINT
from gpurl_tasks.errors import CheckFailed, ExitCode, GpurlError, PinError, RegistryError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import PulledImage, parse_manifest
from gpurl_tasks.oci.registry import ManifestUnknown, RegistryClient
from gpurl_tasks.oci.tags import cache_repository, resolve_reference
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.release.attested import attestation_findings
from gpurl_tasks.release.pin import (
    Provenance,
    check_immutable,
    pinned_value,
    provenance_comment,
    rewrite_assignment,
    unified_diff,
)
from gpurl_tasks.release.verify import Record, Report, Rules, check_layers, layer_instructions, report_json
from gpurl_tasks.writer.records import record_of

__all__ = [
    "PinChange",
    "apply_pin",
    "load_plan",
    "missing_blobs",
    "pin_reference",
    "prepare_pin",
    "read_records",
    "rules_for",
    "verify_image",
    "verify_reference",
]

PlanLoader = Callable[[Config], tuple[Plan | None, str | None]]


def rules_for(config: Config) -> Rules:
    return Rules(cap=config.verify.cap or config.layers.cap, hard_limit=config.verify.hard_limit,
                 min_layers=config.verify.min_layers)


def load_plan(config: Config) -> tuple[Plan | None, str | None]:
    """The plan for the current config, or (None, why not): predictions are optional."""
    try:
        plan: Plan = fitted_plan(config)
    except GpurlError as exc:
        return None, f"the plan could not be computed ({exc.message}): sizes are not predicted"
    return plan, None


def verify_image(config: Config, ref: ImageRef, client: RegistryClient, *,
                 plan_loader: PlanLoader = load_plan) -> tuple[PulledImage, Report]:
    """Pull the image's manifest and config, HEAD every blob it names, and apply the layer
    rules."""
    image = client.pull(ref)
    plan, note = (None, None)
    if image.labels.get(LABEL_PLAN_FINGERPRINT):
        plan, note = plan_loader(config)
    records, records_note = read_records(config, image, client)
    report = check_layers(image, rules_for(config), plan, plan_note=note, records=records,
                          records_note=records_note, missing=missing_blobs(image, client))
    findings, notes = attestation_findings(config, image, client)
    return image, dataclasses.replace(report, findings=(*report.findings, *findings),
                                      notes=(*report.notes, *notes))


def missing_blobs(image: PulledImage, client: RegistryClient) -> frozenset[str]:
    """The blobs the image's manifest names (its config and every layer) that the registry
    does not hold: a manifest is accepted by some registries whatever it names, and a blob
    can be deleted after the push. One HEAD per distinct blob."""
    named = dict.fromkeys([image.config_digest, *(d.digest for d in image.layers)])
    return frozenset(d for d in named if not client.has_blob(image.ref, d, push=False))


def read_records(config: Config, image: PulledImage, client: RegistryClient,
                 ) -> tuple[dict[int, Record], str | None]:
    """layer index -> the record that layer's history names (a slice gpurl wrote) with the
    blob the cache repository holds under it, and a note when the records cannot be read."""
    tags = {i: tag for i, text in enumerate(layer_instructions(image)[0])
            if text and (tag := record_of(text)) is not None}
    if not tags:
        return {}, None
    cache = parse_reference(cache_repository(config), default_host=config.registry.host,
                            bare=True)
    if cache.host != image.ref.host:
        return {}, (f"the cache repository {cache.name} is on another host than the image: "
                    "written slices are not checked against their records")
    records: dict[int, Record] = {}
    for index, tag in tags.items():
        where = dataclasses.replace(cache, tag=tag, digest=None)
        try:
            _, _, manifest = client.manifest(where)
            layers = parse_manifest(manifest, f"manifest of {where}").layers
        except ManifestUnknown:
            records[index] = Record(tag=tag, blob=None)
            continue
        except RegistryError as exc:  # the image is checked all the same; say why not these
            return {}, (f"the slice records in {cache.name} cannot be read ({exc.message}): "
                        "written slices are not checked against them")
        records[index] = Record(tag=tag, blob=layers[0] if len(layers) == 1 else None)
    return records, None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PinChange:
    """A prepared launcher edit: `diff` is empty when the launcher already holds the pin."""

    path: Path
    value: str
    old: str
    new: str
    diff: str

    @property
    def changed(self) -> bool:
        return self.old != self.new


def prepare_pin(config: Config, image: PulledImage, report: Report, *, force: bool,
                today: dt.date) -> PinChange:
    """Check the reference and rules, and compute the new launcher text (nothing written)."""
    check_immutable(image.ref, config.registry)
    missing = [f.message for f in report.findings if f.code == "missing-blob"]
    if missing:  # no --force: a node could never pull what the pin names
        raise CheckFailed(f"refusing to pin {image.ref}: {'; '.join(missing)}",
                          hint="rebuild the image (invoke build); --force does not pin an "
                               "image whose blobs are missing")
    if not report.ok and not force:
        failing = "; ".join(f.message for f in report.findings if f.failing)
        raise CheckFailed(f"refusing to pin {image.ref}: it fails the layer rules: {failing}",
                       hint="fix the build, or pass --force to pin it anyway")
    path = config.launcher.path
    old = read_text(path, what="launcher file", error=PinError,
                    missing_hint="set launcher.path in the config or pass --launcher")
    try:
        check_launcher(config, old)
    except GpurlError as exc:
        raise PinError(f"refusing to pin: {exc.message}", hint=exc.hint) from None
    largest = report.largest
    comment = provenance_comment(Provenance(
        tag=image.ref.tag, layer_count=len(report.rows), total_bytes=report.total,
        largest_bytes=largest.size if largest else 0, date=today))
    # The linux/amd64 manifest digest, not the index digest: see the module docstring of pin.py.
    value = pinned_value(image.ref, image.manifest_digest)
    new = rewrite_assignment(old, config.launcher.variable, value, comment, where=str(path),
                             line_length=line_length_for(path, config.root))
    shown = path.relative_to(config.root) if path.is_relative_to(config.root) else path
    return PinChange(path=path, value=value, old=old, new=new,
                     diff=unified_diff(old, new, str(shown)))


RUFF_DEFAULT_LINE_LENGTH = 88


def line_length_for(path: Path, root: Path) -> int:
    """The line length ruff applies to `path`: the nearest ruff.toml, .ruff.toml or
    pyproject.toml with a [tool.ruff] table, from the file's directory up to `root`."""
    for folder in [path.parent, *path.parent.parents]:
        for name, table in (("ruff.toml", ()), (".ruff.toml", ()),
                            ("pyproject.toml", ("tool", "ruff"))):
            candidate = folder / name
            if not candidate.is_file():
                continue
            try:
                data: Any = tomllib.loads(read_text(candidate, what="linter config"))
            except (GpurlError, tomllib.TOMLDecodeError):
                continue
            for key in table:
                data = data.get(key) if isinstance(data, dict) else None
            if isinstance(data, dict):
                value = data.get("line-length")
                return value if isinstance(value, int) else RUFF_DEFAULT_LINE_LENGTH
        if folder == root:
            break
    return RUFF_DEFAULT_LINE_LENGTH


def apply_pin(change: PinChange) -> bool:
    """Write the prepared edit atomically; False when there was nothing to change."""
    if not change.changed:
        return False
    write_atomic(change.path, change.new)
    return True


def verify_reference(config: Config, text: str | None, *,
                     env: Mapping[str, str] | None = None) -> Report:
    """`invoke verify-layers`: the report for `text` (default: this commit's tag)."""
    ref = resolve_reference(config, text)
    with open_client(config, ref, env) as client:
        return verify_image(config, ref, client)[1]


def pin_reference(config: Config, text: str | None, *, force: bool, today: dt.date,
                  env: Mapping[str, str] | None = None) -> tuple[Report, PinChange]:
    """`invoke pin`: refuse floating tags before any network, verify, prepare the edit."""
    ref = resolve_reference(config, text)
    check_immutable(ref, config.registry)
    with open_client(config, ref, env) as client:
        image, report = verify_image(config, ref, client)
    return report, prepare_pin(config, image, report, force=force, today=today)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PinOutcome:
    """`invoke pin`'s outcome: the prepared edit, whether it was written, and the rules."""

    change: PinChange
    report: Report
    written: bool
    dry_run: bool
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        change = self.change
        if self.dry_run:
            return change.diff.rstrip("\n") or f"{change.path}: already pinned to {change.value}"
        if self.written:
            return f"pinned {change.value} in {change.path}"
        return f"{change.path} already pins {change.value}; nothing to do"

    def to_json(self) -> dict[str, Any]:
        return {"value": self.change.value, "path": str(self.change.path),
                "changed": self.change.changed, "written": self.written, "dry_run": self.dry_run,
                "diff": self.change.diff, "report": report_json(self.report)}


def pin_task(config: Config, text: str | None, *, force: bool, dry_run: bool,
             warn: Callable[[str], None], today: dt.date | None = None) -> PinOutcome:
    """Verify `text` (default: this commit's tag), then write the pin unless `dry_run`; the
    provenance comment is dated `today` (default: today in UTC)."""
    report, change = pin_reference(config, text, force=force,
                                   today=today or dt.datetime.now(dt.UTC).date())
    if not report.ok:
        warn(f"warning: pinning {report.reference} despite failing rules (--force)")
    written = False if dry_run else apply_pin(change)
    return PinOutcome(change=change, report=report, written=written, dry_run=dry_run)
