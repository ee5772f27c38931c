"""`invoke build` on the cluster: guard rails, then the `iris job run` that runs kaniko.

Each refusal names the runbook's reason, because every one of them is a build that
would otherwise fail late (a silent OOM, a push rejected after an hour) or never start.
Side effects come in through the small `BuildEnv` so tests can point each at a real
local part (a git repo in a temp dir) or a stand-in (the cluster).
"""

from __future__ import annotations

import base64
import dataclasses
import shlex
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from gpurl_tasks import git
from gpurl_tasks.cluster import doctor, kaniko
from gpurl_tasks.cluster.bundle import Bundle, check_bundle, with_job_files
from gpurl_tasks.cluster.doctor import MIN_MEMORY, require
from gpurl_tasks.cluster.iris import ClusterTarget, JobSpec, job_run_argv
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.context import ignored_paths
from gpurl_tasks.errors import BuildError
from gpurl_tasks.oci.tags import refuse_to_move
from gpurl_tasks.redact import Secret, TokenSource

__all__ = [
    "JOB_COMMAND",
    "MIN_MEMORY",
    "BuildEnv",
    "BuildRequest",
    "PreparedBuild",
    "elide_argument",
    "guard_immutable_tag",
    "prepare_build",
]

# The pod command iris runs: decode the script shipped in BUILD_B64 into a file of its own
# and exec it. Not a fixed /tmp/build.sh: where tasks share a host's /tmp (a local iris
# cluster runs them as host processes), concurrent jobs would run each other's script.
JOB_COMMAND = ("bash", "-lc",
               'f="$(mktemp)" && echo "$BUILD_B64" | base64 -d > "$f" && exec bash "$f"')


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class BuildRequest:
    """The flags of `invoke build`; None means "from the config"."""

    cluster: str | None = None
    cpu: float | None = None
    memory: str | None = None
    disk: str | None = None
    timeout: int | None = None
    force: bool = False
    local_only: tuple[str, ...] = ()  # local-backend flags that were given: refused here


@dataclasses.dataclass(frozen=True, kw_only=True)
class BuildEnv:
    """The outside world the guard rails read (environment, git, token, bundle)."""

    env: Mapping[str, str]
    token: Callable[[], TokenSource | None]
    bundle: Callable[[Path], Bundle]
    # the tree the job bundles (git.source, as the local backend's source id reads it)
    source: Callable[[Path, Sequence[str]], git.Source | None] = git.source
    # the digest the registry holds under an image reference (None: no such tag);
    # None here: ask the configured registry (release.configured.existing_digest)
    tag_digest: Callable[[str], str | None] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PreparedBuild:
    """A build that passed every guard rail: the job, its argv, and notes for the user."""

    spec: JobSpec
    gitsha: str
    image_tag: str
    secrets: tuple[Secret, ...]
    notes: tuple[str, ...]
    bundle: Bundle  # with the job's files (`job_files`): what iris uploads
    # what `invoke build` stages beside the repository's files, by path in the workspace
    job_files: Mapping[str, bytes] = dataclasses.field(default_factory=dict)
    # a dry run's missing cluster access (kubeconfig, token): what the real build refuses on
    warnings: tuple[str, ...] = ()

    def argv(self, program: str, *, reveal: bool) -> tuple[str, ...]:
        """The full command; secrets appear only with `reveal=True` (for execution)."""
        return (program, *job_run_argv(self.spec, reveal=reveal))

    def display(self, program: str = "iris") -> str:
        """The command line for humans: `shlex.join` of the argv with secrets redacted and each
        long payload (the base64 script) replaced whole by a placeholder naming its start and
        length, so the line stays one well-formed shell command; `--json` carries the full argv."""
        return shlex.join(elide_argument(arg) for arg in self.argv(program, reveal=False))


ELIDE_OVER = 120  # characters; longer arguments are shown as their start and their length


def elide_argument(arg: str) -> str:
    """A whole argument, or a placeholder for it (never a cut inside a quoted word)."""
    return arg if len(arg) <= ELIDE_OVER else f"{arg[:24]}...<{len(arg)} chars>"


def guard_immutable_tag(prepared: PreparedBuild, existing: str | None, *, force: bool
                        ) -> PreparedBuild:
    """Before submitting: a tag the registry already holds is never moved (kaniko without
    --reproducible never rebuilds the same digest), unless `force`, which the script is told
    through OVERWRITE_TAG=1 (it checks again with crane before it builds)."""
    if existing is None:
        return prepared
    refuse_to_move(prepared.image_tag, existing, force=force,
                   why="a new build would push a different image under it")
    spec = dataclasses.replace(prepared.spec, env=(*prepared.spec.env, ("OVERWRITE_TAG", "1")))
    return dataclasses.replace(prepared, spec=spec, notes=(
        *prepared.notes, f"overwriting {prepared.image_tag} (now {existing}): --force"))


# What a dry run warns about instead of refusing: the cluster access a user reviewing the
# build may not have (the real build still refuses without it)
ACCESS_CHECKS = ("kubeconfig", "registry-token", "registry-user")
NO_TOKEN = TokenSource(token=Secret("<no token>"), source="nowhere (a dry run without one)")


def prepare_build(config: Config, request: BuildRequest, world: BuildEnv, *,
                  dry_run: bool = False) -> PreparedBuild:
    """Run every guard rail and compose the job; raise BuildError naming the first refusal.

    A stale checkout is refused first, in generate --check's words: regenerating changes
    the tree the job bundles (and its tag), whatever else needs fixing.
    `dry_run`: a missing kubeconfig, token or user (ACCESS_CHECKS) is a warning of the result,
    not a refusal, so the commands can be reviewed without cluster access."""
    warnings: list[str] = []

    def access(check: doctor.Check) -> None:
        if dry_run and check.failed and check.name in ACCESS_CHECKS:
            warnings.append(f"{check.detail} (hint: {check.fix})" if check.fix else check.detail)
        else:
            require(check)

    if request.local_only:
        flags = ", ".join(request.local_only)
        one = len(request.local_only) == 1
        raise BuildError(f"{flags} {'is a local-backend flag' if one else 'are local-backend flags'}",
                         hint="add --backend local to build on this machine; the cluster script "
                              "reads WHEEL_SOURCE and PUSH_FLOATING itself")
    # `invoke doctor`'s checks, the ones a build refuses on, in this order. The committed files
    # are rendered from pyproject alone, never from GPURL_* variables: a stale Dockerfile,
    # slice set or script is refused first, with generate --check's own message
    require(doctor.generated_files(config))
    require(doctor.hand_written(config))  # skipped (passes) for a generated Dockerfile
    cluster = config.cluster
    memory = request.memory or cluster.memory
    access(doctor.kubeconfig(world.env))
    named = doctor.kubeconfig_cluster(world.env, cluster.name)
    require(doctor.job_memory(memory, force=request.force,
                              snapshots_environment=doctor.snapshots_environment(config)))
    found = world.token()
    access(doctor.registry_token(found, config.registry.host))
    token = (found or NO_TOKEN) if dry_run else doctor.required_token(found, config.registry.host)
    access(doctor.registry_user(config))
    tree = world.source(config.root, ignored_paths(config))
    if tree is None:
        raise BuildError(
            "cannot resolve GITSHA from git (`git rev-parse --short HEAD` failed): the image "
            "is pushed as the immutable tag PREFIX-GITSHA and the build script requires it",
            hint=f"run from a git checkout with at least one commit ({config.root})",
        )
    gitsha = tree.id
    notes: list[str] = [f"{named.detail} (`invoke doctor` checks every prerequisite)"] \
        if named.failed else []
    if tree.dirty:
        dirty = tree.dirty
        notes.append(f"{len(dirty)} tracked file(s) have uncommitted edits ({', '.join(dirty[:3])}"
                     f"{' ...' if len(dirty) > 3 else ''}); iris bundles the working tree, so "
                     f"the image is tagged {config.registry.tag_prefix}-{gitsha}, not as "
                     f"commit {tree.commit}")
    job_files = kaniko.job_files(config)
    bundle = with_job_files(world.bundle(config.root), job_files)
    check_bundle(bundle)

    # the variant's script with this run's settings: byte-identical to the committed file just
    # checked unless a GPURL_* variable overrides a value the script carries (registry, wheels)
    script = kaniko.render_script(config)
    env: list[tuple[str, str | Secret]] = [
        ("DOCKER_USER_ID", config.registry.user),
        ("DOCKER_TOKEN", token.token),
        ("BUILD_B64", base64.b64encode(script.encode()).decode()),
        ("GITSHA", gitsha),
    ]
    prefix = config.registry.tag_prefix
    job_name = f"gpurl-kaniko-{gitsha}"
    if config.variant.name != config.variants[0].name:
        # each variant has its own script (its Dockerfile, tags and compiled wheels)
        job_name = f"gpurl-kaniko-{config.variant.name}-{gitsha}"
    # what the image's provenance names: the full commit and the iris job
    env += [("GIT_COMMIT", tree.commit), ("JOB_NAME", job_name)]
    spec = JobSpec(
        cluster=ClusterTarget.resolve(name=cluster.name, controller_url=cluster.controller_url,
                                      flag=request.cluster),
        task_image=cluster.task_image,
        cpu=request.cpu if request.cpu is not None else cluster.cpu,
        memory=memory,
        disk=request.disk or cluster.disk,
        job_name=job_name,
        max_retries=cluster.max_retries,
        timeout=request.timeout if request.timeout is not None else cluster.timeout,
        env=tuple(env),
        command=JOB_COMMAND,
    )
    if token is not NO_TOKEN:
        notes.append(f"registry token from {token.source}")
    return PreparedBuild(spec=spec, gitsha=gitsha,
                         image_tag=config.registry.immutable_reference(gitsha, prefix=prefix),
                         notes=tuple(notes),
                         # the token, and USER:TOKEN as the registry auth file carries it (base64)
                         secrets=(token.token, Secret(f"{config.registry.user}:{token.token.reveal()}")),
                         bundle=bundle, job_files=job_files, warnings=tuple(warnings))
