#!/usr/bin/python3
"""tools/call round trip of `run_python` for print(1), beside a bare interpreter start.

Run by hand (as root, a daemon running, an otherwise idle machine):

    cargo build --release
    sudo ./target/release/vivariumd --profiles profiles &
    /usr/bin/python3 mcp-frontend/bench/roundtrip.py --runs 200

It starts `vivarium-mcp` once, does the MCP handshake, then alternates a raw JSON-RPC
`tools/call` (request written -> response read) with a bare `/usr/bin/python3 -I -S -c pass`
(spawn -> exit), and prints median, p90 and p99 of each. Plain JSON-RPC over the pipes, no
SDK: what is measured is the server, the daemon and the sandbox, not a client library.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

BARE = ["/usr/bin/python3", "-I", "-S", "-c", "pass"]


def pct(samples: list[float], p: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.path.join(repo, "target/release/vivarium-mcp"))
    ap.add_argument("--socket", default=None, help="daemon socket (default: the server's own default)")
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--viv", default=os.path.join(repo, "target/release/viv"),
                    help="also time `viv run` of the same script, to separate the MCP layer (skipped if missing)")
    args = ap.parse_args()
    viv = None
    if os.path.exists(args.viv):
        script = os.path.join(tempfile.mkdtemp(prefix="roundtrip-"), "print1.py")
        with open(script, "w") as f:
            f.write("print(1)\n")
        viv = [args.viv] + (["--socket", args.socket] if args.socket else []) + ["run", script]

    cmd = [args.server, "--max-calls-per-minute", "0"]
    if args.socket:
        cmd += ["--socket", args.socket]
    server = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    next_id = 0

    def request(method: str, params: dict) -> dict:
        nonlocal next_id
        next_id += 1
        server.stdin.write((json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}) + "\n").encode())
        server.stdin.flush()
        while True:
            msg = json.loads(server.stdout.readline())
            if msg.get("id") == next_id:
                return msg

    init = request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "roundtrip-bench", "version": "0"}})
    assert "result" in init, init
    server.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    server.stdin.flush()

    call = {"name": "run_python", "arguments": {"code": "print(1)"}}

    def one_call() -> float:
        t0 = time.perf_counter()
        r = request("tools/call", call)
        dt = time.perf_counter() - t0
        sc = r.get("result", {}).get("structuredContent")
        if not sc or sc["stdout"]["text"] != "1\n":
            sys.exit(f"unexpected answer: {r}")
        return dt

    def one_bare() -> float:
        t0 = time.perf_counter()
        subprocess.run(BARE, check=True)
        return time.perf_counter() - t0

    def one_viv() -> float:
        t0 = time.perf_counter()
        subprocess.run(viv, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        return time.perf_counter() - t0

    for _ in range(args.warmup):
        one_call()
        one_bare()
        if viv:
            one_viv()
    calls, bares, vivs = [], [], []
    for _ in range(args.runs):
        calls.append(one_call())
        bares.append(one_bare())
        if viv:
            vivs.append(one_viv())
    server.stdin.close()
    server.wait(timeout=5)

    def row(name: str, xs: list[float]) -> str:
        return (f"{name:<34} median {statistics.median(xs) * 1e3:7.2f} ms   "
                f"p90 {pct(xs, 90) * 1e3:7.2f} ms   p99 {pct(xs, 99) * 1e3:7.2f} ms")

    print(f"{args.runs} runs each, interleaved, after {args.warmup} warm-up pairs")
    print(row("tools/call run_python print(1)", calls))
    if vivs:
        print(row("viv run print(1) (no MCP)", vivs))
    print(row(" ".join(BARE), bares))
    print(f"ratio of medians: {statistics.median(calls) / statistics.median(bares):.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
