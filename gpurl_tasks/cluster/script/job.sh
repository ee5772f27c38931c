#!/usr/bin/env bash
# In-cluster build of the image of profile '@PROFILE@'@VARIANT@: kaniko in an iris job.
# Rendered by `invoke build` from [tool.gpurl] in pyproject.toml when it submits the job.
# gpurl's own code (the zipapp in the bundle, checked by its sha256) runs every step but the
# executor: `start prepare` and `start admit` read and check the job's environment (GITSHA,
# required; DOCKERFILE, TAG_PREFIX, FLOATING_TAG, PUSH_FLOATING, OVERWRITE_TAG, WHEEL_SOURCE,
# REGISTRY_RETRIES, REGISTRY_RETRY_MAX_WAIT, SSL_CERT_FILE: cluster/jobstart.py). The push
# authenticates as DOCKER_USER_ID with DOCKER_TOKEN (required); GIT_COMMIT, JOB_NAME and
# INPUTS_TAG are what the provenance names.
set -euo pipefail

die() { echo "${0##*/}: error: $*" >&2; exit 1; }

# The image is built for the node the job runs on (kaniko, crane and uv run natively on it):
# a job of one platform on a node of another is refused before anything runs.
TARGET_ARCH=@TARGET_ARCH@
TARGET_PLATFORM=@TARGET_PLATFORM@
CLUSTER_NAME=@CLUSTER_NAME@
NODE_ARCH="$(uname -m)"
[ "$NODE_ARCH" = "$TARGET_ARCH" ] \
  || die "this job builds the $TARGET_PLATFORM ($TARGET_ARCH) image but runs on a $NODE_ARCH" \
    "node: submit it to cluster $CLUSTER_NAME (invoke build runs each variant on its own)"

ROOT="${GPURL_KANIKO_ROOT:-}"
APP_DIR="$ROOT/app"
KANIKO_DIR="$ROOT/kaniko"
# kaniko builds in this job's own root filesystem and deletes it between stages, all but
# $KANIKO_DIR and mount points: the build context, crane and gpurl's files live under
# $KANIKO_DIR, so they outlive the first stage. iris mounts the bundle at $APP_DIR (the task's
# workdir, an emptyDir), so the image's workspace is elsewhere (start prepare checks it).
CONTEXT="$KANIKO_DIR/context"
WORK="$KANIKO_DIR/gpurl"
IMAGE=@IMAGE@
REGISTRY_HOST=@REGISTRY_HOST@
CACHE_REPO=@CACHE_REPO@
EXECUTOR_IMAGE=@EXECUTOR_IMAGE@
DOCKER_USER_ID="${DOCKER_USER_ID:-@REGISTRY_USER@}"

command -v python3 >/dev/null 2>&1 || die "the task image has no python3 to run gpurl's steps" \
  "of this job with: set cluster.task-image to an image with python3 3.11 or newer"
[ -d "$APP_DIR" ] || die "build context $APP_DIR does not exist (the iris workspace bundle)"
mkdir -p "$WORK"
rm -rf "$CONTEXT"
cp -a "$APP_DIR" "$CONTEXT"
JOB_APP="$CONTEXT"/@JOB_APP@
echo "@JOB_APP_SHA256@  $JOB_APP" | sha256sum -c --quiet - \
  || die "$JOB_APP is not the zipapp invoke build staged (expected sha256 @JOB_APP_SHA256@)"
START=(python3 -I -B "$JOB_APP" start --root "${ROOT:-/}" --work "$WORK" --image "$IMAGE"
  --executor-image "$EXECUTOR_IMAGE" --platform "$TARGET_PLATFORM"
@START_ARGS@
)
"${START[@]}" prepare
# shellcheck source=/dev/null  # written by start prepare: DESTINATION, TAG, DOCKERFILE, ...
. "$WORK/job.vars"
export SSL_CERT_FILE  # the job's CA bundle, which outlives kaniko's reset of /etc/ssl
tar -xf "$WORK/executor.tar" -C "${ROOT:-/}"
rm -f "$WORK/executor.tar"
[ -x "$KANIKO_DIR/executor" ] || die "the exported image has no $KANIKO_DIR/executor"
# The executor is static and `crane export` carries no ENV: give it what it looks up.
export USER="${USER:-root}" HOME="${HOME:-/root}"

# The auth file is written after the overlay: the executor image ships its own /kaniko.
# Tracing stays off until the token has been consumed, so it never reaches the job log.
case "$-" in *x*) TRACING=1 ;; *) TRACING=0 ;; esac
{ set +x; } 2>/dev/null
if [ -z "${DOCKER_TOKEN:-}" ]; then
  die "DOCKER_TOKEN is not set: the push to $REGISTRY_HOST needs a registry token"
fi
if [ -z "$DOCKER_USER_ID" ]; then
  die "DOCKER_USER_ID is not set: the push to $REGISTRY_HOST authenticates as USER:TOKEN (registry.user)"
fi
export DOCKER_CONFIG="$KANIKO_DIR/.docker"
mkdir -p "$DOCKER_CONFIG"
AUTH="$(printf '%s:%s' "$DOCKER_USER_ID" "$DOCKER_TOKEN" | base64 -w0)"
printf '{"auths":{%s:{"auth":"%s"}}}\n' @REGISTRY_HOST_JSON@ "$AUTH" \
  >"$DOCKER_CONFIG/.config.tmp"
mv "$DOCKER_CONFIG/.config.tmp" "$DOCKER_CONFIG/config.json"
# iris also hands the task every -e variable again as JSON in IRIS_JOB_ENV: drop that copy too.
unset AUTH DOCKER_TOKEN IRIS_JOB_ENV
if [ "$TRACING" = 1 ]; then set -x; fi
echo "==> registry auth for $DOCKER_USER_ID@$REGISTRY_HOST written to $DOCKER_CONFIG/config.json"
"${START[@]}" admit

# Every executor run shares the context, the build args, the layer cache and the retries.
KANIKO_RETRIES=("--push-retry=$REGISTRY_RETRIES" "--image-download-retry=$REGISTRY_RETRIES"
  "--image-fs-extract-retry=$REGISTRY_RETRIES")
COMMON=(
  --context "dir://$CONTEXT"@BUILD_CONTEXT@
  --dockerfile "$DOCKERFILE"
@WHEEL_BUILD_ARG@
@BUILD_ARGS@
  --build-arg "GITSHA=$GITSHA"
  --skip-unused-stages
  # the variant's platform, which every base image is pulled for: stated, not the node's
  "--custom-platform=$TARGET_PLATFORM"
  --compressed-caching=false
  --compression-level=@COMPRESSION_LEVEL@
  --snapshot-mode=@SNAPSHOT_MODE@
  --cache=true
  # no --cache-copy-layers: with every instruction of the last stage cached, kaniko skips
  # unpacking that stage, and the attestation step after it reads the image's files
  "--cache-repo=$CACHE_REPO"
  "${KANIKO_RETRIES[@]}"
  # kaniko checks push access with one upload POST it never retries; the push itself,
  # retried, is the check (doctor checks the token's push scope before the job is submitted)
  --skip-push-permission-check
)
ARGS=("${COMMON[@]}" --destination "$DESTINATION" --digest-file "$WORK/digest")
if [ -n "$FLOATING" ]; then ARGS+=(--destination "$FLOATING"); fi
@COMPOSE@
echo "==> kaniko build of $DESTINATION"
cd "$CONTEXT"
"$KANIKO_DIR/executor" "${ARGS[@]}"
# Builtins, crane and the image's python3 only from here: the filesystem is now the
# image's last stage, not this job's.
[ -s "$WORK/digest" ] || die "the executor wrote no digest"
read -r DIGEST <"$WORK/digest" || true
echo "pushed $DESTINATION@$DIGEST"

@ATTEST@
