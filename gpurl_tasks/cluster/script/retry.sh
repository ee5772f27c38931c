# shellcheck shell=bash
REGISTRY_RETRIES="${REGISTRY_RETRIES:-@RETRIES@}"
REGISTRY_RETRY_MAX_WAIT="${REGISTRY_RETRY_MAX_WAIT:-@MAX_WAIT@}"
[[ "$REGISTRY_RETRIES$REGISTRY_RETRY_MAX_WAIT" =~ ^[0-9]+$ ]] \
  || die "REGISTRY_RETRIES and REGISTRY_RETRY_MAX_WAIT must be whole numbers"
# The bounds are written into the file: the composing build sources it in a shell of its own.
printf '# shellcheck shell=bash\nREGISTRY_RETRIES=%d\nREGISTRY_RETRY_MAX_WAIT=%d\n' \
  "$REGISTRY_RETRIES" "$REGISTRY_RETRY_MAX_WAIT" >"$WORK/registry-retry.sh"
cat >>"$WORK/registry-retry.sh" <<'RETRY'
RETRIED=@RETRIED@
# retry_wait ATTEMPT WHAT LOG: the call that failed (crane -v's stderr in LOG) is tried again
# when the registry's answer is worth it and retries are left: one line says so, then the wait
# (Retry-After, else @BACKOFF_MS@ ms doubled per retry, at most REGISTRY_RETRY_MAX_WAIT s).
# LOG is cut to the call's own error (secrets redacted) either way.
retry_wait() {
  local attempt="$1" what="$2" log="$3" after answer ms cap
  after="$(sed -n 's/^[Rr]etry-[Aa]fter: *\([0-9][0-9]*\).*/\1/p' "$log" | tail -n 1)"
  answer="$(grep -E '^Error: ' "$log" || tail -n 1 "$log")"
  sed -E 's/(Bearer|Basic) [^ "]+/\1 <redacted>/g; s/_state=[^&" ]+/_state=REDACTED/g' \
    <<<"$answer" >"$log"
  answer="$(tr '\n' ' ' <"$log")"
  grep -qE "$RETRIED" <<<"$answer" || return 1
  [ "$attempt" -le "$REGISTRY_RETRIES" ] || {
    echo "after $attempt attempts" >>"$log"
    return 1
  }
  cap=$((REGISTRY_RETRY_MAX_WAIT * 1000))
  if [ -n "$after" ]; then
    ms=$((after * 1000))
  else
    ms=$((@BACKOFF_MS@ << (attempt - 1)))
    ms=$((ms + ms * (RANDOM % 25) / 100))
  fi
  [ "$ms" -le "$cap" ] || ms="$cap"
  echo "    retry $attempt/$REGISTRY_RETRIES in $((ms / 1000)).$((ms % 1000 / 100))s" \
    "(${after:+Retry-After $after s, }$what): $answer" >&2
  sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
}
# retried LOG WHAT PROGRAM ARGS...: crane PROGRAM, its stdout passed on, tried again by
# retry_wait's rules; on a final failure LOG holds the registry's answer.
retried() {
  local log="$1" what="$2" program="$3" attempt=1
  shift 3
  while :; do
    "$program" -v "$@" 2>"$log" && return 0
    retry_wait "$attempt" "$what" "$log" || return 1
    attempt=$((attempt + 1))
  done
}
RETRY
# shellcheck source=/dev/null
. "$WORK/registry-retry.sh"
