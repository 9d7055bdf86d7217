#!/usr/bin/env bash
# Build, start a daemon on the default profile, run one script in the sandbox, stop.
# Usage (as root): ./scripts/try.sh [SCRIPT.py]   (default: examples/hello.py)
set -euo pipefail
cd "$(dirname "$0")/.."
script=${1:-examples/hello.py}
cargo build --release --quiet --bin vivariumd --bin viv
tmp=$(mktemp -d /tmp/vivarium-try.XXXXXX)
sock=$tmp/vivariumd.sock
./target/release/vivariumd --profiles profiles --socket "$sock" 2>"$tmp/daemon.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { cat "$tmp/daemon.log" >&2; exit 1; }
./target/release/viv --socket "$sock" run -v "$script"
