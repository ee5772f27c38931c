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


@task(help={
    "check": "fail (exit 1) when a committed Dockerfile differs from what would be generated",
    "profile": "generate only this profile (default: every profile in [tool.gpurl.profiles])",
    "json": "print a JSON summary on stdout",
})
def generate(c: Context, check: bool = False, profile: str | None = None, json: bool = False
             ) -> None:
    """Render each profile's Dockerfile (docker/Dockerfile.gpu-rl, ...) from config + layer plan.

    The megatron variant is not a separate file: build with `--build-arg INSTALL_MEGATRON=1`.
    """
    from gpurl_tasks.generate import generate as run_generate
    from gpurl_tasks.generate import profiles_with_dockerfile

    with cli.clean_failures():
        names = (profile,) if profile else profiles_with_dockerfile(cli.REPO_ROOT)
        results = [run_generate(cli.config_for(name), check=check) for name in names]
        if json:
            cli.emit_json({"check": check, "files": [r.to_json() for r in results]})
        for r in results:
            verb = "up to date" if not r.changed else ("would change" if check else "written")
            cli.say(f"{r.path.relative_to(cli.REPO_ROOT)}: {verb} ({r.steps} sync layers)")


ns.add_task(generate)


# --- cluster build (iris + kaniko) ------------------------------------------------------


# --- registry: verify and pin -----------------------------------------------------------


# --- rebuild decision and wheel checks --------------------------------------------------


# --- local build and end to end ---------------------------------------------------------
