"""gpurl's tasks, the collection every entry point runs: the `gpurl` command bundles it,
and a project's committed tasks.py (`shims.SHIMS`) hands it to `invoke`.

Each task resolves its flags, calls one gpurl function and returns its outcome, which
`cli.task` prints (`cli.finish`) under the one handler (`cli.clean_failures`). `gpurl --list`
(or `invoke --list`) lists them, `gpurl TASK --help` shows a task's flags; the contract every
task keeps (one-line errors, exit codes, --json, short flags, shared help) is cli.py's.
"""

from __future__ import annotations

from invoke.collection import Collection
from invoke.context import Context

from gpurl_tasks import cli, program
from gpurl_tasks.cli import ONE_VARIANT_HELP, PROFILE_HELP, RULES_HELP, VARIANT_HELP, Outcome, task
from gpurl_tasks.config import WheelSource

program.adopt()  # under `invoke`: its parse errors (an unknown flag or task...) follow the contract


@task(iterable=["extra"], help={
    "lock": "uv.lock to plan (config key: lock)", "extra": "extra to select; repeatable",
    "cap": "largest allowed layer, e.g. 4GB (config key: layers.cap)",
    "size_overrides": "JSON of sizes the lock lacks (config key: layers.size-overrides)",
    "basis": "size the cap applies to: compressed or installed", "variant": VARIANT_HELP,
    "repack": "plan afresh, ignoring the committed slice files",
    "max_image_layers": "most layers each image may have, the base's included "
                        "(config key: layers.max-image-layers)"})
def plan(c: Context, lock: str | None = None, extra: list[str] | None = None,
         cap: str | None = None, size_overrides: str | None = None, basis: str | None = None,
         json: bool = False, repack: bool = False, profile: str | None = None,
         variant: str | None = None, max_image_layers: str | None = None) -> Outcome | None:
    """Plan the layers: which packages each slice installs, each layer under the cap.

    Each variant's image stays within layers.max-image-layers, the base's layers included;
    the plan says what that budget cost in re-push terms."""
    from gpurl_tasks.dockerfile.generate import fitted_views
    config = cli.config_for(profile, variant=variant, lock=cli.path_flag(lock),
                            python__extras=extra or None, layers__cap=cap, layers__basis=basis,
                            layers__size_overrides=cli.path_flag(size_overrides),
                            layers__max_image_layers=max_image_layers)
    return cli.EachVariant(fitted_views(config, repack=repack, lock_given=lock is not None,
                                        only=variant, selection_given=bool(extra)).views())


@task(iterable=["extra"], help={
    "probe": "fetch the missing sizes over HTTP (HEAD + zip directory) into layers.size-cache",
    "lock": "uv.lock to read (config key: lock)", "extra": "extra to select; repeatable",
    "offline": "with --probe: list what would be probed and fetch nothing",
    "variant": VARIANT_HELP + "; each variant's wheels are its own platform's"})
def sizes(c: Context, probe: bool = False, lock: str | None = None,
          extra: list[str] | None = None, offline: bool = False, json: bool = False,
          profile: str | None = None, variant: str | None = None) -> Outcome | None:
    """List the wheels whose installed size (and maybe compressed size) nothing records.

    With --probe, fetch every one over HTTP and cache what worked in layers.size-cache; exit 2
    if any failed (one line each, with its host and error). --offline never touches the network."""
    from gpurl_tasks.plan.probe import survey_sizes
    return survey_sizes(cli.variant_configs(profile, variant, lock=cli.path_flag(lock),
                                            python__extras=extra or None),
                        probe=probe, dry_run=offline, progress=cli.say)


@task(help={"check": "fail (exit 1) when a committed Dockerfile or slice file is stale",
            "repack": "pack the layers afresh instead of keeping the committed slices",
            "profile": "only this profile (default: every profile)"})
def generate(c: Context, check: bool = False, repack: bool = False, profile: str | None = None,
             json: bool = False) -> Outcome | None:
    """Render every generated file from the committed config and plan.

    Each variant's Dockerfile, slice files and package-set checker, .dockerignore's rules,
    and (in gpurl's own repository) docs/config.md, the config reference; everything is
    checked first, and a failure writes nothing. What a cluster job runs (its script, slice
    index, attestation skeleton and gpurl's own code) is rendered when `invoke build` submits
    it, never committed."""
    from gpurl_tasks.dockerfile.generate import generate_profiles
    return generate_profiles(cli.project_root(), cli.text_flag("--profile", profile), check=check,
                             repack=repack)


@task(help={"check": "resolve nothing; fail (exit 1) when a variant's pins are missing or stale",
            "dry_run": "resolve and say what would be written; write nothing",
            "upgrade": "resolve every variant's again, even where its pins are current "
                       "(newer releases the requirements allow)",
            "variant": VARIANT_HELP})
def lock_post_install(c: Context, profile: str | None = None, variant: str | None = None,
                      check: bool = False, dry_run: bool = False, upgrade: bool = False,
                      json: bool = False) -> Outcome | None:
    """Resolve build.post-install once, into each variant's committed pins file.

    uv resolves the requirements against the lock's set, for the image's Python and platform,
    with hashes; generate installs the pins as the plan's last slice, so their dependencies
    never drift between builds and a lock bump reuses their layer. The pins go stale when the
    requirements, the target or the index move, the lock comes to hold a pinned package, or it
    drops a post-install the pins left to it."""
    from gpurl_tasks.plan.profile import lock_post_install as resolve_pins
    return resolve_pins(cli.variant_configs(profile, variant), check=check, dry_run=dry_run,
                        upgrade=upgrade, say=cli.say)


@task(help={
    "backend": "iris (kaniko in an iris job) or local (Docker engine)",
    "cpu": "CPUs for the build job (config key: cluster.cpu)",
    "memory": "memory for the build job (config key: cluster.memory); refused below 512GB "
              "where kaniko snapshots the environment, below the measured peak otherwise",
    "disk": "ephemeral disk for the build job (config key: cluster.disk)",
    "timeout": "job timeout in seconds (config key: cluster.timeout)",
    "variant": "the variant to build (default: the profile's first)",
    "dry_run": "print every command (secrets redacted) and run nothing",
    "force": "override a guard rail knowingly: --memory below its floor, or an immutable tag that "
             "already holds a different image; and build even when an image of the same inputs "
             "was pushed (no inputs-tag lookup)",
    "wheel_source": "local: prebuilt-wheelhouse or wheel-builder (config: build.wheel-source)",
    "push_floating": "local: also push the floating tag", "no_cache": "local: rebuild every step",
    "verbose": "local: stream the whole build log",
    "chain": "local: build the environment as one layer chain (env-chain) instead of composing "
             "it from slice images at the registry"})
def build(c: Context, profile: str | None = None, backend: str | None = None,
          cluster: str | None = None, cpu: float | None = None, memory: str | None = None,
          disk: str | None = None, timeout: int | None = None, variant: str | None = None,
          dry_run: bool = False, force: bool = False, json: bool = False,
          wheel_source: str | None = None, push_floating: bool = False, no_cache: bool = False,
          verbose: bool = False, chain: bool = False) -> Outcome | None:
    """Build and push the image: an iris job running kaniko, or the local Docker engine.

    An image of the same inputs already pushed (its `inputs-<key>` tag) is tagged instead and
    nothing runs (docs/build.md)."""
    from gpurl_tasks.cluster.jobs import run_build
    from gpurl_tasks.cluster.submit import BuildRequest
    from gpurl_tasks.local.pipeline import build_task
    # --memory and --disk are validated as their GPURL_CLUSTER_* variables are
    config = cli.config_for(profile, variant=variant, backend=backend, cluster__memory=memory,
                            cluster__disk=disk)
    source = cli.choice("--wheel-source", wheel_source, WheelSource)
    if config.backend == "local":
        return build_task(config, dry_run=dry_run, wheel_source=source, push_floating=push_floating,
                          no_cache=no_cache, say=cli.say, stream=verbose, force=force, chain=chain)
    return run_build(config, BuildRequest(
        cluster=cli.cluster_flag(cluster), cpu=cli.positive_flag("--cpu", cpu, float),
        timeout=cli.positive_flag("--timeout", timeout, int), force=force,
        local_only=cli.given_flags(wheel_source=source, push_floating=push_floating,
                                   no_cache=no_cache, chain=chain)), dry_run=dry_run, say=cli.say)


@task(interrupted="interrupted: stopped watching {job}; the job was not touched",
      help={"job": "the job id `invoke build` printed, e.g. /alice/gpurl-kaniko-0123abc",
            "interval": "seconds between state polls",
            "max_duration": "give up (exit 3) after this many seconds, also while iris hangs"})
def watch(c: Context, job: str, interval: int = 60, max_duration: int = 6 * 3600,
          cluster: str | None = None, profile: str | None = None, json: bool = False) -> Outcome | None:
    """Poll an iris job's state until terminal (exit 0 succeeded, 1 failed, 2 absent, 3 stuck).

    Exit 3 also when iris does not answer within --max-duration; 2 without iris; 130 on
    Ctrl-C and 143 on SIGTERM, which leave the job running."""
    from gpurl_tasks.cluster.jobs import run_watch
    return run_watch(cli.config_for(profile), cli.positional("watch", job), interval=interval,
                     max_duration=max_duration, say=cli.say, cluster=cli.cluster_flag(cluster))


@task(help={"job": "the id of the one job to stop; no other job is touched (no prefix match)",
            "dry_run": "print the command and run nothing"})
def kill(c: Context, job: str, cluster: str | None = None, profile: str | None = None,
         dry_run: bool = False, json: bool = False) -> Outcome | None:
    """Stop exactly one iris job, no other job whose id shares its prefix.

    Exit 0 killed, 2 not running (ended or unknown), 1 refused (it would touch another job) or
    another job was touched, 3 no answer from iris within its bound, 130 interrupted."""
    from gpurl_tasks.cluster.jobs import kill_job
    return kill_job(cli.config_for(profile), cli.positional("kill", job), dry_run=dry_run,
                    cluster=cli.cluster_flag(cluster))


@task(help={
    "ref": "image REPO:TAG or REPO@sha256:... (default: REGISTRY/REPO:PREFIX-<HEAD sha>)",
    **RULES_HELP, "variant": VARIANT_HELP,
    "profile": PROFILE_HELP + "; with --ref alone, the profile whose registry/repository it names"})
def verify_layers(c: Context, ref: str | None = None, cap: str | None = None,
                  hard_limit: str | None = None, min_layers: str | None = None,
                  json_: bool = False, profile: str | None = None,
                  variant: str | None = None) -> Outcome | None:
    """Check a pushed image's layers through the registry API; exit 0 only if every rule holds.

    The image is --ref (`nox -s verify-layers -- REF` takes it bare); an image index is checked
    platform by platform, each under its platform's variant's rules. Rules: no layer at the
    hard limit, none above the cap, at least min-layers layers; each uv sync layer is shown
    next to its predicted size when the image's plan fingerprint matches the current plan."""
    from gpurl_tasks.release.flow import verify_task
    configs = cli.variant_configs(profile, variant, ref=ref,
                                  **cli.rule_flags(cap, hard_limit, min_layers))
    return cli.each_variant(configs, lambda config: verify_task(
        config, cli.text_flag("--ref", ref)))


@task(help={
    "ref": "immutable REPO:PREFIX-<gitsha> or REPO@sha256:... (default: this commit's tag)",
    "launcher": "launcher file to rewrite (config key: launcher.path)",
    "variable": "variable holding the image (config key: launcher.variable; pins it instead "
                "of an image table)",
    "dry_run": "print the unified diff and write nothing",
    "force": "pin even when the image fails the layer rules", **RULES_HELP,
    "variant": VARIANT_HELP + "; each goes to its own launcher variable (variants of several "
               "platforms sharing one: their image index; one of those alone: its platform-variable; "
               "with launcher.table, each to its entry, in one write)"})
def pin(c: Context, ref: str | None = None, launcher: str | None = None,
        variable: str | None = None, dry_run: bool = False, force: bool = False,
        cap: str | None = None, hard_limit: str | None = None, min_layers: str | None = None,
        json_: bool = False, profile: str | None = None, variant: str | None = None) -> Outcome | None:
    """Verify the image, then pin its manifest digest (of an index: its target's platform's)
    into the launcher; variants of different platforms sharing a launcher variable get the
    digest of their image index, composed at the registry, and each its own in its
    platform-variable.

    Rewrites only the variable's value and the provenance comment above it, atomically; a
    second pin of the same digest changes nothing. Floating tags are refused."""
    from gpurl_tasks.release.flow import pin_each
    configs = cli.variant_configs(profile, variant, ref=ref, strict=True,
                                  single="--variable" if variable is not None else None,
                                  **cli.rule_flags(cap, hard_limit, min_layers),
                                  launcher__variable=variable, launcher__path=cli.path_flag(launcher),
                                  launcher__table="" if variable is not None else None)
    return cli.EachVariant(pin_each(configs, cli.text_flag("--ref", ref), force=force,
                                    dry_run=dry_run, warn=cli.say))


@task(name="verify-gpu", help={
    "ref": "the image: REPO:TAG or REPO@sha256:... (default: this commit's tag)",
    "variant": ONE_VARIANT_HELP + "; its platform's image runs, on its cluster",
    "cluster": "the iris cluster of the job (default: cluster.gpu-cluster, else the build's)",
    "dry_run": "print the iris command (the image resolved to its digest) and submit nothing",
    "interval": "seconds between the job's state polls"})
def verify_gpu(c: Context, ref: str | None = None, variant: str | None = None,
               profile: str | None = None, cluster: str | None = None, dry_run: bool = False,
               interval: int = 30, json: bool = False) -> Outcome | None:
    """Run the pushed image on the GPUs of one node and attach the verdict to its digest.

    An iris job whose task image is the image by digest checks the driver, the kernels'
    architectures, kernel launches and the network there; its result becomes an in-toto
    SLSA verification summary attached to the image (`invoke sbom` shows it; `pin` reads
    it under verify.gpu). Exit 0 passed, 1 failed (attached either way), 2 or 3 when no
    result came back (nothing attached)."""
    from gpurl_tasks.cluster.gpujob import run_verify_gpu
    return run_verify_gpu(cli.config_for(profile, variant=variant), cli.text_flag("--ref", ref),
                          dry_run=dry_run, say=cli.say, cluster=cli.cluster_flag(cluster),
                          interval=cli.positive_flag("--interval", interval, int) or 30)


@task(name="rebuild-needed", help={
    "since": "git ref to compare with (default: the pinned image's commit, else HEAD~1)",
    "variant": VARIANT_HELP})
def rebuild_needed(c: Context, since: str | None = None, json: bool = False,
                   profile: str | None = None, variant: str | None = None) -> Outcome | None:
    """Does the working tree need a new image? none (0), image (10) or wheels+image (11).

    Compares the baked inputs (Dockerfile ARGs, base images, apt sets, the sync chain, the
    lock's install closure for the target and extras) at --since and in the working tree.
    Exit codes: 0 none (a source-only change is synced live into /app), 10 image (the
    prebuilt wheels stay valid), 11 wheels+image (rebuild the compiled wheels first),
    2 error (bad input: a bad ref, an unreadable lock or Dockerfile)."""
    from gpurl_tasks.rebuild.inputs import rebuild_needed as decide
    return cli.each_variant(cli.variant_configs(profile, variant), lambda config: decide(
        config, since=cli.text_flag("--since", since)))


@task(help={"variant": "the variant whose build is checked (default: the profile's first)"})
def doctor(c: Context, profile: str | None = None, variant: str | None = None,
           json: bool = False) -> Outcome | None:
    """Check every prerequisite of the configured build, one line each; exit 0 only if all hold.

    KUBECONFIG naming the cluster, the pinned iris and its kubernetes client, the controller
    (with cluster.controller-url), the registry token's kind and push scope on the image and
    cache repositories, the prebuilt wheels and their MANIFEST, current generated files, a
    free immutable tag, the executor and crane pins. `invoke build` runs the same checks first."""
    from gpurl_tasks.cluster.jobs import doctor_task
    return doctor_task(cli.config_for(profile, variant=variant), say=cli.say)


@task(positional=["first", "second"], help={
            "first": "REF1, the image a node holds: REPO:TAG or REPO@sha256:...",
            "second": "REF2, the image it would pull next: REPO:TAG or REPO@sha256:...",
            "profile": PROFILE_HELP + " (its registry, lock and target read the images)"})
def diff(c: Context, first: str, second: str | None = None, profile: str | None = None,
         json: bool = False) -> Outcome | None:
    """What changed from one pushed image to another, and the bytes a node holding it pulls.

    `invoke diff REF1 REF2`: layers by digest, slice layers shared or new, the largest
    new layer, and the packages added, removed or changed (from the locks at the images'
    recorded commits, when this clone has them); an image gpurl did not build is compared by
    layers and bytes only."""
    from gpurl_tasks.release.diff import diff_task
    first = cli.positional("diff", first)
    second = cli.positional("diff", second, needs="the second image", usage="invoke diff REF1 REF2")
    return diff_task(cli.config_for(profile), first, second)


@task(name="check-wheels", help={
    "source": "a wheelhouse directory, a MANIFEST file or its URL (default: build.wheelhouse)",
    "variant": ONE_VARIANT_HELP})
def check_wheels(c: Context, source: str | None = None, json: bool = False,
                 profile: str | None = None, variant: str | None = None) -> Outcome | None:
    """Check the prebuilt wheels against the Dockerfile's pins; exit 1 on a mismatch."""
    from gpurl_tasks.rebuild.wheelhouse import check_source
    return check_source(cli.config_for(profile, variant=variant), cli.text_flag("--source", source))


@task(name="setup-local", help={"variant": ONE_VARIANT_HELP,
                                "dry_run": "say what each step would do, change nothing"})
def setup_local(c: Context, profile: str | None = None, dry_run: bool = False,
                json: bool = False, variant: str | None = None) -> Outcome | None:
    """Make the local path ready: engine, BuildKit client, registry, base image, package index."""
    from gpurl_tasks.local.setup import setup_local as prepare
    return prepare(cli.config_for(profile, variant=variant), dry_run=dry_run)


@task(name="write-slices", help={
    "variant": ONE_VARIANT_HELP,
    "output": "directory the layer blobs go to (default: .cache/gpurl/slices/PROFILE/VARIANT)",
    "dry_run": "print the staging image's build and each slice's staging container, run nothing"})
def write_slices(c: Context, profile: str | None = None, variant: str | None = None,
                 output: str | None = None, dry_run: bool = False,
                 json: bool = False) -> Outcome | None:
    """Write a variant's slice layers here and check them, for another platform too.

    An aarch64 variant's slices are staged on this x86_64 machine with uv's --python-platform
    (no emulation); every ELF file must be of the target's machine and every entry point must
    name build.venv's python. A slice uv must build from an sdist is left to a native build."""
    from pathlib import Path

    from gpurl_tasks.local.write_slices import write_slices as write
    given = cli.path_flag(output)
    return write(cli.config_for(profile, variant=variant),
                 output=Path(given) if given else None, dry_run=dry_run, say=cli.say)


@task(name="setup-kaniko",
      help={"executor": "which executors to build: upstream, fork or both (comma-separated)",
            "dry_run": "check the sources, print the commands; build and push nothing"})
def setup_kaniko(c: Context, profile: str | None = None, executor: str = "upstream,fork",
                 json: bool = False, dry_run: bool = False) -> Outcome | None:
    """Build kaniko and crane from source archives and push the executors to the registry.

    The archives are cluster.source-archives (names and sha256 pinned in
    gpurl_tasks/local/builder-sources.toml); the registry is registry.host (loopback)."""
    from gpurl_tasks.local.from_source import setup_kaniko_task
    return setup_kaniko_task(cli.config_for(profile), executor, dry_run=dry_run, say=cli.say)


@task(name="build-wheels", help={
    "target": "the stage that builds the wheels",
    "source": "directory in that stage holding the wheels and MANIFEST",
    "dockerfile": "Dockerfile to build (config key: build.dockerfile)",
    "verbose": "stream the whole build log", "variant": ONE_VARIANT_HELP})
def build_wheels(c: Context, profile: str | None = None, target: str = "wheel-builder",
                 source: str = "wheels", dockerfile: str | None = None, json: bool = False,
                 verbose: bool = False, variant: str | None = None) -> Outcome | None:
    """Build the wheel-builder stage into the wheelhouse, then check the wheels (exit 1)."""
    from gpurl_tasks.local.actions import build_wheels_task
    config = cli.config_for(profile, variant=variant, build__dockerfile=cli.path_flag(dockerfile))
    return build_wheels_task(config, target=target, source=source, say=cli.say, stream=verbose)


@task(name="serve-index", interrupted="index server stopped: interrupted", help={
    "directory": "directory to serve (default: the local cache's)",
    "json": "a failure as one JSON object on stdout"})
def serve_index(c: Context, profile: str | None = None, directory: str = "", json: bool = False) -> None:
    """Serve the loopback package index at build.index-url until Ctrl-C or SIGTERM."""
    from gpurl_tasks.local.setup import serve_index as serve
    serve(cli.config_for(profile), directory, say=cli.say)


@task(name="fill-index", help={
    "pins": "comma-separated exact pins, e.g. 'rich==13.9.4,attrs==25.3.0'",
    "deps": "also download their dependencies"})
def fill_index(c: Context, pins: str, profile: str | None = None, deps: bool = False,
               json: bool = False) -> Outcome | None:
    """Download wheels for the profile's target platform into the loopback index."""
    from gpurl_tasks.local.setup import fill_index as fill
    return fill(cli.config_for(profile), cli.positional("fill-index", pins), deps=deps, say=cli.say)


@task(help={"profile": "profile to run end to end (default: $GPURL_PROFILE, else demo)",
            "wheel_source": "prebuilt-wheelhouse (compile once, reuse) or wheel-builder",
            "dry_run": "print every step's commands; start, build, push and write nothing"})
def demo(c: Context, profile: str | None = None, wheel_source: str = "prebuilt-wheelhouse",
         json: bool = False, dry_run: bool = False) -> Outcome | None:
    """The main job on this machine: setup-local, plan, generate, build, push, verify, pin."""
    from gpurl_tasks.local.pipeline import demo_task
    source = cli.choice("--wheel-source", wheel_source, WheelSource) or wheel_source
    return demo_task(cli.config_for(profile, default="demo"), wheel_source=source,
                     dry_run=dry_run, say=cli.say)


@task(help={"ref": "the image: REPO:TAG or REPO@sha256:... (default: this commit's tag)",
            "document": "print the whole SBOM (CycloneDX JSON) instead of a summary",
            "variant": VARIANT_HELP})
def sbom(c: Context, ref: str | None = None, document: bool = False, json: bool = False,
         profile: str | None = None, variant: str | None = None) -> Outcome | None:
    """The SBOM and provenance attached to a pushed image: a summary, or the SBOM itself."""
    from gpurl_tasks.release.attested import sbom_task
    return sbom_task(cli.config_for(profile, variant=variant), cli.text_flag("--ref", ref),
                     document=document)



@task(iterable=["variant", "platform", "cluster"], help={
    "variant": "NAME=EXTRA,EXTRA: an image of these extras; repeatable (e.g. standard=vllm,fsdp)",
    "platform": "x86_64 or aarch64 (amd64/arm64); repeatable (default: every linux machine "
                "the lock was resolved for)",
    "workspace": "the directory of the uv.lock (default: found: the root's, else the one below)",
    "registry": "HOST/REPOSITORY the images are pushed to (default: a pin table's "
                "IMAGE_REPOSITORY)",
    "pin_table": "the module of pinned images (default: found, like cloud/iris/gpu_rl_images.py)",
    "cluster": "ARCH=NAME: the iris cluster that builds that platform's images; repeatable",
    "cuda_arch_list": "TORCH_CUDA_ARCH_LIST, e.g. \"8.0;9.0;10.0\" (required when the image "
                      "builds a package from source)",
    "python": "the image's Python, e.g. 3.12 (default: the one requires-python allows)",
    "profile": "the profile to write (default: $GPURL_PROFILE, else default)",
    "force": "write over an existing [tool.gpurl] and differing tasks.py / noxfile.py",
    "dry_run": "print what would be written and write nothing"})
def init(c: Context, variant: list[str] | None = None, platform: list[str] | None = None,
         workspace: str | None = None, registry: str | None = None, pin_table: str | None = None,
         cluster: list[str] | None = None, cuda_arch_list: str | None = None,
         python: str | None = None, profile: str | None = None, force: bool = False,
         dry_run: bool = False, json: bool = False) -> Outcome | None:
    """Adopt the repository in the current directory: write [tool.gpurl] from its lock.

    It reads uv.lock and pyproject.toml, writes [tool.gpurl] into pyproject.toml (your text
    stays as it is) and gpurl's tasks.py / noxfile.py, and names at once everything it cannot
    tell (the registry, the CUDA arch list when the image compiles). Nothing is written on an
    error, or when [tool.gpurl] is there already (unless --force)."""
    from gpurl_tasks.adopt.init import DEFAULT_PROFILE, InitRequest, adopt
    from gpurl_tasks.config import profile_from_env
    return adopt(InitRequest(
        root=cli.start_directory(), workspace=cli.text_flag("--workspace", workspace),
        variants=tuple(variant or ()), platforms=tuple(platform or ()),
        registry=cli.text_flag("--registry", registry),
        pin_table=cli.text_flag("--pin-table", pin_table), clusters=tuple(cluster or ()),
        cuda_arch_list=cli.text_flag("--cuda-arch-list", cuda_arch_list),
        python=cli.text_flag("--python", python),
        profile=cli.text_flag("--profile", profile) or profile_from_env() or DEFAULT_PROFILE,
        force=force,
        dry_run=dry_run))


ns = Collection(plan, sizes, lock_post_install, generate, build, watch, kill, verify_layers, verify_gpu, pin,
                rebuild_needed, doctor, diff, check_wheels, setup_local, setup_kaniko,
                build_wheels, serve_index, fill_index, demo, sbom, write_slices, init)
