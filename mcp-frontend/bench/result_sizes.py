"""How big `run_python` results are on the wire: for a failing run with 1 MB on both
streams and for a 10 MB print, the characters of the text content (as the model reads it,
and JSON-escaped as it travels) and of structuredContent (serialized). Stdlib only, raw
JSON-RPC over the server's stdio, against a running daemon:

    python3 mcp-frontend/bench/result_sizes.py --server target/debug/vivarium-mcp \
        --socket /run/vivarium/vivariumd.sock
"""

from __future__ import annotations

import argparse
import json
import subprocess

CASES = {
    # 10,000 lines of 99 characters on each stream (1,000,000 bytes each), then an exception.
    "failing run, 1 MB on both streams": (
        "import sys\n"
        "line = 'x' * 99 + '\\n'\n"
        "for _ in range(10_000):\n"
        "    sys.stdout.write(line)\n"
        "    sys.stderr.write(line)\n"
        "sys.stdout.flush(); sys.stderr.flush()\n"
        "1/0\n"
    ),
    # The same without a traceback: the script exits 1 after its output.
    "failing run, 1 MB both, exit 1": (
        "import sys\n"
        "line = 'x' * 99 + '\\n'\n"
        "for _ in range(10_000):\n"
        "    sys.stdout.write(line)\n"
        "    sys.stderr.write(line)\n"
        "sys.exit(1)\n"
    ),
    "10 MB print": "print('x' * 10_000_000)",
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--server", required=True)
    p.add_argument("--socket", required=True)
    p.add_argument("server_args", nargs="*", help="more flags for the server")
    args = p.parse_args()
    proc = subprocess.Popen(
        [args.server, "--socket", args.socket, *args.server_args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )

    def send(msg: dict) -> None:
        proc.stdin.write((json.dumps(msg) + "\n").encode())
        proc.stdin.flush()

    def answer(id_: int) -> dict:
        while True:
            msg = json.loads(proc.stdout.readline())
            if msg.get("id") == id_:
                return msg

    send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "result_sizes", "version": "0"}}})
    answer(0)
    send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    print(f"{'case':36} {'isError':>7} {'text blocks':>11} {'text chars':>10} "
          f"{'text on wire':>12} {'structured on wire':>18} {'whole line':>10}")
    for i, (name, code) in enumerate(CASES.items(), start=1):
        send({"jsonrpc": "2.0", "id": i, "method": "tools/call",
              "params": {"name": "run_python", "arguments": {"code": code}}})
        raw = None
        while True:
            line = proc.stdout.readline()
            msg = json.loads(line)
            if msg.get("id") == i:
                raw = line
                break
        result = msg["result"]
        texts = [c["text"] for c in result["content"] if c.get("type") == "text"]
        text_chars = sum(len(t) for t in texts)
        text_wire = sum(len(json.dumps(t, ensure_ascii=False)) for t in texts)
        sc = result.get("structuredContent")
        sc_wire = len(json.dumps(sc, ensure_ascii=False, separators=(",", ":"))) if sc is not None else 0
        print(f"{name:36} {str(result.get('isError')):>7} {len(texts):>11} {text_chars:>10} "
              f"{text_wire:>12} {sc_wire:>18} {len(raw.rstrip()):>10}")
    proc.stdin.close()
    proc.wait(timeout=10)


if __name__ == "__main__":
    main()
