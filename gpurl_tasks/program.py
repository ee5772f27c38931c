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
import io
import re
from typing import Any

from invoke.collection import Collection
from invoke.exceptions import ParseError
from invoke.parser.argument import Argument
from invoke.program import Program

import gpurl_tasks
from gpurl_tasks import cli
from gpurl_tasks.errors import ConfigError

__all__ = ["GpurlProgram", "adopt", "gpurl_version", "usage_error"]

JSON_FLAGS = ("--json", "-j")
PROJECT_HELP = ("the project to work on: the nearest directory from DIR up whose pyproject.toml "
                "holds [tool.gpurl] (default: from the working directory up)")


def gpurl_version() -> str:
    """gpurl's own version, not invoke's: the one its generated files name
    (`gpurl_tasks.__version__`; the package's metadata says the same, a test checks it)."""
    return gpurl_tasks.__version__


# invoke's flags that choose a collection; the `gpurl` command has gpurl's built in
COLLECTION_FLAGS = ("-c", "--collection", "-r", "--search-root")


def _flag(name: str) -> str:
    name = name.replace("_", "-")
    return name if name.startswith("-") else (f"-{name}" if len(name) == 1 else f"--{name}")


def usage_error(exc: ParseError, *, collection: Collection | None, binary: str,
                argv: list[str]) -> ConfigError:
    """invoke's parse error as gpurl's error: what was wrong on the command line, and a hint
    (the closest task or flag, the value a flag takes, the task's usage line). `argv` names
    the task when the error does not (a flag's bad value)."""
    text = str(exc)
    if isinstance(exc, cli.FlagError):
        return ConfigError(text, hint=exc.hint)
    context = exc.context
    tasks = collection.task_names if collection is not None else {}
    task = next((t for t in (getattr(context, "name", None), *argv) if t in tasks), None)
    helped = f"{binary} {task} --help" if task else f"{binary} --help"
    if found := re.fullmatch(r"No idea what '(.*)' is!", text):
        token = found[1]
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
    if found := re.fullmatch(r"Flag <\w+: ([^ >(\[]+).*> needed value and was not given one!",
                             text):
        flag = _flag(found[1])
        argument = context.flags.get(flag) if context is not None else None
        described = getattr(argument, "help", None)
        return ConfigError(f"{flag} needs a value",
                           hint=f"{flag}: {described}" if described else f"see {helped}")
    if found := re.fullmatch(r"'(.*)' did not receive required positional arguments: (.*)",
                             text):
        names = re.findall(r"'([^']+)'", found[2])
        positional = [str(a.name) for a in context.positional_args] if context else names
        return ConfigError(f"{found[1]} needs {', '.join(n.upper() for n in names)}",
                           hint=f"{binary} {found[1]} "
                           + " ".join(n.upper() for n in positional) + f" (see {helped})")
    return ConfigError(text[:1].lower() + text[1:].rstrip("!"), hint=f"see {helped}")


class GpurlProgram(Program):
    """invoke's Program whose parse errors follow gpurl's exit-code contract."""

    def _as_json(self) -> bool:
        return any(arg in JSON_FLAGS or arg.startswith("--json=")
                   for arg in getattr(self, "argv", [])[1:])

    def _parsed(self, step: Any) -> None:
        with cli.clean_failures(as_json=self._as_json()):
            try:
                step()
            except ParseError as exc:
                raise usage_error(exc, collection=getattr(self, "collection", None),
                                  binary=self.binary_names[0],
                                  argv=getattr(self, "argv", [])[1:]) from None

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
        self._parsed(parse)

    def parse_cleanup(self) -> None:
        self._parsed(super().parse_cleanup)

    def print_task_help(self, name: str) -> None:
        """invoke's task help, its usage line naming the positional arguments (`diff
        [--options] FIRST SECOND`), which invoke lists only among the options."""
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            super().print_task_help(name)
        usage, _, rest = shown.getvalue().partition("\n")
        context = self.parser.contexts[name]
        for flag in {a.name for a in context.flags.values() if a.kind is list}:
            # invoke shows a repeatable flag as if it took no value (`--extra`)
            shown_flag = _flag(flag)
            rest = re.sub(rf"(?m)^(\s+{re.escape(shown_flag)})( {{7}}|\s)",
                          lambda m: m[1] + "=STRING" + (" " if len(m[2]) == 1 else ""), rest)
        positional = " ".join(a.name.upper() for a in context.positional_args)
        if positional:
            usage = usage.replace(f" {name} [--options] ", f" {name} [--options] {positional} ", 1)
        cli.out(f"{usage}\n{rest}".rstrip("\n"))

    def print_version(self) -> None:
        cli.out(f"gpurl {gpurl_version()}")


def adopt() -> None:
    """Make the running `invoke` program (invoke's own `invoke.main.program`, a plain
    Program) a GpurlProgram for the rest of its parse: `collection` calls this as invoke
    loads tasks.py, before the task's name and flags are parsed. invoke has no hook for its
    own program's class, so the instance's class is switched (GpurlProgram adds no state but
    the --project flag, which only the `gpurl` command parses)."""
    import invoke.main

    if type(invoke.main.program) is Program:
        invoke.main.program.__class__ = GpurlProgram
