#!/usr/bin/env bash
# Install the pinned uv that vivariumd uses for job packages, from PyPI, into a venv of
# Debian's interpreter. Prints the uv binary's path (for the daemon config key `uv`).
# Usage: ./scripts/install-uv.sh [DIR]   (default: /opt/vivarium/uv as root,
#        else target/uv-venv). The directory must be readable by everyone (the install
#        sandbox binds it), so not under a 0700 home.
set -euo pipefail
cd "$(dirname "$0")/.."
UV_VERSION=0.13.9   # bump deliberately: the cache key includes uv's version
if [ "$(id -u)" = 0 ]; then default=/opt/vivarium/uv; else default=target/uv-venv; fi
dir=${1:-$default}
if [ -x "$dir/bin/uv" ] && [ "$("$dir/bin/uv" --version | cut -d' ' -f2)" = "$UV_VERSION" ]; then
  echo "$(cd "$dir" && pwd)/bin/uv"
  exit 0
fi
/usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || {
  apt-get update -qq && apt-get install -y -qq python3-venv >&2; }
mkdir -p "$(dirname "$dir")"
/usr/bin/python3 -m venv "$dir"
"$dir/bin/pip" install -q --disable-pip-version-check "uv==$UV_VERSION" >&2
chmod -R a+rX "$dir"
echo "$(cd "$dir" && pwd)/bin/uv"
