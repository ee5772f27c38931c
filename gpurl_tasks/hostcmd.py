"""Local-path process helpers on top of `gpurl_tasks.proc` (the one place that runs programs).

Adds what the local path needs besides `proc.run`: a quiet run (setup steps report results,
not command lines), "install X" hints for missing tools, and starting the long-lived daemons
(dockerd, docker-registry) detached from this process. Nothing here prints.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from gpurl_tasks import proc
from gpurl_tasks.errors import BuildError

__all__ = ["alive", "quote", "require", "run", "spawn_detached", "tail"]


def quote(args: Sequence[str | Path]) -> str:
    """The command line as a user could paste it into a shell."""
    return " ".join(shlex.quote(str(a)) for a in args)


def tail(text: str, lines: int = 15) -> str:
    """The last `lines` lines of a program's output: where the reason for a failure usually is."""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def require(program: str, *, hint: str | None = None) -> str:
    """Absolute path of `program`, or a BuildError that says what to install."""
    try:
        return proc.find_program(program)
    except proc.ProgramNotFound:
        raise BuildError(f"couldn't find {program!r} on PATH",
                         hint=hint or f"install {program}") from None


def run(
    args: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    timeout: float | None = None,
) -> proc.Completed:
    """`proc.run` without echoing the command line; a missing program names what to install."""
    argv = [str(a) for a in args]
    require(argv[0])
    return proc.run(argv, env=env, check=check, timeout=timeout, echo=None)


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
        raise BuildError(f"could not start `{quote(args)}`: {tail(done.stderr, 3)}")
    return int(done.stdout.strip())


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie that nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
