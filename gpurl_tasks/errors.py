"""One small error hierarchy: every failure a user can cause carries an actionable message,
and the one exit-code contract of every task (`ExitCode`, documented once, in the README's
table).

The task layer catches `GpurlError` once and turns it into one line plus a hint and a
non-zero exit code; nothing below it prints or exits.
"""

from __future__ import annotations

import enum

__all__ = [
    "BUG_HINT",
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
    """Base of every expected failure: `message` says what went wrong, `hint` what to do.

    Every raise of an error that exits 2 writes its own hint, where it knows what the user
    should change (tests/test_cli_contract.py fails on one without): there is no class-wide
    fallback, which would say the same vague thing for every cause."""

    exit_code: int = ExitCode.ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message} (hint: {self.hint})"


class CheckFailed(GpurlError):
    """A check ran and found a problem (a stale file, an image failing the layer rules)."""

    exit_code = ExitCode.CHECK_FAILED


class ConfigError(GpurlError):
    """The [tool.gpurl] config, an environment variable or a flag is invalid."""


class LockError(GpurlError):
    """uv.lock is missing, malformed or does not contain what was asked for."""


class SizeError(GpurlError):
    """A package's size is unknown and no override or probe supplies it."""


class PlanError(GpurlError):
    """The layer plan cannot satisfy its invariants (e.g. one package exceeds the cap)."""


class RegistryError(GpurlError):
    """The registry refused, failed, or returned something inconsistent."""


class IrisError(GpurlError):
    """The iris CLI is missing, different from what we support, or failed."""


class BuildError(GpurlError):
    """A build could not be started or failed."""


class PinError(GpurlError):
    """The launcher pin cannot be written safely."""


class Unreachable(GpurlError):
    """`host` could not be reached from this machine (network, DNS, proxy, firewall): what
    needed it was not checked, which says nothing about the thing itself. Raised as a
    subclass that is also the failing part's own error (RegistryError, WheelCheckError)."""

    def __init__(self, message: str, *, host: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.host = host


# The hint of an invariant only a bug in gpurl breaks (no input of the user's can reach it).
BUG_HINT = "a gpurl bug: report it with the command that ran"


def unreachable_hint(host: str) -> str:
    """The one hint of an Unreachable: where to look (this machine's way to `host`)."""
    return (f"check that this machine can reach {host} (network, DNS, proxy) and that {host} "
            "is up; the build job reaches it from the cluster, which may differ")


def shown(value: object, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters, for quoting bad input in one error line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 5]}...{text[-2:]}"
