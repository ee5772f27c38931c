"""nox sessions: gpurl's own (tests, lint, the iris and kaniko end to end, benchmarks), and
the sessions every project runs (verify-layers, pin, build), from gpurl_tasks.sessions as a
project's noxfile imports them (`nox -l` lists them all)."""

from __future__ import annotations

import glob
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import nox

# this checkout's gpurl_tasks, not another installed copy: its sessions run in-process here
sys.path.insert(0, str(Path(__file__).resolve().parent))
import gpurl_tasks.sessions  # noqa: F401  (verify-layers, pin, build)

nox.options.default_venv_backend = "uv"
# cluster-e2e runs kaniko-e2e with iris-contract and iris-e2e beside it
nox.options.sessions = ["tests", "cluster-e2e", "lint"]
nox.options.reuse_venv = "yes"


def _sync(session: nox.Session, *groups: str) -> None:
    """Install the project and only the named dependency groups (not the default `dev` group)
    from gpurl's own uv.lock into the session, quietly (uv's output shows only on failure)."""
    args = ["uv", "sync", "--frozen", "--inexact", "--quiet", "--no-default-groups"]
    for group in groups:
        args += ["--group", group]
    session.run_install(*args, env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
                        silent=True)


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (unit, property and integration tests against real local parts)."""
    _sync(session, "test")
    # the iris contract and e2e need Python 3.12 and the pinned release: their sessions run them
    # ... and the real-kaniko builds run in their own session
    # --durations: the slowest tests named in every run's log, where the suite's time goes
    session.run("pytest", "--ignore=tests/test_iris_contract.py",
                "--ignore=tests/test_iris_e2e.py", "-m", "not kaniko", "--durations=25",
                *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy, shellcheck on the kaniko script's templates, generate --check on every
    committed generated file (Dockerfiles, slice files, the package-set checker), hadolint.
    The rendered scripts are never committed: tests/test_kaniko_render.py renders each
    configured variant's and shellchecks it whole."""
    _sync(session, "lint")
    session.run("ruff", "check", ".")
    session.run("mypy")
    # the templates the job's script is rendered from, each as it stands (script/.shellcheckrc)
    session.run("shellcheck", *sorted(glob.glob("gpurl_tasks/cluster/script/*.sh")))
    session.run("invoke", "generate", "--check")
    session.run("hadolint", "--config", ".hadolint.yaml", *sorted(glob.glob("docker/Dockerfile.*")))


# --- cluster build (iris + kaniko) ------------------------------------------------------

# The iris release `invoke build` is checked against, pinned once in a data file of the package
# (the "couldn't find iris" hint names the same pins), read here as data: the noxfile runs before
# any session has installed gpurl.
_RELEASE = tomllib.loads(
    (Path(__file__).parent / "gpurl_tasks" / "cluster" / "iris-release.toml").read_text())
IRIS_CONTRACT_PINS: tuple[str, ...] = tuple(_RELEASE["pins"])
IRIS_CONTRACT_EXCLUDE_NEWER: str = _RELEASE["exclude-newer"]
_IRIS_PYTHON: str = _RELEASE["python"]


def _python312() -> str:
    """The interpreter the iris sessions run on (nox's own lookup misses pyenv's versions):
    the installed gpurl's lookup when nox runs in the project's environment."""
    try:
        from gpurl_tasks.cluster.iris_release import find_python312
    except ImportError:  # nox installed on its own: its lookup of "3.12"
        return _IRIS_PYTHON
    return find_python312() or _IRIS_PYTHON


def _install_pinned_iris(session: nox.Session) -> None:
    """gpurl's test group plus the pinned iris release (pre-releases only where pinned)."""
    _sync(session, "test")
    session.run_install("uv", "pip", "install", "--quiet", "--python", session.virtualenv.location,
                        "--prerelease", "if-necessary-or-explicit",
                        "--exclude-newer", IRIS_CONTRACT_EXCLUDE_NEWER, *IRIS_CONTRACT_PINS,
                        silent=True)


@nox.session(name="iris-contract", python=_python312())
def iris_contract(session: nox.Session) -> None:
    """Parse `invoke build`'s exact argv with the pinned iris release's own CLI parser."""
    _install_pinned_iris(session)
    session.run("pytest", "tests/test_iris_contract.py", *session.posargs,
                env={"GPURL_IRIS_CONTRACT": IRIS_CONTRACT_PINS[0]})


@nox.session(name="iris-e2e", python=_python312())
def iris_e2e(session: nox.Session) -> None:
    """build, watch, logs and kill against a real local iris controller (pinned release)."""
    _install_pinned_iris(session)
    session.run("pytest", "tests/test_iris_e2e.py", *session.posargs,
                env={"GPURL_IRIS_CONTRACT": IRIS_CONTRACT_PINS[0]})


@nox.session(name="kaniko-e2e")
def kaniko_e2e(session: nox.Session) -> None:
    """The generated kaniko script end to end with real kaniko (both executors) and crane,
    built from their source archives, against an authenticated TLS loopback registry."""
    _sync(session, "test")
    # the job's resilience end to end (faults, kills, two jobs at once: 25 of its 54 minutes on
    # 2 cores) runs in kaniko-faults; the same faults run on both paths in tests/test_registry_faults.py
    session.run("pytest", "-m", "kaniko and not kaniko_faults", "-s", "--durations=15",
                *session.posargs)


@nox.session(name="cluster-e2e", venv_backend="none")
def cluster_e2e(session: nox.Session) -> None:
    """kaniko-e2e, with iris-contract and iris-e2e run beside it in a second nox: the real
    kaniko builds wait on their registry and disk for much of their time, and the iris
    sessions fit in that time (CI's default run). The iris sessions' output is printed whole
    when both are done; either failing fails this session."""
    nox_argv = [sys.executable, "-m", "nox", "--noxfile", __file__]
    with tempfile.TemporaryFile("w+") as log:
        iris = subprocess.Popen([*nox_argv, "-s", "iris-contract", "iris-e2e"], stdout=log,
                                stderr=subprocess.STDOUT, text=True)
        session.log("iris-contract and iris-e2e started beside kaniko-e2e (pid %d)", iris.pid)
        try:
            session.run(*nox_argv, "-s", "kaniko-e2e", "--", *session.posargs, external=True)
        finally:
            code = iris.wait()
            log.seek(0)
            print(log.read(), flush=True)
        if code:
            session.error(f"iris-contract or iris-e2e failed (exit {code}): their output is above")


@nox.session(name="kaniko-faults", default=False)
def kaniko_faults(session: nox.Session) -> None:
    """The real kaniko job through registry faults, killed at each step, and two jobs of two
    commits at once on one cache (not in CI's default run: about 25 minutes on 2 cores)."""
    _sync(session, "test")
    session.run("pytest", "-m", "kaniko_faults", "-s", *session.posargs)


# --- build and end to end ----------------------------------------------------------------


@nox.session(default=False)
def e2e(session: nox.Session) -> None:
    """The end-to-end tests alone: real Docker engine, loopback registry and index (`-m docker`)."""
    _sync(session, "test")
    session.run("pytest", "-m", "docker", *session.posargs)


# --- benchmarks ---------------------------------------------------------------------------


@nox.session(default=False)
def bench(session: nox.Session) -> None:
    """Planner benchmarks (speed, plan quality, size prediction, rebuild cost) -> benchmarks/REPORT.md."""
    _sync(session)
    session.run("python", "-m", "benchmarks.run", *session.posargs)


@nox.session(name="bench-heavy", default=False)
def bench_heavy(session: nox.Session) -> None:
    """Real scale: build the heavy profile (torch + CUDA wheels) here, measure (`-- --clean` removes)."""
    _sync(session)
    session.run("python", "-m", "benchmarks.real_scale", *session.posargs)


@nox.session(name="bench-kaniko", default=False)
def bench_kaniko(session: nox.Session) -> None:
    """Real kaniko at heavy scale: both executors cold, warm, redo snapshots, one layer (not CI)."""
    _sync(session)
    session.run("python", "-m", "benchmarks.kaniko_scale", *session.posargs)


@nox.session(name="bench-noop", default=False)
def bench_noop(session: nox.Session) -> None:
    """The no-op rebuild's wall time against the previous release's, local and real kaniko (not CI)."""
    _sync(session, "test")  # its builds reuse the test trees' helpers (tests/support)
    session.run("python", "-m", "benchmarks.noop_rebuild", *session.posargs)


@nox.session(name="bench-whole-image", default=False)
def bench_whole_image(session: nox.Session) -> None:
    """What a rebuild re-pushes of the whole image on real kaniko, compiled wheels of a
    realistic size included, against the previous release's final stage (not CI)."""
    _sync(session, "test")
    session.run("python", "-m", "benchmarks.whole_image", *session.posargs)


@nox.session(name="bench-whole-history", default=False)
def bench_whole_history(session: nox.Session) -> None:
    """The lock-history model of the whole image: each SkyRL lock version's re-push of the
    slices and the final stage against the floor, today and the previous release (not CI)."""
    _sync(session)
    session.run("python", "-m", "benchmarks.whole_history", *session.posargs)


@nox.session(name="bench-compression", default=False)
def bench_compression(session: nox.Session) -> None:
    """zstd against gzip for a composed environment: bytes, CPU, cold containerd pulls (not CI)."""
    _sync(session)
    session.run("python", "-m", "benchmarks.compression", *session.posargs)


@nox.session(name="digest-proof", default=False)
def digest_proof(session: nox.Session) -> None:
    """The same pushed bytes before and after a change: `-- --before REF` (demo and heavy, not CI)."""
    _sync(session)
    session.run("python", "-m", "benchmarks.digest_proof", *session.posargs)


@nox.session(name="bench-installed", default=False)
def bench_installed(session: nox.Session) -> None:
    """The wheel as a user installs it: its size, `gpurl --version` and `gpurl plan` wall time."""
    _sync(session)
    session.run("python", "-m", "benchmarks.installed", *session.posargs)
