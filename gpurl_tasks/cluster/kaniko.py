"""The in-cluster build script (docker/build_gpu_rl_kaniko.sh), generated from the config.

The iris job runs ubuntu:22.04 (kaniko's image is distroless, no bash), so the script:
fetches crane at a pinned version and checks its sha256; `crane export`s the kaniko
executor (pinned by digest) over `/`; writes the registry auth file *after* that overlay
(kaniko's image ships its own /kaniko and would clobber it) with tracing off until the
token is consumed; fetches the profile's prebuilt compiled wheels (by exact name, none for a
profile without any) + MANIFEST and verifies them, never falling back to a compile; then runs
the executor with per-instruction layers and `--skip-unused-stages`. Rendering reads nothing
but the config and the `./path` wheel sources' pyproject.toml (their versions name the wheels)
and is byte-reproducible (no dates, sorted inputs).

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

from gpurl_tasks.config import Config
from gpurl_tasks.dockerfile.checks import variant_note
from gpurl_tasks.dockerfile.wheels import (
    WheelNameError,
    configured_globs,
    pins_from_args,
    prebuilt_filenames,
    spec_versions,
)
from gpurl_tasks.errors import BuildError
from gpurl_tasks.files import read_text, write_atomic
from gpurl_tasks.oci.tags import cache_repository
from gpurl_tasks.values import SOURCE_ID_ERE, inside_repository, plain_name, profile_name, registry_host

__all__ = [
    "CRANE_SHA256",
    "CRANE_VERSION",
    "DEFAULT_PINS",
    "ROOT_ENV",
    "ToolPins",
    "cache_repo",
    "check_script",
    "prebuilt_wheel_names",
    "render_script",
    "script_files",
    "write_script",
]

# go-containerregistry release assets; refresh both together from the release's checksums.txt.
CRANE_VERSION = "v0.20.3"
CRANE_SHA256 = "36c67a932f489b3f2724b64af90b599a8ef2aa7b004872597373c0ad694dc059"
_CRANE_URL = ("https://github.com/google/go-containerregistry/releases/download/"
              f"{CRANE_VERSION}/go-containerregistry_Linux_x86_64.tar.gz")
# Tests point this at a temp dir so the script's /kaniko and /app live there.
ROOT_ENV = "GPURL_KANIKO_ROOT"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class ToolPins:
    """Where crane comes from, which executor image is exported and where the prebuilt wheels
    are fetched (tests use local stand-ins; an empty executor_image or wheel_base_url means the
    config's `cluster.kaniko-executor` / `build.wheel-base-url`, so the default pins render
    exactly the committed script)."""

    crane_url: str = _CRANE_URL
    crane_sha256: str = CRANE_SHA256
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
                         f"{variant_note(config.variant)}: {exc.message}") from None


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
# immutable tag knowingly). SINGLE_SNAPSHOT=1 is refused.
set -euo pipefail

die() {{ echo "build_gpu_rl_kaniko: error: $*" >&2; exit 1; }}

: "${{GITSHA:?GITSHA is required: the image is pushed as the immutable tag PREFIX-GITSHA}}"
[[ "$GITSHA" =~ ^{source_id}$ ]] \
  || die "GITSHA must be a lowercase hex commit id (optionally -dirty-<12 hex>), got '$GITSHA'"

ROOT="${{{root_env}:-}}"
APP_DIR="$ROOT/app"
KANIKO_DIR="$ROOT/kaniko"
WHEELHOUSE="$APP_DIR"/{wheelhouse}
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

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

if ! command -v curl >/dev/null 2>&1; then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends ca-certificates curl >/dev/null
fi
fetch() {{ curl -fsSL --retry 3 --connect-timeout 30 -o "$2" "$1"; }}

echo "==> crane $CRANE_URL"
fetch "$CRANE_URL" "$WORK/crane.tgz" || die "could not download crane from $CRANE_URL"
echo "$CRANE_SHA256  $WORK/crane.tgz" | sha256sum -c --quiet - \
  || die "crane archive checksum mismatch (expected sha256 $CRANE_SHA256)"
tar -xzf "$WORK/crane.tgz" -C "$WORK" crane

echo "==> kaniko executor $EXECUTOR_IMAGE over ${{ROOT:-/}}"
"$WORK/crane" export --platform linux/amd64 "$EXECUTOR_IMAGE" - | tar -x -C "${{ROOT:-/}}"
[ -x "$KANIKO_DIR/executor" ] || die "the exported image has no $KANIKO_DIR/executor"

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
if EXISTING="$("$WORK/crane" digest "$DESTINATION" 2>"$WORK/crane.err")"; then
  if [ "${{OVERWRITE_TAG:-0}}" != 1 ]; then
    die "$DESTINATION already exists as $EXISTING; an immutable tag is never moved" \
      "(pin that digest, or rebuild with invoke build --force to overwrite it knowingly)"
  fi
  echo "    overwriting $EXISTING (OVERWRITE_TAG=1)"
elif grep -qE 'MANIFEST_UNKNOWN|NAME_UNKNOWN|404' "$WORK/crane.err"; then
  echo "    not pushed yet"
else
  die "cannot check whether $DESTINATION exists: $(tr '\n' ' ' <"$WORK/crane.err")"
fi

{fetch}ARGS=(
  --context "dir://$APP_DIR"
  --dockerfile "$DOCKERFILE"
  --build-arg "WHEEL_SOURCE=$WHEEL_SOURCE"
  --build-arg "GITSHA=$GITSHA"
  --skip-unused-stages
  --compressed-caching=false
  --cache=true
  "--cache-repo=$CACHE_REPO"
  --destination "$DESTINATION"
  --digest-file "$WORK/digest"
)
if [ "$PUSH_FLOATING" = 1 ]; then
  ARGS+=(--destination "$IMAGE:$FLOATING_TAG")
fi

echo "==> kaniko build of $DESTINATION"
cd "$APP_DIR"
"$KANIKO_DIR/executor" "${{ARGS[@]}}"
[ -s "$WORK/digest" ] || die "the executor wrote no digest"
echo "pushed $DESTINATION@$(cat "$WORK/digest")"
"""


_FETCH = r"""if [ "$WHEEL_SOURCE" = prebuilt-wheelhouse ]; then
  echo "==> prebuilt wheels from $WHEEL_BASE_URL"
  mkdir -p "$WHEELHOUSE"
  NO_COMPILE="not compiling instead; set WHEEL_SOURCE=wheel-builder to compile"
  fetch "$WHEEL_BASE_URL/MANIFEST" "$WHEELHOUSE/MANIFEST" \
    || die "MANIFEST is missing at $WHEEL_BASE_URL/MANIFEST ($NO_COMPILE)"
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


def _plain(key: str, value: str) -> str:
    """A value spliced into `"${VAR:-value}"`: only a registry-name alphabet is allowed."""
    return plain_name(value, key, error=BuildError)


def _executor(image: str) -> str:
    """The executor image, which must be pinned by digest: a tag can move under a cached job."""
    if not re.fullmatch(r"[^\s@]+@sha256:[0-9a-f]{64}", image):
        raise BuildError(f"cluster.kaniko-executor = {image!r} is not pinned by digest",
                         hint="write IMAGE@sha256:<64 hex>; `crane digest IMAGE:TAG` gives it")
    return image


def render_script(config: Config, pins: ToolPins = DEFAULT_PINS) -> str:
    """The script text for `config` (pure; the same config always gives the same bytes)."""
    q = shlex.quote
    registry = config.registry
    host = registry_host(registry.host, "registry.host", error=BuildError)
    wheels = prebuilt_wheel_names(config)
    return _TEMPLATE.format(
        profile=profile_name(config.profile, "profile", error=BuildError),
        variant=f" (variant '{config.variant}')" if config.variant else "",
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
        fetch=_FETCH if wheels else _NO_FETCH,
        crane_url=q(pins.crane_url),
        crane_sha256=q(pins.crane_sha256),
        executor_image=q(_executor(pins.executor_image or config.cluster.kaniko_executor)),
        registry_user=_plain("registry.user", registry.user),
        wheel_source=_plain("build.wheel-source", config.build.wheel_source),
        tag_prefix=_plain("registry.tag-prefix", registry.tag_prefix),
        floating_tag=_plain("registry.floating-tag", registry.floating_tag),
    )


def check_script(config: Config, pins: ToolPins = DEFAULT_PINS) -> None:
    """Raise when the committed script differs from what the config renders."""
    path = config.build.kaniko_script
    text = read_text(path, what="kaniko script", error=BuildError,
                     missing_hint="run `invoke generate` and commit it")
    if text != render_script(config, pins):
        raise BuildError(f"{path} is stale: it differs from what the config renders",
                         hint="run `invoke generate` and commit the result")


def script_files(config: Config) -> dict[Path, str]:
    """The script `invoke generate` writes for a variant built on the cluster (none for a
    profile built with the local backend)."""
    return {config.build.kaniko_script: render_script(config)} if config.backend == "iris" else {}


def write_script(config: Config, pins: ToolPins = DEFAULT_PINS, path: Path | None = None) -> Path:
    """Write the script atomically (temp file + rename), executable; return its path."""
    path = path or config.build.kaniko_script
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, render_script(config, pins), mode=0o755)
    return path
