"""One small error hierarchy: every failure a user can cause carries an actionable message,
and the one exit-code contract of every task (`ExitCode`, documented once, in the README's
table).

The task layer catches `GpurlError` once and turns it into one line plus a hint and a
non-zero exit code; nothing below it prints or exits.
"""

from __future__ import annotations

import enum

__all__ = [
    "BuildError",
    "CheckFailed",
    "ConfigError",
    "ExitCode",
    "GpurlError",
    "IrisError",
    "LockError",
    "PinError",
    "PlanError",
    "RegistryError",
    "SizeError",
    "Unreachable",
    "shown",
    "unreachable_hint",
]


class ExitCode(enum.IntEnum):
    """What a task's exit status means, the same for every task."""

    OK = 0  # done; every check held; the watched job succeeded; no rebuild needed
    CHECK_FAILED = 1  # a check ran and found a problem (stale file, bad layer, failed job)
    ERROR = 2  # bad input, a missing tool, a refused request: the message says what to do
    INCONCLUSIVE = 3  # the answer could not be found out (e.g. the watcher lost the job)
    REBUILD_IMAGE = 10  # rebuild-needed: the image must be rebuilt, the wheels still hold
    REBUILD_WHEELS = 11  # rebuild-needed: the compiled wheels and the image must be rebuilt
    INTERNAL = 70  # a bug in gpurl (EX_SOFTWARE); the line says where to report it
    INTERRUPTED = 130  # stopped by Ctrl-C (128 + SIGINT)
    PIPE_CLOSED = 141  # the reader of stdout closed it (`| head -1`): ended quietly (128 + SIGPIPE)
    TERMINATED = 143  # stopped by SIGTERM (128 + SIGTERM); a watched job is left running


class GpurlError(Exception):
    """Base of every expected failure: `message` says what went wrong, `hint` what to do."""

    exit_code: int = ExitCode.ERROR
    # What to do when the raise site has nothing more precise to say. A class whose errors
    # exit 2 sets one, or every raise of it passes `hint=` (tests/test_cli_contract.py checks
    # both): an `error:` line is never without a next step.
    default_hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint or self.default_hint

    @property
    def specific_hint(self) -> str | None:
        """The hint its raise site wrote (None: only the class's default), for a caller that
        has a better one than the default."""
        return self.hint if self.hint != self.default_hint else None

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class CheckFailed(GpurlError):
    """A check ran and found a problem (a stale file, an image failing the layer rules)."""

    exit_code = ExitCode.CHECK_FAILED


class ConfigError(GpurlError):
    """The [tool.gpurl] config, an environment variable or a flag is invalid."""

    default_hint = ("every key, flag and GPURL_ variable is in docs/config.md, with the "
                    "form of its value")


class LockError(GpurlError):
    """uv.lock is missing, malformed or does not contain what was asked for."""

    default_hint = "run `uv lock` in the project, or pass --lock PATH to the lock to read"


class SizeError(GpurlError):
    """A package's size is unknown and no override or probe supplies it."""

    default_hint = ("record the size in the size override file (layers.size-overrides), or "
                    "run `invoke sizes --probe`")


class PlanError(GpurlError):
    """The layer plan cannot satisfy its invariants (e.g. one package exceeds the cap)."""

    default_hint = ("raise the cap (--cap, layers.cap) or split the packages over more "
                    "slices (docs/config.md)")


class RegistryError(GpurlError):
    """The registry refused, failed, or returned something inconsistent."""

    default_hint = "check the registry's address and credentials: `invoke doctor` checks both"


class IrisError(GpurlError):
    """The iris CLI is missing, different from what we support, or failed."""

    default_hint = "`invoke doctor` checks the iris CLI and the cluster"


class BuildError(GpurlError):
    """A build could not be started or failed."""

    default_hint = ("the lines above say which step failed; `invoke doctor` checks what a "
                    "build needs")


class PinError(GpurlError):
    """The launcher pin cannot be written safely."""

    default_hint = ("check the launcher file and variable the profile's launcher.* keys "
                    "name (docs/config.md)")


class Unreachable(GpurlError):
    """`host` could not be reached from this machine (network, DNS, proxy, firewall): what
    needed it was not checked, which says nothing about the thing itself. Raised as a
    subclass that is also the failing part's own error (RegistryError, WheelCheckError)."""

    def __init__(self, message: str, *, host: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.host = host


def unreachable_hint(host: str) -> str:
    """The one hint of an Unreachable: where to look (this machine's way to `host`)."""
    return (f"check that this machine can reach {host} (network, DNS, proxy) and that {host} "
            "is up; the build job reaches it from the cluster, which may differ")


def shown(value: object, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters, for quoting bad input in one error line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 5]}...{text[-2:]}"
