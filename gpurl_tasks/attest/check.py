"""verify-layers' rules for an image's attached SBOM and provenance (pure).

The SBOM's Python components must be exactly the lock's closure for the variant plus the
declared post-installs (a package missing, added or at another version fails), and the
provenance must name the commit the image's tag names. Without them: a failure when they are
required (`verify.attestations = "required"`), else a note.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from gpurl_tasks.attest.provenance import commit_of
from gpurl_tasks.attest.sbom import python_components, requirement_name

__all__ = ["Problem", "check_attestations"]

_SHOWN = 5  # packages named in a finding before "and N more"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Problem:
    """One failed rule (verify-layers shows it as a failing finding of its report)."""

    code: str  # no-sbom | no-provenance | sbom-differs | provenance-commit
    message: str


def _names(items: Collection[tuple[str, str]]) -> str:
    shown = ", ".join(f"{n}=={v}" for n, v in sorted(items)[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def check_attestations(*, sbom: Mapping[str, Any] | None, provenance: Mapping[str, Any] | None,
                       expected: Collection[tuple[str, str]] | None,
                       post_installs: Collection[str], commit: str | None, required: bool,
                       where: str, same_inputs: str | None = None
                       ) -> tuple[list[Problem], list[str]]:
    """(findings, notes) for the documents found attached to the image (None: not found);
    `expected` None: the image was built from another lock, its packages are not compared;
    `same_inputs`: the inputs tag of a statement that a build of the same inputs put the
    verified tag on the image (attest/sameinputs.py), which lets the tag name another commit
    than the provenance."""
    findings: list[Problem] = []
    notes: list[str] = []
    absent = [name for name, document in (("SBOM", sbom), ("provenance", provenance))
              if document is None]
    if required:
        findings += [Problem(code=f"no-{name.lower()}",
                             message=f"no {name} is attached to the image (its referrers list "
                                     "none); verify.attestations = required")
                     for name in absent]
    elif absent:
        notes.append(f"no {' or '.join(absent)} attached to the image; not required "
                     "(verify.attestations)")
    if sbom is not None and expected is None:
        notes.append("SBOM attached; the image was built from another lock than this "
                     "checkout's, so its packages are not compared")
    elif sbom is not None and expected is not None:
        found = python_components(sbom)
        locked = set().union(*(v for k, v in found.items()
                               if k not in ("compiled-wheel", "post-install")))
        want = set(expected)
        missing, extra = want - locked, locked - want
        declared = {n for n, _ in found.get("post-install", set())}
        wanted_post = {requirement_name(line) for line in post_installs}
        if missing or extra:
            parts = ([f"lacks {_names(missing)}"] if missing else []) + (
                [f"lists {_names(extra)} the lock does not"] if extra else [])
            findings.append(Problem(code="sbom-differs",
                                    message="the SBOM does not match the lock's closure: "
                                            + "; ".join(parts)))
        elif declared != wanted_post:
            findings.append(Problem(code="sbom-differs", message=(
                f"the SBOM's post-installs {sorted(declared)} are not the declared "
                f"{sorted(wanted_post)}")))
        else:
            notes.append(f"SBOM: {len(locked)} packages equal the lock's closure"
                         + (f", {len(declared)} post-installs as declared" if declared else "")
                         + f" ({where})")
    if provenance is not None:
        said = commit_of(provenance)
        if commit is None:
            notes.append(f"provenance: built from {said} (the tag names no commit to compare)")
        elif said is not None and (said.startswith(commit) or commit.startswith(said)):
            notes.append(f"provenance: built from {said} by "
                         f"{_builder(provenance)} ({where})")
        elif said is not None and same_inputs is not None:
            notes.append(f"provenance: built from {said}; the tag naming {commit} was put on it "
                         f"by a build of the same inputs ({same_inputs})")
        else:
            findings.append(Problem(code="provenance-commit", message=(
                f"the provenance says the image was built from {said or 'no commit'}, but its "
                f"tag names {commit}")))
    return findings, notes


def _builder(provenance: Mapping[str, Any]) -> str:
    run = (provenance.get("predicate") or {}).get("runDetails") or {}
    builder = run.get("builder") or {} if isinstance(run, Mapping) else {}
    return str(builder.get("id", "an unnamed builder")) if isinstance(builder, Mapping) else "?"
