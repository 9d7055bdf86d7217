#!/usr/bin/env python3
"""The kernel's floor for a job forked with fresh namespaces, beside bare interpreter starts.

What the zygote's throughput target asks (2x the rate of bare `python3 -I -S -c pass`
starts on 2 cores, every layer included) is bounded below by what the kernel charges
for the namespaces and forks alone. This measures that floor with no daemon, no
cgroup, no Landlock, no seccomp, no mounts and no job: loops of `clients` processes,
each a Python interpreter like the zygote (`/usr/bin/python3`, its heap touched so that
its size is the zygote's), forking children that only make namespaces and exit, in the
same rounds as bare interpreter starts:

  bare          posix_spawn `/usr/bin/python3 -I -S -c pass`, waitpid
  fork          os.fork of the interpreter; the child exits at once
  fork+pidns    the same into a new pid namespace (the child is its pid 1)
  one fork      + the child unshares mount, IPC, UTS, cgroup, network and user namespaces
  two forks     as a zygote job: the child (init) unshares mount, IPC, UTS, cgroup and
                network namespaces and forks a grandchild (the payload) that unshares a user
                namespace; init waits for it
  two, no net   the same without the network namespace

Each cell runs `--seconds` with `--clients` concurrent loops; rounds rotate the order.
Prints jobs/s, the ratio to bare and the machine's CPU ms per job (from /proc/stat).

Usage (as root): python3 bench/floor.py [--clients 2] [--seconds 3] [--rounds 3]
"""
import argparse
import ctypes
import os
import statistics
import sys

from common import busy_seconds, loops
from perf import FLAGS, PY

CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x20000, 0x02000000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
INIT_NS = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
LIBC = ctypes.CDLL(None, use_errno=True)


def unshare(flags):
    if LIBC.unshare(flags) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"unshare({flags:#x})")


def job(kind, own_pid_ns):
    """One job of `kind`, from this process; returns when it is over, False if it failed."""
    if kind == "bare":
        child = os.posix_spawn(PY, [PY, *FLAGS, "-c", "pass"], os.environ)
        return os.waitpid(child, 0)[1] == 0
    if kind != "fork":
        # As the zygote does: back to its own pid namespace for children, then a new one.
        if LIBC.setns(own_pid_ns, CLONE_NEWPID) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        unshare(CLONE_NEWPID)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            if kind == "one fork":
                unshare(INIT_NS | CLONE_NEWNET | CLONE_NEWUSER)
            elif kind.startswith("two"):
                unshare(INIT_NS | (0 if kind == "two, no net" else CLONE_NEWNET))
                payload = os.fork()
                if payload == 0:
                    try:
                        unshare(CLONE_NEWUSER)
                    except OSError:
                        os._exit(1)
                    os._exit(0)
                _, status = os.waitpid(payload, 0)
                code = 1 if status else 0
        except OSError:
            code = 1
        os._exit(code)
    return os.waitpid(pid, 0)[1] == 0


def cell(kind, clients, seconds):
    """Jobs per second of `kind` with `clients` concurrent loops, and CPU ms per job."""
    c0 = busy_seconds()
    own = os.open("/proc/self/ns/pid", os.O_RDONLY)
    try:
        total, span = loops(clients, seconds, lambda: job(kind, own))
    finally:
        os.close(own)
    return total / span, (busy_seconds() - c0) * 1000 / max(1, total)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--heap-mib", type=int, default=8,
                    help="heap touched in the forking interpreter (a zygote's is ~8-10 MiB)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("floor.py needs root (namespaces)")
    ballast = bytearray(args.heap_mib << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1
    kinds = ["bare", "fork", "fork+pidns", "one fork", "two forks", "two, no net"]
    results = {k: [] for k in kinds}
    for i in range(args.rounds):
        k = i % len(kinds)
        for kind in kinds[k:] + kinds[:k]:
            results[kind].append(cell(kind, args.clients, args.seconds))
    bare = statistics.median(r for r, _ in results["bare"])
    print(f"{args.rounds} rounds of {args.seconds:g} s per cell, {args.clients} concurrent loops, "
          f"forking from a {args.heap_mib} MiB interpreter; medians.\n")
    print("| jobs | jobs/s | ratio to bare | machine CPU ms per job |")
    print("|---|---:|---:|---:|")
    for kind in kinds:
        rate = statistics.median(r for r, _ in results[kind])
        cpu = statistics.median(c for _, c in results[kind])
        print(f"| {kind} | {rate:.1f} | {rate / bare:.2f}x | {cpu:.2f} |")


if __name__ == "__main__":
    main()
