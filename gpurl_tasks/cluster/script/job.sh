#!/usr/bin/env bash
# In-cluster build of the image of profile '@PROFILE@'@VARIANT@: kaniko in an iris job.
# Rendered by `invoke build` from [tool.gpurl] in pyproject.toml when it submits the job.
#
# Inputs (environment): GITSHA (required), DOCKER_TOKEN (required), DOCKER_USER_ID,
# PUSH_FLOATING (0 | 1), DOCKERFILE (a variant's), TAG_PREFIX, FLOATING_TAG, OVERWRITE_TAG
# (0 | 1: move an existing immutable tag knowingly), GIT_COMMIT and JOB_NAME (what the
# provenance names: the full commit, the iris job), INPUTS_TAG (the tag that records the
# pushed image by its inputs: release/reuse.py). SINGLE_SNAPSHOT=1 is refused.
@WHEEL_INPUT@
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

: "${GITSHA:?GITSHA is required: the image is pushed as the immutable tag PREFIX-GITSHA}"
[[ "$GITSHA" =~ ^@SOURCE_ID@$ ]] \
  || die "GITSHA must be a lowercase hex commit id (optionally -dirty-<12 hex>), got '$GITSHA'"

ROOT="${GPURL_KANIKO_ROOT:-}"
APP_DIR="$ROOT/app"
KANIKO_DIR="$ROOT/kaniko"
# kaniko builds in this job's own root filesystem and deletes it between stages, all but
# $KANIKO_DIR and mount points (never snapshotted, never deleted): the build context, crane
# and the digest live under $KANIKO_DIR, so they outlive the first stage. iris mounts the
# bundle at $APP_DIR (the task's workdir, an emptyDir): the image's workspace is therefore
# elsewhere ($IMAGE_WORKSPACE), or its COPY would write into the bundle and miss the image.
CONTEXT="$KANIKO_DIR/context"
# the Dockerfile's build context: the bundle, or a directory of it (build.context)
BUILD_CONTEXT="$CONTEXT"@BUILD_CONTEXT@
IMAGE_WORKSPACE=@IMAGE_WORKSPACE@
WORK="$KANIKO_DIR/gpurl"
REGISTRY_HOST=@REGISTRY_HOST@
REGISTRY_HOST_JSON=@REGISTRY_HOST_JSON@
IMAGE=@IMAGE@
CACHE_REPO=@CACHE_REPO@
DEFAULT_DOCKERFILE=@DOCKERFILE@
CRANE_URL=@CRANE_URL@
CRANE_SHA256=@CRANE_SHA256@
EXECUTOR_IMAGE=@EXECUTOR_IMAGE@
@WHEEL_VARS@

DOCKER_USER_ID="${DOCKER_USER_ID:-@REGISTRY_USER@}"
PUSH_FLOATING="${PUSH_FLOATING:-0}"
DOCKERFILE="${DOCKERFILE:-$DEFAULT_DOCKERFILE}"
TAG_PREFIX="${TAG_PREFIX:-@TAG_PREFIX@}"
if [ "$TAG_PREFIX" = @TAG_PREFIX@ ]; then
  FLOATING_TAG="${FLOATING_TAG:-@FLOATING_TAG@}"
else
  FLOATING_TAG="${FLOATING_TAG:-$TAG_PREFIX}"
fi

if [ "${SINGLE_SNAPSHOT:-0}" != 0 ]; then
  die "SINGLE_SNAPSHOT=1 is refused: it collapses the image into one huge layer" \
    "that cannot be pulled over the cluster's registry egress (every pod" \
    "ImagePullBackOff); per-instruction layers are the default"
fi
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
  apt-get @APT_OPTIONS@ update -qq
  apt-get @APT_OPTIONS@ install -y -qq --no-install-recommends ca-certificates curl >/dev/null
fi
fetch() { curl -fsSL --retry 3 --connect-timeout 30 -o "$2" "$1"; }
@RETRY@

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
if [ -n "${SSL_CERT_FILE:-}" ]; then
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

echo "==> kaniko executor $EXECUTOR_IMAGE over ${ROOT:-/}"
retried "$WORK/crane.err" "export of $EXECUTOR_IMAGE" "$WORK/crane" export \
    --platform "$TARGET_PLATFORM" "$EXECUTOR_IMAGE" "$WORK/executor.tar" \
  || die "cannot export $EXECUTOR_IMAGE: $(tr '\n' ' ' <"$WORK/crane.err")"
tar -xf "$WORK/executor.tar" -C "${ROOT:-/}"
rm -f "$WORK/executor.tar"
[ -x "$KANIKO_DIR/executor" ] || die "the exported image has no $KANIKO_DIR/executor"
# The executor is static and `crane export` carries no ENV: give it what it looks up.
export USER="${USER:-root}" HOME="${HOME:-/root}"
rm -rf "$CONTEXT"
cp -a "$APP_DIR" "$CONTEXT"
# gpurl's own code the job runs (the layer tool, the attestation writer): the zipapp invoke
# build staged in the bundle, run only as the one that was submitted.
JOB_APP="$CONTEXT"/@JOB_APP@
echo "@JOB_APP_SHA256@  $JOB_APP" | sha256sum -c --quiet - \
  || die "$JOB_APP is not the zipapp invoke build staged (expected sha256 @JOB_APP_SHA256@)"

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
printf '{"auths":{%s:{"auth":"%s"}}}\n' "$REGISTRY_HOST_JSON" "$AUTH" \
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
  if [ "${OVERWRITE_TAG:-0}" != 1 ]; then
    die "$DESTINATION already exists as $EXISTING; an immutable tag is never moved" \
      "(pin that digest, or rebuild with invoke build --force to overwrite it knowingly)"
  fi
  echo "    overwriting $EXISTING (OVERWRITE_TAG=1)"
elif grep -qE 'MANIFEST_UNKNOWN|NAME_UNKNOWN|status code 404' "$WORK/crane.err"; then
  echo "    not pushed yet"
else
  die "cannot check whether $DESTINATION exists: $(tr '\n' ' ' <"$WORK/crane.err")"
fi

@FETCH@

# Every executor run retries its registry reads and pushes within the job's bound.
KANIKO_RETRIES=("--push-retry=$REGISTRY_RETRIES" "--image-download-retry=$REGISTRY_RETRIES"
  "--image-fs-extract-retry=$REGISTRY_RETRIES")
# Every executor run shares the context, the build args and the layer cache.
COMMON=(
  --context "dir://$BUILD_CONTEXT"
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
  # unpacking that stage, and the attestation step after it reads the image's files (seen
  # here on both executors: "the built image has no python3")
  "--cache-repo=$CACHE_REPO"
  "${KANIKO_RETRIES[@]}"
  # kaniko checks push access with one upload POST it never retries (a single 5xx there failed
  # a build); the push itself, retried, is the check (doctor checks the token's push scope
  # before the job is submitted)
  --skip-push-permission-check
)
ARGS=("${COMMON[@]}" --destination "$DESTINATION" --digest-file "$WORK/digest")
if [ "$PUSH_FLOATING" = 1 ]; then
  ARGS+=(--destination "$IMAGE:$FLOATING_TAG")
fi
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
