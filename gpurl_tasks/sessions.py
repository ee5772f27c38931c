"""The nox sessions a project runs with the installed gpurl (`nox -l` lists them): a
project's committed noxfile.py (`adopt.shims.SHIMS`) imports this module, and so does gpurl's own.

Each runs in nox's own environment (`venv_backend="none"`), the one gpurl is installed in:
a session that synced a virtualenv would install gpurl's own lock into the user's
repository. Each runs the `gpurl` command in-process in the project nox runs in (nox works
in the noxfile's directory), its stdout and stderr apart (`session.run` merges them, so
--json's one object was followed by the `error:` line) and its exit code nox's own (the
README's table; nox would say 1).
"""

from __future__ import annotations

import logging
import shlex

import nox

from gpurl_tasks.__main__ import main
from gpurl_tasks.collection import ns

__all__ = ["build", "pin", "verify_layers"]


def _ref_as_flag(task: str, posargs: list[str]) -> list[str]:
    """`nox -s verify-layers -- [flags] REF [flags]`: the first bare argument that is no
    flag's value is the image (--ref), wherever it stands (`-- --json REF` too)."""
    valued = {name for a in ns[task].get_arguments() if a.kind is not bool
              for name in (f"--{a.name.replace('_', '-')}", *(f"-{n}" for n in a.nicknames))}
    args, found, rest = [], False, list(posargs)
    while rest:
        arg = rest.pop(0)
        if arg.startswith("-"):
            args.append(arg)
            if arg in valued and rest:  # `--cap 4GB`: the value is the flag's
                args.append(rest.pop(0))
        elif not found:
            args += ["--ref", arg]
            found = True
        else:
            args.append(arg)
    return args


def _gpurl(session: nox.Session, *args: str) -> None:
    """`gpurl ARGS`, as a user's shell runs it: a failure's exit code ends nox with it."""
    session.log("gpurl " + shlex.join(args))
    # nox's root logger shows DEBUG records: invoke's own debug log would flood the session
    logging.getLogger("invoke").setLevel(logging.WARNING)
    try:
        main(["gpurl", *args])
    except SystemExit as exc:
        if exc.code not in (0, None):  # `--help` ends the program early, and well
            raise


@nox.session(name="verify-layers", venv_backend="none", default=False)
def verify_layers(session: nox.Session) -> None:
    """Check a pushed image's layers via the registry API (args: `gpurl verify-layers` flags)."""
    _gpurl(session, "verify-layers", *_ref_as_flag("verify-layers", session.posargs))


@nox.session(venv_backend="none", default=False)
def pin(session: nox.Session) -> None:
    """Verify an image and pin its digest into the launcher (args: `gpurl pin` flags)."""
    _gpurl(session, "pin", *_ref_as_flag("pin", session.posargs))


@nox.session(venv_backend="none", default=False)
def build(session: nox.Session) -> None:
    """Build and push the image (args: `gpurl build` flags, e.g. --dry-run, --backend local)."""
    _gpurl(session, "build", *session.posargs)
