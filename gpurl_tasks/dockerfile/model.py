"""A Dockerfile as data: stages of frozen instructions, rendered to stable text.

Every instruction validates itself on construction (errors, not asserts) and renders itself;
`render()` is pure and deterministic, so a generated file is byte-identical for equal inputs.
Long RUN commands are written one flag (with its value) or one package per line so a
reviewer sees a one-line diff when one package changes.

Quoting happens here, once for every value: `quote_word` leaves a word bare only when it holds
nothing the shell would interpret but a glob; a build-arg reference `${NAME}` is expanded only
inside double quotes (it cannot word-split); any other `$`, a backtick, `"` or a backslash is
escaped.
No instruction, comment or word may hold a control character (a newline would end the RUN and
start another instruction): that is a DockerfileError, never an escape.
"""

from __future__ import annotations

import dataclasses
import json
import re

from gpurl_tasks.errors import BUG_HINT, GpurlError, shown
from gpurl_tasks.imageref import ImageRef, InvalidReference, parse_reference

__all__ = [
    "Arg",
    "ArgImage",
    "Cmd",
    "Command",
    "Comment",
    "Copy",
    "Dockerfile",
    "DockerfileError",
    "Entrypoint",
    "Env",
    "ImageRef",
    "Instruction",
    "Label",
    "Run",
    "Shell",
    "Stage",
    "User",
    "Workdir",
    "image",
    "quote_word",
    "render",
]

_KW = {"frozen": True, "kw_only": True, "slots": True}
_ONE_LINE = 88  # a command longer than this is written one argument group per line
_INDENT = "      "


class DockerfileError(GpurlError):
    """A Dockerfile model is invalid (bad name, reference, argument or stage order)."""


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STAGE = re.compile(r"[a-z][a-z0-9_.-]*")
_SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./*?-]+")  # nothing the shell interprets but globs
_ARG_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}")
_PARTS = re.compile(r"(\$\{[A-Za-z_][A-Za-z0-9_]*\})|([A-Za-z0-9_@%+=:,./*?-]+)")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def _check(condition: bool, message: str, hint: str) -> None:
    if not condition:
        raise DockerfileError(message, hint=hint)


def _one_line(text: str, what: str) -> None:
    """No control character (a newline or carriage return would end the instruction)."""
    if _CONTROL.search(text):
        raise DockerfileError(f"{what} must be one line without control characters, not "
                              f"{shown(text)}",
                              hint="remove the newline or other control character from that value")


def _in_double_quotes(text: str) -> str:
    """`text` for the inside of a double-quoted shell word: `${NAME}` stays a reference, any
    other `$`, backtick, `"` and backslash is escaped."""
    out = []
    for piece in re.split(r"(\$\{[A-Za-z_][A-Za-z0-9_]*\})", text):
        if _ARG_REF.fullmatch(piece):
            out.append(piece)
        else:
            out.append(re.sub(r'([\\"`$])', r"\\\1", piece))
    return "".join(out)


@dataclasses.dataclass(**_KW)
class ArgImage:
    """A FROM whose whole image is a build arg, `${NAME}` (the base image, the wheel source)."""

    name: str

    def __post_init__(self) -> None:
        _check(bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", self.name)),
               f"invalid build arg name {self.name!r}",
               "name build args like shell variables: letters, digits and _ (build.build-args)")

    def render(self) -> str:
        return f"${{{self.name}}}"


def image(text: str) -> ImageRef:
    """A FROM image as written (`debian:bookworm`, `scratch`, `host:5000/repo:tag@sha256:...`),
    in the one image-reference grammar; a bad one is a DockerfileError."""
    try:
        return parse_reference(text, bare=True)
    except InvalidReference as exc:
        raise DockerfileError(exc.message, hint=exc.hint) from None


def quote_word(word: str) -> str:
    """Shell-quote one word so it stays one word whatever it holds: bare when it holds only
    safe characters and globs; a glob with build-arg references as bare pieces and `"${NAME}"`
    (the glob still matches, the reference cannot split); anything else double-quoted with
    `${NAME}` left live and every other `$`, backtick, `"` and backslash escaped."""
    _one_line(word, "a shell word")
    if word == "$@":
        return '"$@"'
    if _SAFE_WORD.fullmatch(word):
        return word
    parts = _PARTS.findall(word)
    if any(c in word for c in "*?") and "".join(a or b for a, b in parts) == word:
        return "".join(f'"{ref}"' if ref else safe for ref, safe in parts)
    return f'"{_in_double_quotes(word)}"'


@dataclasses.dataclass(**_KW)
class Command:
    """One shell command: a head (program and subcommand) and argument groups.

    Each group is written on one line when the command is long (`("--extra", "ep")`).
    `unordered` words are sorted and de-duplicated: package lists whose order does not matter.
    """

    head: tuple[str, ...]
    groups: tuple[tuple[str, ...], ...] = ()
    unordered: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check(bool(self.head) and all(self.head), "a command needs a non-empty head", BUG_HINT)
        _check(all(g and all(g) for g in self.groups), f"empty argument in {self.head!r}",
               "remove the empty string from the list key that feeds this command")
        _check(all(self.unordered), f"empty word in {self.head!r}",
               "remove the empty string from the list key that feeds this command")

    @property
    def words(self) -> tuple[str, ...]:
        tail = tuple(w for g in self.groups for w in g) + tuple(sorted(set(self.unordered)))
        return self.head + tail

    def render(self) -> str:
        lines = [" ".join(quote_word(w) for w in g) for g in self.groups]
        lines += [quote_word(w) for w in sorted(set(self.unordered))]
        head = " ".join(quote_word(w) for w in self.head)
        flat = " ".join([head, *lines])
        if len(flat) <= _ONE_LINE:
            return flat
        return f" \\\n{_INDENT}".join([head, *lines])


@dataclasses.dataclass(**_KW)
class Shell:
    """A raw shell fragment (a conditional, a redirect) rendered verbatim."""

    text: str

    def __post_init__(self) -> None:
        _check(bool(self.text.strip()), "a shell fragment must be one non-empty line", BUG_HINT)
        _one_line(self.text, "a shell fragment")

    def render(self) -> str:
        return self.text


@dataclasses.dataclass(**_KW)
class Comment:
    """A `#` comment line; generated files explain their own decisions."""

    text: str

    def __post_init__(self) -> None:
        _one_line(self.text, "a comment")

    def render(self) -> str:
        return f"# {self.text}".rstrip()


@dataclasses.dataclass(**_KW)
class Arg:
    """`ARG NAME[=default]`."""

    name: str
    default: str | None = None

    def __post_init__(self) -> None:
        _check(bool(_NAME.fullmatch(self.name)), f"invalid ARG name {self.name!r}",
               "name build args like shell variables: letters, digits and _ (build.build-args)")
        if self.default is not None:
            _one_line(self.default, f"the ARG {self.name} default")

    def render(self) -> str:
        if self.default is None:
            return f"ARG {self.name}"
        return f"ARG {self.name}={_quoted_value(self.default)}"


def _quoted_value(value: str) -> str:
    """An ARG/ENV/LABEL value as Docker reads it: double-quoted (JSON escapes), a `${NAME}`
    reference left live, any other `$` escaped so Docker substitutes nothing else."""
    return re.sub(r"\$(?!\{[A-Za-z_][A-Za-z0-9_]*\})", r"\\$", json.dumps(value))


def _pairs(kind: str, pairs: tuple[tuple[str, str], ...], key: re.Pattern[str]) -> str:
    _check(bool(pairs), f"{kind} needs at least one key", BUG_HINT)
    names = [k for k, _ in pairs]
    _check(len(set(names)) == len(names), f"duplicate {kind} key in {names!r}",
           f"set each {kind} key once")
    for k, v in pairs:
        _check(bool(key.fullmatch(k)), f"invalid {kind} key {k!r}",
               f"write the key to match {key.pattern}")
        _one_line(v, f"the {kind} value for {k!r}")
    body = [f"{k}={_quoted_value(v)}" for k, v in sorted(pairs)]
    return f"{kind} " + f" \\\n{_INDENT}".join(body)


@dataclasses.dataclass(**_KW)
class Env:
    """`ENV K=V ...`; keys sorted (values in one ENV see only earlier instructions)."""

    pairs: tuple[tuple[str, str], ...]

    def render(self) -> str:
        return _pairs("ENV", self.pairs, _NAME)


@dataclasses.dataclass(**_KW)
class Label:
    """`LABEL k=v ...`; keys sorted."""

    pairs: tuple[tuple[str, str], ...]

    def render(self) -> str:
        return _pairs("LABEL", self.pairs, re.compile(r"[a-z0-9][a-z0-9.-]*"))


@dataclasses.dataclass(**_KW)
class Run:
    """`RUN a && b && ...`: commands chained with `&&`, so any failure fails the build.
    `uncached_fileless`: it writes no file and kaniko never takes it from its cache (it runs
    under a build arg the cluster job sets anew), so upstream kaniko adds no layer for it; the
    fork adds an empty one and BuildKit one of the directories its mounts touch
    (dockerfile/layers.py)."""

    commands: tuple[Command | Shell, ...]
    uncached_fileless: bool = False

    def __post_init__(self) -> None:
        _check(bool(self.commands), "RUN needs at least one command", BUG_HINT)

    def render(self) -> str:
        return "RUN " + " \\\n && ".join(c.render() for c in self.commands)


@dataclasses.dataclass(**_KW)
class Copy:
    """`COPY [--from=stage] src... dest`."""

    sources: tuple[str, ...]
    dest: str
    from_stage: str | None = None

    def __post_init__(self) -> None:
        _check(bool(self.sources) and all(self.sources), "COPY needs sources", BUG_HINT)
        _check(bool(self.dest), "COPY needs a destination", BUG_HINT)
        for path in (*self.sources, self.dest):
            _one_line(path, "a COPY path")
            _check(bool(re.fullmatch(r"[A-Za-z0-9_./+@-]+", path)) and not path.startswith("-"),
                   f"a COPY path is letters, digits and '_./+@-' only, not {shown(path)}",
                   "rename the path (a local path source or build.wheelhouse) to those characters")
        _check(self.from_stage is None or bool(_STAGE.fullmatch(self.from_stage)),
               f"invalid COPY --from stage {self.from_stage!r}", BUG_HINT)

    def render(self) -> str:
        flag = f"--from={self.from_stage} " if self.from_stage else ""
        return f"COPY {flag}{' '.join(self.sources)} {self.dest}"


@dataclasses.dataclass(**_KW)
class Workdir:
    """`WORKDIR /abs/path`. `exists`: an earlier instruction of the stage's lineage makes the
    directory, so this one only sets the working directory and makes no layer of it (kaniko's
    layer of a directory it creates is a new blob on every build: its time)."""

    path: str
    exists: bool = False

    def __post_init__(self) -> None:
        _check(bool(re.fullmatch(r"/[A-Za-z0-9_./+-]*", self.path)),
               f"WORKDIR must be an absolute path of plain characters: {shown(self.path)}", BUG_HINT)

    def render(self) -> str:
        return f"WORKDIR {self.path}"


@dataclasses.dataclass(**_KW)
class User:
    """`USER name[:group]`."""

    name: str

    def __post_init__(self) -> None:
        _check(bool(re.fullmatch(r"[a-z0-9_][a-z0-9_:-]*", self.name)),
               f"invalid USER {self.name!r}", BUG_HINT)

    def render(self) -> str:
        return f"USER {self.name}"


@dataclasses.dataclass(**_KW)
class Entrypoint:
    """`ENTRYPOINT ["exec", "form"]` (exec form only: signals reach the process)."""

    argv: tuple[str, ...]

    def __post_init__(self) -> None:
        _check(bool(self.argv), "ENTRYPOINT needs argv", BUG_HINT)
        for word in self.argv:
            _one_line(word, "an ENTRYPOINT argument")

    def render(self) -> str:
        return f"ENTRYPOINT {json.dumps(list(self.argv))}"


@dataclasses.dataclass(**_KW)
class Cmd:
    """`CMD ["exec", "form"]`."""

    argv: tuple[str, ...]

    def __post_init__(self) -> None:
        _check(bool(self.argv), "CMD needs argv", BUG_HINT)
        for word in self.argv:
            _one_line(word, "a CMD argument")

    def render(self) -> str:
        return f"CMD {json.dumps(list(self.argv))}"


Instruction = Comment | Arg | Env | Label | Run | Copy | Workdir | User | Entrypoint | Cmd


@dataclasses.dataclass(**_KW)
class Stage:
    """`FROM base AS name` and its instructions; `base` is an image or an earlier stage."""

    name: str
    base: ImageRef | ArgImage | str  # str: the name of an earlier stage
    instructions: tuple[Instruction, ...] = ()
    comment: str = ""

    def __post_init__(self) -> None:
        _check(bool(_STAGE.fullmatch(self.name)), f"invalid stage name {self.name!r}", BUG_HINT)
        for line in self.comment.splitlines():
            _one_line(line, "a stage comment line")

    def render(self) -> str:
        base = self.base if isinstance(self.base, str) else (
            self.base.render() if isinstance(self.base, ArgImage) else str(self.base))
        head = [f"# {line}".rstrip() for line in self.comment.splitlines()]
        lines = [*head, f"FROM {base} AS {self.name}"]
        lines += [i.render() for i in self.instructions]
        return "\n".join(lines)


@dataclasses.dataclass(**_KW)
class Dockerfile:
    """Global ARGs (usable in FROM lines) and stages in build order."""

    stages: tuple[Stage, ...]
    global_args: tuple[Arg, ...] = ()
    header: tuple[str, ...] = ()  # comment lines at the top of the file

    def __post_init__(self) -> None:
        _check(bool(self.stages), "a Dockerfile needs at least one stage", BUG_HINT)
        for line in self.header:
            _one_line(line, "a header comment line")
        arg_names = [a.name for a in self.global_args]
        _check(len(set(arg_names)) == len(arg_names), f"duplicate global ARG in {arg_names!r}",
               "give each build arg one name (build.build-args repeats a name gpurl sets)")
        seen: list[str] = []
        for stage in self.stages:
            _check(stage.name not in seen, f"duplicate stage name {stage.name!r}", BUG_HINT)
            if isinstance(stage.base, str):
                _check(stage.base in seen, f"stage {stage.name!r} builds on unknown or later "
                       f"stage {stage.base!r}", BUG_HINT)
            elif isinstance(stage.base, ArgImage):
                var = stage.base.name
                _check(var in arg_names, f"stage {stage.name!r} uses ${{{var}}} in FROM, which "
                       "is not a global ARG", BUG_HINT)
            for ins in stage.instructions:
                if isinstance(ins, Copy) and ins.from_stage is not None:
                    _check(ins.from_stage in seen, f"COPY --from={ins.from_stage} in stage "
                           f"{stage.name!r} names no earlier stage", BUG_HINT)
            seen.append(stage.name)

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise DockerfileError(f"no stage named {name!r}",
                              hint=BUG_HINT)


def render(dockerfile: Dockerfile) -> str:
    """The Dockerfile text: header, global ARGs, stages separated by blank lines."""
    blocks: list[str] = []
    top = [f"# {line}".rstrip() for line in dockerfile.header]
    top += [a.render() for a in dockerfile.global_args]
    if top:
        blocks.append("\n".join(top))
    blocks += [s.render() for s in dockerfile.stages]
    return "\n\n".join(blocks) + "\n"
