"""The registry half of a composition, written once for both paths (stdlib only): trust a
cached record only when its blobs are there, stage the missing slices in parallel, record
each (a record whose blob was lost is written again), check every layer before the composed
manifest, push it, and say what became of each slice.

The registry is a small interface (`Registry`): gpurl's client on the local path
(oci/composing.py), crane as a subprocess in the cluster job (writer/crane.py). What a slice's
staging is belongs to the caller (`stage`): a container of env-base locally, uv in env-base's
own filesystem in the job (writer/job.py).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from gpurl_tasks.writer.blob import Blob, LayerError
from gpurl_tasks.writer.composition import Composition, Record, compose, record_of_image
from gpurl_tasks.writer.records import (
    MEDIA_TYPES,
    manifest_blobs,
    platform_of,
    recorded_history,
    slice_image,
)

__all__ = ["WORKERS", "BaseDocuments", "BlobsMissing", "ComposeError", "Composed", "Outcome",
           "Registry", "SliceFailures", "Slot", "StagedSlice", "check_layers", "compose_env",
           "read_base"]

# The one bound on slices staged (and recorded) at once: they are independent.
WORKERS = max(1, min(8, os.cpu_count() or 1))


class ComposeError(LayerError):
    """A composition that cannot go on: the registry's answer, or what it holds, says so."""


class BlobsMissing(ComposeError):
    """The composed manifest names a blob its repository does not hold: it is not written."""

    hint = "run the build again: a slice whose blob is gone is written anew"


class SliceFailures(ComposeError):
    """Slices that could not be staged or recorded, by NN-label in plan order (the others
    were recorded, so a rerun reuses them)."""

    def __init__(self, failures: Mapping[str, BaseException]) -> None:
        self.failures = dict(failures)
        first = next(iter(self.failures))
        super().__init__(f"slice {first} could not be written (its reason is above)")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BaseDocuments:
    """env-base as the registry holds it: its manifest and config documents."""

    manifest: Mapping[str, Any]
    config: Mapping[str, Any]

    @property
    def media_type(self) -> str:
        return str(self.manifest.get("mediaType"))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Slot:
    """One slice the composition wants: its NN-label, its cache tag, and the history entry
    of the install that writes it (records.written_history)."""

    name: str
    tag: str
    created_by: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class StagedSlice:
    """One written slice layer on disk, and how long staging and writing took."""

    path: Path
    blob: Blob
    seconds: float
    log: str  # what the install said


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Outcome:
    """What became of one slice: `cached` (its record reused), `lost` (its record names a
    blob the registry no longer holds: `blob` is that one, and the slice is written again)
    or `written` (`rewritten` when it was lost)."""

    name: str
    tag: str
    state: Literal["cached", "lost", "written"]
    blob: Blob
    seconds: float = 0.0
    rewritten: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Composed:
    """The composed environment: its tag, `repository@digest`, and each slice's outcome."""

    tag: str
    reference: str
    slices: tuple[Outcome, ...]

    @property
    def digest(self) -> str:
        return self.reference.rpartition("@")[2]


class Registry(Protocol):
    """The registry as a composition uses it: the cache repository (records, env-base) and
    the repository the composed image goes to (`composed_repository`, named in errors)."""

    @property
    def composed_repository(self) -> str:
        """Where the composed image goes (`host/repository`), as errors name it."""

    def lookup(self, tag: str) -> str | None:
        """The digest cache tag `tag` names, None when there is none."""

    def manifest(self, reference: str) -> Mapping[str, Any]:
        """A manifest of the cache repository, by tag or digest."""

    def blob_json(self, digest: str) -> Mapping[str, Any] | None:
        """A JSON blob of the cache repository, None when it no longer holds it."""

    def has_blob(self, digest: str, *, composed: bool = False) -> bool:
        """Whether the cache repository (`composed`: the composed image's) holds `digest`."""

    def push_record(self, slot: Slot, manifest: bytes, config: bytes, staged: StagedSlice,
                    *, lost: bool) -> None:
        """The slice's one-layer record image under its cache tag, its blob uploaded (`lost`:
        even when the tag already names this very manifest, whose blob is gone)."""

    def gather(self, composition: Composition) -> None:
        """Bring what the composed image names into its repository, short of its manifest."""

    def push_composed(self, composition: Composition) -> str:
        """The composed manifest under its tag -> `repository@digest`."""


def read_base(registry: Registry, reference: str) -> BaseDocuments:
    """env-base's manifest and config, by tag or digest in the cache repository."""
    manifest = registry.manifest(reference)
    media_type = manifest.get("mediaType")
    if media_type not in MEDIA_TYPES:
        raise ComposeError(f"env-base's manifest is {media_type}, not a Docker or OCI image "
                           "manifest")
    config = registry.blob_json(manifest_blobs(dict(manifest))[0])
    if config is None:
        raise ComposeError(f"the registry no longer holds env-base's config ({reference})")
    return BaseDocuments(manifest=manifest, config=config)


def _cached(registry: Registry, slot: Slot) -> tuple[Record | None, str]:
    """The record under the slot's tag, trusted only when every blob it names is there (a
    cleanup of the cache repository, or of the registry, can keep a tag and lose a blob):
    (the record, ""); (None, the first blob gone); (None, "") when there is no record."""
    if registry.lookup(slot.tag) is None:
        return None, ""
    manifest = registry.manifest(slot.tag)
    config_digest, *layers = manifest_blobs(dict(manifest))
    config = registry.blob_json(config_digest)
    if config is None:
        return None, config_digest
    record = record_of_image(slot.name, manifest, config)
    lost = next((d for d in layers if not registry.has_blob(d)), "")
    return (None, lost) if lost else (record, "")


def _record_documents(slot: Slot, blob: Blob, base: BaseDocuments) -> tuple[bytes, bytes]:
    """The slice's record image (manifest, config): its history entry names its cache tag."""
    return slice_image(blob, created_by=recorded_history(slot.created_by, slot.tag),
                       media_type=base.media_type, platform=platform_of(dict(base.config)))


def compose_env(registry: Registry, *, base: BaseDocuments, wanted: Sequence[Slot],
                stage: Callable[[Slot], StagedSlice],
                report: Callable[[Outcome], None] = lambda _: None,
                workers: int = WORKERS) -> Composed:
    """Reuse each slice whose record (and its blobs) is there, `stage` and record the others,
    `workers` at a time, compose them onto `base` and push the image once every layer it
    names is in its repository. `report` hears each outcome as it is known. A run stopped at
    any step leaves only complete records (a record's manifest is written after its blobs),
    which the next run reuses; a slice that fails stops the composition after the others
    are recorded (SliceFailures)."""
    found: dict[str, Record] = {}
    outcomes: dict[str, Outcome] = {}
    failures: dict[str, BaseException] = {}
    rewritten: set[str] = set()

    def write(slot: Slot, lost: bool) -> tuple[Record, StagedSlice]:
        staged = stage(slot)
        try:
            manifest, config = _record_documents(slot, staged.blob, base)
            registry.push_record(slot, manifest, config, staged, lost=lost)
        finally:
            staged.path.unlink(missing_ok=True)
        return record_of_image(slot.name, json.loads(manifest), json.loads(config)), staged

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        jobs = {}
        for slot in wanted:
            record, lost = _cached(registry, slot)
            if record is not None:
                found[slot.name] = record
                outcomes[slot.name] = Outcome(name=slot.name, tag=slot.tag, state="cached",
                                              blob=_blob(record))
                report(outcomes[slot.name])
                continue
            if lost:
                rewritten.add(slot.name)
                report(Outcome(name=slot.name, tag=slot.tag, state="lost",
                               blob=Blob(digest=lost, diff_id="", size=0)))
            jobs[pool.submit(write, slot, bool(lost))] = slot
        for job in concurrent.futures.as_completed(jobs):
            slot = jobs[job]
            try:
                record, staged = job.result()
            except Exception as exc:  # each slice's own failure: the others go on
                failures[slot.name] = exc
                continue
            found[slot.name] = record
            outcomes[slot.name] = Outcome(name=slot.name, tag=slot.tag, state="written",
                                          blob=staged.blob, seconds=staged.seconds,
                                          rewritten=slot.name in rewritten)
            report(outcomes[slot.name])
    if failures:
        raise SliceFailures({s.name: failures[s.name] for s in wanted if s.name in failures})
    composition = compose(base.manifest, base.config, [found[s.name] for s in wanted])
    registry.gather(composition)
    check_layers(registry, composition,
                 {str(found[s.name].layer["digest"]): f"slice {s.name}" for s in wanted})
    reference = registry.push_composed(composition)
    return Composed(tag=composition.tag, reference=reference,
                    slices=tuple(outcomes[s.name] for s in wanted))


def check_layers(registry: Registry, composition: Composition, names: Mapping[str, str]) -> None:
    """Every layer the composed manifest names is in its repository, before the manifest is
    written: a registry that does not check would take a manifest no node can pull (and
    crane skips every layer when the tag already names the manifest). `names` says which
    slice a layer digest is."""
    missing = [names.get(d, f"layer {i} ({d[:19]})")
               for i, d in enumerate(composition.layers) if not registry.has_blob(d, composed=True)]
    if missing:
        raise BlobsMissing(f"the composed environment names blobs {registry.composed_repository} "
                           f"does not hold: {', '.join(missing)}; its manifest is not written")


def _blob(record: Record) -> Blob:
    return Blob(digest=str(record.layer["digest"]), diff_id=record.diff_id,
                size=int(record.layer["size"]))
