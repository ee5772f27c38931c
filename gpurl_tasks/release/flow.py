"""The verify-then-pin flow behind `invoke verify-layers` and `invoke pin`.

Glue only: it turns the config into a reference, a registry client and rules, asks the
registry for the image, applies the pure checks in verify.py and prepares the launcher edit
in pin.py (or, with launcher.table, in launcher/table.py). The tasks print and exit; nothing
here does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpurl_tasks import git
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.generate import check_launcher, fitted_plan
from gpurl_tasks.dockerfile.provenance import LABEL_PLAN_FINGERPRINT
from gpurl_tasks.errors import CheckFailed, ExitCode, GpurlError, PinError, RegistryError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.imageref import ImageRef, parse_reference
from gpurl_tasks.launcher.table import EntryPin, TableShape, check_entries, pin_entries
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import ImageIndex, PulledImage, parse_manifest, same_platform
from gpurl_tasks.oci.registry import ManifestUnknown, RegistryClient
from gpurl_tasks.oci.tags import is_index_tag
from gpurl_tasks.plan.model import Plan
from gpurl_tasks.release.attested import attestation_findings
from gpurl_tasks.release.configured import (
    cache_repository,
    client_settings,
    index_prefix,
    index_reference,
    resolve_reference,
)
from gpurl_tasks.release.gpu import GPU_CODES, gpu_findings
from gpurl_tasks.release.index import (
    Member,
    check_listed,
    compose_index,
    index_comment,
    index_group,
    platform_config,
)
from gpurl_tasks.release.pin import (
    Provenance,
    check_immutable,
    pinned_value,
    provenance_comment,
    rewrite_assignment,
    unified_diff,
)
from gpurl_tasks.release.verify import Record, Report, Rules, check_layers, layer_instructions, report_json
from gpurl_tasks.values import source_commit
from gpurl_tasks.writer.records import record_of

__all__ = [
    "IndexPinOutcome",
    "IndexReport",
    "PinChange",
    "TablePinOutcome",
    "apply_pin",
    "check_pinnable",
    "load_plan",
    "missing_blobs",
    "pin_each",
    "pin_index",
    "pin_reference",
    "pin_table",
    "prepare_pin",
    "prepare_pins",
    "read_records",
    "rules_for",
    "shown_path",
    "table_pin",
    "table_tag",
    "verified_image",
    "verify_image",
    "verify_reference",
    "verify_task",
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
                 plan_loader: PlanLoader = load_plan,
                 image: PulledImage | None = None) -> tuple[PulledImage, Report]:
    """Pull the image's manifest and config (of an index: the entry of the variant's
    platform; `image`: already pulled), HEAD every blob it names, and apply the layer rules."""
    image = image or client.pull(ref, platform=config.target.platform)
    plan, note = (None, None)
    if image.labels.get(LABEL_PLAN_FINGERPRINT):
        plan, note = plan_loader(config)
    records, records_note = read_records(config, image, client)
    hand_written = ("" if config.build.generate
                    else config.build.dockerfile.relative_to(config.root).as_posix())
    report = check_layers(image, rules_for(config), plan, plan_note=note, records=records,
                          records_note=records_note, missing=missing_blobs(image, client),
                          hand_written=hand_written)
    findings, notes = attestation_findings(config, image, client)
    gpu, gpu_notes = gpu_findings(config, image, client)
    findings, notes = [*findings, *gpu], [*notes, *gpu_notes]
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

    def said(self, *, dry_run: bool, written: bool) -> str | None:
        """What a dry run prints (the diff) or a pin that wrote nothing; None once written."""
        if dry_run:
            return self.diff.rstrip("\n") or f"{self.path}: already pinned to {self.value}"
        return None if written else f"{self.path} already pins {self.value}; nothing to do"


def prepare_pin(config: Config, image: PulledImage, report: Report, *, force: bool,
                today: dt.date) -> PinChange:
    """Check the reference and rules, and compute the new launcher text (nothing written)."""
    return prepare_pins(((config, image, report),), force=force, today=today)


def prepare_pins(pinned: Sequence[tuple[Config, PulledImage, Report]], *, force: bool,
                 today: dt.date, entries: Sequence[EntryPin] = ()) -> PinChange:
    """Check each image, and compute the one launcher edit that pins them: the entries of an
    image table (launcher.table; `entries`, each image's `table_pin`, where the caller has
    them), else the one image's variable (nothing written)."""
    for config, image, report in pinned:
        check_pinnable(config, image, report, force=force)
    first = pinned[0][0]
    old = read_launcher(first)
    values = [pinned_value(image.ref, image.manifest_digest) for _, image, _ in pinned]
    if first.launcher.table:
        new = pin_entries(old, TableShape.of(first.launcher),
                          list(entries) or [table_pin(config, image)
                                            for config, image, _ in pinned],
                          where=str(shown_path(first)))
    else:
        (config, image, report), = pinned  # one variable holds one image (an index: pin_index)
        new = rewrite_pin(config, old, config.launcher.variable, values[0],
                          image_comment(image, report, today))
    return launcher_change(first, old, new, ", ".join(values))


def check_pinnable(config: Config, image: PulledImage, report: Report, *, force: bool) -> None:
    """Raise unless `image` may be pinned for `config`'s variant: an immutable reference, an
    image of the variant's platform, and the rules held (or `force`)."""
    check_immutable(image.ref, config.registry)
    if image.platform and not same_platform(image.platform, config.target.platform):
        raise CheckFailed(f"refusing to pin {image.ref} for variant {config.variant.name}: its "
                          f"config says {image.platform}, the variant's target is "
                          f"{config.target.platform}",
                          hint=f"pin the {config.target.platform} image, or rebuild it for its "
                               f"target on cluster {config.cluster.name}")
    refuse_failing(image.ref, report, force=force)


def table_pin(config: Config, image: PulledImage) -> EntryPin:
    """What the variant's table entry records of `image`: its manifest digest, its immutable
    tag, and the commit that tag names (in full where this clone has it: the table's commits
    are 40 hex digits, and `git fetch` takes no abbreviation)."""
    tag = table_tag(config, image.ref)
    commit = source_commit(tag[len(config.registry.tag_prefix) + 1:]) or ""
    with contextlib.suppress(GpurlError):  # a commit this clone lacks: as the tag spells it
        commit = git.resolve_commit(git.toplevel(config.root), commit)
    return EntryPin(key=config.variant.table_key, digest=image.manifest_digest, tag=tag,
                    commit=commit)


def table_tag(config: Config, ref: ImageRef) -> str:
    """`ref`'s immutable tag, which a table entry records with the commit it names (a
    reference by digest alone has none)."""
    tag, prefix = ref.tag or "", config.registry.tag_prefix
    if not config.registry.is_immutable_tag(tag):
        raise PinError(f"refusing to pin {ref} into {config.launcher.table}: an entry records "
                       f"the image's immutable {prefix}-<gitsha> tag and its commit",
                       hint=f"pin by the tag the build pushed (--ref "
                            f"{config.registry.image}:{prefix}-<gitsha>)")
    return tag


def shown_path(config: Config) -> Path:
    """The launcher's path as messages and diffs show it: relative to the repository root."""
    path = config.launcher.path
    return path.relative_to(config.root) if path.is_relative_to(config.root) else path


def refuse_failing(ref: ImageRef, report: Report, *, force: bool) -> None:
    """Raise unless `report` may be pinned: never with a missing blob, else only with `force`
    when a rule fails."""
    missing = [f.message for f in report.findings if f.code == "missing-blob"]
    if missing:  # no --force: a node could never pull what the pin names
        raise CheckFailed(f"refusing to pin {ref}: {'; '.join(missing)}",
                          hint="rebuild the image (invoke build); --force does not pin an "
                               "image whose blobs are missing")
    if not report.ok and not force:
        failing = [f for f in report.findings if f.failing]
        if all(f.code in GPU_CODES for f in failing):  # its message says what to run
            raise CheckFailed(f"refusing to pin {ref}: {'; '.join(f.message for f in failing)}",
                              hint="--force pins it anyway")
        raise CheckFailed(f"refusing to pin {ref}: it fails the layer rules: "
                          f"{'; '.join(f.message for f in failing)}",
                          hint="fix the build, or pass --force to pin it anyway")


def read_launcher(config: Config) -> str:
    """The launcher's text, once its python variable is known to be in the image's venv."""
    old = read_text(config.launcher.path, what="launcher file", error=PinError,
                    missing_hint="set launcher.path in the config or pass --launcher")
    try:
        check_launcher(config, old)
    except GpurlError as exc:
        raise PinError(f"refusing to pin: {exc.message}", hint=exc.hint) from None
    return old


def image_comment(image: PulledImage, report: Report, today: dt.date) -> str:
    """The provenance comment above one image's pin."""
    largest = report.largest
    return provenance_comment(Provenance(
        tag=image.ref.tag, layer_count=len(report.rows), total_bytes=report.total,
        largest_bytes=largest.size if largest else 0, date=today,
        platform=image.platform or "linux/amd64"))


def rewrite_pin(config: Config, text: str, variable: str, value: str, comment: str) -> str:
    path = config.launcher.path
    return rewrite_assignment(text, variable, value, comment, where=str(path),
                              line_length=line_length_for(path, config.root))


def launcher_change(config: Config, old: str, new: str, value: str) -> PinChange:
    return PinChange(path=config.launcher.path, value=value, old=old, new=new,
                     diff=unified_diff(old, new, str(shown_path(config))))


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
    """The report for `text` (default: this commit's tag); of an index, its entry for the
    variant's platform."""
    ref = resolve_reference(config, text)
    with open_client(client_settings(config), ref, env) as client:
        return verify_image(config, ref, client)[1]


def verify_task(config: Config, text: str | None, *,
                env: Mapping[str, str] | None = None) -> Report | IndexReport:
    """`invoke verify-layers`: the report for `text` (default: this commit's tag); an image
    index is checked platform by platform, each under the rules of its platform's variant."""
    ref = resolve_reference(config, text)
    with open_client(client_settings(config), ref, env) as client:
        images = client.pull_each(ref)
        if not images[0].is_index:
            return verify_image(config, ref, client, image=images[0])[1]
        reports = tuple((platform_config(config, image.platform), image) for image in images)
        return IndexReport(reference=str(ref), digest=images[0].top_digest, reports=tuple(
            (each.variant.name if each is not None else None,
             verify_image(each or config, ref, client, image=image)[1])
            for each, image in reports))


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IndexReport:
    """verify-layers of an image index: each platform's report, with its variant (None: no
    variant of the profile builds that platform, the given profile's rules applied)."""

    reference: str
    digest: str
    reports: tuple[tuple[str | None, Report], ...]

    @property
    def ok(self) -> bool:
        return all(r.ok for _, r in self.reports)

    @property
    def exit_code(self) -> int:
        return ExitCode.OK if self.ok else ExitCode.CHECK_FAILED

    @property
    def failure(self) -> str | None:
        failed = [f"{r.platform or '?'}" for _, r in self.reports if not r.ok]
        return None if self.ok else (f"verify-layers: {self.reference} fails the layer rules "
                                     f"for {', '.join(failed)}")

    def human(self) -> str:
        lines = [f"index    {self.reference} {self.digest}: "
                 + ", ".join(f"{r.platform or '?'} ({variant or 'no variant'})"
                             for variant, r in self.reports)]
        for variant, report in self.reports:
            lines += ["", f"== {report.platform or '?'} (variant {variant or 'none'}) ==",
                      report.human()]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"reference": self.reference, "index_digest": self.digest, "ok": self.ok,
                "platforms": {r.platform or "?": {"variant": variant, **report_json(r)}
                              for variant, r in self.reports}}


def pin_reference(config: Config, text: str | None, *, force: bool, today: dt.date,
                  env: Mapping[str, str] | None = None) -> tuple[Report, PinChange]:
    """`invoke pin`: refuse floating tags before any network, verify, prepare the edit."""
    image, report = verified_image(config, text, env=env)
    return report, prepare_pin(config, image, report, force=force, today=today)


def verified_image(config: Config, text: str | None, *, env: Mapping[str, str] | None = None
                   ) -> tuple[PulledImage, Report]:
    """The image `text` names (default: this commit's tag) and its report; a floating tag is
    refused before any network."""
    ref = resolve_reference(config, text)
    check_immutable(ref, config.registry)
    with open_client(client_settings(config), ref, env) as client:
        return verify_image(config, ref, client)


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
        return (change.said(dry_run=self.dry_run, written=self.written)
                or f"pinned {change.value} in {change.path}")

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


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class IndexPinOutcome:
    """`invoke pin` of an image index: its members and their reports, whether it was put now,
    and the one launcher edit (the shared variable and each platform variable)."""

    reference: str  # REGISTRY/REPO:TAG of the index (or @digest when given so)
    digest: str
    members: tuple[Member, ...]
    reports: tuple[Report, ...]
    state: str  # "composed" (put now) | "found" (the registry held it) | "not put (dry run)"
    change: PinChange
    pins: tuple[tuple[str, str], ...]  # (variable, value) in the order written
    written: bool
    dry_run: bool
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        lines = [f"index {self.reference} {self.digest} ({self.state}):"]
        lines += [f"  {m.entry_platform:<14} {m.variant} {m.image.manifest_digest} "
                  f"({len(r.rows)} layers, {'OK' if r.ok else 'FAILS the layer rules'})"
                  for m, r in zip(self.members, self.reports, strict=True)]
        change = self.change
        if self.dry_run:
            lines.append(change.diff.rstrip("\n") or f"{change.path}: already pinned")
        elif self.written:
            lines += [f"pinned {value} in {change.path} ({variable})" for variable, value in self.pins]
        else:
            lines.append(f"{change.path} already pins {self.digest}; nothing to do")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"index": {"reference": self.reference, "digest": self.digest, "state": self.state,
                          "manifests": [{"variant": m.variant, "platform": m.entry_platform,
                                         "cluster": m.cluster, **m.descriptor.to_json()}
                                        for m in self.members]},
                "value": self.change.value, "path": str(self.change.path),
                "pins": dict(self.pins), "changed": self.change.changed,
                "written": self.written, "dry_run": self.dry_run, "diff": self.change.diff,
                "reports": {m.variant: report_json(r)
                            for m, r in zip(self.members, self.reports, strict=True)}}


def _missing_member(configs: tuple[Config, ...], config: Config, ref: ImageRef,
                    where: str = "the registry") -> PinError:
    """The one line refusing an index pin when one platform's image is not pushed (or not in
    the index given)."""
    names = ", ".join(c.variant.name for c in configs)
    others = [c for c in configs if c.launcher.platform_variable and c is not config]
    alone = "; or pin " + " and ".join(
        f"{c.variant.name}'s own {c.launcher.platform_variable} alone (invoke pin -p "
        f"{c.profile} --variant {c.variant.name})" for c in others) if others else ""
    return PinError(
        f"refusing to pin {config.launcher.variable} (the image index of {names}): variant "
        f"{config.variant.name}'s {config.target.platform} image {ref} is not in {where} "
        f"(it is built on cluster {config.cluster.name})",
        hint=f"build it (invoke build -p {config.profile} --variant {config.variant.name}, "
             f"on {config.cluster.name}){alone}")


def _index_members(configs: tuple[Config, ...], client: RegistryClient, index_ref: ImageRef,
                   given: bool) -> list[tuple[Config, ImageRef]]:
    """Each variant's config and the reference of its image: its tag at this commit, or (an
    index `given` by --ref) the entry of its platform in that index."""
    if not given:
        found = []
        for config in configs:
            ref = resolve_reference(config, None)
            if client.lookup(ref) is None:
                raise _missing_member(configs, config, ref)
            found.append((config, ref))
        return found
    digest, index = client.read_index(index_ref)
    out = []
    for config in configs:
        entries = [e for e in index.manifests
                   if same_platform(e.platform or "", config.target.platform)]
        if not entries:
            raise _missing_member(configs, config, index_ref, f"the index ({digest[:19]})")
        out.append((config, index_ref.with_digest(entries[0].digest)))
    extra = [e.platform or "?" for e in index.manifests
             if not any(same_platform(e.platform or "", c.target.platform) for c in configs)]
    if extra:
        raise CheckFailed(f"refusing to pin the index {index_ref} ({digest[:19]}): it lists "
                          f"{', '.join(extra)}, which no variant of {configs[0].launcher.variable} "
                          "builds, so nobody verified it",
                          hint="pin the index gpurl composes (invoke pin without --ref)")
    return out


def pin_index(configs: tuple[Config, ...], text: str | None, *, force: bool, dry_run: bool,
              today: dt.date, env: Mapping[str, str] | None = None) -> IndexPinOutcome:
    """Verify each platform's image (built at this commit, or the entries of the index `text`
    names), compose their index at the registry (or find it there), read it back and check it
    lists exactly those manifests, then pin its digest into the shared variable and each
    image's own digest into its platform variable: one atomic launcher write."""
    first = configs[0]
    if len({c.launcher.path for c in configs}) != 1:
        raise PinError(f"the variants of {first.launcher.variable} name different launcher files",
                       hint="one launcher.path for the variants of an image index")
    index_ref = parse_reference(text or index_reference(first), default_host=first.registry.host)
    members: list[Member] = []
    reports: list[Report] = []
    with open_client(client_settings(first), index_ref, env) as client:
        for config, ref in _index_members(configs, client, index_ref, given=text is not None):
            image, report = verify_image(config, ref, client)
            refuse_failing(ref, report, force=force)
            members.append(Member(variant=config.variant.name, cluster=config.cluster.name,
                                  platform=config.target.platform, image=image))
            reports.append(report)
        index = compose_index(members)  # refuses an image of another platform than its target
        digest, state = _put_or_find(client, index_ref, index, members, given=text is not None,
                                     force=force, dry_run=dry_run)
    pins = [(first.launcher.variable, pinned_value(index_ref, digest))]
    comments = [index_comment(index_ref.tag, members, [(len(r.rows), r.total) for r in reports],
                              today)]
    for config, member, report in zip(configs, members, reports, strict=True):
        if config.launcher.platform_variable:
            pins.append((config.launcher.platform_variable,
                         pinned_value(member.image.ref, member.image.manifest_digest)))
            comments.append(image_comment(member.image, report, today))
    old = new = read_launcher(first)
    for (variable, value), comment in zip(pins, comments, strict=True):
        new = rewrite_pin(first, new, variable, value, comment)
    change = launcher_change(first, old, new, pins[0][1])
    written = False if dry_run else apply_pin(change)
    return IndexPinOutcome(reference=str(index_ref), digest=digest, members=tuple(members),
                           reports=tuple(reports), state=state, change=change, pins=tuple(pins),
                           written=written, dry_run=dry_run)


def _put_or_find(client: RegistryClient, index_ref: ImageRef, index: ImageIndex,
                 members: list[Member], *, given: bool, force: bool, dry_run: bool
                 ) -> tuple[str, str]:
    """(digest, state) of the index the pin names, read back through the registry API and
    checked to list exactly the verified manifests. Its tag is immutable: one holding another
    index that does not list them is refused (--force replaces it)."""
    composed = "sha256:" + hashlib.sha256(index.to_bytes()).hexdigest()
    held = client.resolve(index_ref) if given else client.lookup(index_ref)
    state = "found"
    if held is not None and held != composed:
        _, other = client.read_index(index_ref.with_digest(held))
        try:
            check_listed(f"{index_ref} ({held[:19]})", other, members)
        except CheckFailed:
            if given or not force:
                raise
            held = None  # --force: the tag moves to the index of these images
        else:
            composed = held  # the same images, other bytes (another tool composed it)
    if held is None:
        if dry_run:
            return composed, "not put (dry run)"
        put = client.put_index(index_ref, index_ref.tag or "", index)
        if put != composed:
            raise RegistryError(f"the registry stored the index as {put}, not {composed}",
                                hint="the registry rewrote the index: "
                                     "use one that stores manifests as pushed")
        state = "composed"
    digest, back = client.read_index(index_ref.with_digest(composed))
    check_listed(f"{index_ref} ({digest[:19]})", back, members)
    return digest, state


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class TablePinOutcome:
    """`invoke pin` into an image table: each variant's entry and report, and the one edit."""

    change: PinChange
    entries: tuple[tuple[str, EntryPin, Report], ...]  # (variant, its entry's values, report)
    written: bool
    dry_run: bool
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        change = self.change
        return change.said(dry_run=self.dry_run, written=self.written) or "\n".join(
            f"pinned {pin.key} in {change.path}: {pin.tag} {pin.digest} (variant {variant}, "
            f"commit {pin.commit[:12]})" for variant, pin, _ in self.entries)

    def to_json(self) -> dict[str, Any]:
        change = self.change
        return {"value": change.value, "path": str(change.path), "changed": change.changed,
                "written": self.written, "dry_run": self.dry_run, "diff": change.diff,
                "entries": {variant: {"key": pin.key, "digest": pin.digest, "tag": pin.tag,
                                      "source_commit": pin.commit}
                            for variant, pin, _ in self.entries},
                "reports": {variant: report_json(r) for variant, _, r in self.entries}}


def pin_table(configs: Sequence[Config], text: str | None, *, force: bool, dry_run: bool,
              warn: Callable[[str], None], today: dt.date) -> TablePinOutcome:
    """Verify each variant's image and pin them all into their table entries in one atomic
    write: entries sharing a commit variable, all pinned to one commit, move it once."""
    first = configs[0]  # bad input is named before any image is fetched
    check_entries(read_launcher(first), TableShape.of(first.launcher),
                  [c.variant.table_key for c in configs], where=str(shown_path(first)))
    for config in configs:
        check_immutable(ref := resolve_reference(config, text), config.registry)
        table_tag(config, ref)
    pinned = [(config, *verified_image(config, text)) for config in configs]
    entries = [table_pin(config, image) for config, image, _ in pinned]  # git asked once each
    change = prepare_pins(pinned, force=force, today=today, entries=entries)
    for _, _, report in pinned:
        if not report.ok:
            warn(f"warning: pinning {report.reference} despite failing rules (--force)")
    written = False if dry_run else apply_pin(change)
    return TablePinOutcome(change=change, written=written, dry_run=dry_run, entries=tuple(
        (config.variant.name, entry, report)
        for (config, _, report), entry in zip(pinned, entries, strict=True)))


def pin_each(configs: tuple[Config, ...], text: str | None, *, force: bool, dry_run: bool,
             warn: Callable[[str], None], today: dt.date | None = None
             ) -> tuple[tuple[str, PinOutcome | IndexPinOutcome | TablePinOutcome], ...]:
    """`invoke pin` over the chosen variants: all into their entries of an image table
    (launcher.table) in one edit; else each to its own variable, and the variants of
    different platforms sharing one (an image index, release/index.py) together. One of them
    chosen alone (--variant, or --ref of its own image) pins only its platform variable."""
    today = today or dt.datetime.now(dt.UTC).date()
    if configs[0].launcher.table:
        return (("+".join(c.variant.name for c in configs),
                 pin_table(configs, text, force=force, dry_run=dry_run, warn=warn, today=today)),)
    chosen = {c.variant.name for c in configs}
    out: list[tuple[str, PinOutcome | IndexPinOutcome | TablePinOutcome]] = []
    done: set[str] = set()
    for config in configs:
        if config.variant.name in done:
            continue
        group = index_group(config.variants, config.variant)
        if len(group) == 1:
            out.append((config.variant.name, pin_task(config, text, force=force, dry_run=dry_run,
                                                      warn=warn, today=today)))
            continue
        names = [v.name for v in group]
        tag = parse_reference(text, default_host=config.registry.host).tag if text else None
        if (text is None and chosen >= set(names)) or (tag and is_index_tag(index_prefix(config), tag)):
            outcome = pin_index(tuple(config.for_variant(v) for v in group), text, force=force,
                                dry_run=dry_run, today=today)
            bad = [r.reference for r in outcome.reports if not r.ok]
            if bad:
                warn(f"warning: pinning {', '.join(bad)} despite failing rules (--force)")
            out.append(("+".join(names), outcome))
            done |= set(names)
            continue
        own = config.launcher.platform_variable
        if not own:
            raise PinError(
                f"{config.launcher.variable} is the image index of variants {', '.join(names)}: "
                f"{config.variant.name}'s {config.target.platform} image alone there would "
                "reach every platform's nodes",
                hint=f"pin them together (invoke pin -p {config.profile} without --variant), or "
                     f"set platform-variable for variant {config.variant.name} to pin its own image")
        alone = config.with_variant_settings(
            launcher=dataclasses.replace(config.launcher, variable=own))
        out.append((config.variant.name, pin_task(alone, text, force=force, dry_run=dry_run,
                                                  warn=warn, today=today)))
    return tuple(out)
