"""The in-cluster build script (docker/build_gpu_rl_kaniko.sh), generated from the config.

The iris job runs ubuntu:22.04 (kaniko's image is distroless, no bash), so the script:
fetches crane at a pinned version and checks its sha256; `crane export`s the kaniko
executor (pinned by digest) over `/`; writes the registry auth file *after* that overlay
(kaniko's image ships its own /kaniko and would clobber it) with tracing off until the
token is consumed; fetches the profile's prebuilt compiled wheels (by exact name, none for a
profile without any) + MANIFEST and verifies them, never falling back to a compile; then runs
the executor with per-instruction layers and `--skip-unused-stages`. With
`cluster.env-source = "composed"` (the default) the environment is written, not built: the
executor builds env-base alone; an unpushed second build FROM it runs gpurl's layer tool
(docker/gpurl-layer.py, the writer package's own text) on each slice the cache repository
lacks, in env-base's own filesystem, so each slice is the same blob the local path writes;
crane pushes each as a one-layer record image; the same tool composes the environment image
from env-base and the records (writer/composition.py, the local path's composition), which
crane pushes without moving a layer; the final build runs FROM
that image. The slice list is the generated `<script>.slices` index, so a lock bump changes
the index, never the script. After the final push the job attaches the image's SBOM and
provenance (docker/gpurl-attest.py, gpurl's attest modules' own text, on the skeleton
`<script>.attest.json` of what is known before the build; the digest, the image's dpkg status,
the executor's digest and the run only the job knows). Rendering reads nothing but the config
and the `./path` wheel sources' pyproject.toml (their versions name the wheels) and is byte-reproducible.

Every value from the config is a `shlex.quote`d word (or, spliced into `"${VAR:-value}"`, a
plain name); paths are checked to stay inside the repository, symlinks resolved; the registry
host reaches the auth file as a JSON string made by `json.dumps`, so no host can add a key.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path
from types import ModuleType

from gpurl_tasks.attest import documents as attest_documents
from gpurl_tasks.attest import provenance as slsa
from gpurl_tasks.attest import sbom as cdx
from gpurl_tasks.attest import tool as attest_tool
from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.recipe import WORKDIR, apt_options
from gpurl_tasks.dockerfile.wheels import (
    ABI_KEY_PREFIX,
    WheelNameError,
    abi_key,
    configured_globs,
    pins_from_args,
    prebuilt_filenames,
    spec_versions,
)
from gpurl_tasks.errors import BuildError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.oci import retry
from gpurl_tasks.oci.attested import skeleton
from gpurl_tasks.oci.tags import cache_repository
from gpurl_tasks.plan.model import Plan, SliceBuild
from gpurl_tasks.values import SOURCE_ID_ERE, inside_repository, plain_name, profile_name, registry_host
from gpurl_tasks.writer import blob as writer_blob
from gpurl_tasks.writer import composition as writer_composition
from gpurl_tasks.writer import probe as writer_probe
from gpurl_tasks.writer import records as writer_records
from gpurl_tasks.writer import tool as writer_tool
from gpurl_tasks.writer.records import IndexLine, written_history
from gpurl_tasks.writer.staging import build_env_script, install_command, no_isolation_args

__all__ = [
    "DEFAULT_PINS",
    "ROOT_ENV",
    "ToolPins",
    "cache_repo",
    "check_script",
    "pinned_executor",
    "prebuilt_wheel_names",
    "render_script",
    "script_files",
    "write_script",
]

# Tests point this at a temp dir so the script's /kaniko and /app live there.
ROOT_ENV = "GPURL_KANIKO_ROOT"
# Tools the job runs on their own (stdlib only), written into the repository by
# `invoke generate` so the bundle carries them: gpurl's modules' own text, loaded as modules
# by a few lines of stdlib (one implementation on either path).
_LOADER = """
def _load():
    import sys
    import types
    for name in @PACKAGES@:
        package = sys.modules.setdefault(name, types.ModuleType(name))
        package.__path__ = []
    for name, text in _SOURCES.items():
        module = types.ModuleType(name)
        sys.modules[name] = module
        exec(compile(text, name, "exec"), module.__dict__)  # noqa: S102 (gpurl's own modules)
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, module)
    return sys.modules[@ENTRY@]


if __name__ == "__main__":
    raise SystemExit(_load().main())
"""


def _standalone(modules: tuple[ModuleType, ...], purpose: str) -> str:
    """A tool of `modules` (the last one's `main` runs), their source carried verbatim."""
    entry = modules[-1].__name__
    package = entry.rpartition(".")[0]
    sources = "".join(f"    {m.__name__!r}: {Path(str(m.__file__)).read_text(encoding='utf-8')!r},\n"
                      for m in modules)
    loader = _LOADER.replace("@PACKAGES@", f'("gpurl_tasks", "{package}")') \
        .replace("@ENTRY@", f'"{entry}"')
    return (f"#!/usr/bin/env python3\n# Generated by gpurl from {package.replace('.', '/')}/ for "
            f"{purpose};\n# do not edit (`invoke generate`).\n"
            f"_SOURCES = {{\n{sources}}}\n{loader}")


# The slice writer and the composition the composing build runs with env-base's python3.
LAYER_TOOL = "docker/gpurl-layer.py"
_LAYER_MODULES = (writer_blob, writer_records, writer_probe, writer_composition, writer_tool)


def layer_tool_text() -> str:
    """What `invoke generate` writes at LAYER_TOOL."""
    return _standalone(_LAYER_MODULES, "the cluster build's layer writing and composition")


# The writer of the image's SBOM and provenance the job runs after its push with the image's
# python3: attest/tool.py and the attest modules it imports.
ATTEST_TOOL = "docker/gpurl-attest.py"
_ATTEST_MODULES = (cdx, slsa, attest_documents, attest_tool)


def attest_tool_text() -> str:
    """What `invoke generate` writes at ATTEST_TOOL."""
    return _standalone(_ATTEST_MODULES, "the cluster build's SBOM and provenance")


def skeleton_path(config: Config) -> Path:
    """The variant's attestation skeleton: beside its kaniko script, named after it."""
    return config.build.kaniko_script.with_suffix(".attest.json")


def skeleton_text(config: Config) -> str:
    """What the job's documents say that is known before the build (the lock's closure, the
    declared installs, the base image as configured): a lock bump changes it, not the script."""
    return json.dumps(skeleton(config).to_json(), indent=1, sort_keys=True) + "\n"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolPins:
    """Where crane comes from, which executor image is exported and where the prebuilt wheels
    are fetched (tests use local stand-ins; an empty field means the config's
    `cluster.crane-url`, `cluster.crane-sha256`, `cluster.kaniko-executor` or
    `build.wheel-base-url`, so the default pins render exactly the committed script)."""

    crane_url: str = ""
    crane_sha256: str = ""
    executor_image: str = ""
    wheel_base_url: str = ""


DEFAULT_PINS = ToolPins()


def cache_repo(config: Config) -> str:
    """The kaniko layer cache repository (shared across builds: never delete it)."""
    return cache_repository(config)


def _source_pyprojects(config: Config) -> dict[str, str]:
    """{`./path` wheel spec: its pyproject.toml text} for each one that has the file."""
    texts = {}
    for spec in config.build.wheel_specs:
        if spec.startswith("./"):
            path = config.root / spec[2:] / "pyproject.toml"
            _relative(path, config.root, "build.wheel-specs")
            if path.is_file():
                texts[spec] = read_text(path, what="wheel source pyproject.toml", error=BuildError)
    return texts


def prebuilt_wheel_names(config: Config) -> tuple[str, ...]:
    """File names of the compiled wheels the prebuilt path fetches (sorted; none for a profile
    without compiled wheels): one per `build.wheel-globs` entry.

    One derivation for the whole tool (wheels.prebuilt_filenames over the names
    wheels.expected_filenames gives the pinned pair): the names the Dockerfile's install globs
    accept, so a bump of a pinned input asks for different files. A name that cannot be derived
    is refused in one line naming the profile, variant and key to set.
    """
    build = config.build
    pins = pins_from_args({}, build, config.target)  # the ARG defaults are the config's
    try:
        return prebuilt_filenames(pins, configured_globs(build, {}, pins),
                                  spec_versions(build.wheel_specs, pins, _source_pyprojects(config)))
    except WheelNameError as exc:
        raise BuildError(f"cannot name the prebuilt wheels of profile {config.profile!r}"
                         f"{config.variant.note}: {exc.message}") from None


def _relative(path: Path, root: Path, key: str) -> str:
    """`path` relative to the repository (the kaniko context, /app), symlinks resolved."""
    return inside_repository(path, root, key, error=BuildError)



_TEMPLATE = r"""#!/usr/bin/env bash
# In-cluster build of the image of profile '{profile}'{variant}: kaniko in an iris job.
# Generated by `invoke generate` from [tool.gpurl] in pyproject.toml; do not edit.
#
# Inputs (environment): GITSHA (required), DOCKER_TOKEN (required), DOCKER_USER_ID,
# WHEEL_SOURCE (prebuilt-wheelhouse | wheel-builder), PUSH_FLOATING (0 | 1),
# DOCKERFILE (a variant's), TAG_PREFIX, FLOATING_TAG, OVERWRITE_TAG (0 | 1: move an existing
# immutable tag knowingly), GIT_COMMIT and JOB_NAME (what the provenance names: the full
# commit, the iris job). SINGLE_SNAPSHOT=1 is refused.
set -euo pipefail

die() {{ echo "${{0##*/}}: error: $*" >&2; exit 1; }}

: "${{GITSHA:?GITSHA is required: the image is pushed as the immutable tag PREFIX-GITSHA}}"
[[ "$GITSHA" =~ ^{source_id}$ ]] \
  || die "GITSHA must be a lowercase hex commit id (optionally -dirty-<12 hex>), got '$GITSHA'"

ROOT="${{{root_env}:-}}"
APP_DIR="$ROOT/app"
KANIKO_DIR="$ROOT/kaniko"
# kaniko builds in this job's own root filesystem and deletes it between stages, all but
# $KANIKO_DIR and mount points (never snapshotted, never deleted): the build context, crane
# and the digest live under $KANIKO_DIR, so they outlive the first stage. iris mounts the
# bundle at $APP_DIR (the task's workdir, an emptyDir): the image's workspace is therefore
# elsewhere ($IMAGE_WORKSPACE), or its COPY would write into the bundle and miss the image.
CONTEXT="$KANIKO_DIR/context"
IMAGE_WORKSPACE={image_workspace}
WORK="$KANIKO_DIR/gpurl"
WHEELHOUSE="$CONTEXT"/{wheelhouse}
REGISTRY_HOST={registry_host}
REGISTRY_HOST_JSON={registry_host_json}
IMAGE={image}
CACHE_REPO={cache_repo}
DEFAULT_DOCKERFILE={dockerfile}
WHEEL_BASE_URL={wheel_base_url}
PREBUILT_WHEELS=({wheels})
CRANE_URL={crane_url}
CRANE_SHA256={crane_sha256}
EXECUTOR_IMAGE={executor_image}

DOCKER_USER_ID="${{DOCKER_USER_ID:-{registry_user}}}"
WHEEL_SOURCE="${{WHEEL_SOURCE:-{wheel_source}}}"
PUSH_FLOATING="${{PUSH_FLOATING:-0}}"
DOCKERFILE="${{DOCKERFILE:-$DEFAULT_DOCKERFILE}}"
TAG_PREFIX="${{TAG_PREFIX:-{tag_prefix}}}"
if [ "$TAG_PREFIX" = {tag_prefix} ]; then
  FLOATING_TAG="${{FLOATING_TAG:-{floating_tag}}}"
else
  FLOATING_TAG="${{FLOATING_TAG:-$TAG_PREFIX}}"
fi

if [ "${{SINGLE_SNAPSHOT:-0}}" != 0 ]; then
  die "SINGLE_SNAPSHOT=1 is refused: it collapses the image into one huge layer" \
    "that cannot be pulled over the cluster's registry egress (every pod" \
    "ImagePullBackOff); per-instruction layers are the default"
fi
case "$WHEEL_SOURCE" in
  prebuilt-wheelhouse | wheel-builder) ;;
  *) die "WHEEL_SOURCE must be prebuilt-wheelhouse or wheel-builder, got '$WHEEL_SOURCE'" ;;
esac
case "$DOCKERFILE" in
  /* | *..* | "") die "DOCKERFILE must be a path inside the build context, got '$DOCKERFILE'" ;;
esac
[ -d "$APP_DIR" ] || die "build context $APP_DIR does not exist (the iris workspace bundle)"
# kaniko keeps every mount point out of its snapshots: an image path under a mount of this job
# would be written into the mount and be missing from the pushed image.
if [ -r /proc/self/mountinfo ]; then
  while read -r _ _ _ _ mount _; do
    case "$IMAGE_WORKSPACE/" in
      "$mount"/*) die "the image's workspace $IMAGE_WORKSPACE is under $mount, a mount of" \
        "this job: kaniko would leave it out of the image" ;;
    esac
  done </proc/self/mountinfo
fi

mkdir -p "$WORK"

if ! command -v curl >/dev/null 2>&1; then
  apt-get {apt_options} update -qq
  apt-get {apt_options} install -y -qq --no-install-recommends ca-certificates curl >/dev/null
fi
fetch() {{ curl -fsSL --retry 3 --connect-timeout 30 -o "$2" "$1"; }}
{retry}
# kaniko's filesystem reset after its first run puts the built stage's /etc/ssl in place of
# this job's: a CA the job trusts there (a private registry, a proxy) is gone for every later
# run (`x509: certificate signed by unknown authority`). The job's trust, its system bundle
# plus $SSL_CERT_FILE when set, is copied under $KANIKO_DIR first, and every later step reads
# that copy: the executor and crane through SSL_CERT_FILE, the composing build (its layer
# writer, uv and crane) through its vars file.
JOB_CA="$WORK/ca-certificates.crt"
: >"$JOB_CA.tmp"
for bundle in /etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt \
    /etc/ssl/ca-bundle.pem /etc/pki/tls/cacert.pem \
    /etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem /etc/ssl/cert.pem; do
  if [ -f "$bundle" ]; then  # the first one found, as Go (kaniko, crane) reads them
    cat "$bundle" >>"$JOB_CA.tmp" && echo >>"$JOB_CA.tmp"
    break
  fi
done
if [ -n "${{SSL_CERT_FILE:-}}" ]; then
  [ -f "$SSL_CERT_FILE" ] || die "SSL_CERT_FILE=$SSL_CERT_FILE is not a file in this job"
  cat "$SSL_CERT_FILE" >>"$JOB_CA.tmp"
fi
[ -s "$JOB_CA.tmp" ] || die "this job has no CA bundle (/etc/ssl/certs/ca-certificates.crt," \
  "or SSL_CERT_FILE): install ca-certificates in the task image"
mv "$JOB_CA.tmp" "$JOB_CA"
export SSL_CERT_FILE="$JOB_CA"
echo "==> CA bundle for every step: $JOB_CA" \
  "($(grep -c 'BEGIN CERTIFICATE' "$JOB_CA") certificates)"

echo "==> crane $CRANE_URL"
fetch "$CRANE_URL" "$WORK/crane.tgz" || die "could not download crane from $CRANE_URL"
echo "$CRANE_SHA256  $WORK/crane.tgz" | sha256sum -c --quiet - \
  || die "crane archive checksum mismatch (expected sha256 $CRANE_SHA256)"
tar -xzf "$WORK/crane.tgz" -C "$WORK" crane

echo "==> kaniko executor $EXECUTOR_IMAGE over ${{ROOT:-/}}"
retried "$WORK/crane.err" "export of $EXECUTOR_IMAGE" "$WORK/crane" export \
    --platform linux/amd64 "$EXECUTOR_IMAGE" "$WORK/executor.tar" \
  || die "cannot export $EXECUTOR_IMAGE: $(tr '\n' ' ' <"$WORK/crane.err")"
tar -xf "$WORK/executor.tar" -C "${{ROOT:-/}}"
rm -f "$WORK/executor.tar"
[ -x "$KANIKO_DIR/executor" ] || die "the exported image has no $KANIKO_DIR/executor"
# The executor is static and `crane export` carries no ENV: give it what it looks up.
export USER="${{USER:-root}}" HOME="${{HOME:-/root}}"
rm -rf "$CONTEXT"
cp -a "$APP_DIR" "$CONTEXT"

# The auth file is written after the overlay: the executor image ships its own /kaniko.
# Tracing stays off until the token has been consumed, so it never reaches the job log.
case "$-" in *x*) TRACING=1 ;; *) TRACING=0 ;; esac
{{ set +x; }} 2>/dev/null
if [ -z "${{DOCKER_TOKEN:-}}" ]; then
  die "DOCKER_TOKEN is not set: the push to $REGISTRY_HOST needs a registry token"
fi
export DOCKER_CONFIG="$KANIKO_DIR/.docker"
mkdir -p "$DOCKER_CONFIG"
AUTH="$(printf '%s:%s' "$DOCKER_USER_ID" "$DOCKER_TOKEN" | base64 -w0)"
printf '{{"auths":{{%s:{{"auth":"%s"}}}}}}\n' "$REGISTRY_HOST_JSON" "$AUTH" \
  >"$DOCKER_CONFIG/.config.tmp"
mv "$DOCKER_CONFIG/.config.tmp" "$DOCKER_CONFIG/config.json"
# iris also hands the task every -e variable again as JSON in IRIS_JOB_ENV: drop that copy too.
unset AUTH DOCKER_TOKEN IRIS_JOB_ENV
if [ "$TRACING" = 1 ]; then set -x; fi
echo "==> registry auth for $DOCKER_USER_ID@$REGISTRY_HOST written to $DOCKER_CONFIG/config.json"

# An immutable tag is never moved: look it up before spending hours on the build.
DESTINATION="$IMAGE:$TAG_PREFIX-$GITSHA"
echo "==> immutable tag $DESTINATION"
if EXISTING="$(retried "$WORK/crane.err" "lookup of $DESTINATION" "$WORK/crane" digest \
    "$DESTINATION")"; then
  if [ "${{OVERWRITE_TAG:-0}}" != 1 ]; then
    die "$DESTINATION already exists as $EXISTING; an immutable tag is never moved" \
      "(pin that digest, or rebuild with invoke build --force to overwrite it knowingly)"
  fi
  echo "    overwriting $EXISTING (OVERWRITE_TAG=1)"
elif grep -qE 'MANIFEST_UNKNOWN|NAME_UNKNOWN|status code 404' "$WORK/crane.err"; then
  echo "    not pushed yet"
else
  die "cannot check whether $DESTINATION exists: $(tr '\n' ' ' <"$WORK/crane.err")"
fi

{fetch}# Every executor run retries its registry reads and pushes within the job's bound.
KANIKO_RETRIES=("--push-retry=$REGISTRY_RETRIES" "--image-download-retry=$REGISTRY_RETRIES"
  "--image-fs-extract-retry=$REGISTRY_RETRIES")
# Every executor run shares the context, the build args and the layer cache.
COMMON=(
  --context "dir://$CONTEXT"
  --dockerfile "$DOCKERFILE"
  --build-arg "WHEEL_SOURCE=$WHEEL_SOURCE"
  --build-arg "GITSHA=$GITSHA"
  --skip-unused-stages
  --compressed-caching=false
  --compression-level={compression_level}
  --snapshot-mode={snapshot_mode}
  --cache=true
  "--cache-repo=$CACHE_REPO"
  "${{KANIKO_RETRIES[@]}}"
  # kaniko checks push access with one upload POST it never retries (a single 5xx there failed
  # a build); the push itself, retried, is the check (doctor checks the token's push scope
  # before the job is submitted)
  --skip-push-permission-check
)
ARGS=("${{COMMON[@]}}" --destination "$DESTINATION" --digest-file "$WORK/digest")
if [ "$PUSH_FLOATING" = 1 ]; then
  ARGS+=(--destination "$IMAGE:$FLOATING_TAG")
fi
{compose}
echo "==> kaniko build of $DESTINATION"
cd "$CONTEXT"
"$KANIKO_DIR/executor" "${{ARGS[@]}}"
# Builtins, crane and the image's python3 only from here: the filesystem is now the
# image's last stage, not this job's.
[ -s "$WORK/digest" ] || die "the executor wrote no digest"
read -r DIGEST <"$WORK/digest" || true
echo "pushed $DESTINATION@$DIGEST"
{attest}"""


# cluster.env-source = "composed": the environment is written, not built. kaniko builds
# env-base alone; a second, unpushed kaniko build FROM it runs _COMPOSE_ENV in env-base's own
# filesystem and environment (its python3, uv and venv, as a container of env-base does on
# the local path); the final build runs FROM the composed image. Between executor runs the
# job's own filesystem is gone (kaniko deletes it, and restores only what a stage needs), so
# this script then uses bash builtins and the static crane only.
_COMPOSE = r"""
SLICE_INDEX="$CONTEXT"/{slice_index}
LAYER_TOOL="$CONTEXT"/{layer_tool}
[ -f "$SLICE_INDEX" ] || die "the slice index $SLICE_INDEX is missing (run invoke generate)"
[ -f "$LAYER_TOOL" ] || die "the layer tool $LAYER_TOOL is missing (run invoke generate)"
cat >"$WORK/compose-env.sh" <<'COMPOSE_ENV'
{compose_env}COMPOSE_ENV
echo "==> kaniko build of env-base (what every slice is installed on)"
cd "$CONTEXT"
"$KANIKO_DIR/executor" "${{COMMON[@]}}" --target env-base \
  --destination "$CACHE_REPO:env-base-$GITSHA" --digest-file "$WORK/env-base.digest"
[ -s "$WORK/env-base.digest" ] || die "the executor wrote no digest for env-base"
read -r ENV_BASE_DIGEST <"$WORK/env-base.digest" || true
{{
  printf '%s=%q\n' CACHE_REPO "$CACHE_REPO" ENV_BASE "$CACHE_REPO@$ENV_BASE_DIGEST" \
    GITSHA "$GITSHA" WORK "$WORK" CONTEXT "$CONTEXT" SLICE_INDEX "$SLICE_INDEX" \
    LAYER_TOOL "$LAYER_TOOL" DOCKER_CONFIG "$DOCKER_CONFIG" JOB_CA "$JOB_CA"
}} >"$WORK/compose-env.vars"
printf 'FROM %s\nRUN ["/bin/bash", "%s"]\n' "$CACHE_REPO@$ENV_BASE_DIGEST" \
  "$WORK/compose-env.sh" >"$WORK/compose-env.Dockerfile"
echo "==> the slices written on env-base and composed (an unpushed kaniko build)"
"$KANIKO_DIR/executor" --context "dir://$CONTEXT" --dockerfile "$WORK/compose-env.Dockerfile" \
  --no-push --cache=false --snapshot-mode={snapshot_mode} "${{KANIKO_RETRIES[@]}}"
read -r ENV_IMAGE <"$WORK/env-image" || die "composing the environment wrote no reference"
ARGS+=(--build-arg "ENV_SOURCE=$ENV_IMAGE")
"""

# Every crane call that talks to the registry goes through `retried`, with oci/retry.py's rules
# (which gpurl's own client follows) and config's bounds. crane (go-containerregistry v0.20.3)
# retries by itself only a little: a 5xx (408, 500, 502-504) or a reset, 3 tries in ~4 s
# (0.1 s, 0.3 s between reads; 1 s, 3 s between a blob's or manifest's upload attempts), a 429
# only on a write, and it never reads Retry-After. So the whole call is tried again, at most
# REGISTRY_RETRIES times, when its answer (crane's `Error:` line) is worth it; crane runs with
# -v so the registry's Retry-After is in its log. Written to a file: the composing build, in
# env-base's filesystem, sources it too.
_RETRY = r"""REGISTRY_RETRIES="${{REGISTRY_RETRIES:-{retries}}}"
REGISTRY_RETRY_MAX_WAIT="${{REGISTRY_RETRY_MAX_WAIT:-{max_wait}}}"
[[ "$REGISTRY_RETRIES$REGISTRY_RETRY_MAX_WAIT" =~ ^[0-9]+$ ]] \
  || die "REGISTRY_RETRIES and REGISTRY_RETRY_MAX_WAIT must be whole numbers"
# The bounds are written into the file: the composing build sources it in a shell of its own.
printf '# shellcheck shell=bash\nREGISTRY_RETRIES=%d\nREGISTRY_RETRY_MAX_WAIT=%d\n' \
  "$REGISTRY_RETRIES" "$REGISTRY_RETRY_MAX_WAIT" >"$WORK/registry-retry.sh"
cat >>"$WORK/registry-retry.sh" <<'RETRY'
RETRIED={retried}
# retry_wait ATTEMPT WHAT LOG: the call that failed (crane -v's stderr in LOG) is tried again
# when the registry's answer is worth it and retries are left: one line says so, then the wait
# (Retry-After, else {backoff_ms} ms doubled per retry, at most REGISTRY_RETRY_MAX_WAIT s).
# LOG is cut to the call's own error (secrets redacted) either way.
retry_wait() {{
  local attempt="$1" what="$2" log="$3" after answer ms cap
  after="$(sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)"
  answer="$(grep -E '^Error: ' "$log" || tail -n 1 "$log")"
  sed -E 's/(Bearer|Basic) [^ "]+/\1 <redacted>/g; s/_state=[^&" ]+/_state=REDACTED/g' \
    <<<"$answer" >"$log"
  answer="$(tr '\n' ' ' <"$log")"
  grep -qE "$RETRIED" <<<"$answer" || return 1
  [ "$attempt" -le "$REGISTRY_RETRIES" ] || {{
    echo "after $attempt attempts" >>"$log"
    return 1
  }}
  cap=$((REGISTRY_RETRY_MAX_WAIT * 1000))
  if [ -n "$after" ]; then
    ms=$((after * 1000))
  else
    ms=$(({backoff_ms} << (attempt - 1)))
    ms=$((ms + ms * (RANDOM % 25) / 100))
  fi
  [ "$ms" -le "$cap" ] || ms="$cap"
  echo "    retry $attempt/$REGISTRY_RETRIES in $((ms / 1000)).$((ms % 1000 / 100))s" \
    "(${{after:+Retry-After $after s, }}$what): $answer" >&2
  sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
}}
# retried LOG WHAT PROGRAM ARGS...: crane PROGRAM, its stdout passed on, tried again by
# retry_wait's rules; on a final failure LOG holds the registry's answer.
retried() {{
  local log="$1" what="$2" program="$3" attempt=1
  shift 3
  while :; do
    "$program" -v "$@" 2>"$log" && return 0
    retry_wait "$attempt" "$what" "$log" || return 1
    attempt=$((attempt + 1))
  done
}}
RETRY
# shellcheck source=/dev/null
. "$WORK/registry-retry.sh"
"""

# Run by the compose build above, inside env-base (its PATH, uv settings and index apply).
_COMPOSE_ENV = r"""set -euo pipefail
# shellcheck source=/dev/null  # written by the job script once env-base is pushed
. "${{0%/*}}/compose-env.vars"
die() {{ echo "compose-env: error: $*" >&2; exit 1; }}
# The job's CA bundle (this build runs in env-base's filesystem, whose /etc/ssl is its own).
export DOCKER_CONFIG SSL_CERT_FILE="$JOB_CA"
# shellcheck source=/dev/null  # the job script's retry wrapper (`retried`)
. "$WORK/registry-retry.sh"
crane() {{ retried "$WORK/crane.err" "crane $1 ${{2:-}}" "$WORK/crane" "$@"; }}
said() {{ tr '\n' ' ' <"$WORK/crane.err"; }}
# Whether the registry holds blob $1 (REPO@sha256:...). crane has no HEAD of a blob: the first
# byte of its GET shows the blob is there (the rest is never read), a 404 that it is not.
blob_there() {{
  local got attempt=1
  while :; do
    got="$("$WORK/crane" -v blob "$1" 2>"$WORK/crane.err" | head -c 1 | wc -c)" || true
    [ "$got" = 1 ] && return 0
    retry_wait "$attempt" "read of blob $1" "$WORK/crane.err" || break
    attempt=$((attempt + 1))
  done
  grep -qE 'BLOB_UNKNOWN|MANIFEST_BLOB_UNKNOWN|status code 404' "$WORK/crane.err" && return 1
  die "cannot read blob $1: $(said)"
}}
# The first blob image $1 names that its repository ($2) does not hold; nothing when all are.
lost_blob() {{
  local digest
  crane manifest "$1" >"$WORK/lost.manifest" || die "cannot read $1: $(said)"
  python3 -B "$LAYER_TOOL" blobs "$WORK/lost.manifest" >"$WORK/lost.blobs" \
    || die "cannot read the blobs of $1"
  while read -r digest; do
    blob_there "$2@$digest" || {{ echo "$digest"; return 0; }}
  done <"$WORK/lost.blobs"
}}
VENV={venv}
LEVEL={layer_level}
for doc in manifest config; do
  crane "$doc" "$ENV_BASE" >"$WORK/env-base.$doc" || die "cannot read $ENV_BASE: $(said)"
done
BASE_DOCS=(--base-manifest "$WORK/env-base.manifest" --base-config "$WORK/env-base.config")
SLICES="$WORK/slices"
rm -rf "$SLICES"
mkdir -p "$SLICES"
# Each slice's cache tag: what its blob's bytes depend on here, besides its file.
python3 -B "$LAYER_TOOL" keys --index "$SLICE_INDEX" --context "$CONTEXT" --venv "$VENV" \
  --level "$LEVEL" >"$SLICES/tags" || die "cannot compute the slices' cache tags"
# One slice the cache lacks: staged, written and pushed (its own log and error files, so
# slices can be written side by side).
# A slice whose index line ends in `lower [uv flags]` (the lock's build settings) is staged
# on the slices below it: their files ($7...) installed into its scratch build prefix.
write_slice() {{
  local name="$1" file="$2" created_by="$3" tag="$4" again="${{5:-}}" log="$SLICES/$1.log"
  local words=() build_args=() below=() lower_file
  read -ra words <<<"${{6:-}}"
  : >"$log"
  if [ "${{words[0]:-}}" = lower ]; then
    build_args=("${{words[@]:1}}")
    for lower_file in "${{@:7}}"; do below+=("$CONTEXT/$lower_file"); done
    if [ "${{#below[@]}}" -gt 0 ] && ! {{ {build_env}; }} >>"$log" 2>&1; then
      echo "installing the slices below slice $name failed: $(tail -n 5 "$log" | tr '\n' ' ')"
      return 1
    fi
  fi
  if ! {install} >>"$log" 2>&1
  then
    echo "installing slice $name ($file) failed: $(tail -n 5 "$log" | tr '\n' ' ')"
    return 1
  fi
  if ! python3 -B "$LAYER_TOOL" image "$SLICES/$name/tree" "$SLICES/$name/image" \
      --prefix "${{VENV#/}}" --level "$LEVEL" --created-by "$created_by" --record "$tag" \
      "${{BASE_DOCS[@]}}" >"$SLICES/$name.blob" 2>>"$log"
  then
    echo "writing slice $name failed: $(tail -n 2 "$log" | tr '\n' ' ')"
    return 1
  fi
  # crane pushes nothing, not even a missing blob, when the tag already names the manifest
  # (the same slice, the same bytes): a record whose blob is gone is pushed under a tag of
  # its own first, which uploads the blob, then under its own tag again.
  local pushes=("$CACHE_REPO:$tag")
  if [ -n "$again" ]; then pushes=("$CACHE_REPO:$tag-rewrite-$(date -u +%Y%m%d%H%M%S)" "${{pushes[@]}}"); fi
  for to in "${{pushes[@]}}"; do
    if ! retried "$SLICES/$name.crane" "push of slice $name" "$WORK/crane" push \
        "$SLICES/$name/image" "$to" >/dev/null; then
      echo "cannot push slice $name to $to: $(tr '\n' ' ' <"$SLICES/$name.crane")"
      return 1
    fi
  done
  rm -rf "${{SLICES:?}}/$name"
  echo "    $name: written $(cat "$SLICES/$name.blob")"
}}
JOBS="$(nproc)"
[ "$JOBS" -le 8 ] || JOBS=8
WRITTEN=0
REWRITTEN=0
CACHED=0
exec 3<"$SLICE_INDEX"
exec 4<"$SLICES/tags"
LOWER=()
while IFS=$'\t' read -r name _label file created_by build <&3; do
  [ -n "$name" ] || continue
  below=("${{LOWER[@]}}")
  LOWER+=("$file")
  read -r tagged tag <&4 && [ "$tagged" = "$name" ] || die "no cache tag for slice $name"
  if crane digest "$CACHE_REPO:$tag" >/dev/null; then
    # A record is trusted only when its blobs are there: a cleanup of the cache repository
    # (or of the registry) can keep the tag and lose the blob.
    lost="$(lost_blob "$CACHE_REPO:$tag" "$CACHE_REPO")"
    if [ -z "$lost" ]; then
      CACHED=$((CACHED + 1))
      echo "    $name: cached ($tag)"
      continue
    fi
    echo "    $name: its record $tag names blob $lost, which the registry no longer holds:" \
      "written again"
    REWRITTEN=$((REWRITTEN + 1))
  elif ! grep -qE 'MANIFEST_UNKNOWN|NAME_UNKNOWN|status code 404' "$WORK/crane.err"; then
    die "cannot look up $CACHE_REPO:$tag: $(said)"
  else
    lost=""
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  ( write_slice "$name" "$file" "$created_by" "$tag" "$lost" "$build" "${{below[@]}}" \
    || touch "$SLICES/$name.failed" ) &
  WRITTEN=$((WRITTEN + 1))
done
exec 3<&- 4<&-
wait
for failed in "$SLICES"/*.failed; do
  if [ -e "$failed" ]; then
    failed="${{failed##*/}}"
    die "slice ${{failed%.failed}} could not be written (its reason is above)"
  fi
done
# The environment image, composed as the local path composes it (writer/composition.py, run
# by the layer tool): env-base's layers, then each slice's record layer in plan order, under
# env-base's config extended to match. Only its config and manifest are written: crane finds
# every layer in the cache repository already (env-base pushed, each record checked or
# written above) and moves none; a layer the registry lacks fails the push before its
# manifest is written (the layout holds no layer to upload).
RECORDS=()
while read -r name tag; do
  for doc in manifest config; do
    crane "$doc" "$CACHE_REPO:$tag" >"$SLICES/$name.record.$doc" \
      || die "cannot read the record of slice $name ($tag): $(said)"
  done
  RECORDS+=(--record "$name" "$SLICES/$name.record.manifest" "$SLICES/$name.record.config")
done <"$SLICES/tags"
ENV_TAG="$(python3 -B "$LAYER_TOOL" compose "$SLICES/env" "${{BASE_DOCS[@]}}" \
  "${{RECORDS[@]}}")" || die "cannot compose the environment (the layer tool's reason is above)"
ENV_IMAGE="$(crane push "$SLICES/env" "$CACHE_REPO:$ENV_TAG")" \
  || die "cannot push the composed environment $CACHE_REPO:$ENV_TAG: $(said)"
# No image is built on a manifest that names a blob the registry lacks (a registry that does
# not check would take it, and no node could pull the result).
lost="$(lost_blob "$ENV_IMAGE" "$CACHE_REPO")"
[ -z "$lost" ] || die "the composed environment $ENV_IMAGE names blob $lost, which the" \
  "registry does not hold: not building on it (run the job again: a slice whose blob is gone" \
  "is written anew)"
rm -rf "$SLICES"
echo "$ENV_IMAGE" >"$WORK/env-image"
echo "==> environment $ENV_IMAGE ($WRITTEN slice(s) written, $REWRITTEN of them as their" \
  "record's blob was gone; $CACHED cached)"
"""

# The image's SBOM and provenance, attached to the pushed digest as OCI 1.1 artifacts (their
# `subject` the image), written by docker/gpurl-attest.py (gpurl's attest modules) from the
# bundle's skeleton and what only this job knows: the digest, the image's labels, the apt set
# as installed (the filesystem here is the image's last stage: its dpkg status, its python3),
# the executor by digest. A registry without the referrers API gets the `sha256-<hex>` tag.
_ATTEST = r"""
ATTEST_TOOL="$CONTEXT"/{tool}
ATTEST_SKELETON="$CONTEXT"/{skeleton}
ATTEST="$WORK/attest"
BASE_IMAGE={base_image}
echo "==> SBOM and provenance of $DESTINATION@$DIGEST"
[ -f "$ATTEST_TOOL" ] && [ -f "$ATTEST_SKELETON" ] \
  || die "the attestation tool or skeleton is missing from the bundle (run invoke generate)"
PY=""
for candidate in python3 {venv}/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1; then PY="$candidate"; break; fi
done
[ -n "$PY" ] || die "the built image has no python3 to write its SBOM and provenance with"
# every registry call through the job's retry wrapper (its rules, its redaction)
attest_crane() {{ retried "$WORK/attest.err" "crane $1 of the attestations" "$WORK/crane" "$@"; }}
attest_said() {{ local said; said="$(<"$WORK/attest.err")"; echo "${{said//$'\n'/ }}"; }}
attest_crane manifest "$IMAGE@$DIGEST" >"$WORK/image.manifest" \
  || die "cannot read the pushed manifest: $(attest_said)"
attest_crane config "$IMAGE@$DIGEST" >"$WORK/image.config" \
  || die "cannot read the pushed image's config: $(attest_said)"
BASE_REF="$BASE_IMAGE"
if BASE_DIGEST="$(attest_crane digest "$BASE_IMAGE")"; then
  BASE_REF="${{BASE_IMAGE%@*}}@$BASE_DIGEST"
else
  echo "    the base image's digest is unknown ($(attest_said)): named as configured"
fi
WHEEL_ARGS=()
{wheel_args}COMMIT="${{GIT_COMMIT:-$GITSHA}}"
if [[ "$GITSHA" == *-dirty-* ]]; then COMMIT="${{COMMIT%%-dirty-*}}-dirty-${{GITSHA##*-dirty-}}"; fi
"$PY" -I -B "$ATTEST_TOOL" documents --skeleton "$ATTEST_SKELETON" --out "$ATTEST" \
  --image "$IMAGE" --tag "$TAG_PREFIX-$GITSHA" --digest "$DIGEST" \
  --image-manifest "$WORK/image.manifest" --image-config "$WORK/image.config" \
  --dpkg-status "$ROOT/var/lib/dpkg/status" --base-image "$BASE_REF" \
  --builder "$EXECUTOR_IMAGE" --invocation "iris:${{JOB_NAME:-gpurl-kaniko-$GITSHA}}" \
  --commit "$COMMIT" "${{WHEEL_ARGS[@]}}" >"$WORK/attest.list" 2>"$WORK/attest.err" \
  || die "cannot write the SBOM and provenance: $(attest_said)"
echo "    $(attest_said)"
while read -r kind artifact; do
  attest_crane push "$ATTEST/$kind" "$IMAGE@$artifact" >/dev/null \
    || die "cannot attach the $kind to $DIGEST: $(attest_said)"
  echo "    $kind: $artifact"
done <"$WORK/attest.list"
# crane lists an artifact under the referrers tag itself when the registry lacks the API (by
# its config's media type): the tag is rewritten to list each by its artifactType.
FALLBACK="$IMAGE:sha256-${{DIGEST#sha256:}}"
if attest_crane manifest "$FALLBACK" >"$WORK/fallback.index"; then
  "$PY" -I -B "$ATTEST_TOOL" fallback --existing "$WORK/fallback.index" --attached "$ATTEST" \
    --out "$ATTEST/fallback" >"$WORK/fallback.others" 2>"$WORK/attest.err" \
    || die "cannot write the referrers tag's index: $(attest_said)"
  while read -r other; do
    attest_crane manifest "$IMAGE@$other" >"$ATTEST/fallback/blobs/sha256/${{other#sha256:}}" \
      || die "cannot read $other, listed under $FALLBACK: $(attest_said)"
  done <"$WORK/fallback.others"
  attest_crane push "$ATTEST/fallback" "$FALLBACK" >/dev/null \
    || die "cannot write $FALLBACK: $(attest_said)"
  VIA="the tag $FALLBACK"
elif [[ "$(<"$WORK/attest.err")" =~ MANIFEST_UNKNOWN|NAME_UNKNOWN|status\ code\ 404 ]]; then
  VIA="the registry's referrers API"
else
  die "cannot read $FALLBACK: $(attest_said)"
fi
echo "attested $IMAGE@$DIGEST: SBOM and provenance, listed by $VIA"
"""


# The prebuilt wheels the image installed, named with the sha256 their MANIFEST records.
_ATTEST_WHEELS = r"""if [ "$WHEEL_SOURCE" = prebuilt-wheelhouse ]; then
  WHEEL_ARGS=(--wheel-manifest "$WHEELHOUSE/MANIFEST" --abi-prefix {abi_prefix})
  for whl in "${{PREBUILT_WHEELS[@]}}"; do WHEEL_ARGS+=(--wheel "$whl"); done
fi
"""


def _attest(config: Config) -> str:
    """The script's last step: the pushed image's SBOM and provenance attached to it."""
    return _ATTEST.format(
        tool=shlex.quote(ATTEST_TOOL),
        skeleton=shlex.quote(_relative(skeleton_path(config), config.root, "build.kaniko-script")),
        base_image=shlex.quote(config.build.base_image), venv=shlex.quote(config.build.venv),
        wheel_args=_ATTEST_WHEELS.format(abi_prefix=shlex.quote(ABI_KEY_PREFIX))
        if prebuilt_wheel_names(config) else "")


_FETCH = r"""ABI_KEY=@ABI_KEY@
if [ "$WHEEL_SOURCE" = prebuilt-wheelhouse ]; then
  echo "==> prebuilt wheels from $WHEEL_BASE_URL"
  mkdir -p "$WHEELHOUSE"
  NO_COMPILE="not compiling instead; set WHEEL_SOURCE=wheel-builder to compile"
  fetch "$WHEEL_BASE_URL/MANIFEST" "$WHEELHOUSE/MANIFEST" \
    || die "MANIFEST is missing at $WHEEL_BASE_URL/MANIFEST ($NO_COMPILE)"
  found_key="$(sed -n 's/^@ABI_PREFIX@//p' "$WHEELHOUSE/MANIFEST")"
  [ "$found_key" = "$ABI_KEY" ] \
    || die "the MANIFEST at $WHEEL_BASE_URL records another ABI key: expected '$ABI_KEY'," \
      "found '${found_key:-none}' (rebuild the wheels for these pins; $NO_COMPILE)"
  for whl in "${PREBUILT_WHEELS[@]}"; do
    want="$(awk -v f="$whl" '$2 == f || $2 == "*" f { print $1 }' "$WHEELHOUSE/MANIFEST")"
    [ -n "$want" ] || die "MANIFEST at $WHEEL_BASE_URL has no entry for $whl"
    fetch "$WHEEL_BASE_URL/$whl" "$WHEELHOUSE/$whl" \
      || die "wheel $whl is missing at $WHEEL_BASE_URL/$whl ($NO_COMPILE)"
    got="$(sha256sum "$WHEELHOUSE/$whl" | cut -d ' ' -f 1)"
    [ "$got" = "$want" ] \
      || die "checksum mismatch for $whl: MANIFEST says $want, the download is $got"
    echo "    ok $whl"
  done
fi

"""
# A profile without compiled wheels: the prebuilt wheelhouse stays empty, nothing is fetched.
_NO_FETCH = r"""if [ "$WHEEL_SOURCE" = prebuilt-wheelhouse ]; then
  echo "==> no prebuilt wheels to fetch: this profile compiles none" \
    "(${#PREBUILT_WHEELS[@]} listed${WHEEL_BASE_URL:+, $WHEEL_BASE_URL not read})"
  mkdir -p "$WHEELHOUSE"
fi

"""


def _retry(config: Config) -> str:
    """The crane wrapper with the config's bounds and oci/retry.py's rules."""
    return _RETRY.format(retries=config.registry.retries,
                         max_wait=config.registry.retry_max_wait,
                         retried=shlex.quote(retry.RETRIED_ANSWERS),
                         backoff_ms=int(retry.BACKOFF * 1000))


def _fetch(config: Config) -> str:
    """The prebuilt fetch, with the ABI key the MANIFEST must record (checked right after
    the MANIFEST is fetched: a wrong wheelhouse fails in seconds, before any executor run)."""
    key = abi_key(pins_from_args({}, config.build, config.target))
    return _FETCH.replace("@ABI_KEY@", shlex.quote(key)).replace("@ABI_PREFIX@", ABI_KEY_PREFIX)


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
    """The composing part of the script ("" for cluster.env-source = chain)."""
    if config.cluster.env_source != "composed":
        return ""
    index = slice_index_path(config)
    install = install_command(prefix='"$SLICES/$name/tree"', venv='"$VENV"',
                              slice_file='"$CONTEXT/$file"', build_args=['"${build_args[@]}"'])
    build_env = build_env_script(prefix='"$SLICES/$name/build"', venv='"$VENV"',
                                 files='"${below[@]}"')
    compose_env = _COMPOSE_ENV.format(venv=shlex.quote(config.build.venv), install=" ".join(install),
                                      build_env=build_env,
                                      layer_level=config.layers.compression_level)
    return _COMPOSE.format(
        slice_index=shlex.quote(_relative(index, config.root, "build.kaniko-script")),
        layer_tool=shlex.quote(LAYER_TOOL), compose_env=compose_env,
        snapshot_mode=config.cluster.snapshot_mode)


def render_script(config: Config, pins: ToolPins = DEFAULT_PINS) -> str:
    """The script text for `config` (pure; the same config always gives the same bytes)."""
    q = shlex.quote
    registry = config.registry
    host = registry_host(registry.host, "registry.host", error=BuildError)
    wheels = prebuilt_wheel_names(config)
    return _TEMPLATE.format(
        compose=_compose(config),
        retry=_retry(config),
        attest=_attest(config),
        apt_options=" ".join(w for pair in apt_options(config) for w in pair),
        image_workspace=q(WORKDIR),
        profile=profile_name(config.profile, "profile", error=BuildError),
        variant=config.variant.note,
        root_env=ROOT_ENV,
        source_id=SOURCE_ID_ERE,
        wheelhouse=q(_relative(config.build.wheelhouse, config.root, "build.wheelhouse")),
        registry_host=q(host),
        registry_host_json=q(json.dumps(host)),
        image=q(registry.image),
        cache_repo=q(cache_repo(config)),
        dockerfile=q(_relative(config.build.dockerfile, config.root, "build.dockerfile")),
        wheel_base_url=q((pins.wheel_base_url or config.build.wheel_base_url).rstrip("/")),
        wheels=" ".join(q(n) for n in wheels),
        fetch=_fetch(config) if wheels else _NO_FETCH,
        crane_url=q(pins.crane_url or config.cluster.crane_url),
        crane_sha256=q(pins.crane_sha256 or config.cluster.crane_sha256),
        executor_image=q(pinned_executor(pins.executor_image or config.cluster.kaniko_executor)),
        registry_user=_plain("registry.user", registry.user),
        wheel_source=_plain("build.wheel-source", config.build.wheel_source),
        tag_prefix=_plain("registry.tag-prefix", registry.tag_prefix),
        floating_tag=_plain("registry.floating-tag", registry.floating_tag),
        compression_level=config.cluster.compression_level,
        snapshot_mode=config.cluster.snapshot_mode,
    )


def check_script(config: Config, pins: ToolPins = DEFAULT_PINS) -> None:
    """Raise when the committed script differs from what the config renders."""
    path = config.build.kaniko_script
    text = read_text(path, what="kaniko script", error=BuildError,
                     missing_hint="run `invoke generate` and commit it")
    if text != render_script(config, pins):
        raise BuildError(f"{path} is stale: it differs from what the config renders",
                         hint="run `invoke generate` and commit the result")


def slice_index_path(config: Config) -> Path:
    """The variant's slice index: beside its kaniko script, named after it."""
    return config.build.kaniko_script.with_suffix(".slices")


def slice_index(config: Config, plan: Plan) -> str:
    """One line per slice, in plan order (writer/records.py's `IndexLine`): what the script
    composes (the script is rendered from the config alone: a lock bump leaves it)."""
    return "".join(IndexLine(
        name=step.name, label=step.label,
        file=_relative(step.slice.path(config.variant), config.root, "slices"),
        created_by=written_history(step.slice.image_path, config.build.venv),
        build=_build_column(plan.build_of(step))).to_line() + "\n" for step in plan.layers)


def _build_column(build: SliceBuild | None) -> str:
    """The index's last column for a slice staged on the slices below: `lower` and uv's
    flags for it (empty for any other slice)."""
    if build is None:
        return ""
    return " ".join(["lower", *no_isolation_args(build.no_isolation)])


def script_files(config: Config, plan: Plan) -> dict[Path, str]:
    """What `invoke generate` writes for a variant built on the cluster (nothing for one built
    with the local backend): the script, its attestation skeleton and tool and, when it
    composes, the slice index and the layer tool it runs."""
    if config.backend != "iris":
        return {}
    files = {config.build.kaniko_script: render_script(config),
             skeleton_path(config): skeleton_text(config),
             config.root / ATTEST_TOOL: attest_tool_text()}
    if config.cluster.env_source == "composed":
        files[slice_index_path(config)] = slice_index(config, plan)
        files[config.root / LAYER_TOOL] = layer_tool_text()
    return files


def write_script(config: Config, pins: ToolPins = DEFAULT_PINS, path: Path | None = None) -> Path:
    """Write the script atomically (temp file + rename), executable; return its path."""
    path = path or config.build.kaniko_script
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render_script(config, pins), mode=0o755)
    return path
