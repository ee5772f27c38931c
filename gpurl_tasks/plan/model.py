"""The layer plan as data: what the planner produces and the Dockerfile recipe consumes.

Each layer is one slice file (its identity: `Slice`) installed with `uv pip
install --no-deps`; one `uv sync --frozen` with the profile's selection flags follows and must
find nothing left to do. Packages the compiled wheels provide are in no layer and excluded from
that sync. Kept apart from the algorithm (planner.py) so readers of a plan (the generator,
verify-layers, rebuild-needed, benchmarks) depend only on these frozen types.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from pathlib import Path
from typing import Any, ClassVar

from gpurl_tasks.config import LayerMode, Layout, PythonSelection, SizeBasis, Variant
from gpurl_tasks.plan.sizes import installed_estimate
from gpurl_tasks.writer.records import SLICE_DIR

__all__ = ["LOCAL_INSTALL_FLAGS", "POST_INSTALL_LABEL", "Layer", "Plan", "PlannedPackage",
           "ProvidedPackage", "Slice", "SliceBuild", "sync_selection_flags"]

_KW = {"frozen": True, "kw_only": True, "slots": True}
# What keeps local sources out of the environment until the source is copied; the final sync,
# which runs after the copy, drops them.
LOCAL_INSTALL_FLAGS = frozenset({"--no-install-project", "--no-install-workspace",
                                 "--no-install-local"})
POST_INSTALL_LABEL = "post-install"  # the slice of the pinned post-installs (plan/postinstall.py)


@dataclasses.dataclass(**_KW)
class PlannedPackage:
    """One package a slice installs, its predicted sizes and its slice line."""

    name: str
    version: str
    compressed_bytes: int
    installed_bytes: int | None  # exact (probed from the wheel's zip directory) or None
    requirement: str = ""  # the slice line (see slices.py)
    index: str | None = None  # the index a registry package comes from
    hashed: bool = True
    built: bool = False  # no wheel for the target: uv builds it (an sdist, a git source)

    @property
    def installed_estimate(self) -> int:
        return installed_estimate(self.compressed_bytes, self.installed_bytes)

    @property
    def unhashed(self) -> bool:
        """Installed with no hash to check it: the lock records none (an index that serves
        none). A git source, pinned by its commit, is not one."""
        return not self.hashed and " @ git+" not in self.requirement

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "version": self.version,
                "compressed_bytes": self.compressed_bytes, "installed_bytes": self.installed_bytes}


@dataclasses.dataclass(**_KW)
class Slice:
    """One slice's identity, the one place each of its names is spelled: its label (the
    layer's anchor, stable across plans), its position, its committed file in the repository,
    where that file sits in the image and the stage that installs it alone (a slice's cache
    tag is writer/records.py's `slice_key`, which hashes what its written layer depends on)."""

    # where each slice file is copied inside the image: the Dockerfile installs from there,
    # and verify and rebuild recognise a planned layer by it
    IMAGE_DIR: ClassVar[str] = SLICE_DIR
    # the spelling of `name` (a committed file's stem): the position, then the label
    STEM: ClassVar[re.Pattern[str]] = re.compile(r"(\d{2,3})-([a-z0-9][a-z0-9._-]*)")

    position: int
    label: str
    shared: bool = False  # one of the lowest slices every variant of the profile installs
    unique: bool = True  # no other slice of its plan has its label

    @property
    def name(self) -> str:
        """`NN-label`: the position orders the files, the label stays put."""
        return f"{self.position:02d}-{self.label}"

    def path(self, variant: Variant) -> Path:
        """Its committed file: in the variant's own slice directory, or the shared one."""
        return (variant.shared_slices if self.shared else variant.slices) / f"{self.name}.txt"

    @property
    def image_path(self) -> str:
        """Where its file sits in the image: named by its label, not its position, so the
        same slice installs with the same instruction wherever the plan puts it (a label two
        slices share keeps its NN- prefix)."""
        return f"{self.IMAGE_DIR}/{self.label if self.unique else self.name}.txt"


@dataclasses.dataclass(**_KW)
class Layer:
    """The packages one slice installs (one image layer), and why it sits where it does."""

    slice: Slice
    packages: tuple[PlannedPackage, ...]
    reason: str = ""

    @property
    def index(self) -> int:
        return self.slice.position

    @property
    def name(self) -> str:
        """The slice file's stem, NN-label."""
        return self.slice.name

    @property
    def label(self) -> str:
        return self.slice.label

    @property
    def compressed_bytes(self) -> int:
        return sum(p.compressed_bytes for p in self.packages)

    @property
    def installed_bytes(self) -> int:
        """Installed size; packages without a probed figure use their estimate (see sizes.py)."""
        return sum(p.installed_estimate for p in self.packages)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.packages)

    @property
    def indexes(self) -> tuple[str, ...]:
        return tuple(sorted({p.index for p in self.packages if p.index}))

    @property
    def hashed(self) -> bool:
        """Every line carries a hash, so the install can run with --require-hashes."""
        return all(p.hashed for p in self.packages)


@dataclasses.dataclass(**_KW)
class SliceBuild:
    """How one slice is staged when the lock's build settings name a package it builds
    (plan/buildenv.py): on the slices below it, isolation off for `no_isolation`."""

    name: str  # the slice's NN-label
    lower: tuple[str, ...]  # the NN-label names of the slices below, in plan order
    no_isolation: tuple[str, ...]


@dataclasses.dataclass(**_KW)
class ProvidedPackage:
    """A distribution the compiled wheels provide: never installed from the lock."""

    name: str
    version: str  # what the lock pins
    requirements: tuple[tuple[str, str], ...] = ()  # (dependent, specifier) from the lock

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "lock_version": self.version,
                "requirements": [{"dependent": d, "specifier": s} for d, s in self.requirements]}


def sync_selection_flags(selection: PythonSelection, *, local_flags: tuple[str, ...]) -> tuple[str, ...]:
    """The selection flags of the final `uv sync`, before local packages are let in.

    The sync is exact: a selection other than the slices' would uninstall the difference and
    leave dead bytes in a lower layer, so the flags come from the config alone.
    """
    flags: list[str] = ["--frozen", "--no-cache"]
    if selection.no_dev:
        flags.append("--no-dev")
    for extra in sorted(selection.extras):
        flags += ["--extra", extra]
    for group in sorted(selection.groups):
        flags += ["--group", group]
    flags += list(local_flags)
    return tuple(flags)


@dataclasses.dataclass(**_KW)
class Plan:
    """Slices in build order, then the final sync; local packages come with the source."""

    cap_bytes: int
    basis: SizeBasis  # which size the cap applies to
    sync_flags: tuple[str, ...]  # the final sync's selection (see sync_selection_flags)
    layers: tuple[Layer, ...]
    local: tuple[str, ...]  # root project, workspace members, path/editable packages
    lower_bound_layers: int
    provided: tuple[ProvidedPackage, ...] = ()
    history: int = 0  # lock versions the ordering learned from (0: ordered by size)
    # (name, path as the lock records it) of each local package whose source is not the
    # workspace directory itself: the image must hold it there before the final sync
    local_paths: tuple[tuple[str, str], ...] = ()
    # requirements the image installs outside the lock, resolved at build time (harbor when
    # the lock lacks it)
    outside_lock: tuple[str, ...] = ()
    # each slice is its own layer wherever it sits, composed in plan order (config layers.mode,
    # whose one value the plan's fingerprint still carries)
    mode: LayerMode = Layout.mode
    # what the slices were packed by: the configured layout, or the one the slice budget chose
    layout: Layout = dataclasses.field(default_factory=Layout)
    # the slices staged on the ones below them (the lock's build settings; plan/buildenv.py)
    builds: tuple[SliceBuild, ...] = ()
    # the image's OCI platform (target.os/arch), and the profile's other platforms: their
    # variants share no slice with this one, since a slice's files are its platform's wheels
    platform: str = "linux/amd64"
    apart_from: tuple[str, ...] = ()

    @property
    def native_slices(self) -> tuple[str, ...]:
        """Slices uv builds a package of (an sdist, a git source: no wheel for the target):
        they are written on a builder of the image's own platform, never staged from another."""
        return tuple(layer.name for layer in self.layers if any(p.built for p in layer.packages))

    @property
    def unhashed(self) -> tuple[PlannedPackage, ...]:
        """The packages installed without a hash check: the lock records none for them."""
        return tuple(p for p in self.closure if p.unhashed)

    @property
    def pinned_post_install(self) -> Layer | None:
        """The slice of the pinned post-installs (the last), or None: resolved at build time."""
        return next((layer for layer in self.layers if layer.label == POST_INSTALL_LABEL), None)

    @property
    def outside_lock_notes(self) -> tuple[str, ...]:
        """What the plan says of each post-install: pinned, or resolved at build time."""
        how = ("pinned with its dependencies in post-install.pins, the last slice"
               if self.pinned_post_install else
               "its dependencies resolved at build time; `invoke lock-post-install` pins them")
        return tuple(f"outside the lock ({how}): {r}" for r in self.outside_lock)

    def build_of(self, layer: Layer) -> SliceBuild | None:
        return next((b for b in self.builds if b.name == layer.name), None)

    @property
    def shared(self) -> int:
        """The lowest layers common to every variant of the profile (their slices are shared)."""
        return sum(1 for layer in self.layers if layer.slice.shared)

    @property
    def closure(self) -> tuple[PlannedPackage, ...]:
        return tuple(sorted((p for layer in self.layers for p in layer.packages),
                            key=lambda p: p.name))

    @property
    def total_compressed_bytes(self) -> int:
        return sum(layer.compressed_bytes for layer in self.layers)

    @property
    def repush_per_bump(self) -> int:
        """The compressed bytes a bump of one package re-pushes on average, every package as
        likely to move: its slice. What fewer, larger slices cost (`layers.max-image-layers`)."""
        members = sum(len(layer.packages) for layer in self.layers)
        total = sum(len(layer.packages) * layer.compressed_bytes for layer in self.layers)
        return total // members if members else 0

    @property
    def final_sync_flags(self) -> tuple[str, ...]:
        """The final `uv sync`: the selection, local packages included, --inexact (the compiled
        wheels and harbor stay), and the compiled wheels' packages excluded."""
        return (*(f for f in self.sync_flags if f not in LOCAL_INSTALL_FLAGS), "--inexact",
                *(w for name in self.final_exclusions for w in ("--no-install-package", name)))

    @property
    def final_exclusions(self) -> tuple[str, ...]:
        """What the final sync must not install: the packages the compiled wheels provide."""
        return tuple(sorted(p.name for p in self.provided))

    def to_json(self) -> dict[str, Any]:
        return {
            "cap_bytes": self.cap_bytes,
            "basis": self.basis,
            "lower_bound_layers": self.lower_bound_layers,
            "total_compressed_bytes": self.total_compressed_bytes,
            "sync_flags": list(self.sync_flags),
            "closure": [{"name": p.name, "version": p.version} for p in self.closure],
            "local": list(self.local),
            "local_paths": [{"name": n, "path": p} for n, p in self.local_paths],
            "outside_lock": list(self.outside_lock),
            "provided": [p.to_json() for p in self.provided],
            "history_versions": self.history,
            "shared_layers": self.shared,
            "platform": self.platform,
            "shares_no_slice_with": list(self.apart_from),
            "native_slices": list(self.native_slices),
            "unhashed": [{"name": p.name, "version": p.version, "requirement": p.requirement,
                          "index": p.index} for p in self.unhashed],
            "mode": self.mode,
            "packed_by": {"own_layer": self.layout.own_layer,
                          "tail_groups": self.layout.tail_groups,
                          "max_slices": self.layout.max_slices},
            "layers": [
                {
                    "index": layer.index,
                    "slice": layer.name,
                    "why": layer.reason,
                    "packages": [p.to_json() for p in layer.packages],
                    "compressed_bytes": layer.compressed_bytes,
                    "installed_bytes": layer.installed_bytes,
                }
                for layer in self.layers
            ],
            "final_sync": {"flags": list(self.final_sync_flags),
                           "no_install_package": list(self.final_exclusions)},
            "fingerprint": self.fingerprint,
        }

    @property
    def fingerprint(self) -> str:
        """sha256 over what decides the layers' contents: slices, their pins, the final sync."""
        canonical = {
            "sync_flags": list(self.sync_flags),
            "layers": [[layer.name, *(f"{p.name}=={p.version}" for p in layer.packages)]
                       for layer in self.layers],
            "provided": list(self.final_exclusions),
            "local": list(self.local),
            "mode": self.mode,
        }
        if self.platform != "linux/amd64":  # another platform's slices hold other files
            canonical["platform"] = self.platform
        blob = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()
