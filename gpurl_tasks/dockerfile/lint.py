"""A lint pass over the Dockerfile model, separate from rendering.

It catches the classic silent failure of multi-stage Dockerfiles: a global `ARG` (declared
before the first FROM) is visible only in FROM lines, so a stage that uses `${TORCH_VERSION}`
without re-declaring `ARG TORCH_VERSION` gets an empty string and builds the wrong thing.
"""

from __future__ import annotations

import dataclasses
import re

from gpurl_tasks.dockerfile.model import (
    Arg,
    Cmd,
    Command,
    Comment,
    Copy,
    Dockerfile,
    Entrypoint,
    Env,
    Instruction,
    Label,
    Run,
    Shell,
    User,
    Workdir,
)
from gpurl_tasks.values import VARIABLE, variable_name

__all__ = ["Finding", "lint"]

_ARG_NAME = re.compile(r"[A-Z][A-Z0-9_]*")  # the expansions an ARG or ENV could declare
# Set by the base image or the shell, never by this Dockerfile.
_AMBIENT = frozenset({"PATH", "HOME"})


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Finding:
    """One problem: where it is and what is wrong."""

    stage: str
    message: str

    def __str__(self) -> str:
        return f"stage {self.stage}: {self.message}"


def _texts(ins: Instruction) -> list[str]:
    """The strings of an instruction in which Docker or the shell expands variables."""
    match ins:
        case Run(commands=commands):
            out: list[str] = []
            for c in commands:
                out += list(c.words) if isinstance(c, Command) else [c.text]
            return out
        case Shell(text=text):
            return [text]
        case Env(pairs=pairs) | Label(pairs=pairs):
            return [v for _, v in pairs]
        case Copy(sources=sources, dest=dest):
            return [*sources, dest]
        case Workdir(path=path):
            return [path]
        case User(name=name):
            return [name]
        case Arg(default=default):
            return [default] if default else []
        case Comment() | Entrypoint() | Cmd():
            return []
    return []


def lint(dockerfile: Dockerfile) -> tuple[Finding, ...]:
    """Every `${NAME}` used in a stage must be declared (ARG or ENV) in that stage before use."""
    findings: list[Finding] = []
    globals_ = {a.name for a in dockerfile.global_args}
    for stage in dockerfile.stages:
        declared: set[str] = set(_AMBIENT)
        for ins in stage.instructions:
            for text in _texts(ins):
                for name in (variable_name(m) for m in VARIABLE.finditer(text)):
                    if not _ARG_NAME.fullmatch(name) or name in declared:
                        continue
                    hint = " (a global ARG: re-declare it in the stage)" if name in globals_ else ""
                    findings.append(Finding(stage=stage.name,
                                            message=f"${{{name}}} is used but not declared{hint}"))
                    declared.add(name)  # report each name once per stage
            if isinstance(ins, Arg):
                declared.add(ins.name)
            elif isinstance(ins, Env):
                declared.update(k for k, _ in ins.pairs)
    return tuple(findings)
