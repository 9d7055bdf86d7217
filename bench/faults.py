#!/usr/bin/env python3
"""Page faults of a job forked from an interpreter that holds the warm bootstrap.

In a sandbox forked from a zygote, each page the job's Python writes to (a reference
count is a write) is first copied from the zygote: one page fault each, ~2-3 us on a
small VM. This counts them outside any sandbox, so that a change to the bootstrap can
be compared alone: an interpreter (`/usr/bin/python3 -I -S`) loads the warm bootstrap's
program as the zygote does (figures hook, inputs code, warm_bootstrap.py; the modules
the zygote's loop imports; the compiler used once; `gc.freeze()`), then forks
`--jobs` children one after another; each gets a `pass` job on its stdin (the warm
header: no arguments, no files) and runs `_vivarium_run()`. Per child, minor faults
(getrusage) from just after `os.fork` (its after-fork repairs done) to its `os._exit`.
Deterministic for a given interpreter and bootstrap: no timing involved.

Usage (as root: it mounts a tmpfs on /work in a mount namespace of its own):
  python3 bench/faults.py [--jobs 20] [--bootstrap sandbox/src/warm_bootstrap.py]
Compare with another revision's bootstrap:
  git show REV:sandbox/src/warm_bootstrap.py > /tmp/old.py
  python3 bench/faults.py --bootstrap /tmp/old.py
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "..", "sandbox", "src")

HARNESS = r'''
import ctypes, socket, _signal, gc, resource
def _minflt():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
compile("pass", "<vivarium>", "exec")
gc.collect()
gc.freeze()
_job = (0).to_bytes(4, "little") + (4).to_bytes(4, "little") + b"pass" + (0).to_bytes(4, "little")
_counts = []
for _ in range(int(sys.argv[1])):
    _r, _w = os.pipe()
    os.write(_w, _job)
    os.close(_w)
    _rr, _ww = os.pipe()
    _pid = os.fork()
    if _pid == 0:
        _start = _minflt()
        os.dup2(_r, 0)
        _real_exit = os._exit
        def _exit(status, start=_start, out=_ww, real=_real_exit):
            os.write(out, str(_minflt() - start).encode())
            real(status)
        os._exit = _exit
        _vivarium_run()
    os.close(_ww)
    os.close(_r)
    _counts.append(int(os.read(_rr, 64)))
    os.close(_rr)
    os.waitpid(_pid, 0)
print(" ".join(map(str, _counts)))
'''


def program(bootstrap):
    read = lambda name: open(os.path.join(SRC, name)).read()
    return ("_vivarium_zygote = True\n" + read("figures_hook.py") + "_VIVARIUM_INPUTS_PY = r'''"
            + read("inputs.py") + "'''\n" + open(bootstrap).read() + HARNESS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--bootstrap", default=os.path.join(SRC, "warm_bootstrap.py"))
    a = ap.parse_args()
    # A mount namespace of our own, with a tmpfs on /work for the job's /work/main.py
    # (the program is read first: the tmpfs hides whatever /work holds).
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c",
           'mkdir -p /work && mount -t tmpfs -o size=16m vivarium-faults /work && cd / && '
           'exec /usr/bin/python3 -I -S -c "$1" "$2"', "sh", program(a.bootstrap), str(a.jobs)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    counts = [int(x) for x in out.split()]
    print(f"{a.bootstrap}: minor faults per forked `pass` job, after the fork to its exit: "
          f"median {statistics.median(counts):.0f} (min {min(counts)}, max {max(counts)}, {len(counts)} jobs)")


if __name__ == "__main__":
    main()
