"""invoke tasks: thin wrappers (parse flags -> call gpurl_tasks -> print).

Run `invoke --list` for the tasks and `invoke --help TASK` for each task's flags.
"""

from __future__ import annotations

from invoke import Collection, Context, task
from invoke.exceptions import Exit

from gpurl_tasks import cli

ns = Collection()

_PROFILE_HELP = "config profile from [tool.gpurl.profiles] (default: gpu-rl, or $GPURL_PROFILE)"


# --- plan -------------------------------------------------------------------------------


# --- generate ---------------------------------------------------------------------------


# --- cluster build (iris + kaniko) ------------------------------------------------------


# --- registry: verify and pin -----------------------------------------------------------

_RULE_HELP = {
    "cap": "target cap per layer, e.g. 4GB (default: layers.cap from config)",
    "hard_limit": "no layer may reach this size, e.g. 8GB (default: verify.hard-limit)",
    "min_layers": "the image needs at least this many layers (default: verify.min-layers)",
}


def _rule_overrides(cap: str | None, hard_limit: str | None,
                    min_layers: str | None) -> dict[str, str | None]:
    """Rule flags as config overrides (config keys are dashed: verify.hard-limit)."""
    return {"layers__cap": cap, "verify__hard-limit": hard_limit,
            "verify__min-layers": min_layers}


@task(auto_shortflags=False, help={
    "ref": "image REPO:TAG or REPO@sha256:... (default: REGISTRY/REPO:PREFIX-<HEAD sha>)",
    **_RULE_HELP,
    "json": "print one JSON object instead of the table",
    "profile": _PROFILE_HELP,
})
def verify_layers(
    c: Context,
    ref: str | None = None,
    cap: str | None = None,
    hard_limit: str | None = None,
    min_layers: str | None = None,
    json_: bool = False,
    profile: str | None = None,
) -> None:
    """Check the pushed image's layers through the registry API; exit 0 only if every rule holds.

    Invoke has no optional positional arguments, so the image is given as --ref
    (`nox -s verify-layers -- REF` also takes it bare). Rules: no layer at or above the hard
    limit, none above the cap, at least min-layers layers; a single layer holding most of the
    image is named. When the image's plan-fingerprint label
    matches the current plan, each uv sync layer is shown next to its predicted size.
    """
    from gpurl_tasks import release, verify

    with cli.clean_failures():
        config = cli.config_for(profile, **_rule_overrides(cap, hard_limit, min_layers))
        report = release.verify_reference(config, ref)
    if json_:
        cli.emit_json(verify.report_json(report))
    else:
        print(verify.render_table(report))
    if not report.ok:
        raise Exit(f"verify-layers: {report.reference} fails the layer rules", code=1)


ns.add_task(verify_layers)


@task(auto_shortflags=False, help={
    "ref": "immutable reference REPO:PREFIX-<gitsha> or REPO@sha256:... "
           "(default: REGISTRY/REPO:PREFIX-<HEAD sha>); floating tags are refused",
    "launcher": "launcher file to rewrite (default: launcher.path from config)",
    "variable": "variable holding the image (default: launcher.variable, DEFAULT_RL_DOCKER_IMAGE)",
    "dry_run": "print the unified diff and write nothing",
    "force": "pin even when the image fails the layer rules",
    **_RULE_HELP,
    "json": "print one JSON object (value, path, changed, diff, layer report)",
    "profile": _PROFILE_HELP,
})
def pin(
    c: Context,
    ref: str | None = None,
    launcher: str | None = None,
    variable: str | None = None,
    dry_run: bool = False,
    force: bool = False,
    cap: str | None = None,
    hard_limit: str | None = None,
    min_layers: str | None = None,
    json_: bool = False,
    profile: str | None = None,
) -> None:
    """Verify the image, then pin its linux/amd64 manifest digest into the launcher.

    The image is given as --ref (`nox -s pin -- REF` also takes it bare), default this commit's
    immutable tag.
    Rewrites only the launcher variable's value and the provenance comment above it,
    atomically; a second pin of the same digest changes nothing.
    """
    import datetime as dt
    from pathlib import Path

    from gpurl_tasks import release, verify

    with cli.clean_failures():
        config = cli.config_for(
            profile, **_rule_overrides(cap, hard_limit, min_layers), launcher__variable=variable,
            launcher__path=str(Path(launcher).resolve()) if launcher else None)
        report, change = release.pin_reference(config, ref, force=force,
                                               today=dt.datetime.now(dt.UTC).date())
        if not report.ok:
            cli.say(f"warning: pinning {report.reference} despite failing rules (--force)")
        written = False if dry_run else release.apply_pin(change)
    if json_:
        cli.emit_json({"value": change.value, "path": str(change.path), "changed": change.changed,
                       "written": written, "dry_run": dry_run, "diff": change.diff,
                       "report": verify.report_json(report)})
    elif dry_run:
        print(change.diff or f"{change.path}: already pinned to {change.value}\n", end="")
    elif written:
        cli.say(f"pinned {change.value} in {change.path}")
    else:
        cli.say(f"{change.path} already pins {change.value}; nothing to do")


ns.add_task(pin)


# --- rebuild decision and wheel checks --------------------------------------------------


# --- local build and end to end ---------------------------------------------------------
