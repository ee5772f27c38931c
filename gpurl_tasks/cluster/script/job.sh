#!/usr/bin/env bash
# In-cluster build of the image of profile '@PROFILE@'@VARIANT@: kaniko in an iris job.
# Rendered by `invoke build` when it submits the job. gpurl's own code (the bundle's zipapp)
# runs every step but the executor and reads the job's environment (cluster/jobstart.py); the
# push authenticates as DOCKER_USER_ID with DOCKER_TOKEN (required).
set -euo pipefail

die() { echo "${0##*/}: error: $*" >&2; exit 1; }

# kaniko, crane and uv run natively: a node of another platform is refused before anything.
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
# kaniko builds in this job's root filesystem and deletes it between stages, all but $KANIKO_DIR
# and mounts (iris mounts the bundle at $APP_DIR): what must outlive a stage is under $KANIKO_DIR.
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
  --executor-image "$EXECUTOR_IMAGE" --platform "$TARGET_PLATFORM" --context "$CONTEXT"
@START_ARGS@
)
"${START[@]}" prepare
# shellcheck source=/dev/null  # written by start prepare: DESTINATION, TAG, DOCKERFILE, ...
. "$WORK/job.vars"
tar -xf "$WORK/executor.tar" -C "${ROOT:-/}" || die "cannot unpack $EXECUTOR_IMAGE over ${ROOT:-/}"
rm -f "$WORK/executor.tar"
[ -x "$KANIKO_DIR/executor" ] || die "the exported image has no $KANIKO_DIR/executor"
# What the static executor looks up (`crane export` carries no ENV), and the job's CA bundle.
export USER="${USER:-root}" HOME="${HOME:-/root}" SSL_CERT_FILE
# The auth file after the overlay (the executor image ships its own /kaniko), tracing off.
case "$-" in *x*) TRACING=1 ;; *) TRACING=0 ;; esac
{ set +x; } 2>/dev/null
[ -n "${DOCKER_TOKEN:-}" ] \
  || die "DOCKER_TOKEN is not set: the push to $REGISTRY_HOST needs a registry token"
[ -n "$DOCKER_USER_ID" ] || die "DOCKER_USER_ID is not set: the push to $REGISTRY_HOST" \
  "authenticates as USER:TOKEN (registry.user)"
export DOCKER_CONFIG="$KANIKO_DIR/.docker"
mkdir -p "$DOCKER_CONFIG"
AUTH="$(printf '%s:%s' "$DOCKER_USER_ID" "$DOCKER_TOKEN" | base64 -w0)"
printf '{"auths":{%s:{"auth":"%s"}}}\n' @REGISTRY_HOST_JSON@ "$AUTH" >"$DOCKER_CONFIG/.config.tmp"
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
@CACHE_COPY@
  "--cache-repo=$CACHE_REPO"
  "${KANIKO_RETRIES[@]}"
  # kaniko's push check is one POST it never retries: the retried push is the check
  --skip-push-permission-check
)
ARGS=("${COMMON[@]}" --destination "$DESTINATION" --digest-file "$WORK/digest")
if [ -n "$FLOATING" ]; then ARGS+=(--destination "$FLOATING"); fi
@COMPOSE@
echo "==> kaniko build of $DESTINATION"
cd "$CONTEXT"
"$KANIKO_DIR/executor" "${ARGS[@]}"
# Builtins, crane and the image's python3 only from here: the filesystem is the image's.
[ -s "$WORK/digest" ] || die "the executor wrote no digest"
read -r DIGEST <"$WORK/digest" || true
echo "pushed $DESTINATION@$DIGEST"

@ATTEST@
