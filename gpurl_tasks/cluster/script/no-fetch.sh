# shellcheck shell=bash
if [ "$WHEEL_SOURCE" = prebuilt-wheelhouse ]; then
  echo "==> no prebuilt wheels to fetch: this profile compiles none" \
    "(${#PREBUILT_WHEELS[@]} listed${WHEEL_BASE_URL:+, $WHEEL_BASE_URL not read})"
  mkdir -p "$WHEELHOUSE"
fi
