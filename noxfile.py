"""nox sessions: tests, lint, and the registry/build sessions users run (`nox -l` lists them)."""

from __future__ import annotations

from pathlib import Path

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
    dockerfiles = sorted(str(p) for p in Path("docker").glob("Dockerfile.*"))
    session.run("hadolint", "--config", ".hadolint.yaml", *dockerfiles)
