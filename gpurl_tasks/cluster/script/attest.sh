# shellcheck shell=bash
PY="$(command -v python3 || command -v @VENV@/bin/python3)" \
  || die "the built image has no python3 to write its SBOM and provenance with"
[ -f "$CONTEXT"/@SKELETON@ ] \
  || die "the attestation skeleton is missing from the bundle (submit with invoke build)"
"$PY" -I -B "$JOB_APP" attest job --skeleton "$CONTEXT"/@SKELETON@ --crane "$WORK/crane" \
  --out "$WORK/attest" --image "$IMAGE" --tag "$TAG" --digest "$DIGEST" \
  --dpkg-status "$ROOT/var/lib/dpkg/status" --base-image @BASE_IMAGE@ \
  --builder "$EXECUTOR_IMAGE" --invocation "iris:${JOB_NAME:-gpurl-kaniko-$GITSHA}" \
  --commit "${GIT_COMMIT:-}" --source-id "$GITSHA" --retries "$REGISTRY_RETRIES" \
  --retry-max-wait "$REGISTRY_RETRY_MAX_WAIT" --inputs-tag "${INPUTS_TAG:-}"@WHEEL_ARGS@
