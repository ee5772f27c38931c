"""The one exit-code contract of every gpurl task (documented once, in the README's table)."""

from __future__ import annotations

import enum

__all__ = ["ExitCode"]


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
