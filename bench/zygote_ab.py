#!/usr/bin/env python3
"""Zygote throughput of two (or more) builds side by side, with the CPU each job costs.

Each build gets its own daemon; every round runs bare `/usr/bin/python3 -I -S -c pass`
starts, then each build's zygote profiles in a rotating order, at CLIENTS concurrent
clients for SECONDS each: `benchzyg0` (a sandbox forked per job), `benchzyg` (a pool of 4)
and `benchzygbig` (forked per job from a zygote that preloaded much of the standard
library: what the copy of a bigger zygote costs). Per cell, medians over the rounds:
jobs/s, the ratio to bare, the machine's busy CPU per job (/proc/stat: everything,
other users of the machine included) and the build's own CPU per job (its daemon's
cgroup subtree from cpuacct, which is hierarchical and so keeps ended jobs' usage: jobs,
zygote, spawner; plus the server process and the benchmark client; kernel threads, such
as a network namespace's cleanup, are not in it). On a machine others use too, compare
the own column. Own page faults per job: the subtree's memory cgroup `total_pgfault`,
the server's and the client's minor faults (a count, not a time: it does not depend on
the machine's speed).

Usage (as root, after `cargo build --release --workspace --lib --bins --examples`; a build
directory holds vivariumd, libvivarium_zygote.so, vivarium-zygote-init and
examples/bench_client):
  python3 bench/zygote_ab.py CLIENTS SECONDS ROUNDS before=DIR after=target/release
"""
import os, sys, tempfile, signal, shutil, subprocess, time, statistics, glob, resource
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import start_daemon, busy_seconds
from perf import bench_profiles, warm_profiles, bare_throughput
clients, seconds, rounds = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
builds = [a.split("=", 1) for a in sys.argv[4:]]
TCK = os.sysconf("SC_CLK_TCK")
def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TCK
def minflt(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[7])
def pgfaults(subtree):
    # The memory hierarchy's `total_pgfault` of the subtree's top (hierarchical; ended
    # jobs' faults stay counted in their parent).
    hits = sorted(glob.glob(f"/sys/fs/cgroup/memory/**/{subtree}/memory.stat", recursive=True), key=len)
    for line in open(hits[0]) if hits else ():
        if line.startswith("total_pgfault "):
            return int(line.split()[1])
    return 0
def cpuacct(subtree):
    hits = glob.glob(f"/sys/fs/cgroup/cpuacct/**/{subtree}/cpuacct.usage", recursive=True)
    return sum(int(open(h).read()) for h in hits) / 1e9
daemons, tmps, cells = [], [], []
try:
    for name, target in builds:
        tmp = tempfile.mkdtemp(prefix=f"zyab-{name}-"); os.chmod(tmp, 0o755); tmps.append(tmp)
        prof, text = bench_profiles(tmp); warm_profiles(prof, text, 4)
        # A bigger zygote: much of the standard library preloaded (what the copy costs).
        big = ["asyncio", "email.message", "email.parser", "json", "decimal", "http.client", "xml.etree.ElementTree",
               "unittest", "argparse", "logging", "typing", "dataclasses", "inspect", "difflib", "csv",
               "statistics", "fractions", "pickle", "tarfile", "zipfile", "urllib.request", "ssl", "sqlite3"]
        with open(os.path.join(prof, "benchzygbig.toml"), "w") as f:
            f.write(text + "\n[warm]\nzygote = true\npool = 0\nidle_secs = 600\npreload = " + repr(big).replace("'", '"') + "\n")
        sub = f"zyab-{name}-{os.getpid()}"
        d, sock = start_daemon(os.path.join(target, "vivariumd"), tmp, prof, sub, "max_concurrent_jobs = 16\n")
        daemons.append(d)
        exe = os.path.join(target, "examples", "bench_client")
        for profile in ("benchzyg0", "benchzyg", "benchzygbig"):
            cells.append((f"{profile} {name}", exe, sock, profile, sub, d.pid))
    def run(cell, secs):
        label, exe, sock, profile, sub, dpid = cell
        t0, c0, a0, s0 = time.monotonic(), busy_seconds(), cpuacct(sub), proc_cpu(dpid)
        r0 = os.times()
        p0 = pgfaults(sub) + minflt(dpid) + resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
        out = subprocess.run([exe, "--socket", sock, "--profile", profile, "--code", "pass", "--expect", "",
                              "--mode", "throughput", "--clients", str(clients), "--seconds", str(secs)],
                             check=True, capture_output=True, text=True).stdout
        r1 = os.times()
        span, cpu = time.monotonic() - t0, busy_seconds() - c0
        own = cpuacct(sub) - a0 + proc_cpu(dpid) - s0 + (r1.children_user + r1.children_system - r0.children_user - r0.children_system)
        faults = pgfaults(sub) + minflt(dpid) + resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - p0
        f = dict(kv.split("=") for kv in out.split())
        assert int(f["failed"]) == 0, out
        jobs = int(f["jobs"])
        return jobs / float(f["seconds"]), cpu * 1000 / (jobs * span / float(f["seconds"])), own * 1000 / jobs, faults / jobs
    for c in cells:
        run(c, 1)
    res = {c[0]: [] for c in cells}
    bare = []
    for i in range(rounds):
        t0, c0 = time.monotonic(), busy_seconds()
        rate = bare_throughput(clients, seconds)
        bare.append((rate, (busy_seconds() - c0) * 1000 / (rate * (time.monotonic() - t0))))
        k = i % len(cells)
        for c in cells[k:] + cells[:k]:
            res[c[0]].append(run(c, seconds))
    br = statistics.median(r for r, _ in bare)
    print(f"{clients} clients, {rounds} rounds of {seconds:g} s; medians. own = the daemon's cgroup subtree + server + client")
    print("| jobs of | jobs/s | ratio to bare | machine CPU ms/job | own CPU ms/job | own page faults/job |")
    print("|---|---:|---:|---:|---:|---:|")
    print(f"| bare | {br:.1f} | 1.00x | {statistics.median(c for _, c in bare):.2f} | | |")
    for c in cells:
        xs = res[c[0]]
        r = statistics.median(x[0] for x in xs)
        print(f"| {c[0]} | {r:.1f} | {r/br:.2f}x | {statistics.median(x[1] for x in xs):.2f} | {statistics.median(x[2] for x in xs):.2f} | {statistics.median(x[3] for x in xs):.0f} |")
finally:
    for d in daemons:
        d.send_signal(signal.SIGTERM); d.wait(timeout=10)
    for t in tmps:
        shutil.rmtree(t, ignore_errors=True)
