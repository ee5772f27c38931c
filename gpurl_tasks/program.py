"""The command line itself: invoke's own parse errors through gpurl's contract, `--version`,
`--project`.

`invoke TASK` runs invoke's `invoke.main.program`, which parses its own flags, then loads
tasks.py, then parses the task's name and flags. tasks.py imports `collection`, which calls
`adopt()`, so from there on that program is a `GpurlProgram`: an unknown task or flag, a flag
without its value, a bad integer or a missing positional argument is one `error:` line with a
hint and exit 2 (one JSON object under --json), as a task's own bad input is. The `gpurl`
command (`__main__.main`) is the same program with `collection.ns` bundled in: it needs no
tasks.py, and `--project DIR` names the project.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import io
from collections.abc import Callable, Iterable

from invoke.collection import Collection
from invoke.exceptions import ParseError
from invoke.parser.argument import Argument
from invoke.parser.context import ParserContext, to_flag
from invoke.parser.parser import Parser
from invoke.program import Program

import gpurl_tasks
from gpurl_tasks import cli
from gpurl_tasks.errors import ConfigError

__all__ = ["GpurlProgram", "adopt", "gpurl_version", "refused_token", "usage_error"]

JSON_FLAGS = ("--json", "-j")
PROJECT_HELP = ("the project to work on: the nearest directory from DIR up whose pyproject.toml "
                "holds [tool.gpurl] (default: from the working directory up)")


def gpurl_version() -> str:
    """gpurl's own version, not invoke's: the one its generated files name
    (`gpurl_tasks.__version__`; the package's metadata says the same, a test checks it)."""
    return gpurl_tasks.__version__


# invoke's flags that choose a collection; the `gpurl` command has gpurl's built in
COLLECTION_FLAGS = ("-c", "--collection", "-r", "--search-root")


def _valued(spec: str) -> str:
    """A flag's help spec (`-e, --extra`) naming the value it takes, as invoke writes one."""
    return ", ".join(f"{name}=STRING" if name.startswith("--") else f"{name} STRING"
                     for name in spec.split(", "))


def _unknown(token: str, *, context: ParserContext | None, collection: Collection | None,
             binary: str, helped: str) -> ConfigError:
    """`token` names no task, and no flag of `context` (None: before any task's name)."""
    if token.startswith("-"):
        flags = sorted(context.flags) if context is not None else []
        close = difflib.get_close_matches(token, flags, n=1)
        named = getattr(context, "name", None)  # None: a flag before the task's name
        if named in cli.READ_ONLY and token.split("=")[0] == "--dry-run":
            message, hint = cli.not_a_flag(named, token)
            return ConfigError(message, hint=hint)
        if not named and token.split("=")[0] in COLLECTION_FLAGS:
            return ConfigError(f"{binary} has no flag {token}", hint=(
                f"{binary} runs gpurl's own tasks: run it inside the project, or pass "
                "--project DIR"))
        return ConfigError(f"{named or binary} has no flag {token}",
                           hint=(f"did you mean {close[0]}? " if close else "")
                           + f"{helped if named else binary + ' --help'} lists the flags")
    names = sorted(collection.task_names) if collection is not None else []
    close = difflib.get_close_matches(token, names, n=1)
    return ConfigError(f"no task {token!r}", hint=(f"did you mean {close[0]!r}? " if close
                                                   else "") + f"{binary} --list lists them")


def refused_token(parser: Parser, tokens: list[str]) -> str | None:
    """The token `parser` refused as no task, flag or value when it parsed `tokens`, if that
    was its error. The same parser with `ignore_unknown` (as invoke's core parse runs)
    parses the same tokens the same way up to that token and stops there: it leaves the
    token first in `unparsed`. Any other error it raises again, before any token is left."""
    probe = Parser(initial=parser.initial, contexts=parser.contexts.values(),
                   ignore_unknown=True)
    try:
        unparsed = probe.parse_argv(tokens).unparsed
    except ParseError:
        return None
    return unparsed[0] if unparsed else None


def _without_value(exc: ParseError, flags: Iterable[Argument]) -> Argument | None:
    """The flag given without the value it needs, of `flags`. invoke's ParseError names it
    only in its text, where it quotes the flag's repr (`Flag <Argument: cap> needed value
    ...`); no attribute of the error says which: the flag is the one whose own repr is
    quoted, never a name cut out of invoke's wording."""
    text = str(exc)
    return next((a for a in flags if a.takes_value and repr(a) in text), None)


def usage_error(exc: ParseError, *, unknown: str | None, collection: Collection | None,
                binary: str, argv: list[str], core: Iterable[Argument] = ()) -> ConfigError:
    """invoke's parse error as gpurl's error: what was wrong on the command line, and a hint
    (the closest task or flag, the value a flag takes, the task's usage line). `unknown`: the
    token invoke refused as no task or flag, if that was the error; `core`: the program's own
    flags, which a task's part of the command line may give too; `argv` names the task when
    the error does not (a flag's bad value)."""
    if isinstance(exc, cli.FlagError):
        return ConfigError(str(exc), hint=exc.hint)
    context = exc.context
    tasks = collection.task_names if collection is not None else {}
    task = next((t for t in (getattr(context, "name", None), *argv) if t in tasks), None)
    helped = f"{binary} {task} --help" if task else f"{binary} --help"
    if unknown is not None:
        return _unknown(unknown, context=context, collection=collection, binary=binary,
                        helped=helped)
    own = list(context.flags.values()) if context is not None else []
    if (argument := _without_value(exc, [*own, *core])) is not None:
        flag = to_flag(argument.name or "")
        described = argument.help if argument in own else None  # a core flag: the task's help
        return ConfigError(f"{flag} needs a value",
                           hint=f"{flag}: {described}" if described else f"see {helped}")
    if context is not None and context.missing_positional_args:
        missing = ", ".join(str(a.name).upper() for a in context.missing_positional_args)
        positional = " ".join(str(a.name).upper() for a in context.positional_args)
        return ConfigError(f"{context.name} needs {missing}",
                           hint=f"{binary} {context.name} {positional} (see {helped})")
    text = str(exc)
    return ConfigError(text[:1].lower() + text[1:].rstrip("!"), hint=f"see {helped}")


class GpurlProgram(Program):
    """invoke's Program whose parse errors follow gpurl's exit-code contract."""

    def _as_json(self) -> bool:
        return any(arg in JSON_FLAGS or arg.startswith("--json=")
                   for arg in getattr(self, "argv", [])[1:])

    def _parsed(self, step: Callable[[], None],
                unknown: Callable[[], str | None] = lambda: None) -> None:
        """Run one of invoke's parse steps; its ParseError becomes gpurl's error. `unknown`
        says which token, if any, the step refused as no task or flag."""
        with cli.clean_failures(as_json=self._as_json()):
            try:
                step()
            except ParseError as exc:  # gpurl's own (FlagError) say all there is
                refused = None if isinstance(exc, cli.FlagError) else unknown()
                raise usage_error(exc, unknown=refused, core=self.initial_context.flags.values(),
                                  collection=getattr(self, "collection", None),
                                  binary=self.binary_names[0],
                                  argv=getattr(self, "argv", [])[1:]) from None

    def _help_of_no_task(self) -> str | None:
        """`--help NAME` where NAME is no task: invoke's parse_cleanup refuses it (its own
        condition, checked on the same values)."""
        named = self.args.help.value
        return named if named and named is not True and named not in self.parser.contexts \
            else None

    def core_args(self) -> list[Argument]:
        """invoke's core flags, and gpurl's --project (the `gpurl` command's; `invoke` parsed
        its own before tasks.py made it a GpurlProgram)."""
        return [*super().core_args(), Argument(names=("project",), help=PROJECT_HELP)]

    def parse_core(self, argv: list[str] | None) -> None:
        self._parsed(lambda: super(GpurlProgram, self).parse_core(argv))
        if "project" in self.args:
            cli.use_project(self.args.project.value)

    def parse_tasks(self) -> None:
        def parse() -> None:
            cli.refuse_bare_repeats(self.core.unparsed, self.collection.to_contexts())
            super(GpurlProgram, self).parse_tasks()
        self._parsed(parse, unknown=lambda: refused_token(self.parser, self.core.unparsed))

    def parse_cleanup(self) -> None:
        self._parsed(super().parse_cleanup, unknown=self._help_of_no_task)

    def print_task_help(self, name: str) -> None:
        """invoke's task help, laid out as invoke lays it out and from invoke's own parts (the
        task's help lines, its column printer), with what invoke leaves out: the positional
        arguments on the usage line (`diff [--options] FIRST SECOND`; invoke lists them only
        among the options) and a repeatable flag's value (`--extra=STRING`; invoke shows it as
        if it took none)."""
        context = self.parser.contexts[name]
        repeatable = {context.help_for(to_flag(a.name))[0] for a in context.flags.values()
                      if a.kind is list}
        options = [(_valued(spec) if spec in repeatable else spec, text)
                   for spec, text in context.help_tuples()]
        positional = "".join(f"{a.name.upper()} " for a in context.positional_args)
        docstring = inspect.getdoc(self.collection[name])
        lines = [f"Usage: {self.binary} [--core-opts] {name} "
                 f"{'[--options] ' if options else ''}{positional}[other tasks here ...]",
                 "", "Docstring:"]
        lines += [self.leading_indent + line if line.strip() else ""
                  for line in (docstring or "none").splitlines()]
        lines += ["", "Options:"]
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):  # invoke's column printer prints
            if options:
                self.print_columns(options)
        lines.append(shown.getvalue() or self.leading_indent + "none")
        cli.out("\n".join(lines).rstrip("\n"))

    def print_version(self) -> None:
        cli.out(f"gpurl {gpurl_version()}")


def adopt() -> None:
    """Make the running `invoke` program (invoke's own `invoke.main.program`, a plain
    Program) a GpurlProgram for the rest of its parse: `collection` calls this as invoke
    loads tasks.py, before the task's name and flags are parsed.

    The one place gpurl goes around invoke's API, as invoke has none for it: the `invoke`
    command is that instance, made as invoke is imported, and no constructor argument,
    config key, loader or collection hook chooses its class or sees its parse errors (its
    `run` prints them and exits 1). So the instance's class is switched, once, from exactly
    Program: from then on invoke calls GpurlProgram's documented hooks (parse_tasks,
    parse_cleanup, print_task_help), and GpurlProgram adds no state that instance lacks but
    the --project flag, which only the `gpurl` command parses."""
    import invoke.main

    if type(invoke.main.program) is Program:
        invoke.main.program.__class__ = GpurlProgram
