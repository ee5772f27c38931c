# shellcheck shell=bash
ATTEST_SKELETON="$CONTEXT"/@SKELETON@
ATTEST="$WORK/attest"
BASE_IMAGE=@BASE_IMAGE@
echo "==> SBOM and provenance of $DESTINATION@$DIGEST"
[ -f "$ATTEST_SKELETON" ] \
  || die "the attestation skeleton is missing from the bundle (submit with invoke build)"
PY=""
for candidate in python3 @VENV@/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1; then PY="$candidate"; break; fi
done
[ -n "$PY" ] || die "the built image has no python3 to write its SBOM and provenance with"
# every registry call through the job's retry wrapper (its rules, its redaction)
attest_crane() { retried "$WORK/attest.err" "crane $1 of the attestations" "$WORK/crane" "$@"; }
attest_said() { local said; said="$(<"$WORK/attest.err")"; echo "${said//$'\n'/ }"; }
attest_crane manifest "$IMAGE@$DIGEST" >"$WORK/image.manifest" \
  || die "cannot read the pushed manifest: $(attest_said)"
attest_crane config "$IMAGE@$DIGEST" >"$WORK/image.config" \
  || die "cannot read the pushed image's config: $(attest_said)"
BASE_REF="$BASE_IMAGE"
if BASE_DIGEST="$(attest_crane digest "$BASE_IMAGE")"; then
  BASE_REF="${BASE_IMAGE%@*}@$BASE_DIGEST"
else
  echo "    the base image's digest is unknown ($(attest_said)): named as configured"
fi
@WHEEL_ARGS@
COMMIT="${GIT_COMMIT:-$GITSHA}"
if [[ "$GITSHA" == *-dirty-* ]]; then COMMIT="${COMMIT%%-dirty-*}-dirty-${GITSHA##*-dirty-}"; fi
"$PY" -I -B "$JOB_APP" attest documents --skeleton "$ATTEST_SKELETON" --out "$ATTEST" \
  --image "$IMAGE" --tag "$TAG_PREFIX-$GITSHA" --digest "$DIGEST" \
  --image-manifest "$WORK/image.manifest" --image-config "$WORK/image.config" \
  --dpkg-status "$ROOT/var/lib/dpkg/status" --base-image "$BASE_REF" \
  --builder "$EXECUTOR_IMAGE" --invocation "iris:${JOB_NAME:-gpurl-kaniko-$GITSHA}" \
  --commit "$COMMIT"@ATTEST_WHEEL_ARGS@ >"$WORK/attest.list" 2>"$WORK/attest.err" \
  || die "cannot write the SBOM and provenance: $(attest_said)"
echo "    $(attest_said)"
while read -r kind artifact; do
  attest_crane push "$ATTEST/$kind" "$IMAGE@$artifact" >/dev/null \
    || die "cannot attach the $kind to $DIGEST: $(attest_said)"
  echo "    $kind: $artifact"
done <"$WORK/attest.list"
# crane lists an artifact under the referrers tag itself when the registry lacks the API (by
# its config's media type): the tag is rewritten to list each by its artifactType.
FALLBACK="$IMAGE:sha256-${DIGEST#sha256:}"
if attest_crane manifest "$FALLBACK" >"$WORK/fallback.index"; then
  "$PY" -I -B "$JOB_APP" attest fallback --existing "$WORK/fallback.index" --attached "$ATTEST" \
    --out "$ATTEST/fallback" >"$WORK/fallback.others" 2>"$WORK/attest.err" \
    || die "cannot write the referrers tag's index: $(attest_said)"
  while read -r other; do
    attest_crane manifest "$IMAGE@$other" >"$ATTEST/fallback/blobs/sha256/${other#sha256:}" \
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
