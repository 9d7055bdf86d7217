#!/bin/sh
# The MCP Inspector's CLI mode over Streamable HTTP: one tools/call of run_python.
# Usage: MCP_TOKEN=... inspector_cli.sh URL   (prints the result JSON on stdout)
#
# @modelcontextprotocol/inspector-cli is the headless part of @modelcontextprotocol/inspector
# (whose `--cli` runs it); the full package also brings the web UI and wants node >= 22.
# Its build/index.js checks for its package.json with a path relative to the working
# directory but imports it relative to itself: run it from its build directory.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/node_modules/@modelcontextprotocol/inspector-cli/build"
exec node cli.js --cli "$1" \
  --transport http \
  --header "Authorization: Bearer $MCP_TOKEN" \
  --method tools/call --tool-name run_python --tool-arg 'code=print(6*7)'
