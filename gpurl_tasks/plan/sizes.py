"""Size model: which artifact uv installs for the target, and how big its layer bytes are.

Compressed layer bytes ~= the wheel file's size (measured within 0.05% on real CUDA wheels),
so the wheel `size` in uv.lock is the compressed prediction. Sizes are
missing for some indexes (the PyTorch index), sdists and git sources; they come from, in order,
an override file, the lock, a probe cache written by `invoke sizes --probe`. What is still
unknown stops the plan with one message listing every such package. Nothing is guessed.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from gpurl_tasks.errors import SizeError
from gpurl_tasks.files import read_text
from gpurl_tasks.plan.lock import Artifact, LockedPackage

__all__ = [
    "INSTALLED_PER_COMPRESSED",
    "PackageSize",
    "SizeSources",
    "installed_estimate",
    "load_size_sources",
    "package_sizes",
    "select_wheel",
    "urls_to_probe",
]

# Installed (uncompressed) bytes per compressed byte when the exact figure was not probed.
# Measured 1.35-1.5x on CUDA wheels; the upper-middle value keeps an
# installed-basis cap on the safe side.
INSTALLED_PER_COMPRESSED = 1.45

_KW = {"frozen": True, "kw_only": True, "slots": True}


def installed_estimate(compressed_bytes: int, installed_bytes: int | None) -> int:
    """Exact installed size when probed, else the measured compressed-to-installed factor."""
    if installed_bytes is not None:
        return installed_bytes
    return round(compressed_bytes * INSTALLED_PER_COMPRESSED)


@dataclasses.dataclass(**_KW)
class PackageSize:
    name: str
    version: str
    compressed_bytes: int
    installed_bytes: int | None  # exact (probed) or None
    source: str  # "override" | "lock" | "probe"
    artifact: str | None  # filename uv installs, None for overrides of unbuilt sources

    @property
    def installed_estimate(self) -> int:
        return installed_estimate(self.compressed_bytes, self.installed_bytes)


@dataclasses.dataclass(**_KW)
class SizeSources:
    """Override table (by "name" or "name==version") and probe cache (by artifact URL)."""

    overrides: Mapping[str, int] = dataclasses.field(default_factory=dict)
    probed: Mapping[str, Mapping[str, int]] = dataclasses.field(default_factory=dict)
    overrides_path: Path | None = None


_RANKS: dict[int, tuple[Sequence[Tag], dict[Tag, int], dict[str, int | None]]] = {}


def _ranks(supported: Sequence[Tag]) -> tuple[dict[Tag, int], dict[str, int | None]]:
    """Tag -> priority, built once per tag sequence (target_tags returns one cached tuple),
    and a memo of wheel filename -> its best tag's priority (None: no tag the target
    supports, or not a wheel's name): every variant of a profile selects among the same wheels.

    Keyed by identity: hashing or comparing a 771-tag tuple per package cost more than the
    lookups themselves (the planner benchmark's profile).
    """
    hit = _RANKS.get(id(supported))
    if hit is None or hit[0] is not supported:
        if len(_RANKS) > 32:
            _RANKS.clear()
        hit = (supported, {tag: i for i, tag in enumerate(supported)}, {})
        _RANKS[id(supported)] = hit
    return hit[1], hit[2]


def _best_rank(filename: str, rank: Mapping[Tag, int]) -> int | None:
    try:
        _, _, _, wheel_tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    return min((rank[t] for t in wheel_tags if t in rank), default=None)


def select_wheel(package: LockedPackage, supported: Sequence[Tag]) -> Artifact | None:
    """The wheel an installer picks: the one whose best tag ranks highest for the target."""
    rank, best_of = _ranks(supported)
    best: tuple[int, str, Artifact] | None = None
    for wheel in package.wheels:
        if wheel.filename not in best_of:
            best_of[wheel.filename] = _best_rank(wheel.filename, rank)
        found = best_of[wheel.filename]
        if found is not None and (best is None or (found, wheel.filename) < best[:2]):
            best = (found, wheel.filename, wheel)
    return best[2] if best else None


# (the key naming it, what it holds) of each JSON file, for the hint of one that is not that
_FORMS = {"size override file": ("layers.size-overrides", 'a JSON object {"name==version": bytes}'),
          "size cache": ("layers.size-cache",
                         "the object `invoke sizes --probe` writes (delete it to start over)")}


def _json_hint(what: str) -> str:
    key, form = _FORMS[what]
    return f"point {key} at the right file, or make it {form}"


def _read_json_object(path: Path, what: str, *, optional: bool) -> dict[str, object]:
    if optional and not path.exists():
        return {}
    text = read_text(path, what=what, error=SizeError,
                     missing_hint="check the path, or create it holding {}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SizeError(f"{what} {path} is not valid JSON: {exc}",
                        hint=_json_hint(what)) from None
    if not isinstance(data, dict):
        raise SizeError(f"{what} {path} must hold a JSON object",
                        hint=_json_hint(what))
    return data


def load_size_sources(overrides: Path | None, cache: Path | None) -> SizeSources:
    """Read the override file and the probe cache; a missing file is an empty table."""
    table: dict[str, int] = {}
    if overrides is not None:
        for key, value in _read_json_object(overrides, "size override file", optional=False).items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SizeError(f"size override {key!r} in {overrides} must be a byte count, "
                                f"got {value!r}",
                                hint="write the size as a whole number of bytes, e.g. 123456789")
            name, _, version = key.partition("==")
            table[canonicalize_name(name) + (f"=={version.strip()}" if version else "")] = value
    probed: dict[str, Mapping[str, int]] = {}
    if cache is not None:
        for url, entry in _read_json_object(cache, "size cache", optional=True).items():
            if isinstance(entry, dict) and isinstance(entry.get("compressed"), int):
                probed[url] = {k: v for k, v in entry.items() if isinstance(v, int)}
    return SizeSources(overrides=table, probed=probed, overrides_path=overrides)


def _compressed(pkg: LockedPackage, wheel: Artifact | None,
                sources: SizeSources) -> tuple[int, str] | None:
    """(compressed bytes, where from) in precedence order: override, lock, probe cache."""
    version = pkg.version or "?"
    override = sources.overrides.get(f"{pkg.name}=={version}", sources.overrides.get(pkg.name))
    if override is not None:
        return override, "override"
    if wheel is not None and wheel.size is not None:
        return wheel.size, "lock"
    probe = sources.probed.get(wheel.url or "", {}) if wheel is not None else {}
    if "compressed" in probe:
        return probe["compressed"], "probe"
    return None


def _unknown_hint(sdists: list[str], sources: SizeSources, *, probe: bool) -> str:
    """How to get what is missing: an sdist's size is its built wheel's, by hand; a wheel's
    is probed."""
    where = (f"{sources.overrides_path} (layers.size-overrides)" if sources.overrides_path
             else "a JSON file named by layers.size-overrides (e.g. sizes/overrides.json)")
    parts = []
    if sdists:
        first = sdists[0]
        lines = ", ".join(f'"{spec}": BYTES' for spec in sdists)
        parts.append(f"an sdist's size is the wheel it builds: build it (`pip wheel --no-deps "
                     f"{first} -w /tmp/gpurl-wheels`, or `uv build --wheel` in its source tree), "
                     f"take the .whl file's size in bytes (`stat -c %s /tmp/gpurl-wheels/*.whl`) "
                     f"and add {lines} to {where}")
    if probe or not sdists:
        parts.append(f"for a wheel: run `invoke sizes --probe` (wheels with a URL), or add "
                     f'"name==version": BYTES (its compressed size) to {where}')
    return "; ".join(parts)


def package_sizes(
    packages: Iterable[LockedPackage], supported: Sequence[Tag], sources: SizeSources
) -> list[PackageSize]:
    """Sizes for every package, or one SizeError naming every package still unknown."""
    result: list[PackageSize] = []
    unknown: list[str] = []
    sdists: list[str] = []
    for pkg in packages:
        version = pkg.version or "?"
        wheel = select_wheel(pkg, supported)
        artifact = wheel or pkg.sdist
        installed = sources.probed.get(wheel.url or "", {}).get("installed") if wheel else None
        known = _compressed(pkg, wheel, sources)
        if known is None:
            if wheel is None and pkg.sdist:
                why = "no wheel for the target and only an sdist (built in the image)"
                sdists.append(f"{pkg.name}=={version}")
            else:
                why = ("its wheel has no compressed size in the lock, the overrides or "
                       "the probe cache" if wheel
                       else f"{pkg.source_kind} source with no wheel")
            unknown.append(f"{pkg.name}=={version} ({why})")
            continue
        size, origin = known
        result.append(PackageSize(name=pkg.name, version=version, compressed_bytes=size,
                                  installed_bytes=installed, source=origin,
                                  artifact=artifact.filename if artifact else None))
    if unknown:
        raise SizeError(
            f"{len(unknown)} package size(s) unknown: " + "; ".join(unknown),
            hint=_unknown_hint(sdists, sources, probe=len(sdists) < len(unknown)),
        )
    return result


def urls_to_probe(
    packages: Iterable[LockedPackage], supported: Sequence[Tag], sources: SizeSources
) -> dict[str, bool]:
    """Wheel URLs (sorted) whose installed size is not known yet (only a probe gives it), each
    with whether its compressed size is known (override, lock or probe cache)."""
    urls: dict[str, bool] = {}
    for pkg in packages:
        wheel = select_wheel(pkg, supported)
        if wheel is None or not wheel.url or not wheel.url.startswith(("http://", "https://")):
            continue
        if "installed" not in sources.probed.get(wheel.url, {}):
            urls[wheel.url] = _compressed(pkg, wheel, sources) is not None
    return dict(sorted(urls.items()))
