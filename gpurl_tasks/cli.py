"""Helpers of the tasks (collection.py): the project, config from flags, clean failures, output.

This is the edge where errors become one line and an exit code, and where JSON and
human output are printed; the modules below never print or exit. Every task turns gpurl's
errors into one line and an exit code of `exitcodes.ExitCode`; `--json` prints exactly one
JSON object on stdout (a failure's is {"error", "hint", "exit_code"}), progress goes to
stderr. The only short flags are -p (--profile) and -j (--json), and --profile, --json and
--cluster have one help line for every task (SHARED_HELP) unless a task's own says otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import gc
import inspect
import json
import math
import os
import signal
import sys
import threading
import tomllib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from json.encoder import encode_basestring_ascii as _json_string
from pathlib import Path
from typing import Any, NoReturn, Protocol, TypeVar, get_args, overload

from invoke import tasks as invoke_tasks
from invoke.exceptions import Exit, ParseError
from invoke.parser.argument import Argument
from invoke.parser.context import ParserContext

import gpurl_tasks
from gpurl_tasks import proc, values
from gpurl_tasks.config import (
    Config,
    load_committed_config,
    load_config,
    load_profile_names,
    profile_from_env,
    unknown_variables,
)
from gpurl_tasks.errors import ConfigError, ExitCode, GpurlError
from gpurl_tasks.files import read_text
from gpurl_tasks.imageref import parse_reference
from gpurl_tasks.redact import known_secrets, redact

__all__ = [
    "DEBUG_ENV",
    "JSON_HELP",
    "ONE_VARIANT_HELP",
    "PROFILE_HELP",
    "READ_ONLY",
    "RULES_HELP",
    "VARIANT_HELP",
    "ConfigError",
    "EachVariant",
    "FlagError",
    "Outcome",
    "as_typed",
    "choice",
    "clean_failures",
    "cluster_flag",
    "config_for",
    "each_variant",
    "emit_json",
    "find_project",
    "finish",
    "given_flags",
    "json_text",
    "path_flag",
    "positional",
    "positive_flag",
    "profile_for_reference",
    "project_root",
    "rule_flags",
    "say",
    "start_directory",
    "task",
    "text_flag",
    "use_project",
    "variant_configs",
    "warn_unknown_variables",
]

PROJECT_HINT = "run `gpurl init` here, or pass --project DIR"
# What --dry-run covers (the README's contract): every task that changes a cluster, a registry
# or the local engine has it. These only read (a registry, the cluster, the lock, git) and
# change nothing, so they have none, and `TASK --dry-run` says so; the tasks in neither set
# write only local files and have their own preview (`generate --check`, `sizes --offline`)
# or run only on this machine (build-wheels, fill-index, serve-index).
READ_ONLY = frozenset({"check-wheels", "diff", "doctor", "plan", "rebuild-needed", "sbom",
                       "verify-layers", "watch"})
# how this program is run again for a task's help (`positional`): `invoke`, or `gpurl` (main)
RUNNING = ["invoke"]
_project: dict[str, Path] = {}  # "start": --project's DIR; "root": the project, found once


def find_project(start: Path) -> Path | None:
    """The nearest directory from `start` up (itself included) whose pyproject.toml holds a
    [tool.gpurl] table: the project gpurl works on, found as uv and nox find theirs."""
    for directory in (start, *start.parents):
        pyproject = directory / "pyproject.toml"
        if not pyproject.is_file():
            continue
        try:
            data = tomllib.loads(read_text(pyproject, what="pyproject.toml", error=ConfigError))
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{pyproject} is not valid TOML: {exc}",
                              hint="fix it, or pass --project DIR") from None
        tool = data.get("tool")
        if isinstance(tool, dict) and "gpurl" in tool:
            return directory
    return None


def use_project(directory: str | None) -> None:
    """`gpurl --project DIR`: look for the project from DIR instead of the working directory."""
    if directory is not None:
        _project.clear()
        _project["start"] = Path(directory)


def start_directory() -> Path:
    """Where the project is looked for: --project's DIR, else the working directory (`gpurl
    init`'s repository, which has no [tool.gpurl] yet)."""
    given = _project.get("start")
    start = (given or Path.cwd()).resolve()
    if given is not None and not start.is_dir():
        raise ConfigError(f"--project {given}: no such directory",
                          hint="name the project's directory, or one inside it")
    return start


def project_root() -> Path:
    """The project every task works on (computed once a process): the nearest ancestor of the
    working directory, or of --project's DIR, whose pyproject.toml holds [tool.gpurl]."""
    if "root" not in _project:
        start = start_directory()
        found = find_project(start)
        if found is None:
            raise ConfigError(f"no gpurl project: no pyproject.toml with [tool.gpurl] in {start} "
                              "or any directory above it", hint=PROJECT_HINT)
        _project["root"] = found
    return _project["root"]


# The only short flags, the same in every task (invoke would otherwise derive one from each
# flag's first free letter, so `-p` meant --probe in one task and --profile in another).
SHORT_FLAGS = {"profile": "p", "json": "j"}
HELP_FLAGS = ("-h", "--help")

# The help of the flags several tasks share. PROFILE_HELP, JSON_HELP and CLUSTER_HELP are what
# `task` shows for --profile, --json and --cluster unless the task's own help says otherwise.
PROFILE_HELP = ("config profile from [tool.gpurl.profiles] (default: default-profile, "
                "or $GPURL_PROFILE)")
JSON_HELP = ("print exactly one JSON object on stdout instead of the human output (an error's: "
             "error, hint, exit_code)")
CLUSTER_HELP = "iris cluster name (config key: cluster.name)"
SHARED_HELP = {"profile": PROFILE_HELP, "json": JSON_HELP, "cluster": CLUSTER_HELP}
VARIANT_HELP = ("a variant of the profile ([tool.gpurl.profiles.NAME.variants]; default: every "
                "variant)")
ONE_VARIANT_HELP = "the variant whose image this is for (default: the profile's first)"
# verify-layers' and pin's layer rules (`rule_flags` turns them into config overrides)
RULES_HELP = {
    "cap": "target cap per layer, e.g. 4GB (default: verify.cap, else layers.cap)",
    "hard_limit": "no layer may reach this size, e.g. 8GB (default: verify.hard-limit)",
    "min_layers": "the image needs at least this many layers (default: verify.min-layers)",
}


def not_a_flag(task: str, flag: str) -> tuple[str, str]:
    """(error, hint) for a flag `task` does not have; `--dry-run` of a task that only reads
    (READ_ONLY) says so, as the README's contract does."""
    if task in READ_ONLY and flag.partition("=")[0] == "--dry-run":
        return (f"{task} only reads: it changes nothing, so it has no --dry-run",
                f"run `invoke {task}` without it")
    return f"{task} has no flag {flag}", f"`invoke {task} --help` lists the flags"


class FlagError(ParseError):
    """A flag's or positional argument's value refused as invoke parses it, with a hint."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.hint = hint


def refuse_bare_repeats(tokens: Sequence[str], contexts: Iterable[ParserContext]) -> None:
    """A repeatable flag (`--extra`) given again without a value, as the last word or before
    another flag: invoke counts it as given, its list already holding the earlier value, and
    says nothing. So the command line is read for one before invoke parses it."""
    by_name = {name: c for c in contexts for name in (c.name, *c.aliases)}
    words: list[str] = []
    for token in tokens:  # invoke reads `--flag=value` as the flag, then its value
        flag, equals, value = token.partition("=")
        words += [flag, value] if equals and flag.startswith("--") else [token]
    context: ParserContext | None = None
    for i, word in enumerate(words):
        if context is not None and word in context.flags:
            argument = context.flags[word]
            after = words[i + 1] if i + 1 < len(words) else None
            if argument.kind is list and (after is None or after in context.flags
                                          or after in context.inverse_flags):
                raise FlagError(f"{word} needs a value", hint=f"{word}: {argument.help}"
                                if argument.help else f"give {word} a value")
        elif word in by_name:
            context = by_name[word]


class _Checked(Argument):
    """A task's flag or positional argument, checked as invoke parses it (the one place for
    every task): an empty value is refused wherever a value is required, never a silent
    fallback to the default (`--memory ''`, `--profile ''`); an integer flag's value must be
    one (`watch --interval abc`: a parse error naming the flag, not a ValueError)."""

    task = ""  # the task's name, for a positional argument (set by `_Task`)

    def set_value(self, value: Any, cast: bool = True) -> None:
        shown = self.names[0].upper() if self.positional else f"--{self.names[0]}"
        if self.positional and isinstance(value, str) and value.startswith("-") and \
                value not in HELP_FLAGS:  # no image, job id or pin starts so: a flag the
            raise FlagError(*not_a_flag(self.task, value))  # task lacks, taken for a value
        if self.kind in (str, int) and isinstance(value, str) and not value.strip():
            raise FlagError(f"{shown} is empty", hint=(
                f"give {shown} a value" if self.positional else f"leave {shown} out to use its default"))
        try:
            super().set_value(value, cast)
        except ValueError:
            raise FlagError(f"{shown} must be a whole number, not {value!r}",
                            hint=f"e.g. {shown} {self.default}" if self.default else
                            f"{shown} takes a whole number") from None


class _Trailing(_Checked):
    """A second positional argument. invoke hands `TASK --help` to a task's first positional
    as its value (`positional` then shows the help); this one is then not missing, so invoke
    does not refuse the command line before the help is shown."""

    lead: Argument

    @property
    def value(self) -> Any:
        value = super().value
        return "" if value is None and self.lead.value in HELP_FLAGS else value

    @value.setter
    def value(self, arg: str) -> None:
        self.set_value(arg, cast=True)


class _Task(invoke_tasks.Task[Callable[..., None]]):
    """An invoke task whose only short flags are SHORT_FLAGS', whose values are checked as
    they are parsed (`_Checked`), and whose positional arguments after the first still let
    `TASK --help` show the help."""

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        helps = dict(self.help)
        arguments: list[Argument] = super().get_arguments(ignore_unknown_help)
        self.help = helps  # invoke pops each flag's help: a second parse would show none
        lead = next((a for a in arguments if a.positional), None)
        checked: list[Argument] = []
        first: Argument | None = None  # the first positional argument, as checked
        for argument in arguments:
            help_ = argument.help
            shown = argument.default
            if help_ and shown not in (None, False, "", []) and "default" not in help_:
                help_ += f" (default: {shown})"
            # invoke builds plain Arguments; each is built again, by the same constructor, as
            # the class that checks it (`_Trailing` after the first positional argument)
            kind = _Trailing if argument.positional and argument is not lead else _Checked
            made = kind(names=argument.names, kind=argument.kind, default=argument.default,
                        help=help_, positional=argument.positional, optional=argument.optional,
                        incrementable=argument.incrementable, attr_name=argument.attr_name)
            if made.positional:
                made.task = self.name
            if argument is lead:
                first = made
            elif isinstance(made, _Trailing) and first is not None:
                made.lead = first  # invoke puts the positional arguments first, in order
            if made.kind is list:  # invoke starts a repeatable flag's raw value at [], so
                made.raw_value = None  # `--extra` with no value would pass as given none
            checked.append(made)
        return checked

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts: dict[str, Any] = super().arg_opts(name, default, taken_names)
        short = SHORT_FLAGS.get(opts["names"][0])
        if short:
            opts["names"].append(short)
        return opts


@contextlib.contextmanager
def _rare_full_collections() -> Iterator[None]:
    """A task's data (config, the parsed lock, its plans) lives until the task ends, and a
    full pass of the cycle collector walks all of it to find nothing: a plan of a large lock
    spent more in two such passes than in packing. The young generations still collect
    short-lived cycles; the full pass runs 10x rarer while the task runs."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old * 10)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


def task(*, interrupted: str = "interrupted",
         **options: Any) -> Callable[[Callable[..., Outcome | None]], Any]:
    """invoke's `@task` with SHORT_FLAGS as the only short flags (never generated ones), its
    body run under `clean_failures` and the outcome it returns printed by `finish` (`--json`
    read from the task's `json` or `json_` flag): a task's body only resolves and calls.
    A shared flag the task's help leaves out gets SHARED_HELP's line.
    `interrupted`: the line Ctrl-C ends with, `{flag}` replaced by the task's argument."""
    def decorate(body: Callable[..., Outcome | None]) -> Any:
        signature = inspect.signature(body)
        names = {name.rstrip("_") for name in signature.parameters}
        helps = {**{k: v for k, v in SHARED_HELP.items() if k in names},
                 **options.get("help", {})}

        @functools.wraps(body)
        def run(*args: Any, **kwargs: Any) -> None:
            flags = signature.bind(*args, **kwargs).arguments
            as_json = bool(flags.get("json", flags.get("json_", False)))
            with clean_failures(interrupted.format_map(flags), as_json=as_json), \
                    _rare_full_collections():
                outcome = body(*args, **kwargs)
                if outcome is not None:
                    finish(outcome, as_json=as_json)

        return invoke_tasks.task(klass=_Task, auto_shortflags=False,
                                 **{**options, "help": helps})(run)
    return decorate


_N = TypeVar("_N", int, float)
_Text = TypeVar("_Text", str, str | None)


def config_for(profile: str | None = None, *, variant: str | None = None,
               committed: bool = False, default: str | None = None, **overrides: Any) -> Config:
    """Resolve the config for a task; flag names map to dotted keys ("layers__size_cache").

    `committed`: pyproject only (see `load_committed_config`); the profile may still come from
    $GPURL_PROFILE. `default`: the task's own profile when neither --profile nor
    $GPURL_PROFILE names one (else the config's default-profile).
    """
    if default is not None:
        profile = profile or profile_from_env() or default
    variant = text_flag("--variant", variant)
    warn_unknown_variables(os.environ)
    if committed:
        return load_committed_config(project_root(), profile, variant)
    dotted: Mapping[str, Any] = {k.replace("__", ".").replace("_", "-"): v
                                 for k, v in overrides.items()}
    return load_config(project_root(), profile=profile, overrides=dotted, variant=variant)


_WARNED: set[str] = set()


def warn_unknown_variables(env: Mapping[str, str]) -> None:
    """One warning line per GPURL_* variable nothing reads (once a process), with the
    closest one that is read: `GPURL_LAYERS_CAPP=2GB` is a typo, not a setting."""
    for name, close in unknown_variables(env):
        if name not in _WARNED:
            _WARNED.add(name)
            say(f"warning: {name} is not a gpurl variable (ignored)"
                + (f"; did you mean {close}?" if close else "; every variable is in docs/config.md"))


def variant_configs(profile: str | None, variant: str | None, *, ref: str | None = None,
                    single: str | None = None, strict: bool = False,
                    **overrides: Any) -> tuple[Config, ...]:
    """The config of `variant`, or of every variant of the profile when none is named (one
    config for a profile without variants). A --ref names one image: its variant is the one
    whose tag prefix its tag carries, else (`strict`: an error) the profile's first. `single`:
    a given flag that only makes sense for one variant (--variable), which needs --variant."""
    ref = text_flag("--ref", ref)
    if ref and not profile and not profile_from_env():
        profile, note = profile_for_reference(project_root(), ref)
        if note:
            say(note)
    config = config_for(profile, variant=variant, **overrides)
    if variant or len(config.variants) < 2:
        return (config,)
    configs = tuple(config.for_variant(v) for v in config.variants)
    names = ", ".join(v.name for v in config.variants)
    tag = (ref or "").split("@", 1)[0].rsplit("/", 1)[-1].partition(":")[2]
    for each in configs:
        if each.registry.is_immutable_tag(tag):
            return (each,)
    if single:
        raise ConfigError(f"{single} is for one image but profile {config.profile!r} has "
                          f"variants ({names})", hint="add --variant NAME")
    if ref is None:
        return configs
    if strict and not tag:  # a bare digest: nothing says which launcher variable it belongs in
        raise ConfigError(f"--ref {ref} carries no variant's tag (variants: {names})",
                          hint="add --variant NAME to say which variant it is")
    return configs[:1]


@dataclasses.dataclass(frozen=True)
class EachVariant:
    """One task's outcomes over several variants: each under its name, the worst exit code."""

    outcomes: tuple[tuple[str, Outcome], ...]

    @property
    def exit_code(self) -> int:
        """The most severe: a failure's code wins over any answer's (rebuild-needed's 10 and
        11 are answers, its errors 1 and 2 failures), then the highest code."""
        codes = [o.exit_code for _, o in self.outcomes]
        failures = [o.exit_code for _, o in self.outcomes
                    if o.exit_code and getattr(o, "verdict", None) is None]
        return max(failures or codes, default=0)

    @property
    def failure(self) -> str | None:
        """The closing line: each variant's verdict when the outcomes are answers, else each
        failed variant's failure."""
        lines = []
        for name, o in self.outcomes:
            verdict = getattr(o, "verdict", None)
            if verdict is not None:
                lines.append(f"{name}: {verdict}")
            elif o.exit_code:
                lines.append(f"{name}: {getattr(o, 'failure', None) or 'failed'}")
        return "; ".join(lines) if self.exit_code else None

    def human(self) -> str:
        if len(self.outcomes) == 1:
            return self.outcomes[0][1].human()
        return "\n\n".join(f"== variant {name} ==\n{o.human()}" for name, o in self.outcomes)

    def to_json(self) -> Any:
        """One shape whatever the number of variants (a script reads `variants.NAME`; a
        profile without declared variants has the one named `default`)."""
        return {"variants": {name: o.to_json() for name, o in self.outcomes}}


def each_variant(configs: tuple[Config, ...], run: Callable[[Config], Outcome]) -> EachVariant:
    """Run a task's one function for each variant's config."""
    return EachVariant(tuple((c.variant.name, run(c)) for c in configs))


# An exception gpurl did not expect (a bug, not bad input) exits with ExitCode.INTERNAL, so a
# script can tell the two apart; GPURL_DEBUG=1 shows its traceback.
DEBUG_ENV = "GPURL_DEBUG"


def _redacted(text: str) -> str:
    """`text` without any registry secret from the environment (no `gh` call on this path)."""
    return redact(text, known_secrets(os.environ, gh_token=lambda: None))


def profile_for_reference(root: Path, text: str, env: Mapping[str, str] | None = None
                          ) -> tuple[str | None, str]:
    """The profile whose registry host and repository are `text`'s, and a line saying whose
    rules apply ("" for the default profile; None: no profile matches, the default's apply)."""
    default = load_config(root, env=env)
    ref = parse_reference(text, default_host=default.registry.host)
    for name in load_profile_names(root):
        registry = load_config(root, profile=name, env=env).registry
        if (registry.host, registry.repository) == (ref.host, ref.repository):
            return name, "" if name == default.profile else (
                f"rules of profile {name!r} (its registry {registry.image} is the image's)")
    return None, (f"no profile's registry is {ref.name}: the rules of profile {default.profile!r} "
                  "(the default) apply; pass --profile NAME for another profile's")


@contextlib.contextmanager
def clean_failures(interrupted: str = "interrupted", *, as_json: bool = False) -> Iterator[None]:
    """The top-level handler of every task: a GpurlError becomes one actionable line and its
    exit code; Ctrl-C (SIGINT) the line `interrupted` and ExitCode.INTERRUPTED, never a
    failure's code; any other exception one "internal error" line and ExitCode.INTERNAL (its
    traceback with GPURL_DEBUG=1); SIGTERM ends like Ctrl-C, as ExitCode.TERMINATED. Never a
    traceback for input a user can give. With `as_json` the failure is also one JSON object
    on stdout: {"error", "hint", "exit_code"} (redacted like the line on stderr)."""
    previous = _on_sigterm(_terminate)
    try:
        yield
    except GpurlError as exc:
        _fail(exc.message, exc.hint, exc.exit_code, as_json=as_json)
    except KeyboardInterrupt:
        _fail(interrupted, None, ExitCode.INTERRUPTED, as_json=as_json, prefix="")
    except _Terminated:
        _fail(interrupted.replace("interrupted", "terminated (SIGTERM)", 1), None,
              ExitCode.TERMINATED, as_json=as_json, prefix="")
    except (Exit, SystemExit):
        raise
    except BrokenPipeError:  # invoke's own output (`invoke --list | head -1`), not ours
        _pipe_closed()
    except Exception as exc:  # the one place a bug is caught: see ExitCode.INTERNAL
        if os.environ.get(DEBUG_ENV, "").strip() not in ("", "0"):
            raise
        detail = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        _fail(f"internal error: {detail}", f"set {DEBUG_ENV}=1 for the traceback",
              ExitCode.INTERNAL, as_json=as_json, prefix="", inline_hint=True)
    finally:  # the early handler would print a second object after the task's: the default
        _on_sigterm(signal.SIG_DFL if previous is gpurl_tasks.terminated_early else previous)


class _Terminated(BaseException):
    """SIGTERM arrived: unwinds the task like Ctrl-C's KeyboardInterrupt (never caught as an
    Exception by the code below), so its `finally` blocks run and it ends as TERMINATED."""


def _terminate(signum: int, frame: object) -> None:
    raise _Terminated


def _on_sigterm(handler: Any) -> Any:
    """Install `handler` for SIGTERM and return the one it replaces (None off the main
    thread, where Python cannot install one; a None `handler` changes nothing)."""
    if handler is None or threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, handler)


def as_typed(text: str) -> str:
    """`text` naming gpurl's tasks as the user runs them: messages say `invoke TASK`, and
    under the `gpurl` command (the same tasks and flags) that is `gpurl TASK`."""
    return text.replace("`invoke ", "`gpurl ") if RUNNING[0] == "gpurl_tasks" else text


def _fail(message: str, hint: str | None, code: int, *, as_json: bool, prefix: str = "error: ",
          inline_hint: bool = False, result: Any = None) -> NoReturn:
    """Exit with `code` after one line on stderr (and under --json one object on stdout;
    `result`: what the task found before it failed, kept under the object's "result")."""
    message, hint = as_typed(_redacted(message)), as_typed(_redacted(hint)) if hint else None
    if as_json:
        failure = {"error": message, "hint": hint, "exit_code": int(code)}
        emit_json(failure if result is None else {**failure, "result": result})
    line = prefix + message
    if hint:
        line += f"; {hint}" if inline_hint else f"\n  hint: {hint}"
    raise Exit(line, code=int(code)) from None


def say(message: str = "") -> None:
    """Human progress and diagnostics go to stderr so --json stdout stays parseable (without
    a secret of the environment, whatever value echoes it: a flag's included)."""
    print(as_typed(_redacted(message)), file=sys.stderr, flush=True)


def emit_json(obj: Any) -> None:
    """Exactly one JSON object on stdout."""
    out(json_text(obj))


class _Unusual(Exception):
    """A value `_indented` leaves to json.dumps (a subclass, a non-string key, NaN)."""


def json_text(obj: Any) -> str:
    """`json.dumps(obj, indent=2)`, the same text: built by joins of the C string encoder's
    output, as an indent makes json.dumps run its pure-Python encoder (the plan of a large
    lock prints a megabyte). Anything unusual is json.dumps's own (its text or its error)."""
    try:
        return _indented(obj, "\n")
    except (_Unusual, RecursionError):
        return json.dumps(obj, indent=2)


def _indented(value: Any, pad: str) -> str:
    kind = type(value)
    if kind is str:
        return _json_string(value)
    if kind is dict:
        if not value:
            return "{}"
        inner = pad + "  "
        items = []
        for key, item in value.items():
            if type(key) is not str:
                raise _Unusual
            items.append(f"{inner}{_json_string(key)}: {_indented(item, inner)}")
        return "{" + ",".join(items) + pad + "}"
    if kind is list or kind is tuple:
        if not value:
            return "[]"
        inner = pad + "  "
        return "[" + ",".join([inner + _indented(item, inner) for item in value]) + pad + "]"
    if value is None or kind is bool:
        return "null" if value is None else "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float and math.isfinite(value):
        return float.__repr__(value)
    raise _Unusual


def out(text: str) -> None:
    """One line (or block) on stdout, flushed. A reader that closed the pipe (`| head -1`)
    ends the task quietly: the rest of stdout goes nowhere and the exit status is
    ExitCode.PIPE_CLOSED (as `yes | head -1` sees), never a BrokenPipeError traceback. No
    secret of the environment is printed, in any form `redact` knows."""
    try:
        print(_redacted(text), flush=True)  # a value echoed may be a secret (`--cluster TOKEN`)
    except BrokenPipeError:
        _pipe_closed()


def _pipe_closed() -> NoReturn:
    """End quietly on a closed stdout: ExitCode.PIPE_CLOSED, nothing more written."""
    # stdout may still hold bytes the interpreter would flush at exit (and fail again)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise Exit(code=int(ExitCode.PIPE_CLOSED)) from None


class Outcome(Protocol):
    """What a task's one function returns: its human text, its JSON and its exit code (an
    outcome may also carry `failure`, the one stderr line a non-zero exit ends with, or
    `verdict`, its answer in a word when its exit code is an answer, not a failure:
    rebuild-needed's `image` is 10)."""

    @property
    def exit_code(self) -> int: ...

    def human(self) -> str: ...

    def to_json(self) -> Any: ...


def finish(outcome: Outcome, *, as_json: bool) -> None:
    """Print a task's outcome (one JSON object, or its human text) and exit with its code.
    An outcome that exits 2 (ExitCode.ERROR: a job unknown to iris, every probe failed) ends
    as every error does: one `error:` line with its `hint`, and under --json the error object
    with the outcome's own under "result"."""
    if outcome.exit_code == ExitCode.ERROR:
        failure = getattr(outcome, "failure", None)
        if failure and not as_json:  # the human text says more than the line (each failure)
            out(as_typed(outcome.human()))
        line = failure or outcome.human().splitlines()[0]
        _fail(line, getattr(outcome, "hint", None), ExitCode.ERROR, as_json=as_json,
              result=outcome.to_json() if as_json else None)
    if as_json:
        emit_json(outcome.to_json())
    else:
        text = outcome.human()
        if text:
            out(as_typed(text))
    if outcome.exit_code:
        raise Exit(getattr(outcome, "failure", None), code=outcome.exit_code)


def path_flag(value: str | None) -> str | None:
    """A path flag as the config cascade takes it: relative to where the user typed it."""
    if value is None:
        return None
    if not value.strip():
        raise ConfigError("a path flag is empty", hint="leave the flag out to use the config")
    return str(Path(value).resolve())


def text_flag(flag: str, value: str | None) -> str | None:
    """An optional text flag: absent is None (the default applies); empty is an error, never a
    silent fallback to the default (`--ref ''` must not pin another image than asked)."""
    if value is not None and not value.strip():
        raise ConfigError(f"{flag} is empty", hint=f"leave {flag} out to use its default")
    return value


def rule_flags(cap: str | None, hard_limit: str | None, min_layers: str | None) -> dict[str, Any]:
    """The layer rules' flags (RULES_HELP) as `config_for` overrides of verify.*."""
    return {"verify__cap": cap, "verify__hard_limit": hard_limit, "verify__min_layers": min_layers}


def given_flags(**flags: object) -> tuple[str, ...]:
    """The flags (`--no-cache`, from no_cache=True) that were given: set, not at their
    default; for a task to refuse the ones another backend takes."""
    return tuple(f"--{name.replace('_', '-')}" for name, value in flags.items() if value)


def cluster_flag(value: str | None) -> str | None:
    """--cluster NAME, checked as cluster.name is (None: the configured cluster)."""
    return None if value is None else values.plain_name(value, "--cluster")


def positive_flag(flag: str, value: str | float | None, kind: type[_N]) -> _N | None:
    """An optional numeric flag as `kind`, finite and above zero. invoke hands a flag whose
    default is None over as text, so it is converted here; `--cpu -4` or `--timeout x` is an
    error, never passed on."""
    if value is None:
        return None
    try:
        number = kind(value)
    except (TypeError, ValueError):
        number = None
    if number is None or not 0 < number < float("inf"):
        raise ConfigError(f"{flag} must be a positive {'integer' if kind is int else 'number'},"
                          f" not {value!r}", hint=f"leave {flag} out to use the config")
    return number


def choice(flag: str, value: str | None, choices: Any) -> str | None:
    """An enumerated flag (a Literal of the config) checked once, with a "did you mean" hint."""
    allowed = get_args(choices)
    if value is None or value in allowed:
        return value
    close = difflib.get_close_matches(value, allowed, n=1)
    raise ConfigError(f"{flag} must be one of {', '.join(map(repr, allowed))}, not {value!r}",
                      hint=f"did you mean {close[0]!r}?" if close else f"pass one of them to {flag}")


@overload
def positional(task: str, value: str | None, *, needs: str, usage: str = "") -> str: ...


@overload
def positional(task: str, value: _Text) -> _Text: ...


def positional(task: str, value: str | None, *, needs: str | None = None, usage: str = "") -> str | None:
    """A task's required positional argument. invoke hands `TASK --help` to it as its value, so
    `--help` there shows the task's help (as `invoke --help TASK` does) instead of running.
    `needs`: what a missing (None or blank) one is, for the one-line error (hint: `usage`)."""
    if value in HELP_FLAGS:
        shown = proc.run([sys.executable, "-m", *RUNNING, "--help", task], echo=None)
        out(shown.stdout.rstrip("\n"))
        raise Exit(code=0)
    if needs and (value is None or not value.strip()):
        raise ConfigError(f"invoke {task} needs {needs}",
                          hint=f"usage: {usage}" if usage else f"see `invoke {task} --help`")
    return value
