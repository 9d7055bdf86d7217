#!/usr/bin/env python3
"""Two (or more) builds of Vivarium side by side, for a before/after of one change.

Each build gets its own daemon (its own socket, state dir and cgroup subtree); every round
runs bare `/usr/bin/python3 -I -S -c pass`, optionally bubblewrap, and per build `viv run`
and a client-library job, in a rotating order, so machine drift (a busy 2-core machine
especially) falls on all of them alike. Ratios are to bare: ratio of medians and median
of per-round ratios.

Usage (as root; keep the "before" binaries somewhere first, e.g. by copying
target/release/{vivariumd,viv} and target/release/examples/bench_client to /tmp/before,
same layout):
  python3 bench/ab.py --build before=/tmp/before --build after=target/release [--runs 200] [--bwrap]
"""
import argparse
import os
import shutil
import signal
import statistics
import tempfile

from common import pct, start_daemon, timed
from perf import PY, FLAGS, Library, bench_profiles, bwrap_cmd


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", required=True, metavar="NAME=DIR",
                    help="a directory holding vivariumd, viv and examples/bench_client (repeatable)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--bwrap", action="store_true", help="also time bubblewrap")
    args = ap.parse_args()
    launchers = [("bare", lambda: timed([PY, *FLAGS, "-c", "pass"]))]
    if args.bwrap:
        launchers.append(("bwrap", lambda: timed(bwrap_cmd("pass"))))
    daemons, tmps, libs = [], [], []
    try:
        for spec in args.build:
            name, target = spec.split("=", 1)
            target = os.path.abspath(target)
            tmp = tempfile.mkdtemp(prefix=f"vivarium-ab-{name}-")
            os.chmod(tmp, 0o755)
            tmps.append(tmp)
            prof, _ = bench_profiles(tmp)
            d, sock = start_daemon(os.path.join(target, "vivariumd"), tmp, prof,
                                   f"vivarium-ab-{name}-{os.getpid()}", "max_concurrent_jobs = 16\n")
            daemons.append(d)
            script = os.path.join(tmp, "pass.py")
            with open(script, "w") as f:
                f.write("pass\n")
            viv = os.path.join(target, "viv")
            launchers.append((f"viv {name}", lambda viv=viv, sock=sock, script=script: timed(
                [viv, "--socket", sock, "run", "--profile", "bench", script])))
            lib = Library(os.path.join(target, "examples", "bench_client"), sock, "bench")
            libs.append(lib)
            launchers.append((f"library {name}", lib))
        for _ in range(10):
            for _, f in launchers:
                f()
        times = {name: [] for name, _ in launchers}
        for i in range(args.runs):
            k = i % len(launchers)
            for name, f in launchers[k:] + launchers[:k]:
                times[name].append(f())
    finally:
        for lib in libs:
            lib.close()
        for d in daemons:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=10)
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)
    bare = times["bare"]
    print(f"{args.runs} rounds, launchers interleaved in rotating order.\n")
    print("| launcher | median ms | p90 ms | ratio of medians | median paired ratio |")
    print("|---|---:|---:|---:|---:|")
    for name, _ in launchers:
        xs = times[name]
        paired = statistics.median(y / x for x, y in zip(bare, xs))
        print(f"| {name} | {statistics.median(xs):.2f} | {pct(xs, 90):.2f} | "
              f"{statistics.median(xs) / statistics.median(bare):.2f}x | {paired:.2f}x |")


if __name__ == "__main__":
    main()
