"""The samples in README.md and docs/*.md: a fenced block (no language) whose lines after `$ `
are commands and the lines after each one its output.

A line `…` in an expected output stands for any number of lines (a long table shown in part).
An HTML comment `<!-- sample: NAME -->` right above a block runs it in the scratch tree the test
names NAME; a command's trailing `# exit N` is the exit code it must end with (default 0).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

__all__ = ["ELIDED", "Sample", "command_and_exit", "fenced", "fits", "normalize", "samples"]

ELIDED = "…"
_SCENARIO = re.compile(r"<!-- sample: ([a-z0-9-]+) -->")
_EXIT = re.compile(r"#.*\bexit (\d+)\b")


@dataclasses.dataclass(frozen=True)
class Sample:
    doc: str  # path relative to the repository root
    line: int  # the line of its `$` command, 1-based
    command: str  # without the `$ ` and a trailing comment
    expected: tuple[str, ...]
    exit_code: int = 0
    scenario: str = ""

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def samples(root: Path, docs: Sequence[str]) -> list[Sample]:
    """Every sample of the documents `docs` (paths relative to `root`), in order."""
    found: list[Sample] = []
    for doc in docs:
        lines = (root / doc).read_text().splitlines()
        i = 0
        while i < len(lines):
            if not lines[i].startswith("```"):
                i += 1
                continue
            end = lines.index("```", i + 1)  # fences do not nest
            above = lines[i - 1] if i else ""
            scenario = m.group(1) if (m := _SCENARIO.fullmatch(above.strip())) else ""
            if lines[i] == "```":  # a block with a language (console, toml, python) is no sample
                found += _block(doc, i + 2, lines[i + 1:end], scenario)
            i = end + 1
    return found


def _block(doc: str, first: int, body: list[str], scenario: str) -> list[Sample]:
    starts = [n for n, line in enumerate(body) if line.startswith("$ ")]
    out = []
    for k, n in enumerate(starts):
        command, code = command_and_exit(body[n])
        stop = starts[k + 1] if k + 1 < len(starts) else len(body)
        expected = tuple(body[n + 1:stop])
        while expected and not expected[-1]:
            expected = expected[:-1]
        out.append(Sample(doc, first + n, command, expected, code, scenario))
    return out


def normalize(text: str, roots: Sequence[Path]) -> str:
    """Only what depends on the checkout: its path, commit ids, the script's base64 length, the
    key of its build inputs."""
    for root in roots:
        text = text.replace(str(root), "/path/to/gpurl")
    text = re.sub(r"\binputs-[0-9a-f]{64}\b", "inputs-<key>", text)
    text = re.sub(r"\b(?:[0-9a-f]{7}|[0-9a-f]{12}|[0-9a-f]{40})(?:-dirty-[0-9a-f]{12})?\b",
                  "<sha>", text)
    return re.sub(r"\.\.\.<\d+ chars>", "...<N chars>", text)


def fits(expected: Sequence[str], actual: Sequence[str]) -> bool:
    """`actual` line for line as `expected`, each ELIDED line standing for any number of lines."""
    reach = [True] + [False] * len(actual)  # reach[j]: expected[:i] can match actual[:j]
    for line in expected:
        if line == ELIDED:
            for j in range(1, len(reach)):
                reach[j] = reach[j] or reach[j - 1]
        else:
            reach = [False] + [reach[j - 1] and actual[j - 1] == line
                               for j in range(1, len(reach))]
    return reach[-1]


def fenced(text: str, languages: Sequence[str]) -> list[tuple[str, list[str]]]:
    """(language, lines) of each block fenced in one of `languages`, in page order."""
    return [(m.group(1), m.group(2).splitlines())
            for m in re.finditer(r"^```(\w+)\n(.*?)^```$", text, re.S | re.M)
            if m.group(1) in languages]


def command_and_exit(line: str) -> tuple[str, int]:
    """A `$ ` line's command and the exit code its trailing `# exit N` names (default 0)."""
    command, _, comment = line[2:].partition("  #")
    code = m.group(1) if (m := _EXIT.search("#" + comment)) else "0"
    return command.strip(), int(code)
