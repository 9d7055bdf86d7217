#!/usr/bin/env python3
"""What MCP over HTTP costs a `run_python` call: the `tools/call` round trip of
`run_python` with `pass`, side by side in one run, over

  stdio        a persistent `vivarium-mcp` on stdin/stdout (JSON-RPC lines), initialized
               once;
  http-noauth  a persistent keep-alive HTTP/1.1 connection to `vivarium-mcp --http` with
               `insecure_no_auth = true` on loopback (stateless: no initialize, no session);
  http-jwt     the same to a second `vivarium-mcp --http` that checks a real JWT (ES256,
               `typ: at+jwt`) on every request, against a tiny issuer in this script
               (RFC 8414 metadata and a JWKS on loopback);
  bare job     the job alone through the client library (bench_client, latency mode),
               for reference: what every row above pays for the sandbox itself.

Each round runs every variant once, in a random order, so that machine drift falls on
all alike; the shipped default profile (ready sandboxes) serves every job, and a pause
after each call lets the pool refill off the clock. Reports median, p90 and p99 in ms,
and each transport's median over the bare job.

Needs root (the daemon builds real sandboxes), a release build and PyJWT with
cryptography (mcp-frontend/tests/clients/requirements.txt; this script re-runs itself
with target/mcp-venv/bin/python when they are not importable):

    cargo build --release --workspace --lib --bins --examples
    python3 bench/mcp_http.py [--runs 200]
"""
import argparse
import base64
import http.client
import http.server
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf  # noqa: E402
from common import pct  # noqa: E402

try:
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec
except ImportError:
    venv = os.path.join(perf.ROOT, "target", "mcp-venv", "bin", "python")
    if os.path.exists(venv) and os.path.realpath(sys.executable) != os.path.realpath(venv):
        os.execv(venv, [venv, *sys.argv])
    sys.exit("mcp_http.py: needs PyJWT and cryptography (pip install -r "
             "mcp-frontend/tests/clients/requirements.txt into target/mcp-venv)")

PROTOCOL = "2025-06-18"
CALL = {"name": "run_python", "arguments": {"code": "pass"}}


def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Issuer:
    """An EC P-256 key and a loopback HTTP server with its metadata and JWKS."""

    def __init__(self):
        self.key = ec.generate_private_key(ec.SECP256R1())
        nums = self.key.public_key().public_numbers()
        jwk = {"kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": "k1",
               "x": b64(nums.x.to_bytes(32, "big")), "y": b64(nums.y.to_bytes(32, "big"))}
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.docs = {
            "/.well-known/oauth-authorization-server": {
                "issuer": self.url, "jwks_uri": f"{self.url}/jwks",
                "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token",
                "response_types_supported": ["code"],
                "code_challenge_methods_supported": ["S256"],
            },
            "/jwks": {"keys": [jwk]},
        }
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(issuer):
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                doc = issuer.docs.get(self.path)
                body = json.dumps(doc).encode() if doc else b"{}"
                self.send_response(200 if doc else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        return Handler

    def token(self, resource, sub):
        t = int(time.time())
        claims = {"iss": self.url, "aud": resource, "sub": sub, "client_id": "bench",
                  "scope": "vivarium:run", "iat": t, "nbf": t - 5, "exp": t + 3600,
                  "jti": f"{sub}-{t}"}
        return jwt.encode(claims, self.key, algorithm="ES256",
                          headers={"kid": "k1", "typ": "at+jwt"})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stdio:
    """A persistent `vivarium-mcp` on stdio, initialized once."""

    def __init__(self, exe, sock, tmp):
        self.p = subprocess.Popen(
            [exe, "--socket", sock, "--max-calls-per-minute", "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            stderr=open(os.path.join(tmp, "stdio.log"), "w"))
        self.id = 0
        self.request("initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "0"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, msg):
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()

    def request(self, method, params):
        self.id += 1
        self.send({"jsonrpc": "2.0", "id": self.id, "method": method, "params": params})
        while True:
            line = self.p.stdout.readline()
            if not line:
                sys.exit("vivarium-mcp (stdio) ended; see stdio.log")
            msg = json.loads(line)
            if msg.get("id") == self.id and "method" not in msg:
                return msg

    def __call__(self):
        t = time.perf_counter()
        answer = self.request("tools/call", CALL)
        dt = (time.perf_counter() - t) * 1000
        check(answer, "stdio")
        return dt

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


class Http:
    """A `vivarium-mcp --http` and one keep-alive connection to it."""

    def __init__(self, exe, sock, tmp, name, config, token=None):
        self.port = free_port()
        self.resource = f"http://127.0.0.1:{self.port}/mcp"
        cfg = os.path.join(tmp, f"{name}.toml")
        with open(cfg, "w") as f:
            f.write(f'listen = "127.0.0.1:{self.port}"\n'
                    + config.format(resource=self.resource)
                    + '\n[limits]\ncalls_per_minute = 0\n'
                    + f'\n[audit]\nfile = "{tmp}/{name}-audit.jsonl"\n')
        log = os.path.join(tmp, f"{name}.log")
        self.p = subprocess.Popen(
            [exe, "--socket", sock, "--http-config", cfg, "--max-calls-per-minute", "0"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(log, "w"),
            env={**os.environ, "VIVARIUM_LOG": "warn"})
        for _ in range(400):
            if "listening on" in open(log).read():
                break
            if self.p.poll() is not None:
                break
            time.sleep(0.05)
        else:
            self.p.kill()
        if self.p.poll() is not None:
            sys.exit(f"vivarium-mcp --http ({name}) did not start:\n{open(log).read()[-3000:]}")
        self.name = name
        self.token = token
        self.conn = http.client.HTTPConnection("127.0.0.1", self.port)
        self.id = 0

    def __call__(self):
        self.id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self.id, "method": "tools/call",
                           "params": CALL})
        headers = {"content-type": "application/json",
                   "accept": "application/json, text/event-stream",
                   "mcp-protocol-version": PROTOCOL}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        t = time.perf_counter()
        self.conn.request("POST", "/mcp", body, headers)
        r = self.conn.getresponse()
        data = r.read()
        dt = (time.perf_counter() - t) * 1000
        if r.status != 200:
            sys.exit(f"{self.name}: HTTP {r.status}: {data[:500]!r}")
        check(json.loads(data), self.name)
        return dt

    def close(self):
        self.conn.close()
        self.p.terminate()
        self.p.wait(timeout=15)


def check(answer, what):
    result = answer.get("result")
    if not result or result.get("isError"):
        sys.exit(f"{what}: not a successful call: {json.dumps(answer)[:800]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(perf.ROOT, "target", "release"))
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--pause", type=float, default=0.05,
                    help="seconds between calls (the pool refills off the clock)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("mcp_http.py: run as root (the daemon builds real sandboxes)")
    mcp = os.path.join(args.target, "vivarium-mcp")
    client = os.path.join(args.target, "examples", "bench_client")
    for exe in (mcp, client, os.path.join(args.target, "vivariumd")):
        if not os.path.exists(exe):
            sys.exit(f"{exe} is missing: cargo build --release --workspace --lib --bins --examples")
    issuer = Issuer()
    with tempfile.TemporaryDirectory() as tmp:
        d, sock = perf.start_daemon(os.path.join(args.target, "vivariumd"), tmp,
                                    os.path.join(perf.ROOT, "profiles"),
                                    f"vivarium-bench-mcp-http-{os.getpid()}")
        variants = {}
        try:
            variants["bare job"] = perf.Library(client, sock, "default")
            variants["stdio"] = Stdio(mcp, sock, tmp)
            variants["http-noauth"] = Http(mcp, sock, tmp, "http-noauth", "insecure_no_auth = true\n")
            jwt_cfg = ('resource = "{resource}"\n[auth]\n'
                       f'authorization_servers = ["{issuer.url}"]\nalgorithms = ["ES256"]\n')
            h = Http(mcp, sock, tmp, "http-jwt", jwt_cfg)
            h.token = issuer.token(h.resource, "bench")
            variants["http-jwt"] = h
            times = {k: [] for k in variants}
            for k, v in variants.items():  # warm-up: first connections, first key fetch
                for _ in range(5):
                    v()
                    time.sleep(args.pause)
            for _ in range(args.runs):
                order = list(variants)
                random.shuffle(order)
                for k in order:
                    times[k].append(variants[k]())
                    time.sleep(args.pause)
        finally:
            for v in variants.values():
                v.close()
            d.terminate()
            d.wait(timeout=30)
    bare = statistics.median(times["bare job"])
    print(f"tools/call run_python `pass`, {args.runs} rounds (random order each), ms:")
    print(f"  {'':12} {'median':>8} {'p90':>8} {'p99':>8}   over the bare job (median)")
    for k, xs in times.items():
        over = "" if k == "bare job" else f"{statistics.median(xs) - bare:+8.2f}"
        print(f"  {k:12} {statistics.median(xs):8.2f} {pct(xs, 90):8.2f} {pct(xs, 99):8.2f}   {over}")
    jwt_cost = statistics.median(times["http-jwt"]) - statistics.median(times["http-noauth"])
    print(f"  the JWT check (http-jwt - http-noauth, medians): {jwt_cost:+.2f} ms")


if __name__ == "__main__":
    main()
