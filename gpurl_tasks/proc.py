"""The one place that runs external programs.

Every command is a list (never a shell string), the program is looked up first so a
missing tool fails with "couldn't find X in PATH" instead of a traceback, the command
line is echoed as `+ cmd` with secrets redacted, and the exit status is always checked.
Long-lived daemons (dockerd, docker-registry) are started detached from here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from gpurl_tasks.errors import BuildError, GpurlError
from gpurl_tasks.redact import Secret, redact

__all__ = ["CommandFailed", "Completed", "ProgramNotFound", "alive", "find_program", "format_command",
           "pipe", "require", "run", "run_quiet", "spawn_detached", "stream", "tail"]


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
        raise ProgramNotFound(f"couldn't find {name}: not an executable file",
                              hint="the path must name an executable file (chmod +x), "
                                   "or give the name alone to search PATH")
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
    errors: str = "replace",
) -> Completed:
    """Run `argv` and capture its output; raise CommandFailed on a non-zero exit if `check`.

    `env` replaces the environment when given; `path` is where the program is looked up
    (default: PATH of `env`, else of this process). Output and messages are redacted.
    `errors` decodes the output ("surrogateescape" keeps undecodable bytes recoverable).
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
            capture_output=True, text=True, errors=errors, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        raise CommandFailed(f"{argv[0]} did not finish within {timeout:g}s: {shown}",
                            returncode=None, stdout=redact(out, secrets),
                            stderr=redact(err, secrets),
                            hint="run it by hand to see where it stops (often a "
                                 "network wait or a held lock)") from None
    result = Completed(argv=tuple(argv), returncode=proc.returncode,
                       stdout=redact(proc.stdout, secrets), stderr=redact(proc.stderr, secrets))
    if check and proc.returncode != 0:
        last = result.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise CommandFailed(f"{argv[0]} exited with status {proc.returncode}: {last[0]}",
                            returncode=proc.returncode, stdout=result.stdout,
                            stderr=result.stderr, hint=f"the command was: {shown}")
    return result


def tail(text: str, lines: int = 15) -> str:
    """The last `lines` lines of a program's output: where the reason for a failure usually is."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def require(program: str, *, hint: str | None = None) -> str:
    """Absolute path of `program`, or a BuildError that says what to install."""
    try:
        return find_program(program)
    except ProgramNotFound:
        raise BuildError(f"couldn't find {program!r} on PATH",
                         hint=hint or f"install {program}") from None


def run_quiet(
    args: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
) -> Completed:
    """`run` without echoing the command line (setup steps report results, not commands);
    a missing program names what to install."""
    argv = [str(a) for a in args]
    require(argv[0])
    return run(argv, env=env, check=check, timeout=timeout, echo=None)


def spawn_detached(args: Sequence[str | Path], log_file: Path) -> int:
    """Start a long-lived daemon detached from us (own session, reparented); its pid.

    A short-lived `sh` starts it in the background and exits, so no `Popen` object of ours
    outlives the call and the daemon keeps running after this process ends.
    """
    argv = [require(str(args[0])), *(str(a) for a in args[1:])]
    log_file.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["/bin/sh", "-c", '"$@" >>"$GPURL_LOG" 2>&1 </dev/null & echo $!', "sh", *argv],
        env={**os.environ, "GPURL_LOG": str(log_file)}, capture_output=True, text=True,
        check=False, start_new_session=True,
    )
    if done.returncode != 0 or not done.stdout.strip().isdigit():
        raise BuildError(f"could not start `{format_command(argv)}`: {tail(done.stderr, 3)}",
                         hint=f"its log is {log_file}")
    return int(done.stdout.strip())


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie that nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stream(argv: Sequence[str], *, env: Mapping[str, str] | None = None,
           on_line: Callable[[str], None] | None = None,
           log_file: Path | None = None) -> tuple[int, str]:
    """Run `argv` with stdout and stderr merged, passing each line on as it comes (long builds
    show progress); the log is kept whole and, with `log_file`, written there too.
    Returns (exit status, whole log); the caller decides what a failure means."""
    program = require(argv[0])
    lines: list[str] = []
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(log_file.open("w")) if log_file else None
        child = stack.enter_context(subprocess.Popen(
            [program, *argv[1:]], env=dict(env) if env is not None else None,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace"))
        try:
            for line in child.stdout or ():
                lines.append(line)
                if sink:
                    sink.write(line)
                if on_line:
                    on_line(line.rstrip("\n"))
        except BaseException:
            child.kill()
            raise
        code = child.wait()
    return code, "".join(lines)


def pipe(first: Sequence[str], second: Sequence[str], *, timeout: float | None = None,
         ) -> Completed:
    """`first | second` without a shell (e.g. `tar -c | docker import -`); raises CommandFailed
    when either side fails, with the second's stderr."""
    producer = subprocess.Popen([require(first[0]), *first[1:]], stdout=subprocess.PIPE)
    try:
        done = subprocess.run([require(second[0]), *second[1:]], stdin=producer.stdout,
                              capture_output=True, check=False, timeout=timeout)
    finally:
        if producer.stdout is not None:
            producer.stdout.close()
        producer.wait()
    result = Completed(argv=(*first, "|", *second), returncode=done.returncode or producer.returncode,
                       stdout=done.stdout.decode(errors="replace"),
                       stderr=done.stderr.decode(errors="replace"))
    if result.returncode != 0:
        raise CommandFailed(f"`{format_command(first)} | {format_command(second)}` failed: "
                            f"{tail(result.stderr, 3)}", returncode=result.returncode,
                            stdout=result.stdout, stderr=result.stderr,
                            hint="the stderr above is the second command's; "
                                 "run both by hand to see which failed")
    return result
