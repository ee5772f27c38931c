# shellcheck shell=bash
set -euo pipefail
# shellcheck source=/dev/null  # written by the job script once env-base is pushed
. "${0%/*}/compose-env.vars"
die() { echo "compose-env: error: $*" >&2; exit 1; }
# The job's CA bundle (this build runs in env-base's filesystem, whose /etc/ssl is its own).
export DOCKER_CONFIG SSL_CERT_FILE="$JOB_CA"
# shellcheck source=/dev/null  # the job script's retry wrapper (`retried`)
. "$WORK/registry-retry.sh"
crane() { retried "$WORK/crane.err" "crane $1 ${2:-}" "$WORK/crane" "$@"; }
said() { tr '\n' ' ' <"$WORK/crane.err"; }
# Whether the registry holds blob $1 (REPO@sha256:...). crane has no HEAD of a blob: the first
# byte of its GET shows the blob is there (the rest is never read), a 404 that it is not.
blob_there() {
  local got attempt=1
  while :; do
    got="$("$WORK/crane" -v blob "$1" 2>"$WORK/crane.err" | head -c 1 | wc -c)" || true
    [ "$got" = 1 ] && return 0
    retry_wait "$attempt" "read of blob $1" "$WORK/crane.err" || break
    attempt=$((attempt + 1))
  done
  grep -qE 'BLOB_UNKNOWN|MANIFEST_BLOB_UNKNOWN|status code 404' "$WORK/crane.err" && return 1
  die "cannot read blob $1: $(said)"
}
# The first blob the manifest in file $1 names that repository $2 does not hold (its layers
# alone with $3 = layers: a config still to be pushed is not asked for); nothing when all are.
lost_blob_in() {
  local digest
  python3 -B "$LAYER_TOOL" blobs "$1" >"$WORK/lost.blobs" || die "cannot read the blobs of $1"
  [ "${3:-}" != layers ] || sed -i 1d "$WORK/lost.blobs"
  while read -r digest; do
    blob_there "$2@$digest" || { echo "$digest"; return 0; }
  done <"$WORK/lost.blobs"
}
# The first blob image $1 names that its repository ($2) does not hold; nothing when all are.
lost_blob() {
  crane manifest "$1" >"$WORK/lost.manifest" || die "cannot read $1: $(said)"
  lost_blob_in "$WORK/lost.manifest" "$2"
}
VENV=@VENV@
LEVEL=@LAYER_LEVEL@
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
# The install runs --require-hashes where its history entry ($3, what ran) says so: a slice
# with a line uv has no hash for (a git source, an index that serves none) is staged without.
write_slice() {
  local name="$1" file="$2" created_by="$3" tag="$4" again="${5:-}" log="$SLICES/$1.log"
  local words=() build_args=() below=() lower_file hash_args=()
  case "$created_by" in *" --require-hashes "*) hash_args=(--require-hashes) ;; esac
  read -ra words <<<"${6:-}"
  : >"$log"
  if [ "${words[0]:-}" = lower ]; then
    build_args=("${words[@]:1}")
    for lower_file in "${@:7}"; do below+=("$CONTEXT/$lower_file"); done
    if [ "${#below[@]}" -gt 0 ] && ! { @BUILD_ENV@; } >>"$log" 2>&1; then
      echo "installing the slices below slice $name failed: $(tail -n 5 "$log" | tr '\n' ' ')"
      return 1
    fi
  fi
  if ! @INSTALL@ >>"$log" 2>&1
  then
    echo "installing slice $name ($file) failed: $(tail -n 5 "$log" | tr '\n' ' ')"
    return 1
  fi
  if ! python3 -B "$LAYER_TOOL" image "$SLICES/$name/tree" "$SLICES/$name/image" \
      --prefix "${VENV#/}" --level "$LEVEL" --created-by "$created_by" --record "$tag" \
      "${BASE_DOCS[@]}" >"$SLICES/$name.blob" 2>>"$log"
  then
    echo "writing slice $name failed: $(tail -n 2 "$log" | tr '\n' ' ')"
    return 1
  fi
  # crane pushes nothing, not even a missing blob, when the tag already names the manifest
  # (the same slice, the same bytes): a record whose blob is gone is pushed under a tag of
  # its own first, which uploads the blob, then under its own tag again.
  local pushes=("$CACHE_REPO:$tag")
  if [ -n "$again" ]; then pushes=("$CACHE_REPO:$tag-rewrite-$(date -u +%Y%m%d%H%M%S)" "${pushes[@]}"); fi
  for to in "${pushes[@]}"; do
    if ! retried "$SLICES/$name.crane" "push of slice $name" "$WORK/crane" push \
        "$SLICES/$name/image" "$to" >/dev/null; then
      echo "cannot push slice $name to $to: $(tr '\n' ' ' <"$SLICES/$name.crane")"
      return 1
    fi
  done
  rm -rf "${SLICES:?}/$name"
  echo "    $name: written $(cat "$SLICES/$name.blob")"
}
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
  below=("${LOWER[@]}")
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
  ( write_slice "$name" "$file" "$created_by" "$tag" "$lost" "$build" "${below[@]}" \
    || touch "$SLICES/$name.failed" ) &
  WRITTEN=$((WRITTEN + 1))
done
exec 3<&- 4<&-
wait
for failed in "$SLICES"/*.failed; do
  if [ -e "$failed" ]; then
    failed="${failed##*/}"
    die "slice ${failed%.failed} could not be written (its reason is above)"
  fi
done
# The environment image, composed as the local path composes it (writer/composition.py, run
# by the layer tool): env-base's layers, then each slice's record layer in plan order, under
# env-base's config extended to match. Only its config and manifest are written, and pushed
# once every layer they name is in the cache repository (env-base pushed, each record checked
# or written above): crane finds each layer there and moves none, and no manifest is ever put
# under a tag while a blob it names is missing (a registry that does not check would take
# it, crane skips every layer when the tag already names the manifest, and no node could
# pull the result).
RECORDS=()
while read -r name tag; do
  for doc in manifest config; do
    crane "$doc" "$CACHE_REPO:$tag" >"$SLICES/$name.record.$doc" \
      || die "cannot read the record of slice $name ($tag): $(said)"
  done
  RECORDS+=(--record "$name" "$SLICES/$name.record.manifest" "$SLICES/$name.record.config")
done <"$SLICES/tags"
read -r ENV_TAG ENV_MANIFEST < <(python3 -B "$LAYER_TOOL" compose "$SLICES/env" \
  "${BASE_DOCS[@]}" "${RECORDS[@]}") || true
[ -n "${ENV_MANIFEST:-}" ] || die "cannot compose the environment (the layer tool's reason is above)"
lost="$(lost_blob_in "$SLICES/env/blobs/sha256/${ENV_MANIFEST#sha256:}" "$CACHE_REPO" layers)"
[ -z "$lost" ] || die "the composed environment names blob $lost, which $CACHE_REPO does not" \
  "hold: its manifest is not written (run the job again: a slice whose blob is gone is" \
  "written anew)"
ENV_IMAGE="$(crane push "$SLICES/env" "$CACHE_REPO:$ENV_TAG")" \
  || die "cannot push the composed environment $CACHE_REPO:$ENV_TAG: $(said)"
rm -rf "$SLICES"
echo "$ENV_IMAGE" >"$WORK/env-image"
echo "==> environment $ENV_IMAGE ($WRITTEN slice(s) written, $REWRITTEN of them as their" \
  "record's blob was gone; $CACHED cached)"
