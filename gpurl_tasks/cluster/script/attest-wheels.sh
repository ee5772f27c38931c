# shellcheck shell=bash
WHEEL_ARGS=()
if [ "$WHEEL_SOURCE" = prebuilt-wheelhouse ]; then
  WHEEL_ARGS=(--wheel-manifest "$WHEELHOUSE/MANIFEST" --abi-prefix @ABI_PREFIX@)
  for whl in "${PREBUILT_WHEELS[@]}"; do WHEEL_ARGS+=(--wheel "$whl"); done
fi
