"""The layer plan as data: what the planner produces and the Dockerfile recipe consumes.

Kept apart from the planning algorithm (layers.py) so readers of a plan (the generator,
verify-layers, rebuild-needed, benchmarks) depend only on these frozen types.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from gpurl_tasks.config import PythonSelection
from gpurl_tasks.plan.sizes import installed_estimate

__all__ = ["Layer", "Plan", "PlannedPackage", "SyncStep", "sync_selection_flags"]

_KW = {"frozen": True, "kw_only": True, "slots": True}


@dataclasses.dataclass(**_KW)
class PlannedPackage:
    """One package the chain installs, with its predicted sizes."""

    name: str
    version: str
    compressed_bytes: int
    installed_bytes: int | None  # exact (probed from the wheel's zip directory) or None

    @property
    def installed_estimate(self) -> int:
        return installed_estimate(self.compressed_bytes, self.installed_bytes)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(**_KW)
class Layer:
    """The packages one sync step installs (one image layer)."""

    index: int
    packages: tuple[PlannedPackage, ...]

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


@dataclasses.dataclass(**_KW)
class SyncStep:
    """One `uv sync` in the chain: the selection flags are shared, only exclusions differ."""

    no_install_package: tuple[str, ...]


def sync_selection_flags(selection: PythonSelection, *, local_flags: tuple[str, ...]) -> tuple[str, ...]:
    """The flags every sync in the chain carries, identical from first to last.

    Identical selection is load-bearing: uv sync is exact, so a sync with different
    extras or groups would uninstall the difference and leave dead bytes in a lower layer.
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
    """A complete chain: `steps[i]` installs `layers[i]`; local packages come after the chain."""

    cap_bytes: int
    basis: str  # "compressed" | "installed": which size the cap applies to
    sync_flags: tuple[str, ...]  # shared by every step, see sync_selection_flags
    layers: tuple[Layer, ...]
    steps: tuple[SyncStep, ...]
    local: tuple[str, ...]  # root project, workspace members, path/editable packages
    lower_bound_layers: int

    @property
    def closure(self) -> tuple[PlannedPackage, ...]:
        return tuple(sorted((p for layer in self.layers for p in layer.packages),
                            key=lambda p: p.name))

    @property
    def total_compressed_bytes(self) -> int:
        return sum(layer.compressed_bytes for layer in self.layers)

    def step_argv(self, index: int) -> tuple[str, ...]:
        """The `uv sync` argv of one step, exclusions sorted for stable output."""
        argv = ["uv", "sync", *self.sync_flags]
        for name in self.steps[index].no_install_package:
            argv += ["--no-install-package", name]
        return tuple(argv)

    def to_json(self) -> dict[str, Any]:
        return {
            "cap_bytes": self.cap_bytes,
            "basis": self.basis,
            "lower_bound_layers": self.lower_bound_layers,
            "total_compressed_bytes": self.total_compressed_bytes,
            "sync_flags": list(self.sync_flags),
            "closure": [{"name": p.name, "version": p.version} for p in self.closure],
            "local": list(self.local),
            "layers": [
                {
                    "index": layer.index,
                    "packages": [p.to_json() for p in layer.packages],
                    "compressed_bytes": layer.compressed_bytes,
                    "installed_bytes": layer.installed_bytes,
                }
                for layer in self.layers
            ],
            "steps": [{"no_install_package": list(s.no_install_package)} for s in self.steps],
            "fingerprint": self.fingerprint,
        }

    @property
    def fingerprint(self) -> str:
        """sha256 over what decides the layers' contents: flags, steps and pinned versions."""
        canonical = {
            "sync_flags": list(self.sync_flags),
            "layers": [[f"{p.name}=={p.version}" for p in layer.packages] for layer in self.layers],
            "steps": [list(s.no_install_package) for s in self.steps],
            "local": list(self.local),
        }
        blob = json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()
