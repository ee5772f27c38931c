"""When a registry request is tried again, and after how long: the one set of rules, for gpurl's
own client (oci/registry.py), the composing build's crane calls (writer/crane.py) and, rendered
into it, the rest of the cluster job's crane wrapper (cluster/kaniko.py). Stdlib only: the job
runs it.

A request is retried on a 429, a 5xx, or a connection that failed or broke mid-body; at most
`attempts` times in all (`registry.retries` + 1); each wait is the registry's Retry-After when it
gives one, else an exponential backoff from BACKOFF seconds with a little jitter, and never more
than `max_wait` (`registry.retry-max-wait`).
"""

from __future__ import annotations

import dataclasses
import email.utils
import random
import time

__all__ = ["BACKOFF", "RETRIED_ANSWERS", "RetryRules", "retry_after_seconds", "retryable_status"]

BACKOFF = 0.5  # seconds before the first retry; doubled for each one after it
# What a failed request's answer says when it is worth sending again, as crane words it
# ("METHOD URL: CODE: message", "pushing REF: METHOD URL CODE:" from a push, or "unexpected
# status code N ..."): a 429 or 5xx status, the registry's code for one (UNKNOWN, UNAVAILABLE,
# TOOMANYREQUESTS; not MANIFEST_UNKNOWN and the like, which are final), a connection reset,
# refused or cut short. An extended regular
# expression (the job's wrapper greps crane's error line with it).
RETRIED_ANSWERS = (r"status code (429|5[0-9][0-9])\b"
                   r"|(^|[^A-Z_])(UNKNOWN|UNAVAILABLE|TOOMANYREQUESTS)\b"
                   r"|connection reset|connection refused|broken pipe|unexpected EOF|\bEOF\b"
                   r"|closed network connection|i/o timeout|TLS handshake timeout"
                   r"|server closed")


def retryable_status(status: int) -> bool:
    """A status the registry may answer differently to the same request a moment later."""
    return status == 429 or status >= 500


def retry_after_seconds(value: str) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date; None when it is neither."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return float(when.timestamp() - time.time())


@dataclasses.dataclass(frozen=True, kw_only=True)
class RetryRules:
    """How many times a request is sent at most, and the bounds of each wait."""

    attempts: int = 4
    max_wait: float = 30.0
    backoff: float = BACKOFF

    def again(self, attempt: int) -> bool:
        """Whether a request that just failed on its `attempt`-th try is sent again."""
        return attempt < max(1, self.attempts)

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """The wait after the `attempt`-th try failed: Retry-After when readable, else backoff."""
        if retry_after:
            seconds = retry_after_seconds(retry_after)
            if seconds is not None:
                return min(max(seconds, 0.0), self.max_wait)
        delay = self.backoff * 2.0 ** (attempt - 1) * (1 + random.random() / 4)
        return min(delay, self.max_wait)
