"""Read BuildKit's `--progress plain` output: which steps ran, which came from the cache.

The plain log names every vertex `#N [STAGE i/n] INSTRUCTION` and ends it with `#N CACHED`,
`#N DONE 1.2s` or `#N ERROR ...`; vertices interleave, so lines are grouped by N. This is
how a test proves that a stage did (or did not) run and counts cache hits of a rebuild.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["BuildStep", "parse_plain_progress", "stages_run", "vertex_output"]

_HEADER = re.compile(r"^#(\d+) \[(?:(\S+)\s+)?(\d+)/(\d+)\] (.+)$")  # "[rl  9/13]": padded
_STATUS = re.compile(r"^#(\d+) (CACHED|DONE\b|ERROR\b)")


@dataclass(frozen=True, kw_only=True)
class BuildStep:
    """One Dockerfile instruction as BuildKit ran it; `status` is cached, done, error or open."""

    vertex: int
    stage: str  # "" for a single-stage Dockerfile
    index: int
    total: int
    instruction: str
    status: str

    @property
    def is_from(self) -> bool:
        return self.instruction.startswith("FROM ")


def parse_plain_progress(log: str) -> list[BuildStep]:
    """The instruction steps of a plain-progress log, in first-seen order."""
    headers: dict[int, tuple[str, int, int, str]] = {}
    status: dict[int, str] = {}
    for line in log.splitlines():
        header = _HEADER.match(line.rstrip())
        if header:
            vertex = int(header.group(1))
            headers.setdefault(vertex, (header.group(2) or "", int(header.group(3)),
                                        int(header.group(4)), header.group(5)))
            continue
        found = _STATUS.match(line)
        if found:
            vertex = int(found.group(1))
            word = found.group(2).lower()
            if status.get(vertex) != "error":
                status[vertex] = word
    return [
        BuildStep(vertex=vertex, stage=stage, index=index, total=total, instruction=instruction,
                  status=status.get(vertex, "open"))
        for vertex, (stage, index, total, instruction) in headers.items()
    ]


def stages_run(steps: list[BuildStep]) -> set[str]:
    """Stages in which at least one instruction (other than FROM) really executed."""
    return {s.stage for s in steps if s.status == "done" and not s.is_from}


def vertex_output(log: str, vertex: int) -> str:
    """What one step printed (timestamps stripped): the reason a failed RUN failed."""
    prefix = f"#{vertex} "
    lines = []
    for line in log.splitlines():
        if line.startswith(prefix):
            rest = line[len(prefix):]
            head, _, tail = rest.partition(" ")
            lines.append(tail if head.replace(".", "", 1).isdigit() else rest)
    return "\n".join(lines)
