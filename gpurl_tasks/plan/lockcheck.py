"""Is uv.lock stale against its workspace? uv's own answer where uv can give it offline,
gpurl's re-implementation (lock.lock_staleness) where it cannot.

What uv 0.13.9 needs to answer `uv lock --check --offline --no-cache` (verified): the lock,
the workspace's pyproject.toml files (and those of its path sources), and an interpreter
that satisfies the project's requires-python; no network, no cache, not even a git source's
repository (the lock pins its commit). A current lock is then "current" (exit 0). A stale one
makes uv resolve again, which offline fails on the first index or URL it would read (exit 1,
"Network connectivity is disabled"), unless the workspace's sources are all local (exit 1,
"The lockfile ... needs to be updated"). So uv is authoritative when it says current or
stale; anything else (no uv, no interpreter, an answer that needs the network) leaves the
verdict to gpurl's own check, which names each difference.

uv's answer depends on those files alone, so it is kept on disk keyed by their bytes (and by
which uv and PATH asked): each uv call costs about a second (it queries an interpreter
afresh under --no-cache), and every `generate`, `plan` and `build` checks every profile's lock.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path

from gpurl_tasks.errors import LockError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.plan.lock import lock_staleness, parse_lock
from gpurl_tasks.proc import CommandFailed, ProgramNotFound, run

__all__ = ["UvVerdict", "ask_uv", "stale_findings", "verdict_dir"]

_STALE = "needs to be updated"
UV_TIMEOUT_S = 120.0


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class UvVerdict:
    """uv's answer: current (True), stale (False) or none (None), and what uv said (for
    None: uv's error lines, which may name an index URL; never shown to the user)."""

    current: bool | None
    said: str


def ask_uv(workspace: Path, *, uv: str = "uv") -> UvVerdict:
    """`uv lock --check` on `workspace`, offline and without a cache: what the lock and the
    workspace's files alone decide (the module docstring says what that is)."""
    argv = [uv, "lock", "--check", "--offline", "--no-cache", "--project", str(workspace)]
    try:
        done = run(argv, cwd=workspace, check=False, timeout=UV_TIMEOUT_S, echo=None)
    except (ProgramNotFound, CommandFailed) as exc:
        return UvVerdict(current=None, said=str(exc))
    if done.returncode == 0:
        return UvVerdict(current=True, said="")
    stale = [line.strip() for line in done.stderr.splitlines() if _STALE in line]
    if stale:  # that line names the lock file only: no index URL, so no credential in it
        return UvVerdict(current=False, said=stale[0])
    return UvVerdict(current=None, said=" ".join(
        line.strip() for line in done.stderr.splitlines() if line.startswith(("error:", "  cause:"))))


# the lock's own entries for the workspace and its path sources: uv reads their pyproject.toml
_LOCAL_SOURCE = re.compile(r'source = \{ (?:editable|virtual|directory) = "([^"]+)" \}')


def verdict_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where uv's verdicts are kept: gpurl's folder in the user's cache ($XDG_CACHE_HOME,
    else ~/.cache), shared by every checkout and copy of a project, as uv's own cache is."""
    env = os.environ if env is None else env
    base = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(base) / "gpurl" / "lock-verdicts"


def _inputs_key(workspace: Path, uv: str, pyproject: str, lock: str) -> str:
    """A digest of everything uv's verdict depends on: the lock, the pyproject.toml of the
    workspace and of each local source the lock names, and which uv answers (its file) under
    which PATH (whether it finds an interpreter)."""
    found = shutil.which(uv)
    stat = Path(found).stat() if found else None
    digest = hashlib.sha256()
    for part in (found or uv, f"{stat.st_size}:{stat.st_mtime_ns}" if stat else "",
                 os.environ.get("PATH", ""), pyproject, lock):
        digest.update(part.encode() + b"\0")
    for source in sorted(set(_LOCAL_SOURCE.findall(lock)) - {"."}):
        try:
            member = (workspace / source / "pyproject.toml").read_bytes()
        except OSError:
            member = b""
        digest.update(source.encode() + b"\0" + member + b"\0")
    return digest.hexdigest()


def _asked_once(workspace: Path, uv: str, pyproject: str, lock: str) -> UvVerdict:
    """`ask_uv`, once for the same inputs (`_inputs_key`), whichever process or copy of the
    project asks; what uv said is kept only when it is the stale line (it names the lock
    alone: other error lines may name an index)."""
    path = verdict_dir() / f"{_inputs_key(workspace, uv, pyproject, lock)}.json"
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        return UvVerdict(current=kept["current"], said=kept["said"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    verdict = ask_uv(workspace, uv=uv)
    said = verdict.said if verdict.current is False else ""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"current": verdict.current, "said": said}))
    except OSError:  # a read-only home: uv is asked again next time, nothing else changes
        pass
    return UvVerdict(current=verdict.current, said=said)


def _member(workspace: Path) -> bool:
    """Whether a directory above `workspace` declares a uv workspace: uv would then check
    that workspace's lock, not `workspace`'s own (so its answer is not about this lock)."""
    for directory in workspace.resolve().parents:
        try:
            data = tomllib.loads((directory / "pyproject.toml").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            continue
        if "workspace" in data.get("tool", {}).get("uv", {}):
            return True
    return False


def stale_findings(workspace: Path, lock: Path, *, where: str, uv: str = "uv") -> list[str]:
    """What makes `lock` stale against `workspace`'s pyproject.toml (`where`, as messages name
    it): nothing when uv says it is current; gpurl's own findings otherwise, or uv's words
    when uv says stale and gpurl's check finds no difference to name. uv is asked only when
    `lock` is the workspace's own uv.lock and no uv workspace above holds it (then uv checks
    that lock)."""
    pyproject = read_text(workspace / "pyproject.toml", what="pyproject.toml", error=LockError)
    text = read_text(lock, what="lock file", error=LockError)
    ours = lock.resolve() == (workspace / "uv.lock").resolve() and not _member(workspace)
    verdict = _asked_once(workspace.resolve(), uv, pyproject, text) if ours \
        else UvVerdict(current=None, said="")
    if verdict.current:
        return []
    own = lock_staleness(pyproject, parse_lock(text, source=str(lock)), where=where)
    if verdict.current is False and not own:
        return [f"`uv lock --check` says: {verdict.said.removeprefix('error: ')}"]
    return own
