"""One small error hierarchy: every failure a user can cause carries an actionable message.

The task layer catches `GpurlError` once and turns it into one line plus a hint and a
non-zero exit code; nothing below it prints or exits.
"""

from __future__ import annotations

from gpurl_tasks.exitcodes import ExitCode

__all__ = [
    "BuildError",
    "CheckFailed",
    "ConfigError",
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


class GpurlError(Exception):
    """Base of every expected failure: `message` says what went wrong, `hint` what to do."""

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


def unreachable_hint(host: str) -> str:
    """The one hint of an Unreachable: where to look (this machine's way to `host`)."""
    return (f"check that this machine can reach {host} (network, DNS, proxy) and that {host} "
            "is up; the build job reaches it from the cluster, which may differ")


def shown(value: object, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters, for quoting bad input in one error line."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 5]}...{text[-2:]}"
