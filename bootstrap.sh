#!/usr/bin/env bash
# Install what gpurl and its tests need on a fresh Debian machine (run as root), then the
# project's own virtualenv (.venv) from gpurl's uv.lock. Idempotent: a second run is quick.
set -euo pipefail
cd "$(dirname "$0")"

APT_PACKAGES=(git curl openssl docker.io docker-registry debootstrap)

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "bootstrap: apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
else
  echo "bootstrap: not root on Debian; make sure these are installed: ${APT_PACKAGES[*]}" >&2
fi

if ! command -v uv >/dev/null 2>&1; then
  echo "bootstrap: pip install uv"
  python3 -m pip install --quiet "uv==0.13.9"
fi

uv sync --frozen --all-groups --quiet
echo "bootstrap: ready (.venv/bin/invoke --list, .venv/bin/nox -l)"
