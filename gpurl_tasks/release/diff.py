"""`invoke diff REF1 REF2`: what changed between two pushed images, and what a node pulls.

Both images are read through the registry API (`oci.registry`: manifest, config, history,
labels). Layers are compared by digest: the bytes a node holding REF1 must pull for REF2 are
the sizes of REF2's layers whose digest REF1 lacks. Slice layers are the RUNs that install
`/tmp/gpurl-layers/<label>.txt` (the history maps layers to instructions). Packages come from
the locks the images were built from: the org.gpurl.git-sha label names the commit, and the
lock at that commit (read from the local git repository, checked against the
org.gpurl.lock-sha256 label) gives each image's install closure. Where the metadata is missing
(an image gpurl did not build, a commit this clone lacks) the diff says so and shows layers
and bytes only; it never invents a package list. Of an image index (the multiarch profile's
one pin, release/index.py), each platform's images are compared, matched by platform.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from gpurl_tasks import git
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.provenance import LABEL_GIT_SHA, LABEL_LOCK_HASH
from gpurl_tasks.errors import ExitCode, GpurlError, RegistryError
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.oci.connect import open_client
from gpurl_tasks.oci.image import PulledImage, same_platform
from gpurl_tasks.rebuild.inputs import closure_entries
from gpurl_tasks.release.attested import read_attestations
from gpurl_tasks.release.configured import client_settings
from gpurl_tasks.release.index import platform_config
from gpurl_tasks.release.verify import layer_instructions
from gpurl_tasks.values import format_bytes
from gpurl_tasks.writer.records import slice_of

__all__ = ["ImageDiff", "LayerChange", "PackageChange", "PlatformDiffs", "diff_images", "diff_task",
           "package_changes", "sbom_packages", "slice_layers"]



@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class LayerChange:
    """A layer of REF2 that REF1 lacks."""

    digest: str
    size: int
    instruction: str | None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PackageChange:
    name: str
    before: str | None  # None: added
    after: str | None  # None: removed

    def text(self) -> str:
        if self.before is None:
            return f"+ {self.name} {self.after}"
        if self.after is None:
            return f"- {self.name} {self.before}"
        if self.before == self.after:
            return f"~ {self.name} {self.after} (another artifact)"
        return f"~ {self.name} {self.before} -> {self.after}"


def slice_layers(image: PulledImage) -> dict[str, str]:
    """{slice label: layer digest} of the RUNs that install a slice file (none when the
    history does not map onto the layers)."""
    instructions, _ = layer_instructions(image)
    found = {}
    for layer, text in zip(image.layers, instructions, strict=True):
        entry = slice_of(text)
        if entry is not None:
            found[entry.stem] = layer.digest
    return found


def package_changes(before: Mapping[str, tuple[str | None, str | None]],
                    after: Mapping[str, tuple[str | None, str | None]]
                    ) -> tuple[PackageChange, ...]:
    """Added, removed and changed packages between two closures {name: (version, artifact)}."""
    out = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        out.append(PackageChange(name=name, before=old[0] or "?" if old else None,
                                 after=new[0] or "?" if new else None))
    return tuple(out)


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageDiff:
    """REF1 -> REF2: layers by digest, slices by label, packages when the locks are known."""

    before: PulledImage
    after: PulledImage
    new_layers: tuple[LayerChange, ...]
    shared_bytes: int
    gone_layers: int
    slices: dict[str, tuple[str, ...]]  # shared | changed | added | removed -> labels
    packages: tuple[PackageChange, ...] | None  # None: unavailable (see notes)
    notes: tuple[str, ...]
    exit_code: int = ExitCode.OK

    @property
    def pull_bytes(self) -> int:
        """What a node holding REF1 downloads for REF2: REF2's layers REF1 lacks."""
        return sum(layer.size for layer in self.new_layers)

    @property
    def largest_new(self) -> LayerChange | None:
        return max(self.new_layers, key=lambda layer: layer.size, default=None)

    def human(self) -> str:
        a, b = self.before, self.after
        shared = len(b.layers) - len(self.new_layers)
        lines = [f"{a.ref} ({a.manifest_digest[:19]}, {len(a.layers)} layers)",
                 f"  -> {b.ref} ({b.manifest_digest[:19]}, {len(b.layers)} layers)",
                 f"layers: {shared} shared ({format_bytes(self.shared_bytes)}), "
                 f"{len(self.new_layers)} new, {self.gone_layers} no longer used",
                 f"a node holding the first pulls {self.pull_bytes:,} bytes "
                 f"({format_bytes(self.pull_bytes)}) for the second"]
        big = self.largest_new
        if big is not None:
            lines.append(f"largest new layer: {format_bytes(big.size)} {big.digest[:19]} "
                         f"{(big.instruction or '(instruction unknown)')[:90]}")
        if any(self.slices.values()):
            lines.append("slices: " + ", ".join(
                f"{len(self.slices[k])} {k}" for k in ("shared", "changed", "added", "removed")))
            lines += [f"  {kind} {label}" for kind in ("changed", "added", "removed")
                      for label in self.slices[kind]]
        if self.packages is not None:
            lines.append(f"packages: {len(self.packages)} changed" if self.packages
                         else "packages: none changed")
            lines += [f"  {change.text()}" for change in self.packages]
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        big = self.largest_new
        return {
            "before": {"ref": str(self.before.ref), "digest": self.before.manifest_digest,
                       "layers": len(self.before.layers)},
            "after": {"ref": str(self.after.ref), "digest": self.after.manifest_digest,
                      "layers": len(self.after.layers)},
            "pull_bytes": self.pull_bytes, "shared_bytes": self.shared_bytes,
            "new_layers": [dataclasses.asdict(layer) for layer in self.new_layers],
            "gone_layers": self.gone_layers,
            "largest_new_layer": dataclasses.asdict(big) if big else None,
            "slices": {k: list(v) for k, v in self.slices.items()},
            "packages": None if self.packages is None else [
                {"name": c.name, "before": c.before, "after": c.after} for c in self.packages],
            "notes": list(self.notes),
        }


def diff_images(before: PulledImage, after: PulledImage,
                packages: tuple[PackageChange, ...] | None, notes: tuple[str, ...] = ()
                ) -> ImageDiff:
    """Compare two pulled images (pure); `packages` from `_packages` or None."""
    held = {layer.digest for layer in before.layers}
    instructions, history_note = layer_instructions(after)
    new: dict[str, LayerChange] = {}
    for layer, text in zip(after.layers, instructions, strict=True):
        if layer.digest not in held and layer.digest not in new:
            new[layer.digest] = LayerChange(digest=layer.digest, size=layer.size, instruction=text)
    wanted = {layer.digest for layer in after.layers}
    shared_bytes = sum({layer.digest: layer.size for layer in after.layers
                        if layer.digest in held}.values())
    gone = len({layer.digest for layer in before.layers} - wanted)
    old, cur = slice_layers(before), slice_layers(after)
    slices = {"shared": tuple(sorted(k for k in cur if old.get(k) == cur[k])),
              "changed": tuple(sorted(k for k in cur if k in old and old[k] != cur[k])),
              "added": tuple(sorted(set(cur) - set(old))),
              "removed": tuple(sorted(set(old) - set(cur)))}
    extra = list(notes)
    if history_note:
        extra.append(f"{after.ref}: {history_note}")
    if not cur and not old:
        extra.append("no slice layers (no RUN installs a /tmp/gpurl-layers file): layers and "
                     "bytes only")
    return ImageDiff(before=before, after=after, new_layers=tuple(new.values()),
                     shared_bytes=shared_bytes, gone_layers=gone, slices=slices,
                     packages=packages, notes=tuple(extra))


def _closure(config: Config, image: PulledImage
             ) -> tuple[dict[str, tuple[str | None, str | None]] | None, str | None]:
    """The image's install closure from the lock at its recorded commit, or a note why not."""
    sha = image.labels.get(LABEL_GIT_SHA, "").split("-dirty-", 1)[0]
    if not sha:
        return None, f"{image.ref} has no {LABEL_GIT_SHA} label (not built by gpurl?)"
    if not config.lock.is_relative_to(config.root):
        return None, f"the lock {config.lock} is outside the repository"
    path = config.lock.relative_to(config.root).as_posix()
    try:
        text = git.show_file(config.root, sha, path)
    except GpurlError as exc:
        return None, f"cannot read {path} at {sha}: {exc.message}"
    if text is None:
        return None, f"{path} at {sha} is not in this clone (git fetch it)"
    recorded = image.labels.get(LABEL_LOCK_HASH)
    if recorded and hashlib.sha256(text.encode()).hexdigest() != recorded:
        return None, (f"{path} at {sha} does not hash to {image.ref}'s {LABEL_LOCK_HASH} "
                      "label (the image was built from an uncommitted lock)")
    try:
        entries = closure_entries(text, config.target, config.python)
    except GpurlError as exc:
        return None, f"cannot read {path} at {sha}: {exc.message}"
    return {name: (version, artifact) for name, version, artifact in entries}, None


def _packages(config: Config, before: PulledImage, after: PulledImage
              ) -> tuple[tuple[PackageChange, ...] | None, tuple[str, ...]]:
    locks = (before.labels.get(LABEL_LOCK_HASH), after.labels.get(LABEL_LOCK_HASH))
    if locks[0] and locks[0] == locks[1]:
        return (), (f"both images record the same lock ({locks[0][:12]}): no package changed",)
    old, why_old = _closure(config, before)
    new, why_new = _closure(config, after)
    if old is None or new is None:
        return None, (f"package diff unavailable: {why_old or why_new}",)
    return package_changes(old, new), ()


def sbom_packages(sbom: Mapping[str, Any]) -> dict[str, tuple[str | None, str | None]]:
    """name -> (version, hash) of every component an SBOM lists (apt ones as `NAME (apt)`)."""
    out: dict[str, tuple[str | None, str | None]] = {}
    for component in sbom.get("components", []) or []:
        if not isinstance(component, Mapping) or component.get("type") != "library":
            continue
        name = str(component.get("name", ""))
        if str(component.get("purl", "")).startswith("pkg:deb/"):
            name += " (apt)"
        hashes = component.get("hashes") or [{}]
        out[name] = (component.get("version"), hashes[0].get("content"))
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlatformDiffs:
    """REF1 -> REF2 where either is an image index: each platform's images compared (matched by
    platform), and what has no counterpart on the other side."""

    first: str
    second: str
    diffs: tuple[tuple[str, ImageDiff], ...]
    notes: tuple[str, ...]
    exit_code: int = ExitCode.OK

    def human(self) -> str:
        lines = [f"{self.first} -> {self.second}: {len(self.diffs)} platform(s) compared"]
        lines += [f"note: {note}" for note in self.notes]
        for platform, diff in self.diffs:
            lines += ["", f"== {platform} ==", diff.human()]
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        return {"first": self.first, "second": self.second,
                "platforms": {platform: diff.to_json() for platform, diff in self.diffs},
                "notes": list(self.notes)}


_Pulled = tuple[PulledImage, Mapping[str, Any] | None]  # an image and its SBOM, if attached


def _pull_each(config: Config, text: str, env: Mapping[str, str] | None) -> list[_Pulled]:
    """Every platform's image `text` names (one unless it is an index), each with its SBOM."""
    ref = parse_reference(text, default_host=config.registry.host)
    out: list[_Pulled] = []
    with open_client(client_settings(config), ref, env) as client:
        for image in client.pull_each(ref):
            try:
                sbom = read_attestations(client, ref, image.subject).sbom
            except GpurlError:
                sbom = None  # unreadable: the locks decide, as for an image without one
            out.append((image, sbom))
    return out


def _diff_pair(config: Config, before: _Pulled, after: _Pulled) -> ImageDiff:
    """Compare two images and their packages: from their SBOMs when both have one (apt
    packages included), else from their locks (`config`: the platform's variant)."""
    if before[1] is not None and after[1] is not None:
        packages: tuple[PackageChange, ...] | None = package_changes(
            sbom_packages(before[1]), sbom_packages(after[1]))
        notes: tuple[str, ...] = ("packages from the images' SBOMs",)
    else:
        packages, notes = _packages(config, before[0], after[0])
    return diff_images(before[0], after[0], packages, notes)


def diff_task(config: Config, first: str, second: str,
              env: Mapping[str, str] | None = None) -> ImageDiff | PlatformDiffs:
    """`invoke diff`'s one function: pull both images and compare them; where either is an
    image index, each platform's images are compared (matched by platform, the lock read for
    that platform's variant)."""
    before, after = _pull_each(config, first, env), _pull_each(config, second, env)
    if len(before) == len(after) == 1 and not before[0][0].is_index \
            and not after[0][0].is_index:
        platform = after[0][0].platform  # two arm64 images: their locks read for arm64
        return _diff_pair(platform_config(config, platform) or config, before[0], after[0])
    diffs, notes = [], []
    for pulled in after:
        platform = pulled[0].platform or "?"
        match = next((b for b in before if same_platform(b[0].platform, platform)), None)
        if match is None:
            notes.append(f"{first} has no {platform} image: a {platform} node pulls all of "
                         f"{second}'s ({format_bytes(sum(d.size for d in pulled[0].layers))})")
            continue
        diffs.append((platform, _diff_pair(platform_config(config, platform) or config, match,
                                           pulled)))
    notes += [f"{second} has no {b[0].platform or '?'} image (only {first} has one)"
              for b in before if not any(same_platform(b[0].platform, a[0].platform)
                                         for a in after)]
    if not diffs:
        raise RegistryError(f"{first} and {second} have no platform in common",
                            hint="compare images of one platform: " + "; ".join(notes))
    return PlatformDiffs(first=first, second=second, diffs=tuple(diffs), notes=tuple(notes))
