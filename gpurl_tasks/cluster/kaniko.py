"""The in-cluster build script, rendered from the config when `invoke build` submits it.

The iris job runs ubuntu:22.04 (kaniko's image is distroless, no bash), so the script:
refuses a node whose `uname -m` is not the variant's target.arch (naming the variant's
cluster); fetches crane (the variant's arch) at a pinned version and checks its sha256;
`crane export`s the kaniko executor (pinned by digest, for the variant's platform) over
`/`; writes the registry auth file *after* that overlay (kaniko's image ships its own /kaniko
and would clobber it) with tracing off until the token is consumed; fetches the profile's
prebuilt compiled wheels (by exact name, none for a profile without any) + MANIFEST and
verifies them (the MANIFEST's platform first), never falling back to a compile; then runs
the executor with per-instruction layers, `--skip-unused-stages` and the variant's
`--custom-platform`. With `cluster.env-source = "composed"` (the default) the environment
is written, not built: the executor builds env-base alone; an unpushed second build FROM it
runs gpurl's layer tool (the job's zipapp, the writer package's own files) `compose-env`: the
local path's orchestration (writer/orchestration.py) with crane as its registry, which stages
each slice the cache repository lacks with uv in env-base's own filesystem (so each slice is
the same blob the local path writes), records it as a one-layer image and composes the
environment image from env-base and the records (writer/composition.py), pushed without moving
a layer; the final build runs FROM that image. The slice list is
the slice index staged in the bundle. After the final push the job attaches the image's SBOM
and provenance (the zipapp's `attest`, gpurl's attest modules' own files, on the skeleton
staged in the bundle of what is known before the build; the digest, the image's dpkg status,
the executor's digest and the run only the job knows). Rendering reads nothing but the config,
the `./path` wheel sources' pyproject.toml (their versions name the wheels) and the installed
package (the zipapp's sha256, which the script checks) and is byte-reproducible.

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
from gpurl_tasks.cluster import jobapp
from gpurl_tasks.cluster.jobapp import JobApp
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.generate import fitted_plan
from gpurl_tasks.dockerfile.recipe import WORKDIR, apt_options
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
    SOURCE_ID_ERE,
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
_ATTEST_MODULES = (writer_ocispec, cdx, slsa, attest_documents, attest_tool)


def job_app() -> JobApp:
    """The zipapp the job runs (the same bytes for the same installed package)."""
    return jobapp.job_app((*_LAYER_MODULES, *_ATTEST_MODULES))


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


def _retry(config: Config) -> str:
    """The crane wrapper (retry.sh) with the config's bounds and writer/retry.py's rules.

    The job's crane calls before it has a python3 (the executor's export, the immutable tag's
    lookup; the rest run in writer/crane.py) go through `retried`, with writer/retry.py's
    rules (which gpurl's own client follows) and config's bounds. crane (go-containerregistry
    v0.20.3) retries by itself only a little: a 5xx (408, 500, 502-504) or a reset, 3 tries in
    ~4 s (0.1 s, 0.3 s between reads; 1 s, 3 s between a blob's or manifest's upload attempts),
    a 429 only on a write, and it never reads Retry-After. So the whole call is tried again, at
    most REGISTRY_RETRIES times, when its answer (crane's `Error:` line) is worth it; crane runs
    with -v so the registry's Retry-After is in its log. Its functions are written to a file
    and sourced: as a quoted heredoc, the template with its placeholders stays shellcheck-clean.
    """
    return _fragment("retry.sh", {"RETRIES": config.registry.retries,
                                  "MAX_WAIT": config.registry.retry_max_wait,
                                  "RETRIED": shlex.quote(retry.RETRIED_ANSWERS),
                                  "BACKOFF_MS": int(retry.BACKOFF * 1000)})


def _fetch(config: Config, wheels: tuple[str, ...]) -> str:
    """The prebuilt fetch (fetch.sh), with the ABI key the MANIFEST must record (checked right
    after the MANIFEST is fetched: a wrong wheelhouse fails in seconds, before any executor
    run), its platform word checked first so wheels of the other platform are named as such;
    nothing (no line) when no prebuilt wheel is installed."""
    if not wheels:
        return ""
    pins = pins_from_args({}, config.build, config.target)
    return _fragment("fetch.sh", {"ABI_KEY": shlex.quote(abi_key(pins)),
                                  "WHEEL_PLATFORM": shlex.quote(pins.platform),
                                  "ABI_PREFIX": ABI_KEY_PREFIX})


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


def _wheel_vars(config: Config, wheels: tuple[str, ...]) -> dict[str, str]:
    """The script's compiled-wheel parts (wheel-vars.sh, WHEEL_SOURCE's build arg and input
    line); empty, so absent from the script, for a profile without compiled wheels."""
    if not config.build.compiled_wheels:
        return {"WHEEL_INPUT": "", "WHEEL_VARS": "", "WHEEL_BUILD_ARG": ""}
    q = shlex.quote
    return {
        "WHEEL_INPUT": "# WHEEL_SOURCE (prebuilt-wheelhouse | wheel-builder): where the compiled "
                       "wheels come from.",
        "WHEEL_VARS": _fragment("wheel-vars.sh", {
            "WHEELHOUSE": q(_relative(config.build.wheelhouse, config.root, "build.wheelhouse")),
            "WHEEL_BASE_URL": q(config.build.wheel_base_url.rstrip("/")),
            "WHEELS": " ".join(q(n) for n in wheels),
            "WHEEL_SOURCE": _plain("build.wheel-source", config.build.wheel_source)}),
        "WHEEL_BUILD_ARG": '  --build-arg "WHEEL_SOURCE=$WHEEL_SOURCE"',
    }


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
    settings and index apply); the final build runs FROM the composed image. Between executor
    runs the job's own filesystem is gone (kaniko deletes it, and restores only what a stage
    needs), so the script then uses bash builtins and the static crane only.
    """
    if not composes(config):
        return ""
    compose_env = _fragment("compose-env.sh", {
        "VENV": shlex.quote(config.build.venv), "LAYER_LEVEL": config.layers.slice_gzip_level})
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
        "RETRY": _retry(config),
        "ATTEST": _attest(config, wheels),
        "FETCH": _fetch(config, wheels),
        "APT_OPTIONS": " ".join(w for pair in apt_options(config) for w in pair),
        "IMAGE_WORKSPACE": q(WORKDIR),
        "PROFILE": profile_name(config.profile, "profile", error=BuildError),
        "TARGET_ARCH": q(config.target.arch),
        "TARGET_PLATFORM": q(config.target.platform),
        "CLUSTER_NAME": q(config.cluster.name),
        "VARIANT": config.variant.note,
        "SOURCE_ID": SOURCE_ID_ERE,
        "REGISTRY_HOST": q(host),
        "REGISTRY_HOST_JSON": q(json.dumps(host)),
        "IMAGE": q(registry.image),
        "CACHE_REPO": q(cache_repo(config)),
        "DOCKERFILE": q(_relative(config.build.dockerfile, config.root, "build.dockerfile")),
        "CRANE_URL": q(config.variant.crane_archive[0]),
        "CRANE_SHA256": q(config.variant.crane_archive[1]),
        "EXECUTOR_IMAGE": q(pinned_executor(config.cluster.kaniko_executor)),
        # unset: the job's DOCKER_USER_ID only (`build` passes it, and refuses without one)
        "REGISTRY_USER": _plain("registry.user", registry.user) if registry.user else "",
        "TAG_PREFIX": _plain("registry.tag-prefix", registry.tag_prefix),
        "FLOATING_TAG": _plain("registry.floating-tag", registry.floating_tag),
        "COMPRESSION_LEVEL": config.cluster.kaniko_gzip_level,
        "SNAPSHOT_MODE": config.cluster.snapshot_mode,
        "JOB_APP": shlex.quote(JOB_APP),
        "JOB_APP_SHA256": job_app().sha256,
        **_wheel_vars(config, wheels),
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
