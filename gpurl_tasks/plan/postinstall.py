"""build.post-install, pinned: resolved once against the lock's set into a committed pins file,
and installed as the plan's last slice.

Resolved at build time, a post-install's dependencies could differ between two builds of one
commit, and its layer sat above the final sync, so every lock bump rebuilt and re-pushed it.
`invoke lock-post-install` (plan/profile.py, the edge) resolves the requirements with uv
(`uv pip compile`, hashes generated, every locked package constrained to what the lock
installs) and writes `<variant slices>/post-install.pins`: each package the lock does not
hold, pinned with its hashes (a git source by its commit). The file records a digest of the
requirements, the target and the index: when one of them moves, the lock comes to hold a
pinned package, or it drops a post-install the pins left to it, planning refuses the stale
pins and names the task. A lock bump alone leaves
them (and their layer) as they are; the image's `uv pip check` gate proves they still fit
the lock. The plan installs the pins as a slice like any other (label `post-install`, last),
so the chain, the local path and the cluster job install, write and key it as they do the
lock's slices. A variant with no pins file resolves its post-installs at build time, as
before (`plan` says so).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from packaging.utils import canonicalize_name

from gpurl_tasks.config import TargetSpec, Variant
from gpurl_tasks.errors import PlanError, shown
from gpurl_tasks.files import read_text
from gpurl_tasks.plan.model import POST_INSTALL_LABEL, Layer, Plan, PlannedPackage, Slice
from gpurl_tasks.plan.slices import Assignment, SliceLine

__all__ = ["DEFAULT_INDEX", "PINS_NAME", "PostInstallInputs", "compile_command",
           "compile_environment", "inputs_for",
           "parse_compiled", "pinned_layer", "pins_path", "read_pins", "render_pins",
           "stale_reason", "uv_platform", "with_pins", "without_pinned"]

PINS_NAME = "post-install.pins"  # beside the variant's slice files (not a .txt: not a slice)
_DIGEST = "# resolved from: "
DEFAULT_INDEX = "https://pypi.org/simple"  # uv's, where build.index-url is empty
_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[A-Za-z0-9._,-]*\])?\s*"
                   r"(==\s*([A-Za-z0-9.+!_-]+)| @ ([A-Za-z0-9+.-]+://\S+))(.*)$")


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PostInstallInputs:
    """What the pins are resolved from (the lock's set among it: a move of it alone leaves
    the pins current, `stale_reason`)."""

    requirements: tuple[str, ...]  # build.post-install's requirements, in config order
    constraints: tuple[str, ...]  # the lock's set: each locked package as the slices install it
    python: str  # target.python
    platform: str  # uv's --python-platform for the target
    index_url: str  # build.index-url ("": uv's default index)

    @property
    def digest(self) -> str:
        """What the pins record: all but the lock's set, so a lock bump leaves them as they
        are (a pin the lock now holds makes them stale: `stale_reason`)."""
        fields = dataclasses.asdict(self)
        del fields["constraints"]
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()

    @property
    def locked(self) -> frozenset[str]:
        return frozenset(canonicalize_name(_name(c)) for c in self.constraints)


def uv_platform(target: TargetSpec) -> str:
    """uv's --python-platform for the target: its arch and manylinux glibc."""
    return f"{target.arch}-manylinux_{target.glibc.replace('.', '_')}"


def inputs_for(variant: Variant, requirements: Sequence[str], locked: Sequence[str]
               ) -> PostInstallInputs:
    """The variant's post-install inputs; `locked`: what it locks, each as a requirement (a
    slice line without its hashes)."""
    return PostInstallInputs(
        requirements=tuple(requirements),
        constraints=tuple(sorted(r.split(" --hash=", 1)[0] for r in locked)),
        python=variant.target.python, platform=uv_platform(variant.target),
        index_url=variant.build.index_url)


def _name(requirement: str) -> str:
    return re.split(r"[\s=@\[;<>!~]", requirement.strip(), maxsplit=1)[0]


def pins_path(variant: Variant) -> Path:
    return variant.slices / PINS_NAME


def render_pins(inputs: PostInstallInputs, lines: Sequence[SliceLine], *, profile: str,
                variant: str) -> str:
    """The pins file: what it is, the inputs' digest, one line a package (sorted)."""
    return ("# build.post-install pinned for the profile "
            f"{profile!r}{f', variant {variant!r}' if variant else ''}: written by "
            "`invoke lock-post-install`, do not edit.\n"
            f"{_DIGEST}{inputs.digest}\n"
            + "".join(f"{r}\n" for r in sorted(line.requirement for line in lines)))


def read_pins(path: Path, index_url: str) -> tuple[str, tuple[SliceLine, ...]] | None:
    """(the digest it records, its lines), or None when there is no pins file."""
    if not path.is_file():
        return None
    text = read_text(path, what="post-install pins", error=PlanError)
    digest = next((ln.removeprefix(_DIGEST) for ln in text.splitlines() if ln.startswith(_DIGEST)),
                  "")
    body = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return digest, tuple(_slice_line(ln, index_url, where=str(path)) for ln in body)


def _slice_line(line: str, index_url: str, *, where: str) -> SliceLine:
    match = _LINE.match(line)
    if match is None or (match.group(5).strip() and not all(
            h.startswith("--hash=sha256:") for h in match.group(5).split())):
        raise PlanError(f"{where}: {shown(line[:80])} is not a pinned requirement with its hashes",
                        hint="the pins are generated: run `invoke lock-post-install`")
    hashed = bool(match.group(5).strip())
    url = match.group(4)
    return SliceLine(requirement=line, index=None if url else (index_url or None),
                     hashed=hashed)


def compile_command(inputs: PostInstallInputs, requirements: Path, constraints: Path
                    ) -> list[str]:
    """The resolution: uv pip compile for the target, hashes generated, the lock's set
    constraining every package it holds, the index as it is now (no cached page)."""
    return ["uv", "pip", "compile", str(requirements), "--constraint", str(constraints),
            "--generate-hashes", "--no-header", "--no-annotate", "--quiet", "--refresh",
            "--no-config", "--python-version", inputs.python, "--python-platform",
            inputs.platform, "--index-url", inputs.index_url or DEFAULT_INDEX]


# what else would steer uv's resolution from the caller's shell: the image's index only
_STEERING = ("UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_DEFAULT_INDEX", "UV_FIND_LINKS",
             "UV_NO_INDEX", "UV_CONSTRAINT", "UV_OVERRIDE", "UV_INDEX_STRATEGY",
             "UV_PRERELEASE", "UV_RESOLUTION", "UV_EXCLUDE_NEWER", "UV_OFFLINE", "UV_CONFIG_FILE")


def compile_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without what would steer the resolution (another index, a
    constraint, a resolution strategy): the pins depend on the config alone."""
    return {k: v for k, v in environ.items() if not k.startswith(_STEERING)}


def parse_compiled(text: str, inputs: PostInstallInputs) -> tuple[SliceLine, ...]:
    """uv pip compile's output -> a slice line for each package the lock does not hold."""
    joined = re.sub(r"\s*\\\n\s*", " ", text)
    lines = [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.startswith("#")]
    locked = inputs.locked
    return tuple(_slice_line(" ".join(ln.split()), inputs.index_url, where="uv pip compile")
                 for ln in lines if canonicalize_name(_name(ln)) not in locked)


def pinned_layer(lines: Sequence[SliceLine], position: int) -> Layer:
    """The pins as the plan's last slice (their sizes are not known: counted as 0)."""
    packages = []
    for line in lines:
        match = _LINE.match(line.requirement)
        assert match is not None  # read_pins and parse_compiled checked each line
        packages.append(PlannedPackage(
            name=canonicalize_name(match.group(1)), version=match.group(3) or match.group(4),
            compressed_bytes=0, installed_bytes=None, requirement=line.requirement,
            index=line.index, hashed=line.hashed, built=" @ git+" in line.requirement))
    return Layer(slice=Slice(position=position, label=POST_INSTALL_LABEL),
                 packages=tuple(sorted(packages, key=lambda p: p.name)),
                 reason="build.post-install, pinned in post-install.pins (their sizes are not "
                        "recorded: shown as 0)")


def without_pinned(assignment: Assignment) -> Assignment:
    """The committed layout without the post-install slice: never the planner's to keep."""
    if POST_INSTALL_LABEL not in assignment.labels:
        return assignment
    return Assignment(labels=tuple(x for x in assignment.labels if x != POST_INSTALL_LABEL),
                      member={n: x for n, x in assignment.member.items()
                              if x != POST_INSTALL_LABEL},
                      lines={x: v for x, v in assignment.lines.items() if x != POST_INSTALL_LABEL})


def stale_reason(found: tuple[str, tuple[SliceLine, ...]], inputs: PostInstallInputs | None
                 ) -> str | None:
    """Why committed pins no longer answer the inputs, or None: the requirements, the target
    or the index moved, the lock now holds a pinned package, or a post-install is neither
    pinned nor locked any more. A lock bump alone does not (the image's `uv pip check` gate
    proves the pins still fit the lock)."""
    digest, lines = found
    if inputs is None:
        return "build.post-install is empty"
    if digest != inputs.digest:
        return "build.post-install, target.python, the platform or build.index-url moved since"
    pinned = {canonicalize_name(_name(line.requirement)) for line in lines}
    held = sorted(pinned & inputs.locked)
    if held:
        return f"the lock now holds {', '.join(held)}"
    dropped = sorted({canonicalize_name(_name(r)) for r in inputs.requirements}
                     - pinned - inputs.locked)
    return f"the lock no longer holds {', '.join(dropped)}, and the pins do not" if dropped else None


def with_pins(plan: Plan, inputs: PostInstallInputs | None, variant: Variant) -> Plan:
    """The plan with its committed post-install pins as its last slice (unchanged when the
    variant has none); stale pins are refused."""
    found = read_pins(pins_path(variant), variant.build.index_url)
    if found is None:
        return plan
    why = stale_reason(found, inputs)
    if why:
        raise PlanError(f"{pins_path(variant)} is stale: {why}",
                        hint="run `invoke lock-post-install` to resolve them again")
    return dataclasses.replace(plan, layers=(*plan.layers,
                                             pinned_layer(found[1], len(plan.layers))))
