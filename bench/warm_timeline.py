#!/usr/bin/env python3
"""Where a warm job's time goes: median offsets of marker syscalls since the client's connect.

The warm counterpart of timeline.py. Starts a daemon of the given build on the shipped
profiles (profiles/, whose `default` keeps a pool of ready sandboxes), runs N `pass` jobs
of the client library (bench_client, latency mode, `--gap-ms` apart so that each job's
refill is over before the next) under `perf trace -a` on a few marker syscalls, and prints,
for each (role, syscall, n-th occurrence) seen in at least 90% of the jobs, its median
offset in ms from the client's `connect`, and for the syscalls that block (the waiting
interpreter's `read` of its stdin, the pumps' and the spawner's waits) when they returned.

Roles, told apart by pid: client (bench_client), server (the daemon's tokio threads),
spawner, init (the job's init: a `viv` process that does not mount in the job's window),
python (the job's interpreter: the one that exits in the window), and build / build-py (a
refill's init and interpreter, built while the job runs). Tracing slows the traced calls,
so read the deltas, not the sums; the last line is the client's own clock.

Usage (as root): /usr/bin/python3 bench/warm_timeline.py [--target target/release] [--jobs 200]
    [--profile default] [--gap-ms 100]
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
from perf import ROOT, Library, spawner_pid

MARKERS = ("connect,sendmsg,recvmsg,sendto,recvfrom,read,write,openat,clone3,clone,mount,execve,"
           "exit_group,kill,wait4,pidfd_send_signal,pread64,setpriority,epoll_wait,poll,ppoll")
# Calls whose return (not entry) is the event: they block until something happens.
BLOCKING = {"read", "recvmsg", "recvfrom", "epoll_wait", "poll", "ppoll", "wait4"}
# `T (D ms): comm/pid call(...)`; a call that blocked is printed at its entry without a
# duration, then as `T (D ms): comm/pid  ... [continued]: call())` (T is still its entry).
LINE = re.compile(r"^\s*([\d.]+) \(\s*([\d.]*)(?: ms)?\s*\): (\S+?)/(\d+) +(\.\.\. \[continued\]: )?(\w+)\(")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--gap-ms", type=float, default=100)
    ap.add_argument("--keep-trace", help="copy the raw trace here")
    ap.add_argument("--from-trace", help="only read a trace kept earlier (--keep-trace)")
    args = ap.parse_args()
    if args.from_trace:
        report(parse(args.from_trace), None, None, [], [], args.profile)
        return
    tmp = tempfile.mkdtemp(prefix="vivarium-warm-timeline-")
    os.chmod(tmp, 0o755)
    trace = os.path.join(tmp, "trace")
    daemon, sock = start_daemon(os.path.join(args.target, "vivariumd"), tmp, os.path.join(ROOT, "profiles"),
                                f"vivarium-warm-timeline-{os.getpid()}", "max_concurrent_jobs = 16\n")
    lib = None
    try:
        time.sleep(1)
        spawner = spawner_pid(daemon.pid)
        lib = Library(os.path.join(args.target, "examples", "bench_client"), sock, args.profile,
                      code="pass", expect="")
        for _ in range(10):
            lib()
            time.sleep(args.gap_ms / 1000)
        latency = traced_jobs(lib, trace, MARKERS, args.jobs, args.gap_ms / 1000)
        kinds = lib.kinds[10:]
        if args.keep_trace:
            shutil.copy(trace, args.keep_trace)
        events = parse(trace)
        spawner_, daemon_pid = spawner, daemon.pid
    finally:
        if lib:
            lib.close()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)
    report(events, spawner_, daemon_pid, kinds, latency, args.profile)


def parse(trace):
    """The trace's events, (time, comm, pid, call), in time order."""
    events = []
    with open(trace, errors="replace") as f:
        for line in f:
            m = LINE.match(line)
            if not m:
                continue
            t, comm, pid, call = float(m[1]), m[3], int(m[4]), m[6]
            if not m[2]:
                if call in BLOCKING:
                    continue  # its `[continued]` line says when it returned
            elif call in BLOCKING:
                t += float(m[2])
            events.append((t, comm, pid, call))
    events.sort()
    return events


def report(events, spawner, daemon_pid, kinds, latency, profile):
    if spawner is None:
        # A kept trace: the spawner is the process that polls most.
        polls = defaultdict(int)
        for _, comm, pid, call in events:
            if call == "poll" and comm == "vivariumd":
                polls[pid] += 1
        spawner = max(polls, key=polls.get)
    # One window per job: from the client's connect to its next connect (or the end).
    starts = [i for i, (t, comm, _, call) in enumerate(events) if comm == "bench_client" and call == "connect"]
    jobs = []
    for k, i in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(events)
        window = events[i:end]
        t0 = window[0][0]
        # The job's interpreter: a python3 that exits within 50 ms of the connect.
        exited = {pid for t, comm, pid, call in window if comm == "python3" and call == "exit_group" and t - t0 < 50}
        mounting = {pid for t, comm, pid, call in window if call == "mount"}
        spawned_py = {pid for t, comm, pid, call in window if comm == "python3" and call == "execve"}
        rows = []
        for t, comm, pid, call in window:
            if t - t0 > 50:
                break
            if comm == "bench_client":
                who = "client"
            elif comm.startswith("tokio") or pid == daemon_pid:
                who = "server"
            elif pid == spawner:
                who = "spawner"
            elif comm == "python3":
                who = "python" if pid in exited and pid not in spawned_py else "build-py"
            elif comm == "viv" or comm.startswith("vivarium") or comm.startswith("memfd:"):
                who = "build" if pid in mounting else "init"
            else:
                continue
            rows.append((t - t0, who, pid, call))
        jobs.append(rows)
    offsets = defaultdict(list)
    for rows in jobs:
        seen = defaultdict(int)
        for t, who, _, call in rows:
            seen[(who, call)] += 1
            offsets[f"{who} {call} #{seen[(who, call)]}"].append(t)
    rows = sorted((statistics.median(v), k, len(v)) for k, v in offsets.items() if len(v) >= 0.9 * len(jobs))
    ready = f"{sum(1 for k in kinds if k == 'ready')} from a ready sandbox" if kinds else "a kept trace"
    print(f"{len(jobs)} jobs on profile {profile} ({ready}), "
          f"ms since the client's connect (median; blocking calls at their return):")
    for t, k, n in rows:
        if t <= 50:
            print(f"{t:8.3f}  {k}")
    # A refill's build (its init mounting) before the client had its outcome (the bench
    # client writes its time then): a build that competed with the job.
    def competed(rows_):
        out = next((t for t, w, _, c in rows_ if w == "client" and c == "write"), None)
        return out is not None and any(w == "build" and t < out for t, w, _, _ in rows_)
    builds = sum(1 for rows_ in jobs if competed(rows_))
    print(f"{builds} of {len(jobs)} jobs had a refill build's mounts before their outcome")
    if not latency:
        return
    lat = sorted(latency)
    print(f"{statistics.median(lat):8.3f}  = submit-to-outcome on the client's own clock "
          f"(p90 {lat[int(0.9 * (len(lat) - 1))]:.3f}, p99 {lat[int(0.99 * (len(lat) - 1))]:.3f})")


if __name__ == "__main__":
    main()
