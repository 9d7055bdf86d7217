#!/usr/bin/env bash
# Build, start a daemon on the default profile, run one script in the sandbox, stop.
# Usage (as root): ./scripts/try.sh [SCRIPT.py [viv run options...]]
#   (default: examples/hello.py), e.g. ./scripts/try.sh examples/numpy_demo.py (PEP 723), or add --with PKG
# The pinned uv is installed from PyPI (scripts/install-uv.sh) so that jobs may ask for
# packages; environments are cached in /var/cache/vivarium/packages.
set -euo pipefail
cd "$(dirname "$0")/.."
script=${1:-examples/hello.py}
cargo build --release --quiet --bin vivariumd --bin viv
uv=$(./scripts/install-uv.sh)
tmp=$(mktemp -d /tmp/vivarium-try.XXXXXX)
sock=$tmp/vivariumd.sock
printf 'uv = "%s"\npackage_cache_dir = "/var/cache/vivarium/packages"\n' "$uv" >"$tmp/vivariumd.toml"
./target/release/vivariumd --config "$tmp/vivariumd.toml" --profiles "$PWD/profiles" --socket "$sock" 2>"$tmp/daemon.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { cat "$tmp/daemon.log" >&2; exit 1; }
./target/release/viv --socket "$sock" run -v "${@:2}" "$script"
