# shellcheck shell=bash
ABI_KEY=@ABI_KEY@
WHEEL_PLATFORM=@WHEEL_PLATFORM@
if [ "$WHEEL_SOURCE" = prebuilt-wheelhouse ]; then
  echo "==> prebuilt wheels from $WHEEL_BASE_URL"
  mkdir -p "$WHEELHOUSE"
  NO_COMPILE="not compiling instead; set WHEEL_SOURCE=wheel-builder to compile"
  fetch "$WHEEL_BASE_URL/MANIFEST" "$WHEELHOUSE/MANIFEST" \
    || die "MANIFEST is missing at $WHEEL_BASE_URL/MANIFEST ($NO_COMPILE)"
  found_key="$(sed -n 's/^@ABI_PREFIX@//p' "$WHEELHOUSE/MANIFEST")"
  # the key's platform word first: wheels of another platform are said to be that, plainly
  read -ra found_words <<<"$found_key"
  for word in "${found_words[@]}"; do
    case "$word" in
      platform=*) [ "${word#platform=}" = "$WHEEL_PLATFORM" ] \
        || die "the MANIFEST at $WHEEL_BASE_URL is for platform ${word#platform=}, not this" \
          "job's $WHEEL_PLATFORM: point build.wheel-base-url at the $WHEEL_PLATFORM wheels" \
          "($NO_COMPILE)" ;;
    esac
  done
  [ "$found_key" = "$ABI_KEY" ] \
    || die "the MANIFEST at $WHEEL_BASE_URL records another ABI key: expected '$ABI_KEY'," \
      "found '${found_key:-none}' (rebuild the wheels for these pins; $NO_COMPILE)"
  for whl in "${PREBUILT_WHEELS[@]}"; do
    want="$(awk -v f="$whl" '$2 == f || $2 == "*" f { print $1 }' "$WHEELHOUSE/MANIFEST")"
    [ -n "$want" ] || die "MANIFEST at $WHEEL_BASE_URL has no entry for $whl"
    fetch "$WHEEL_BASE_URL/$whl" "$WHEELHOUSE/$whl" \
      || die "wheel $whl is missing at $WHEEL_BASE_URL/$whl ($NO_COMPILE)"
    got="$(sha256sum "$WHEELHOUSE/$whl" | cut -d ' ' -f 1)"
    [ "$got" = "$want" ] \
      || die "checksum mismatch for $whl: MANIFEST says $want, the download is $got"
    echo "    ok $whl"
  done
fi
