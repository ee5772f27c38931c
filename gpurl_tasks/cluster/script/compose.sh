# shellcheck shell=bash
SLICE_INDEX="$CONTEXT"/@SLICE_INDEX@
[ -f "$SLICE_INDEX" ] || die "the slice index $SLICE_INDEX is missing (submit with invoke build)"
cat >"$WORK/compose-env.sh" <<'COMPOSE_ENV'
@COMPOSE_ENV@
COMPOSE_ENV
echo "==> kaniko build of env-base (what every slice is installed on)"
cd "$CONTEXT"
"$KANIKO_DIR/executor" "${COMMON[@]}" --target env-base \
  --destination "$CACHE_REPO:env-base-$GITSHA" --digest-file "$WORK/env-base.digest"
[ -s "$WORK/env-base.digest" ] || die "the executor wrote no digest for env-base"
read -r ENV_BASE_DIGEST <"$WORK/env-base.digest" || true
{
  printf '%s=%q\n' CACHE_REPO "$CACHE_REPO" ENV_BASE "$CACHE_REPO@$ENV_BASE_DIGEST" \
    GITSHA "$GITSHA" WORK "$WORK" CONTEXT "$CONTEXT" SLICE_INDEX "$SLICE_INDEX" \
    PREBUILT_WHEELHOUSE "$PREBUILT_WHEELHOUSE" \
    LAYER_TOOL "$JOB_APP" DOCKER_CONFIG "$DOCKER_CONFIG" JOB_CA "$SSL_CERT_FILE" \
    REGISTRY_RETRIES "$REGISTRY_RETRIES" REGISTRY_RETRY_MAX_WAIT "$REGISTRY_RETRY_MAX_WAIT"
} >"$WORK/compose-env.vars"
printf 'FROM %s\nRUN ["/bin/bash", "%s"]\n' "$CACHE_REPO@$ENV_BASE_DIGEST" \
  "$WORK/compose-env.sh" >"$WORK/compose-env.Dockerfile"
echo "==> the slices written on env-base and composed (an unpushed kaniko build)"
"$KANIKO_DIR/executor" --context "dir://$CONTEXT" --dockerfile "$WORK/compose-env.Dockerfile" \
  "--custom-platform=$TARGET_PLATFORM" --no-push --cache=false --snapshot-mode=@SNAPSHOT_MODE@ \
  "${KANIKO_RETRIES[@]}"
# ENV_SOURCE, the composed image; COMPILED_SOURCE=env when it holds the compiled wheels' layer
[ -s "$WORK/env-args" ] || die "composing the environment wrote no build args"
while IFS= read -r ENV_ARG; do ARGS+=(--build-arg "$ENV_ARG"); done <"$WORK/env-args"
