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


@task(
    help={
        "profile": _PROFILE_HELP,
        "backend": "iris (kaniko in an iris job; gpu-rl default) or local (Docker engine)",
        "cluster": "iris cluster name (default: [tool.gpurl.cluster] name)",
        "cpu": "CPUs for the build job (default 48: the daemonset gang-fit rule)",
        "memory": "memory for the build job, humanfriendly binary (default 512GB; less OOMs)",
        "disk": "ephemeral disk for the build job (default 400GB)",
        "timeout": "job timeout in seconds (default 18000)",
        "megatron": "build the megatron variant (INSTALL_MEGATRON=1, tag prefix PREFIX-megatron)",
        "dry_run": "print the full command (secrets redacted) and run nothing",
        "force": "allow --memory below 512GB",
        "json": "machine-readable output on stdout",
    }
)
def build(
    c: Context,
    profile: str | None = None,
    backend: str | None = None,
    cluster: str | None = None,
    cpu: float | None = None,
    memory: str | None = None,
    disk: str | None = None,
    timeout: int | None = None,
    megatron: bool = False,
    dry_run: bool = False,
    force: bool = False,
    json: bool = False,
) -> None:
    """Build and push the image: as an iris job running kaniko (runbook sections 2-4)."""
    from gpurl_tasks import cluster_tasks
    from gpurl_tasks.cluster_build import BuildRequest
    from gpurl_tasks.errors import BuildError

    with cli.clean_failures():
        config = cli.config_for(profile, backend=backend)
        if config.backend != "iris":
            raise BuildError(f"the {config.backend!r} build backend is not available yet",
                             hint="use --backend iris")
        request = BuildRequest(cluster=cluster, cpu=cpu, memory=memory, disk=disk,
                               timeout=timeout, megatron=megatron, force=force)
        cluster_tasks.run_build(config, request, dry_run=dry_run, as_json=json)


ns.add_task(build)


@task(
    help={
        "job": "the job id `invoke build` printed, e.g. /alice/gpurl-kaniko-0123abc",
        "interval": "seconds between state polls",
        "max_duration": "give up (exit 3) after this many seconds",
        "cluster": "iris cluster name (default: [tool.gpurl.cluster] name)",
        "profile": _PROFILE_HELP,
        "json": "machine-readable result on stdout",
    }
)
def watch(
    c: Context,
    job: str,
    interval: int = 60,
    max_duration: int = 6 * 3600,
    cluster: str | None = None,
    profile: str | None = None,
    json: bool = False,
) -> None:
    """Poll an iris job's state until terminal. Exit 0 succeeded, 1 failed, 2 absent, 3 stuck."""
    from invoke.exceptions import Exit

    from gpurl_tasks import cluster_tasks

    with cli.clean_failures():
        code = cluster_tasks.run_watch(cli.config_for(profile), job, interval=interval,
                                       max_duration=max_duration, as_json=json, cluster=cluster)
    if code:
        raise Exit(code=code)


ns.add_task(watch)


@task(
    help={
        "job": "the job id to stop (job-scoped; never anything cluster-wide)",
        "cluster": "iris cluster name (default: [tool.gpurl.cluster] name)",
        "profile": _PROFILE_HELP,
        "dry_run": "print the command and run nothing",
    }
)
def kill(c: Context, job: str, cluster: str | None = None, profile: str | None = None,
         dry_run: bool = False) -> None:
    """Stop one iris job (`iris job kill JOB`)."""
    from gpurl_tasks import cluster_tasks

    with cli.clean_failures():
        cluster_tasks.kill_job(cli.config_for(profile), job, dry_run=dry_run, cluster=cluster)


ns.add_task(kill)


@task(
    name="gen-kaniko",
    help={
        "check": "fail if the committed script differs from what the config renders",
        "profile": _PROFILE_HELP,
    },
)
def gen_kaniko(c: Context, check: bool = False, profile: str | None = None) -> None:
    """Generate docker/build_gpu_rl_kaniko.sh (the in-cluster kaniko build script)."""
    from gpurl_tasks import cluster_tasks

    with cli.clean_failures():
        cli.say(cluster_tasks.generate_script(cli.config_for(profile), check=check))


ns.add_task(gen_kaniko)


# --- registry: verify and pin -----------------------------------------------------------


# --- rebuild decision and wheel checks --------------------------------------------------


# --- local build and end to end ---------------------------------------------------------
