#!/usr/bin/env python3
"""An idle session's private memory (USS of its init + its interpreter after one cell
`x = 1`, median of 4 held sessions), alone: perf.py's `idle_session_uss` against a daemon
with the shipped profiles, without the rest of perf.py's run. Memory, not time: the
machine need not be idle.

    cargo build --release --workspace --lib --bins --examples
    python3 bench/session_uss.py [--profile default] [--rounds 3]
"""
import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--target", default=os.path.join(perf.ROOT, "target", "release"))
ap.add_argument("--profile", default="default")
ap.add_argument("--rounds", type=int, default=3)
args = ap.parse_args()
if os.geteuid() != 0:
    sys.exit("session_uss.py: run as root (the daemon builds real sandboxes)")
with tempfile.TemporaryDirectory() as tmp:
    d, sock = perf.start_daemon(os.path.join(args.target, "vivariumd"), tmp,
                                os.path.join(perf.ROOT, "profiles"),
                                f"vivarium-session-uss-{os.getpid()}", "max_concurrent_jobs = 16\n")
    try:
        time.sleep(1)
        spawner = perf.spawner_pid(d.pid)
        client = os.path.join(args.target, "examples", "bench_client")
        for _ in range(args.rounds):
            kib = perf.idle_session_uss(client, sock, spawner, args.profile, 4)
            print(f"idle session ({args.profile}): {kib / 1024:.1f} MiB" if kib else "no sessions found")
    finally:
        d.terminate()
        d.wait(timeout=30)
