"""The in-cluster build script, rendered from the config when `invoke build` submits it.

The iris job runs cluster.task-image (a slim python image: kaniko's own image is distroless,
no bash). gpurl's own code, the zipapp staged in the bundle (cluster/jobapp.py, checked by its
sha256), runs every step but the executor; bash keeps what must be bash:
- the node check: a node whose `uname -m` is not the variant's target.arch is refused (naming
  the variant's cluster);
- `start prepare` (cluster/jobstart.py, the task image's python3): the job's inputs checked,
  its CA bundle copied where every later step reads it, crane fetched and checked by sha256,
  the executor (pinned by digest, for the variant's platform) exported;
- the overlay of the executor over `/`, then the registry auth file (kaniko's image ships its
  own /kaniko and would clobber it) with tracing off until the token is consumed;
- `start admit`: the immutable tag looked up, the profile's prebuilt compiled wheels (by exact
  name, none for a profile without any) fetched and checked against their MANIFEST (its
  platform first), never falling back to a compile;
- the executor runs, with per-instruction layers, `--skip-unused-stages` and the variant's
  `--custom-platform`. With `cluster.env-source = "composed"` (the default) the environment is
  written, not built: the executor builds env-base alone; an unpushed second build FROM it
  runs the zipapp's `compose-env` (writer/job.py: the local path's orchestration with crane as
  its registry) in env-base's own filesystem, so each slice is the same blob the local path
  writes; the final build runs FROM the composed image;
- after the final push the zipapp's `attest job`, with the image's python3 (the job's own is
  gone with kaniko's first reset), attaches the image's SBOM and provenance.
Rendering reads nothing but the config, the `./path` wheel sources' pyproject.toml (their
versions name the wheels) and the installed package (the zipapp's sha256, which the script
checks) and is byte-reproducible.

The bash is files, not strings: script/ holds job.sh (the whole script) and the fragments
spliced into it, shellcheck-clean as they stand; `render_template` fills their `@NAME@`s.

Every value from the config is a `shlex.quote`d word (or, spliced into `"${VAR:-value}"`, a
plain name); paths are checked to stay inside the repository, symlinks resolved; the registry
host reaches the auth file as a JSON string made by `json.dumps`, so no host can add a key.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from gpurl_tasks.attest import documents as attest_documents
from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sbom as cdx
from gpurl_tasks.attest import tool as attest_tool
from gpurl_tasks.cluster import jobapp, jobstart
from gpurl_tasks.cluster.jobapp import JobApp
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.generate import fitted_plan
from gpurl_tasks.dockerfile.recipe import BUILD_ID, WORKDIR
from gpurl_tasks.dockerfile.wheels import (
    ABI_KEY_PREFIX,
    abi_key,
    pins_from_args,
    prebuilt_wheel_names,
)
from gpurl_tasks.errors import BUG_HINT, BuildError
from gpurl_tasks.plan.model import Plan, SliceBuild
from gpurl_tasks.release.attested import base_image, skeleton
from gpurl_tasks.release.configured import cache_repository
from gpurl_tasks.values import (
    SOURCE_ID_PATTERN,
    inside_repository,
    plain_name,
    profile_name,
    registry_host,
)
from gpurl_tasks.writer import blob as writer_blob
from gpurl_tasks.writer import composition as writer_composition
from gpurl_tasks.writer import crane as writer_crane
from gpurl_tasks.writer import job as writer_job
from gpurl_tasks.writer import ocispec as writer_ocispec
from gpurl_tasks.writer import orchestration as writer_orchestration
from gpurl_tasks.writer import probe as writer_probe
from gpurl_tasks.writer import records as writer_records
from gpurl_tasks.writer import retry
from gpurl_tasks.writer import staging as writer_staging
from gpurl_tasks.writer import tool as writer_tool
from gpurl_tasks.writer.records import IndexLine, written_history
from gpurl_tasks.writer.staging import no_isolation_args

__all__ = [
    "JOB_APP",
    "ROOT_ENV",
    "SKELETON",
    "SLICE_INDEX",
    "cache_repo",
    "composes",
    "job_app",
    "job_files",
    "pinned_executor",
    "prebuilt_wheel_names",
    "render_script",
    "render_template",
]

# Tests point this at a temp dir so the script's /kaniko and /app live there (job.sh reads
# it by this name: a placeholder cannot stand inside `${...:-}`).
ROOT_ENV = "GPURL_KANIKO_ROOT"
# What `invoke build` stages beside the repository's files in the workspace iris bundles
# (cluster/bundle.py), rendered for the variant at submit time and never committed: gpurl's job
# modules as one zipapp (cluster/jobapp.py), checked by its sha256 before it runs, the slice
# index and the attestation skeleton.
JOB_DIR = ".gpurl"
JOB_APP = f"{JOB_DIR}/job.pyz"
SLICE_INDEX = f"{JOB_DIR}/slices"
SKELETON = f"{JOB_DIR}/attest.json"
# The modules whose command lines the job runs (each with every gpurl module it imports): the
# slice writer and the composition the composing build runs with env-base's python3, and the
# SBOM and provenance writer the job runs after its push with the image's python3.
_LAYER_MODULES = (writer_blob, writer_ocispec, writer_records, writer_probe, writer_composition,
                  writer_staging, retry, writer_orchestration, writer_crane, writer_job,
                  writer_tool)
_START_MODULES = (jobstart,)
_ATTEST_MODULES = (writer_ocispec, cdx, slsa, attest_documents, attest_tool)


def job_app() -> JobApp:
    """The zipapp the job runs (the same bytes for the same installed package)."""
    return jobapp.job_app((*_START_MODULES, *_LAYER_MODULES, *_ATTEST_MODULES))


def skeleton_text(config: Config) -> str:
    """What the job's documents say that is known before the build (the lock's closure, the
    declared installs, the base image as configured): a lock bump changes it, not the script."""
    return json.dumps(skeleton(config).to_json(), indent=1, sort_keys=True) + "\n"


def cache_repo(config: Config) -> str:
    """The kaniko layer cache repository (shared across builds: never delete it)."""
    return cache_repository(config)


def _relative(path: Path, root: Path, key: str) -> str:
    """`path` relative to the repository (the kaniko context, /app), symlinks resolved."""
    return inside_repository(path, root, key, error=BuildError)


# The script's bash is in script/ beside this module (package data): job.sh the whole script,
# the others fragments spliced into it, each a file shellcheck reads as it stands. `@NAME@`
# marks a placeholder; its value is a word made here (a `shlex.quote`d config value, a plain
# name, a number) or a fragment's text.
_SCRIPTS = Path(__file__).with_name("script")
_PLACEHOLDER = re.compile(r"^@(?P<line>[A-Z][A-Z0-9_]*)@\n|@(?P<word>[A-Z][A-Z0-9_]*)@", re.M)
# A fragment's first line names its shell to shellcheck alone: it is not part of the script.
_DIRECTIVE = "# shellcheck shell=bash\n"


def render_template(name: str, values: Mapping[str, str | int]) -> str:
    """Template `name` of script/ (its shellcheck directive line dropped) with each `@NAME@`
    replaced by `values[NAME]`, in one pass (a value is never searched for placeholders).
    A placeholder alone on its line whose value is empty takes the line with it: what a
    profile does not have (compiled wheels) leaves no trace in its script.
    The template's placeholders and the keys must be the same: a placeholder without a value,
    or a value without its placeholder, is refused rather than rendered."""
    text = (_SCRIPTS / name).read_text(encoding="utf-8").removeprefix(_DIRECTIVE)
    named = {m["line"] or m["word"] for m in _PLACEHOLDER.finditer(text)}
    if named != values.keys():
        raise BuildError(f"template script/{name} and its values disagree: placeholders without "
                         f"a value: {sorted(named - values.keys())}; values without a "
                         f"placeholder: {sorted(values.keys() - named)}",
                         hint=BUG_HINT)

    def value(match: re.Match[str]) -> str:
        if match["line"] is None:
            return str(values[match["word"]])
        filled = str(values[match["line"]])
        return filled + "\n" if filled else ""

    return _PLACEHOLDER.sub(value, text)


def _fragment(name: str, values: Mapping[str, str | int]) -> str:
    """A fragment's text for its placeholder, which stands alone on its line in the template
    (so the line's own break ends the fragment's last line)."""
    return render_template(name, values).removesuffix("\n")


def _start_args(config: Config, wheels: tuple[str, ...]) -> str:
    """The rendered options of the zipapp's `start` steps (cluster/jobstart.py), one per line
    of the script's START array: the config's values the job's environment may override, and
    the prebuilt wheels the job fetches with the ABI key their MANIFEST must record (no wheel
    option for a profile without compiled wheels)."""
    q = shlex.quote
    options = {
        "image-workspace": WORKDIR, "source-id": SOURCE_ID_PATTERN,
        "dockerfile": _relative(config.build.dockerfile, config.root, "build.dockerfile"),
        "tag-prefix": _plain("registry.tag-prefix", config.registry.tag_prefix),
        "floating-tag": _plain("registry.floating-tag", config.registry.floating_tag),
        "crane-url": config.variant.crane_archive[0],
        "crane-sha256": config.variant.crane_archive[1],
        "retries": str(config.registry.retries),
        "retry-max-wait": str(config.registry.retry_max_wait)}
    if config.build.compiled_wheels:
        pins = pins_from_args({}, config.build, config.target)
        options |= {
            "wheel-source": _plain("build.wheel-source", config.build.wheel_source),
            "wheelhouse": _relative(config.build.wheelhouse, config.root, "build.wheelhouse"),
            "wheel-base-url": config.build.wheel_base_url.rstrip("/"),
            "abi-key": abi_key(pins), "abi-prefix": ABI_KEY_PREFIX,
            "wheel-platform": pins.platform}
    words = [*options.items(), *(("wheel", name) for name in wheels)]
    return "\n".join(f"  --{name} {q(value)}" for name, value in words)


def _attest(config: Config, wheels: tuple[str, ...]) -> str:
    """The script's last step (attest.sh): the pushed image's SBOM and provenance.

    Attached to the pushed digest as OCI 1.1 artifacts (their `subject` the image) by the
    zipapp's `attest job` (attest/tool.py: gpurl's attest modules, its registry calls through
    writer/crane.py) from the bundle's skeleton and what only this job knows: the digest, the
    image's labels, the apt set as installed (the filesystem there is the image's last stage:
    its dpkg status, its python3), the executor by digest. A registry without the referrers
    API gets the `sha256-<hex>` tag. The prebuilt wheels the image installed are named with
    the sha256 their MANIFEST records.
    """
    q = shlex.quote
    wheel_args = "".join(
        [' \\\n  --wheel-source "$WHEEL_SOURCE" --wheel-manifest "$WHEELHOUSE/MANIFEST"'
         f" --abi-prefix {q(ABI_KEY_PREFIX)}", *(f" \\\n  --wheel {q(n)}" for n in wheels)]
    ) if wheels else ""
    return _fragment("attest.sh", {
        "SKELETON": q(SKELETON),
        "BASE_IMAGE": q(base_image(config)),
        "VENV": q(config.build.venv),
        "WHEEL_ARGS": wheel_args})


def _wheel_build_arg(config: Config) -> str:
    """WHEEL_SOURCE's build arg (start prepare checks the job's value); nothing (no line) for
    a profile without compiled wheels."""
    return '  --build-arg "WHEEL_SOURCE=$WHEEL_SOURCE"' if config.build.compiled_wheels else ""


def _cache_copy(config: Config) -> str:
    """The executor's COPY caching, for a generated Dockerfile only.

    A COPY's cache key hashes its files' bytes, modes and owners, not their times, so a cached
    COPY is the same blob and an unchanged compiled tree or workspace is not pushed again. A
    stage whose every command is cached is not unpacked, and the attestation step reads the
    last stage's files: the generated Dockerfile ends in a RUN under BUILD_ID, new on every
    run (start prepare), which is never cached. A hand-written Dockerfile has no such RUN.
    """
    if not config.build.generate:
        return "  # no --cache-copy-layers: a fully cached last stage is not unpacked, and attest reads it"
    return ("  # cached COPY layers are the same blobs; the last RUN, under a new BUILD_ID, is never\n"
            "  # cached, so kaniko unpacks the last stage that attest reads\n"
            f'  --cache-copy-layers\n  --build-arg "{BUILD_ID}=$BUILD_ID"')


def _plain(key: str, value: str) -> str:
    """A value spliced into `"${VAR:-value}"`: only a registry-name alphabet is allowed."""
    return plain_name(value, key, error=BuildError)


def pinned_executor(image: str) -> str:
    """The executor image, which must be pinned by digest: a tag can move under a cached job."""
    if not re.fullmatch(r"[^\s@]+@sha256:[0-9a-f]{64}", image):
        raise BuildError(f"cluster.kaniko-executor = {image!r} is not pinned by digest",
                         hint="write IMAGE@sha256:<64 hex>; `crane digest IMAGE:TAG` gives it")
    return image


def _compose(config: Config) -> str:
    """The composing part of the script (compose.sh; "" for cluster.env-source = chain).

    cluster.env-source = "composed": the environment is written, not built. kaniko builds
    env-base alone; a second, unpushed kaniko build FROM it runs compose-env.sh (the layer
    tool's `compose-env`, writer/job.py) in env-base's own filesystem and environment (its
    python3, uv and venv, as a container of env-base does on the local path; its PATH, uv
    settings and index apply), the prebuilt compiled wheels too when the job fetched them
    (writer/compiled.py); the final build runs FROM the composed image. Between executor
    runs the job's own filesystem is gone (kaniko deletes it, and restores only what a stage
    needs), so the script then uses bash builtins and the static crane only.
    """
    if not composes(config):
        return ""
    compose_env = _fragment("compose-env.sh", {
        "VENV": shlex.quote(config.build.venv), "LAYER_LEVEL": config.layers.slice_gzip_level,
        "COMPILED_WHEELS": "".join(f" --compiled-wheel {shlex.quote(name)}"
                                   for name in prebuilt_wheel_names(config))})
    compose = _fragment("compose.sh", {
        "SLICE_INDEX": shlex.quote(SLICE_INDEX), "COMPOSE_ENV": compose_env,
        "SNAPSHOT_MODE": config.cluster.snapshot_mode})
    return f"\n{compose}\n"  # a paragraph of its own: its placeholder's line is the blank line


def composes(config: Config) -> bool:
    """The job composes the environment from slices: cluster.env-source = "composed", for a
    generated Dockerfile (a hand-written one has no slices: it is built as written)."""
    return config.cluster.env_source == "composed" and config.build.generate


def _build_args(config: Config) -> str:
    """The `--build-arg NAME=value` lines of build.build-args (a hand-written Dockerfile's),
    each a quoted word; nothing (no line) without any."""
    return "\n".join(f"  --build-arg {shlex.quote(arg)}" for arg in config.build.build_args)


def _build_context(config: Config) -> str:
    """What follows "$CONTEXT" in the build context's path: nothing for the repository root,
    else `/'DIR'` (build.context, inside the repository)."""
    rel = _relative(config.build.context, config.root, "build.context")
    return "" if rel in ("", ".") else f"/{shlex.quote(rel)}"


def render_script(config: Config) -> str:
    """The script text for `config` (pure; the same config always gives the same bytes)."""
    q = shlex.quote
    registry = config.registry
    host = registry_host(registry.host, "registry.host", error=BuildError)
    wheels = prebuilt_wheel_names(config)
    return render_template("job.sh", {
        "COMPOSE": _compose(config),
        "BUILD_ARGS": _build_args(config),
        "BUILD_CONTEXT": _build_context(config),
        "START_ARGS": _start_args(config, wheels),
        "ATTEST": _attest(config, wheels),
        "PROFILE": profile_name(config.profile, "profile", error=BuildError),
        "TARGET_ARCH": q(config.target.arch),
        "TARGET_PLATFORM": q(config.target.platform),
        "CLUSTER_NAME": q(config.cluster.name),
        "VARIANT": config.variant.note,
        "REGISTRY_HOST": q(host),
        "REGISTRY_HOST_JSON": q(json.dumps(host)),
        "IMAGE": q(registry.image),
        "CACHE_REPO": q(cache_repo(config)),
        "EXECUTOR_IMAGE": q(pinned_executor(config.cluster.kaniko_executor)),
        # unset: the job's DOCKER_USER_ID only (`build` passes it, and refuses without one)
        "REGISTRY_USER": _plain("registry.user", registry.user) if registry.user else "",
        "COMPRESSION_LEVEL": config.cluster.kaniko_gzip_level,
        "SNAPSHOT_MODE": config.cluster.snapshot_mode,
        "JOB_APP": shlex.quote(JOB_APP),
        "JOB_APP_SHA256": job_app().sha256,
        "WHEEL_BUILD_ARG": _wheel_build_arg(config),
        "CACHE_COPY": _cache_copy(config),
    })


def slice_index(config: Config, plan: Plan) -> str:
    """One line per slice, in plan order (writer/records.py's `IndexLine`): what the script
    composes (the script is rendered from the config alone: a lock bump leaves it)."""
    return "".join(IndexLine(
        name=step.name, label=step.label,
        file=_relative(step.slice.path(config.variant), config.root, "slices"),
        created_by=written_history(step.slice.image_path, config.build.venv, hashed=step.hashed),
        build=_build_column(plan.build_of(step))).to_line() + "\n" for step in plan.layers)


def _build_column(build: SliceBuild | None) -> str:
    """The index's last column for a slice staged on the slices below: `lower` and uv's
    flags for it (empty for any other slice)."""
    if build is None:
        return ""
    return " ".join(["lower", *no_isolation_args(build.no_isolation)])


def job_files(config: Config, plan: Plan | None = None) -> dict[str, bytes]:
    """What `invoke build` stages in the job's workspace for a variant, by path in it: the
    zipapp, the attestation skeleton and, when the job composes, the slice index (of `plan`,
    by default the committed slices' fitted plan, the one `generate --check` just proved)."""
    files = {JOB_APP: job_app().data, SKELETON: skeleton_text(config).encode()}
    if composes(config):
        files[SLICE_INDEX] = slice_index(config, plan or fitted_plan(config)).encode()
    return files
