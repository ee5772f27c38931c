"""Run a program on this host: one helper so every local-path subprocess behaves the same way.

Arguments are a list, never a shell string; the program is looked up first so a missing tool
fails with "install X" rather than a FileNotFoundError; a non-zero exit raises `BuildError`
carrying the command line and the tail of its output. Nothing here prints.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

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
    found = program if "/" in program and Path(program).exists() else shutil.which(program)
    if not found:
        raise BuildError(f"couldn't find {program!r} on PATH", hint=hint or f"install {program}")
    return found


def run(
    args: Sequence[str | Path],
    *,
    env: Mapping[str, str] | None = None,
    input_bytes: bytes | None = None,
    check: bool = True,
    timeout: float | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run `args` with stdout and stderr captured as text; raise BuildError when it fails."""
    argv = [require(str(args[0])), *(str(a) for a in args[1:])]
    try:
        done = subprocess.run(
            argv, env=dict(env) if env is not None else None, input=input_bytes,
            capture_output=True, check=False, timeout=timeout, cwd=cwd,
        )
    except subprocess.TimeoutExpired:
        raise BuildError(f"`{quote(args)}` did not finish within {timeout:.0f}s") from None
    out = done.stdout.decode(errors="replace")
    err = done.stderr.decode(errors="replace")
    if check and done.returncode != 0:
        raise BuildError(
            f"`{quote(args)}` exited with {done.returncode}: {tail(err or out, 5)}",
        )
    return subprocess.CompletedProcess(argv, done.returncode, out, err)


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
