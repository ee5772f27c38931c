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


@task(
    iterable=["extra"],
    help={
        "lock": "uv.lock to plan (default: the workspace lock from config)",
        "extra": "extra to select; repeat for several (default: python.extras from config)",
        "cap": "largest allowed layer, e.g. 4GB or 500MB (default: layers.cap)",
        "size_overrides": "JSON file of sizes the lock lacks: {\"name\" | \"name==version\": bytes}",
        "basis": "size the cap applies to: compressed (default) or installed",
        "json": "print exactly one JSON object instead of the table",
        "profile": _PROFILE_HELP,
    },
)
def plan(
    c: Context,
    lock: str | None = None,
    extra: list[str] | None = None,
    cap: str | None = None,
    size_overrides: str | None = None,
    basis: str | None = None,
    json: bool = False,
    profile: str | None = None,
) -> None:
    """Plan the uv sync chain: which packages each layer installs, each layer under the cap."""
    from pathlib import Path

    from gpurl_tasks.plan.planner import plan_for_config
    from gpurl_tasks.plan.report import render_plan

    with cli.clean_failures():
        config = cli.config_for(profile, python__extras=extra or None, layers__cap=cap,
                                layers__basis=basis)
        result = plan_for_config(config, lock=Path(lock) if lock else None,
                                 size_overrides=Path(size_overrides) if size_overrides else None)
        if json:
            cli.emit_json(result.to_json())
        else:
            print(render_plan(result))
            print(f"every step: uv sync {' '.join(result.sync_flags)}")
            for i, step in enumerate(result.steps):
                print(f"  step {i}: --no-install-package x{len(step.no_install_package)}"
                      f" (installs layer {i}: {len(result.layers[i].packages)} packages)")


ns.add_task(plan)


@task(
    iterable=["extra"],
    help={
        "probe": "fetch sizes over HTTP (HEAD + zip directory range reads) into layers.size-cache",
        "lock": "uv.lock to read (default: the workspace lock from config)",
        "extra": "extra to select; repeat for several (default: python.extras)",
        "dry_run": "list what would be probed without any network access",
        "json": "print the probed entries (or the URLs, with --dry-run) as JSON",
        "profile": _PROFILE_HELP,
    },
)
def sizes(
    c: Context,
    probe: bool = False,
    lock: str | None = None,
    extra: list[str] | None = None,
    dry_run: bool = False,
    json: bool = False,
    profile: str | None = None,
) -> None:
    """Show which wheel sizes are unknown; with --probe, fetch and cache them."""
    from pathlib import Path

    from gpurl_tasks.plan import probe as probing
    from gpurl_tasks.plan.lock import install_closure, load_lock
    from gpurl_tasks.plan.sizes import load_size_sources, urls_to_probe
    from gpurl_tasks.plan.target import target_tags

    with cli.clean_failures():
        config = cli.config_for(profile, python__extras=extra or None)
        closure = install_closure(load_lock(Path(lock) if lock else config.lock),
                                  config.target, config.python)
        sources = load_size_sources(config.layers.size_overrides, config.layers.size_cache)
        urls = urls_to_probe(closure.packages, target_tags(config.target), sources)
        if not probe or dry_run:
            if json:
                cli.emit_json({"to_probe": urls})
            else:
                print("\n".join(urls) or "every wheel size is known")
            return
        cache = config.layers.size_cache
        if cache is None:
            raise cli.ConfigError("layers.size-cache is not set; nowhere to store probed sizes")
        found = probing.probe_urls(urls, progress=lambda url: cli.say(f"probing {url}"))
        probing.write_cache(cache, found)
        cli.say(f"probed {len(found)} wheel(s) into {cache}")
        if json:
            cli.emit_json(found)


ns.add_task(sizes)


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
    from gpurl_tasks.dockerfile.generate import generate as run_generate
    from gpurl_tasks.dockerfile.generate import profiles_with_dockerfile

    with cli.clean_failures():
        names = (profile,) if profile else profiles_with_dockerfile(cli.REPO_ROOT)
        results = [run_generate(cli.config_for(name, committed=True), check=check) for name in names]
        if json:
            cli.emit_json({"check": check, "files": [r.to_json() for r in results]})
        for r in results:
            verb = "up to date" if not r.changed else ("would change" if check else "written")
            cli.say(f"{r.path.relative_to(cli.REPO_ROOT)}: {verb} ({r.steps} sync layers)")


ns.add_task(generate)


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
        "wheel_source": "local backend: prebuilt-wheelhouse or wheel-builder (default: build.wheel-source)",
        "push_floating": "local backend: also push the floating tag (never by default)",
        "no_cache": "local backend: rebuild every step (docker build --no-cache)",
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
    wheel_source: str | None = None,
    push_floating: bool = False,
    no_cache: bool = False,
) -> None:
    """Build and push the image: as an iris job running kaniko (runbook sections 2-4), or
    with the local Docker engine and loopback registry (`--backend local`)."""
    from gpurl_tasks.cluster import jobs
    from gpurl_tasks.cluster.submit import BuildRequest
    from gpurl_tasks.errors import BuildError

    with cli.clean_failures():
        config = cli.config_for(profile, backend=backend)
        if config.backend == "local":
            from gpurl_tasks.local import pipeline
            from gpurl_tasks.local.setup import setup_local

            git_sha = git.head_sha(config.root)
            if dry_run:
                lines = pipeline.describe_local_build(config, git_sha=git_sha,
                                                      wheel_source=wheel_source,
                                                      push_floating=push_floating, no_cache=no_cache)
                if json:
                    cli.emit_json({"dry_run": True, "commands": lines})
                else:
                    print("\n".join(lines))
                return
            with cli.step("setup-local"):
                setup_local(config)
            with cli.step("build + push"):
                result = pipeline.build_local(config, git_sha=git_sha,
                                              wheel_source=wheel_source, push_floating=push_floating,
                                              no_cache=no_cache, on_line=None if json else cli.say)
            if json:
                cli.emit_json({"reference": result.reference, "digest": result.digest,
                               "pinned": result.pinned, "cached_steps": result.cached_steps,
                               "steps": sum(1 for s in result.steps if not s.is_from),
                               "stages": sorted(result.stages),
                               "stages_run": sorted(result.stages_run)})
            else:
                print(f"pushed {result.reference}\ndigest {result.digest}\n"
                      f"next: invoke verify-layers --profile {config.profile} --ref {result.reference}")
            return
        if wheel_source or push_floating or no_cache:
            raise BuildError("--wheel-source, --push-floating and --no-cache are local-backend flags",
                             hint="the cluster script reads WHEEL_SOURCE and PUSH_FLOATING itself")
        request = BuildRequest(cluster=cluster, cpu=cpu, memory=memory, disk=disk,
                               timeout=timeout, megatron=megatron, force=force)
        jobs.run_build(config, request, dry_run=dry_run, as_json=json)


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

    from gpurl_tasks.cluster import jobs

    with cli.clean_failures():
        code = jobs.run_watch(cli.config_for(profile), job, interval=interval,
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
    from gpurl_tasks.cluster import jobs

    with cli.clean_failures():
        jobs.kill_job(cli.config_for(profile), job, dry_run=dry_run, cluster=cluster)


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
    from gpurl_tasks.cluster import jobs

    with cli.clean_failures():
        cli.say(jobs.generate_script(cli.config_for(profile, committed=True), check=check))


ns.add_task(gen_kaniko)


# --- registry: verify and pin -----------------------------------------------------------

_RULE_HELP = {
    "cap": "target cap per layer, e.g. 4GB (default: verify.cap, else layers.cap)",
    "hard_limit": "no layer may reach this size, e.g. 8GB (default: verify.hard-limit)",
    "min_layers": "the image needs at least this many layers (default: verify.min-layers)",
}


def _rule_overrides(cap: str | None, hard_limit: str | None,
                    min_layers: str | None) -> dict[str, str | None]:
    """Rule flags as config overrides (the verify section's keys)."""
    return {"verify__cap": cap, "verify__hard_limit": hard_limit, "verify__min_layers": min_layers}


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
    from gpurl_tasks.oci import release, verify

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

    from gpurl_tasks.oci import release, verify

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

    from gpurl_tasks.rebuild.inputs import rebuild_needed as run

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
    """Check the prebuilt wheels: one per build.wheel_globs entry, against the Dockerfile's pins.

    Names, tags, fork commit, torch/CUDA labels (vLLM fork, flash-attn), installable tags for
    every profile's wheels; in a directory also each wheel's own
    .dist-info (catches renamed wheels) and the sha256 in its MANIFEST. Exit codes: 0 all
    match, 3 mismatches (one line each, expected vs found), 1 usage error, 2 unreadable input.
    """
    from invoke.exceptions import Exit

    from gpurl_tasks.dockerfile.wheels import check_source

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
    from gpurl_tasks.local.setup import setup_local as run_setup

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
    "source": "directory inside that stage holding the wheels and MANIFEST (default: wheels)",
    "dockerfile": "Dockerfile to build (default: build.dockerfile of the profile)",
    "json": "print the copied files and the wheel check as one JSON object on stdout",
})
def build_wheels(c: Context, profile: str = "demo", target: str = "wheel-builder",
                 source: str = "wheels", dockerfile: str = "", json: bool = False) -> None:
    """Build the wheel-builder stage, copy its wheels + MANIFEST into the wheelhouse, check them.

    The wheelhouse is build.wheelhouse; later builds take WHEEL_SOURCE=prebuilt-wheelhouse.
    The result then goes through check-wheels' check (one wheel per build.wheel_globs entry,
    installable tags, MANIFEST sha256): exit 3 with one line per mismatch when it fails.
    """
    from pathlib import Path

    from invoke.exceptions import Exit

    from gpurl_tasks.dockerfile.wheels import check_source
    from gpurl_tasks.local import builder

    with cli.clean_failures():
        # --dockerfile becomes build.dockerfile, so the check reads the Dockerfile just built.
        config = cli.config_for(
            profile, build__dockerfile=str(Path(dockerfile).resolve()) if dockerfile else None)
        with cli.step(f"build-wheels ({target})"):
            result = builder.build_wheels(
                config, target=target, source=source,
                build_args={"WHEEL_SOURCE": "wheel-builder"},
                on_line=None if json else cli.say)
        report = check_source(config, str(config.build.wheelhouse))
    if json:
        cli.emit_json({"files": [str(p) for p in result.files],
                       "seconds": round(result.seconds, 1), "check": report.to_json()})
    else:
        for path in result.files:
            cli.say(f"  {path}")
        for line in report.lines():
            cli.say(line)
    if report.mismatches:
        raise Exit(code=3)


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

    from gpurl_tasks.local import pyindex, setup

    with cli.clean_failures():
        config = cli.config_for(profile)
        port = pyindex.port_of(config.build.index_url)
        where = Path(directory) if directory else setup.index_dir(
            setup.cache_dir(config.root))
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
    from gpurl_tasks.local import pyindex, setup

    with cli.clean_failures():
        config = cli.config_for(profile)
        where = setup.index_dir(setup.cache_dir(config.root))
        target = pyindex.DownloadTarget.for_target(
            python=config.target.python, glibc=config.target.glibc, arch=config.target.arch)
        wanted = [p.strip() for p in pins.split(",") if p.strip()]
        with cli.step(f"fill-index ({len(wanted)} pins)"):
            files = pyindex.download(wanted, where, target=target, with_deps=deps)
        cli.say(f"  {len(files)} files in {where}")


ns.add_task(fill_index)


@task(help={
    "profile": "config profile to run end to end (default: demo, the embedded workspace)",
    "wheel_source": "prebuilt-wheelhouse (default: compile the wheels once, then reuse them) "
                    "or wheel-builder (compile inside the image build)",
    "json": "print the result (plan, build, verify report, pin) as one JSON object",
    "dry_run": "say what every step would do; start, build, push and write nothing",
})
def demo(c: Context, profile: str = "demo", wheel_source: str = "prebuilt-wheelhouse",
         json: bool = False, dry_run: bool = False) -> None:
    """The main job on this machine: setup-local, plan, generate, build, push, verify-layers, pin.

    Each step prints what it did and its duration; a second run is fast (build cache, registry).
    """
    from gpurl_tasks.local.pipeline import describe_pipeline, run_pipeline

    with cli.clean_failures():
        if dry_run:
            lines = describe_pipeline(cli.config_for(profile), wheel_source=wheel_source)
            if json:
                cli.emit_json({"dry_run": True, "steps": lines})
            else:
                print("\n".join(lines))
            return
        result = run_pipeline(cli.config_for(profile), say=cli.say, wheel_source=wheel_source)
        if json:
            cli.emit_json(result.to_json())


ns.add_task(demo)
