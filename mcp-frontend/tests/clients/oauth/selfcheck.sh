#!/usr/bin/env bash
# Harness self-check, no Vivarium involved: the test AS (as.mjs), the MCP SDK stub resource
# server (stub_rs.py) and the OAuth driver (../oauth_client.py) end to end. Prints the
# driver's JSON line; exit status is the driver's. Needs `npm ci` here and the venv at
# target/mcp-venv (see README.md). Extra arguments go to the driver (e.g. --scope ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../../.." && pwd)
py=${PYTHON:-$root/target/mcp-venv/bin/python}
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

# Wait for a "READY <url>" line on a child's stdout file; print the URL.
ready() {
  for _ in $(seq 100); do
    line=$(grep -m1 '^READY ' "$1" 2>/dev/null || true)
    [ -n "$line" ] && { echo "${line#READY }"; return; }
    sleep 0.1
  done
  echo "selfcheck: no READY line in $1" >&2; cat "${1%.out}.err" >&2; exit 1
}

node "$here/as.mjs" --port 0 --no-stdin-watch >"$tmp/as.out" 2>"$tmp/as.err" &
pids+=($!)
issuer=$(ready "$tmp/as.out")
"$py" "$here/stub_rs.py" --issuer "$issuer" --port 0 --no-stdin-watch </dev/null >"$tmp/rs.out" 2>"$tmp/rs.err" &
pids+=($!)
mcp=$(ready "$tmp/rs.out")
rc=0
"$py" "$here/../oauth_client.py" --url "$mcp" "$@" || rc=$?
if [ $rc != 0 ]; then
  echo "--- as.mjs stderr" >&2; grep -v WARNING "$tmp/as.err" >&2 || true
  echo "--- stub_rs.py stderr" >&2; cat "$tmp/rs.err" >&2
fi
exit $rc
