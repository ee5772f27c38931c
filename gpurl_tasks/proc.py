"""The one place that runs external programs.

Every command is a list (never a shell string), the program is looked up first so a
missing tool fails with "couldn't find X in PATH" instead of a traceback, the command
line is echoed as `+ cmd` with secrets redacted, and the exit status is always checked.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from gpurl_tasks.credentials import Secret, redact
from gpurl_tasks.errors import GpurlError

__all__ = ["CommandFailed", "Completed", "ProgramNotFound", "find_program", "format_command",
           "run"]


class ProgramNotFound(GpurlError):
    """A required external program is not installed."""


class CommandFailed(GpurlError):
    """A command exited non-zero (or timed out); output is kept, redacted, for the caller."""

    def __init__(self, message: str, *, returncode: int | None, stdout: str, stderr: str,
                 hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Completed:
    """A finished command: exit status and decoded output."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def find_program(name: str, *, path: str | None = None) -> str:
    """Absolute path of `name` (or `name` itself when it is a path to an executable)."""
    if os.sep in name:
        if os.access(name, os.X_OK) and Path(name).is_file():
            return name
        raise ProgramNotFound(f"couldn't find {name}: not an executable file")
    found = shutil.which(name, path=path)
    if found is None:
        raise ProgramNotFound(f"couldn't find {name} in PATH",
                              hint=f"install {name} or add it to PATH")
    return found


def format_command(argv: Sequence[str], secrets: Iterable[str | Secret] = ()) -> str:
    """The shell-quoted command line with every secret value replaced by a placeholder."""
    secrets = tuple(secrets)
    return shlex.join(redact(arg, secrets) for arg in argv)


def _echo_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    secrets: Iterable[str | Secret] = (),
    check: bool = True,
    timeout: float | None = None,
    echo: Callable[[str], None] | None = _echo_stderr,
    path: str | None = None,
) -> Completed:
    """Run `argv` and capture its output; raise CommandFailed on a non-zero exit if `check`.

    `env` replaces the environment when given; `path` is where the program is looked up
    (default: PATH of `env`, else of this process). Output and messages are redacted.
    """
    secrets = tuple(secrets)
    lookup = path if path is not None else (env or os.environ).get("PATH")
    program = find_program(argv[0], path=lookup)
    shown = format_command(argv, secrets)
    if echo is not None:
        echo(f"+ {shown}")
    try:
        proc = subprocess.run(
            [program, *argv[1:]], cwd=cwd, env=dict(env) if env is not None else None,
            capture_output=True, text=True, errors="replace", timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        raise CommandFailed(f"{argv[0]} did not finish within {timeout:g}s: {shown}",
                            returncode=None, stdout=redact(out, secrets),
                            stderr=redact(err, secrets)) from None
    result = Completed(argv=tuple(argv), returncode=proc.returncode,
                       stdout=redact(proc.stdout, secrets), stderr=redact(proc.stderr, secrets))
    if check and proc.returncode != 0:
        last = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise CommandFailed(f"{argv[0]} exited with status {proc.returncode}: {last[0]}",
                            returncode=proc.returncode, stdout=result.stdout,
                            stderr=result.stderr, hint=f"the command was: {shown}")
    return result
