# shellcheck shell=bash
set -euo pipefail
# shellcheck source=/dev/null  # written by the job script once env-base is pushed
. "${0%/*}/compose-env.vars"
# The job's CA bundle (this build runs in env-base's filesystem, whose /etc/ssl is its own).
export DOCKER_CONFIG SSL_CERT_FILE="$JOB_CA"
exec python3 -B "$LAYER_TOOL" compose-env --cache-repo "$CACHE_REPO" --env-base "$ENV_BASE" \
  --work "$WORK" --context "$CONTEXT" --slice-index "$SLICE_INDEX" --venv @VENV@ \
  --level @LAYER_LEVEL@ --retries "$REGISTRY_RETRIES" --retry-max-wait "$REGISTRY_RETRY_MAX_WAIT" \
  --prebuilt-wheelhouse "$PREBUILT_WHEELHOUSE"@COMPILED_WHEELS@
