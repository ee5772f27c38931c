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

import sys

__all__ = ["__version__"]

# invoke turns bytecode writing off for its whole process before it imports tasks.py (so no
# tasks.pyc lands in a project); gpurl and its dependencies are installed modules like any
# other: they get the interpreter's own setting back (`-B` and PYTHONDONTWRITEBYTECODE still
# rule), or every `invoke TASK` compiles them from source again (a third of a small plan).
sys.dont_write_bytecode = bool(sys.flags.dont_write_bytecode)

__version__ = "0.1.0"
