# shellcheck shell=bash
# The compiled wheels: where the prebuilt ones are fetched into and from, and which source
# the build uses (the Dockerfile's WHEEL_SOURCE).
WHEELHOUSE="$CONTEXT"/@WHEELHOUSE@
WHEEL_BASE_URL=@WHEEL_BASE_URL@
PREBUILT_WHEELS=(@WHEELS@)
WHEEL_SOURCE="${WHEEL_SOURCE:-@WHEEL_SOURCE@}"
case "$WHEEL_SOURCE" in
  prebuilt-wheelhouse | wheel-builder) ;;
  *) die "WHEEL_SOURCE must be prebuilt-wheelhouse or wheel-builder, got '$WHEEL_SOURCE'" ;;
esac
