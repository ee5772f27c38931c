"""gpurl: build, push, verify and pin a large GPU RL training image.

The top level holds the shared basics: the config (`config`, its reference `configdoc`, the
value grammars and byte sizes `values`), errors and exit codes (`errors`), processes (`proc`),
files (`files`), git (`git`), secrets kept out of output (`redact`), image references
(`imageref`), step records (`steps`) and the command line (`cli`, `program`). The sub-packages
follow the pipeline, and imports point one way: basics, `writer` and `launcher` <- plan <-
dockerfile / adopt <- attest <- oci <- rebuild <- release <- cluster / local <- the entry
points (`tests/test_architecture.py` enforces it). The entry points: the tasks (`collection`),
the `gpurl` command that runs them (`__main__`) and the nox sessions (`sessions`); the two
files a project commits so that `invoke` and `nox` run them there are `adopt.shims`.
"""

import os
import signal
import sys
import threading

__all__ = ["__version__", "terminated_early"]

# invoke turns bytecode writing off for its whole process before it imports tasks.py (so no
# tasks.pyc lands in a project); gpurl and its dependencies are installed modules like any
# other: they get the interpreter's own setting back (`-B` and PYTHONDONTWRITEBYTECODE still
# rule), or every `invoke TASK` compiles them from source again (a third of a small plan).
sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)

__version__ = "0.1.0"


def terminated_early(signum: int, frame: object) -> None:
    """SIGTERM before a task's own handler (`cli.clean_failures`) is in place, while the
    command still imports and parses: nothing is started, so it ends at once as the task's
    handler would end it, exit 143 (ExitCode.TERMINATED) and under --json its one object."""
    if any(a in ("--json", "-j") or a.startswith("--json=") for a in sys.argv[1:]):
        os.write(1, b'{\n  "error": "terminated (SIGTERM)",\n  "hint": null,\n  "exit_code": 143\n}\n')
    os.write(2, b"terminated (SIGTERM)\n")
    os._exit(143)


# In a command (`gpurl`, `python -m gpurl_tasks`, `invoke` loading tasks.py), the handler is
# in place from the first import on; a library import (a test) leaves signals alone.
if threading.current_thread() is threading.main_thread() and (
        "invoke.main" in sys.modules or sys.argv[:1] == ["-m"]
        or os.path.basename(sys.argv[0] if sys.argv else "") == "gpurl"):
    signal.signal(signal.SIGTERM, terminated_early)
