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


@task(help={
    "profile": _PROFILE_HELP,
    "dry_run": "print what each step would do and change nothing",
    "json": "print the steps as one JSON object on stdout",
})
def setup_local(c: Context, profile: str = "demo", dry_run: bool = False, json: bool = False,
                ) -> None:
    """Make the local path ready: engine, BuildKit client, loopback registry, base image, wheels.

    Idempotent: a second run finds everything and changes nothing.
    """
    from gpurl_tasks.local_setup import setup_local as run_setup

    with cli.clean_failures():
        config = cli.config_for(profile)
        with cli.step("setup-local" + (" (dry run)" if dry_run else "")):
            result = run_setup(config, dry_run=dry_run)
        if json:
            cli.emit_json(result.as_dict())
        else:
            for s in result.steps:
                cli.say(f"  {s.name:<16} {s.status:<10} {s.seconds:6.1f}s  {s.detail}")


ns.add_task(setup_local)


@task(help={
    "profile": _PROFILE_HELP,
    "target": "Dockerfile stage that builds the wheels (default: wheel-builder)",
    "source": "directory inside that stage holding the wheels and MANIFEST (default: wheelhouse)",
    "dockerfile": "Dockerfile to build (default: build.dockerfile of the profile)",
    "json": "print the copied files as one JSON object on stdout",
})
def build_wheels(c: Context, profile: str = "demo", target: str = "wheel-builder",
                 source: str = "wheelhouse", dockerfile: str = "", json: bool = False) -> None:
    """Build the wheel-builder stage and copy its wheels + MANIFEST into the wheelhouse.

    The wheelhouse is build.wheelhouse; later builds take WHEEL_SOURCE=prebuilt-wheelhouse.
    """
    from pathlib import Path

    from gpurl_tasks import local_build

    with cli.clean_failures():
        config = cli.config_for(profile)
        with cli.step(f"build-wheels ({target})"):
            result = local_build.build_wheels(
                config, target=target, source=source,
                dockerfile=Path(dockerfile).resolve() if dockerfile else None,
                build_args={"WHEEL_SOURCE": "wheel-builder"},
                on_line=None if json else cli.say)
        if json:
            cli.emit_json({"files": [str(p) for p in result.files],
                           "seconds": round(result.seconds, 1)})
        else:
            for path in result.files:
                cli.say(f"  {path}")


ns.add_task(build_wheels)


@task(help={
    "profile": _PROFILE_HELP,
    "directory": "directory of wheels/sdists to serve (default: the local cache's pyindex)",
})
def serve_index(c: Context, profile: str = "demo", directory: str = "") -> None:
    """Serve the loopback package index at build.index-url until Ctrl-C or SIGTERM.

    For `uv lock` of a workspace locked against the index (builds serve it themselves).
    """
    import signal
    import time
    from pathlib import Path

    from gpurl_tasks import local_setup, pyindex

    with cli.clean_failures():
        config = cli.config_for(profile)
        port = pyindex.port_of(config.build.index_url)
        where = Path(directory) if directory else local_setup.index_dir(
            local_setup.cache_dir(config.root))
        def stop(signum: int, frame: object) -> None:
            raise KeyboardInterrupt

        signal.signal(signal.SIGINT, stop)  # also when started in the background by a shell
        signal.signal(signal.SIGTERM, stop)
        with pyindex.serve(where, port=port) as server:
            cli.say(f"serving {where} at {server.url} (Ctrl-C to stop)")
            try:
                while True:
                    time.sleep(3600)
            except KeyboardInterrupt:
                cli.say("stopped")


ns.add_task(serve_index)


@task(help={
    "profile": _PROFILE_HELP,
    "pins": "comma-separated exact pins to add, e.g. 'rich==13.9.4,attrs==25.3.0'",
    "deps": "also download their dependencies (to seed an index a new lock resolves against)",
})
def fill_index(c: Context, pins: str, profile: str = "demo", deps: bool = False) -> None:
    """Download wheels for the profile's target platform into the loopback index directory."""
    from gpurl_tasks import local_setup, pyindex

    with cli.clean_failures():
        config = cli.config_for(profile)
        where = local_setup.index_dir(local_setup.cache_dir(config.root))
        target = pyindex.DownloadTarget.for_target(
            python=config.target.python, glibc=config.target.glibc, arch=config.target.arch)
        wanted = [p.strip() for p in pins.split(",") if p.strip()]
        with cli.step(f"fill-index ({len(wanted)} pins)"):
            files = pyindex.download(wanted, where, target=target, with_deps=deps)
        cli.say(f"  {len(files)} files in {where}")


ns.add_task(fill_index)
