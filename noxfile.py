"""nox sessions: tests, lint, and the registry/build sessions users run (`nox -l` lists them)."""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["tests", "lint"]
nox.options.reuse_venv = "yes"


def _sync(session: nox.Session, *groups: str) -> None:
    """Install the project and dependency groups from gpurl's own uv.lock into the session."""
    args = ["uv", "sync", "--frozen", "--inexact"]
    for group in groups:
        args += ["--group", group]
    session.run_install(*args, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location})


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (unit, property and integration tests against real local parts)."""
    _sync(session, "test")
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy, hadolint on generated Dockerfiles, shellcheck on generated scripts."""
    _sync(session, "lint")
    session.run("ruff", "check", ".")
    session.run("mypy")


def _ref_as_flag(posargs: list[str]) -> list[str]:
    """`nox -s verify-layers -- REF [flags]`: a bare first argument is the image (--ref)."""
    if posargs and not posargs[0].startswith("-"):
        return ["--ref", posargs[0], *posargs[1:]]
    return list(posargs)


@nox.session(name="verify-layers", default=False)
def verify_layers(session: nox.Session) -> None:
    """Check a pushed image's layers via the registry API (args: `invoke verify-layers` flags)."""
    _sync(session)
    session.run("invoke", "verify-layers", *_ref_as_flag(session.posargs))


@nox.session(default=False)
def pin(session: nox.Session) -> None:
    """Verify an image and pin its digest into the launcher (args: `invoke pin` flags)."""
    _sync(session)
    session.run("invoke", "pin", *_ref_as_flag(session.posargs))
