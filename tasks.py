"""invoke tasks: thin wrappers (parse flags -> call gpurl_tasks -> print).

Run `invoke --list` for the tasks and `invoke --help TASK` for each task's flags.
"""

from __future__ import annotations

from invoke import Collection, Context, task

from gpurl_tasks import cli

ns = Collection()

_PROFILE_HELP = "config profile from [tool.gpurl.profiles] (default: gpu-rl, or $GPURL_PROFILE)"


# --- plan -------------------------------------------------------------------------------


# --- generate ---------------------------------------------------------------------------


# --- cluster build (iris + kaniko) ------------------------------------------------------


# --- registry: verify and pin -----------------------------------------------------------


# --- rebuild decision and wheel checks --------------------------------------------------


# --- local build and end to end ---------------------------------------------------------
