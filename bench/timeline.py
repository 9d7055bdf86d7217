#!/usr/bin/env python3
"""Where a cold job's time goes: median offsets of marker syscalls since the client's connect.

Starts a daemon of the given build with the `bench` profile, runs N cold jobs from the client
library (bench_client, latency mode, 10 ms apart) under `perf trace -a` on a few marker
syscalls only (tracing every syscall slows the traced ones several-fold), and prints, for
each (process role, syscall, n-th occurrence) seen in at least 90% of the jobs, its median
offset in ms from the client's `connect`. Roles: client (bench_client), server (the
daemon's tokio workers), viv (the spawner, each job's init and the payload before its
execve: one comm), python (the interpreter after execve). The last line is the client's own
untraced clock for the same jobs, which the tracing slows by a few percent.

Usage (as root): python3 bench/timeline.py [--target target/release] [--jobs 300]
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import tempfile
import time
from collections import defaultdict

from common import start_daemon, traced_jobs
from perf import ROOT, Library, bench_profiles

MARKERS = ("connect,sendmsg,recvmsg,clone3,setgroups,mount,sethostname,clone,landlock_create_ruleset,seccomp,"
           "execve,exit_group,kill,wait4,pread64,sendto,recvfrom")


def role(comm):
    if comm == "bench_client":
        return "client"
    if comm == "python3":
        return "python"
    if comm.startswith("tokio"):
        return "server"
    return "viv"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--jobs", type=int, default=300)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="vivarium-timeline-")
    os.chmod(tmp, 0o755)
    trace = os.path.join(tmp, "trace")
    prof, _ = bench_profiles(tmp)
    daemon, sock = start_daemon(os.path.join(args.target, "vivariumd"), tmp, prof,
                                f"vivarium-timeline-{os.getpid()}")
    lib = None
    try:
        lib = Library(os.path.join(args.target, "examples", "bench_client"), sock, "bench")
        for _ in range(10):
            lib()
        latency = traced_jobs(lib, trace, MARKERS, args.jobs, 0.01)
        jobs = []
        with open(trace) as f:
            for line in f:
                m = re.match(r"^\s*([\d.]+) \((.*?)\): (\S+?)/(\d+) (\w+)\(", line)
                if not m:
                    continue
                t, comm, call = float(m[1]), m[3], m[5]
                if call == "connect" and comm == "bench_client":
                    jobs.append([])
                    start = t
                if jobs:
                    jobs[-1].append((t - start, role(comm), call))
    finally:
        if lib:
            lib.close()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    offsets = defaultdict(list)
    for events in jobs:
        seen = defaultdict(int)
        for t, who, call in sorted(events):
            seen[(who, call)] += 1
            offsets[f"{who} {call} #{seen[(who, call)]}"].append(t)
    rows = sorted((statistics.median(v), k) for k, v in offsets.items() if len(v) >= 0.9 * len(jobs))
    print(f"{len(jobs)} cold jobs, ms since the client's connect (median):")
    for t, k in rows:
        print(f"{t:8.3f}  {k}")
    print(f"{statistics.median(latency):8.3f}  = submit-to-outcome on the client's own clock")


if __name__ == "__main__":
    main()
