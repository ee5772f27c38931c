# shellcheck shell=bash
ABI_KEY=@ABI_KEY@
if [ "$WHEEL_SOURCE" = prebuilt-wheelhouse ]; then
  echo "==> prebuilt wheels from $WHEEL_BASE_URL"
  mkdir -p "$WHEELHOUSE"
  NO_COMPILE="not compiling instead; set WHEEL_SOURCE=wheel-builder to compile"
  fetch "$WHEEL_BASE_URL/MANIFEST" "$WHEELHOUSE/MANIFEST" \
    || die "MANIFEST is missing at $WHEEL_BASE_URL/MANIFEST ($NO_COMPILE)"
  found_key="$(sed -n 's/^@ABI_PREFIX@//p' "$WHEELHOUSE/MANIFEST")"
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
