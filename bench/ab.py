#!/usr/bin/env python3
"""Two (or more) builds of Vivarium side by side, for a before/after of one change.

Each build gets its own daemon (its own socket, state dir and cgroup subtree); every round
runs bare `/usr/bin/python3 -I -S -c pass`, optionally bubblewrap, and per build `viv run`
and client-library jobs (cold, warm from a cold-built pool, forked from a zygote ahead), each
round in a random order, so machine drift (a busy 2-core machine
especially) falls on all of them alike. Ratios are to bare: ratio of medians and median
of per-round ratios.

With `--shipped`, each build also gets a daemon on the shipped profiles (profiles/), and
rows for its `default` profile (a pool of ready sandboxes): `viv run` (`viv-default`) and
the library (`default`), and with `--throughput` its throughput (with the share of jobs
that took a ready sandbox); `--shipped-only` leaves out the other profiles' rows. `--viv PATH` times that viv for every build's viv rows (a musl
build, say) instead of the build's own; `--settle-ms` sleeps after each launch (as perf.py
does: a warm pool's refill then lands before the next launch, not on it).

With `--throughput SECONDS`, rounds of throughput follow (`--rounds`, each build's turn
rotating): bare interpreter starts and each build's warm jobs (`benchwarm`, a cold-built pool
of 4) and zygote jobs (its own profile `benchzyg0`, a sandbox forked per job, and `benchzyg`,
a pool of 4) at `--clients` concurrent clients
for SECONDS each, with the machine's CPU time per job (from /proc/stat: every process, the
daemon, kernel threads and the benchmark's own clients included).

Usage (as root; keep the "before" binaries somewhere first, e.g. by copying
target/release/{vivariumd,viv,libvivarium_zygote.so,vivarium-zygote-init} and target/release/examples/bench_client
to /tmp/before, same layout):
  python3 bench/ab.py --build before=/tmp/before --build after=target/release [--runs 200] [--bwrap]
      [--throughput 5 --rounds 3 --clients 2] [--shipped] [--viv PATH] [--settle-ms 100]
"""
import argparse
import os
import random
import shutil
import signal
import statistics
import tempfile
import time

from common import busy_seconds, pct, start_daemon, timed
from perf import (PY, FLAGS, ROOT, Library, bare_throughput, bench_profiles, bwrap_cmd,
                  library_throughput, library_throughput_ready, warm_profiles)


def measured(run):
    """Run `run` (returns jobs/s over its own span); jobs/s and the machine's busy CPU ms per job."""
    t0, c0 = time.monotonic(), busy_seconds()
    rate = run()
    span, cpu = time.monotonic() - t0, busy_seconds() - c0
    return rate, cpu * 1000 / max(1.0, rate * span)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", required=True, metavar="NAME=DIR",
                    help="a directory holding vivariumd, viv and examples/bench_client (repeatable)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--bwrap", action="store_true", help="also time bubblewrap")
    ap.add_argument("--throughput", type=float, metavar="SECONDS",
                    help="then throughput rounds of SECONDS per cell: bare and each build's zygote")
    ap.add_argument("--rounds", type=int, default=3, help="throughput rounds")
    ap.add_argument("--clients", type=int, default=2, help="concurrent clients in throughput")
    ap.add_argument("--offline", action="append", default=[], metavar="NAME",
                    help="that build's profiles get network = \"none\" (no loopback; builds "
                         "that know network modes), to compare the modes on one binary")
    ap.add_argument("--shipped", action="store_true",
                    help="also time each build's shipped default profile (viv run and the library)")
    ap.add_argument("--viv", help="the viv binary of every build's viv rows (default: the build's)")
    ap.add_argument("--shipped-only", action="store_true",
                    help="with --shipped: only bare and the shipped default's rows")
    ap.add_argument("--settle-ms", type=float, default=0, help="sleep after each launch")
    args = ap.parse_args()
    launchers = [("bare", lambda: timed([PY, *FLAGS, "-c", "pass"]))]
    if args.bwrap:
        launchers.append(("bwrap", lambda: timed(bwrap_cmd("pass"))))
    ready_share = {}
    daemons, tmps, libs, cells = [], [], [], [("bare", lambda: bare_throughput(args.clients, args.throughput))]
    try:
        for spec in args.build:
            name, target = spec.split("=", 1)
            target = os.path.abspath(target)
            tmp = tempfile.mkdtemp(prefix=f"vivarium-ab-{name}-")
            os.chmod(tmp, 0o755)
            tmps.append(tmp)
            prof, text = bench_profiles(tmp)
            if name in args.offline:
                text = text.replace("[network]\n", "[network]\nmode = \"none\"\n", 1)
                assert 'mode = "none"' in text
                with open(os.path.join(prof, "bench.toml"), "w") as f:
                    f.write(text)
            warm_profiles(prof, text, 4)
            d, sock = start_daemon(os.path.join(target, "vivariumd"), tmp, prof,
                                   f"vivarium-ab-{name}-{os.getpid()}", "max_concurrent_jobs = 16\n")
            daemons.append(d)
            script = os.path.join(tmp, "pass.py")
            with open(script, "w") as f:
                f.write("pass\n")
            viv = args.viv or os.path.join(target, "viv")
            if not args.shipped_only:
                launchers.append((f"viv {name}", lambda viv=viv, sock=sock, script=script: timed(
                    [viv, "--socket", sock, "run", "--profile", "bench", script])))
            # Per job, one after another: a cold start, a warm sandbox built cold ahead
            # (`benchwarm`, a pool of 4) and one forked from a zygote ahead (`benchzyg`).
            for profile, label in () if args.shipped_only else (
                    ("bench", "library"), ("benchwarm", "warm"), ("benchzyg", "zygote")):
                lib = Library(os.path.join(target, "examples", "bench_client"), sock, profile)
                libs.append(lib)
                launchers.append((f"{label} {name}", lib))
            exe = os.path.join(target, "examples", "bench_client")
            if args.shipped:
                # The shipped profiles, as a user's first command gets them.
                stmp = os.path.join(tmp, "shipped")
                os.makedirs(stmp)
                sd, ssock = start_daemon(os.path.join(target, "vivariumd"), stmp, os.path.join(ROOT, "profiles"),
                                         f"vivarium-ab-{name}-shipped-{os.getpid()}",
                                         "max_concurrent_jobs = 16\n")
                daemons.append(sd)
                launchers.append((f"viv-default {name}", lambda viv=viv, sock=ssock, script=script: timed(
                    [viv, "--socket", sock, "run", script])))
                lib = Library(exe, ssock, "default")
                libs.append(lib)
                launchers.append((f"default {name}", lib))

                def shipped_tput(exe=exe, sock=ssock, name=name):
                    rate, share = library_throughput_ready(exe, sock, "default", args.clients, args.throughput)
                    ready_share.setdefault(f"default {name}", []).append(share)
                    return rate
                cells.append((f"default {name}", shipped_tput))
            for profile in () if args.shipped_only else ("benchwarm", "benchzyg0", "benchzyg"):
                cells.append((f"{profile} {name}", lambda exe=exe, sock=sock, profile=profile:
                              library_throughput(exe, sock, profile, args.clients, args.throughput)))
        settle = args.settle_ms / 1000
        for _ in range(10):
            for _, f in launchers:
                f()
                time.sleep(settle)
        times = {name: [] for name, _ in launchers}
        # Each round in a fresh random order: a rotation kept every launcher behind the
        # same predecessor, so one build's launcher always ran while the other build's
        # warm pool refilled from the job just before it (seen as +1.8 ms on `viv after`
        # alone, gone when the two were timed on their own).
        order = random.Random(1)
        for _ in range(args.runs):
            for name, f in order.sample(launchers, len(launchers)):
                times[name].append(f())
                time.sleep(settle)
        tput = {name: [] for name, _ in cells}
        for i in range(args.rounds if args.throughput else 0):
            k = i % len(cells)
            for name, run in cells[k:] + cells[:k]:
                tput[name].append(measured(run))
    finally:
        for lib in libs:
            lib.close()
        for d in daemons:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=10)
        for tmp in tmps:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.throughput:
        print(f"Throughput: {args.rounds} rounds of {args.throughput:g} s per cell, {args.clients} "
              "concurrent clients; medians over the rounds.\n")
        print("| jobs of | jobs/s | ratio to bare | machine CPU ms per job |")
        print("|---|---:|---:|---:|")
        bare_rate = statistics.median(r for r, _ in tput["bare"])
        for name, _ in cells:
            rate = statistics.median(r for r, _ in tput[name])
            cpu = statistics.median(c for _, c in tput[name])
            share = ready_share.get(name)
            share = f" (from the pool: {statistics.median(share):.0%})" if share and None not in share else ""
            print(f"| {name}{share} | {rate:.1f} | {rate / bare_rate:.2f}x | {cpu:.2f} |")
        print()
    if not args.runs:
        return
    bare = times["bare"]
    print(f"{args.runs} rounds, launchers interleaved in a random order per round.\n")
    print("| launcher | median ms | p90 ms | p99 ms | ratio of medians | median paired ratio | p99 / bare median |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, _ in launchers:
        xs = times[name]
        paired = statistics.median(y / x for x, y in zip(bare, xs))
        print(f"| {name} | {statistics.median(xs):.2f} | {pct(xs, 90):.2f} | {pct(xs, 99):.2f} | "
              f"{statistics.median(xs) / statistics.median(bare):.2f}x | {paired:.2f}x | "
              f"{pct(xs, 99) / statistics.median(bare):.2f}x |")


if __name__ == "__main__":
    main()
