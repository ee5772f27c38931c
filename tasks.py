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


@task(
    help={
        "since": "git ref to compare with (default: the commit in the pinned image's "
                 "provenance comment, else HEAD~1)",
        "json": "print one JSON object {decision, reasons, since, fingerprint, expected_wheels}",
        "profile": _PROFILE_HELP,
    }
)
def rebuild_needed(c: Context, since: str | None = None, json: bool = False,
                   profile: str | None = None) -> None:
    """Does the working tree need a new image? Prints none | image | wheels+image and why.

    Compares the image's baked inputs (Dockerfile ARGs, base images, apt sets, the uv sync
    chain, the lock's install closure for the configured target and extras) at --since and
    in the working tree. Exit codes: 0 none (source-only change, synced live into /app),
    10 image (rebuild the image, the prebuilt wheels stay valid), 11 wheels+image (rebuild
    the vLLM-fork/flash-attn wheels first), 1 usage error, 2 error (bad ref, unreadable
    lock or Dockerfile).
    """
    from invoke.exceptions import Exit

    from gpurl_tasks.rebuild_inputs import rebuild_needed as run

    with cli.clean_failures():
        report = run(cli.config_for(profile), since=since)
    if json:
        cli.emit_json(report.to_json())
    else:
        short = report.since_commit[:12]
        print(f"rebuild: {report.decision.decision}  (since {report.since_ref} = {short}, "
              f"from {report.since_source})")
        for reason in report.decision.reasons:
            print(f"  - {reason.kind}: {reason.detail}")
    if report.decision.exit_code:
        raise Exit(code=report.decision.exit_code)


ns.add_task(rebuild_needed, name="rebuild-needed")


@task(
    help={
        "source": "a wheelhouse directory, a MANIFEST file or its http(s) URL "
                  "(default: build.wheelhouse)",
        "json": "print one JSON object {ok, expected, found, mismatches}",
        "profile": _PROFILE_HELP,
    },
)
def check_wheels(c: Context, source: str | None = None, json: bool = False,
                 profile: str | None = None) -> None:
    """Check the prebuilt vLLM-fork and flash-attn wheels against the Dockerfile's pins.

    Names, tags, fork commit, torch/CUDA labels; in a directory also each wheel's own
    .dist-info (catches renamed wheels) and the sha256 in its MANIFEST. Exit codes: 0 all
    match, 3 mismatches (one line each, expected vs found), 1 usage error, 2 unreadable input.
    """
    from invoke.exceptions import Exit

    from gpurl_tasks.wheels import check_source

    with cli.clean_failures():
        report = check_source(cli.config_for(profile), source)
    if json:
        cli.emit_json(report.to_json())
    else:
        for line in report.lines():
            print(line)
    if report.mismatches:
        raise Exit(code=3)


ns.add_task(check_wheels, name="check-wheels")


# --- local build and end to end ---------------------------------------------------------
