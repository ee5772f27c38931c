"""One pin for several platforms: the OCI image index of the variants that share a launcher
variable (pure; release/flow.py reads and writes the registry).

Variants of different platforms (`target.platform`: the H100 nodes' linux/amd64, the GB200
nodes' linux/arm64) that name the same `launcher.variable` are one image: each is built and
pushed under its own immutable tag, and their manifests are listed in one image index, whose
digest the variable holds. containerd, given the index, pulls the node's platform. Each
variant's own manifest digest can go to its `launcher.platform-variable` as well.

The index lists exactly the manifests verified (one per variant, in the variants' file
order), so the pin names no byte that was not checked: an index gpurl did not compose is
read back and compared entry by entry before it is pinned.

Its tag is `PREFIX-<source id>-index` (PREFIX: the first variant of the group's tag prefix,
release/configured.index_reference): immutable as the variants' tags are (composed once per source id,
never moved without --force); it can never be a variant's tag (no source id ends in
`-index`), and it carries the source id where rebuild-needed reads a pin's commit.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence

from gpurl_tasks.config import Config, Variant
from gpurl_tasks.errors import CheckFailed
from gpurl_tasks.oci.image import Descriptor, ImageIndex, PulledImage, same_platform
from gpurl_tasks.values import PIN_MARKER, format_bytes
from gpurl_tasks.writer.ocispec import OCI_INDEX

__all__ = ["Member", "check_listed", "compose_index", "index_comment", "index_group",
           "index_groups", "platform_config"]


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Member:
    """One platform's image of an index: the variant that built it and its pulled image."""

    variant: str
    cluster: str  # the cluster its nodes are in (cluster.name)
    platform: str  # the variant's target.platform: what the image must say it runs on
    image: PulledImage

    @property
    def entry_platform(self) -> str:
        """The platform the index lists it under: its config's (an arm64 config may add the
        variant v8), which is its target's os/architecture (compose_index checks that)."""
        return self.image.platform or self.platform

    @property
    def descriptor(self) -> Descriptor:
        image = self.image
        return Descriptor(media_type=image.manifest_media_type, digest=image.manifest_digest,
                          size=image.manifest_size, platform=self.entry_platform)


def index_groups(variants: Sequence[Variant]) -> tuple[tuple[Variant, ...], ...]:
    """The variants grouped by launcher variable, in file order: a group of more than one is an
    image index. Variants of one platform never are (config.py refuses two naming one variable
    in pyproject; a variable a flag names for every variant leaves each its own group)."""
    groups: dict[str, list[Variant]] = {}
    for variant in variants:
        groups.setdefault(variant.launcher.variable, []).append(variant)
    out: list[tuple[Variant, ...]] = []
    for group in groups.values():
        platforms = [v.target.platform for v in group]
        if len(set(platforms)) == len(platforms):
            out.append(tuple(group))
        else:
            out += [(v,) for v in group]
    return tuple(out)


def index_group(variants: Sequence[Variant], variant: Variant) -> tuple[Variant, ...]:
    """The group `variant` is in (itself alone when its variable is its own)."""
    return next(g for g in index_groups(variants) if variant.name in {v.name for v in g})


def platform_config(config: Config, platform: str) -> Config | None:
    """The config of the profile's first variant built for `platform`, None when none is: the
    rules, plan and lock an index's entry of that platform is read with."""
    return next((config.for_variant(v) for v in config.variants
                 if same_platform(platform, v.target.platform)), None)


def compose_index(members: Sequence[Member]) -> ImageIndex:
    """The index of `members`' manifests, in their order; an image whose config names another
    platform than its variant's target, or that lives in another repository, is refused."""
    for member in members:
        said = member.image.platform
        if not same_platform(said, member.platform):
            raise CheckFailed(
                f"variant {member.variant}'s image {member.image.ref} is "
                f"{said or 'of no stated platform'} (its config's os/architecture), not its "
                f"target's {member.platform}: it cannot be that platform's entry of the index",
                hint="rebuild it for its target (target.arch), on its cluster "
                     f"{member.cluster}")
    names = {m.image.ref.name for m in members}
    if len(names) != 1:
        raise CheckFailed(f"the images of an index must be in one repository, not "
                          f"{', '.join(sorted(names))}",
                          hint="give the variants one registry.host and registry.repository")
    platforms = [m.platform for m in members]
    if len(set(platforms)) != len(platforms):
        raise CheckFailed(f"an index lists one image per platform, not {', '.join(platforms)}",
                          hint="give each variant that shares launcher.variable its own target.arch")
    return ImageIndex(manifests=tuple(m.descriptor for m in members), media_type=OCI_INDEX)


def check_listed(where: str, index: ImageIndex, members: Sequence[Member]) -> None:
    """`index` (as read back from the registry) lists exactly the members' manifests, each
    under its platform, and nothing else."""
    want = [(m.entry_platform, m.image.manifest_digest) for m in members]
    have = [(d.platform or "?", d.digest) for d in index.manifests]
    if sorted(have) != sorted(want):
        shown = ", ".join(f"{p} {d[:19]}" for p, d in have) or "nothing"
        expected = ", ".join(f"{p} {d[:19]}" for p, d in want)
        raise CheckFailed(f"the index {where} lists {shown}, not the verified images "
                          f"{expected}", hint="compose it again from the images built at this "
                                              "commit (pass --force to replace its tag)")


def index_comment(tag: str | None, members: Sequence[Member], sizes: Sequence[tuple[int, int]],
                  date: dt.date) -> str:
    """The provenance comment above an index pin: its tag, and each platform's layer count
    and total (`sizes`: (layer count, total bytes) per member)."""
    parts = [f"{m.platform} {count} layers {format_bytes(total)}"
             for m, (count, total) in zip(members, sizes, strict=True)]
    return (f"{PIN_MARKER} {tag or 'pinned by digest'}, image index, {', '.join(parts)}, "
            f"{date.isoformat()}")
