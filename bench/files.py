#!/usr/bin/env python3
"""What input files and artifacts cost a job (issue 20): the same job with and without a
file in, and writing a file that is returned (under out/) or not (under /tmp), side by
side in one run, through the client library (bench_client, latency mode), on a profile
that serves ready sandboxes (the shipped default) and on a cold one (the default's
policy without [warm]). Each round runs every variant once, in a random order, so that
machine drift falls on all alike. Reports medians and the added time per MB.

The job prints the size of its `input.bin` (it is there, whole); the no-file job prints 0.
The no-file job also runs asking for no outputs at all (`Outputs::None`): the difference
is what collecting costs a job that leaves nothing. The artifact jobs write the same number of bytes either to /tmp/o.bin (not returned) or
to out/o.bin (returned, and checked to be whole): their difference is what returning
the file costs.

    cargo build --release --workspace --lib --bins --examples
    python3 bench/files.py [--runs 40] [--mb 10]
"""
import argparse
import os
import random
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import perf  # noqa: E402

CODE = "import os; print(os.path.getsize('input.bin') if os.path.exists('input.bin') else 0)"
OUT = ("import os\nos.makedirs('out', exist_ok=True)\n"
       "open('%s', 'wb').write(bytes(range(256)) * (%d // 256))\nprint(0)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default=os.path.join(perf.ROOT, "target", "release"))
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--mb", type=float, default=10.0, help="the input file's size, MB (10^6 bytes)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("files.py: run as root (the daemon builds real sandboxes)")
    size = int(args.mb * 1e6)
    client = os.path.join(args.target, "examples", "bench_client")
    with tempfile.TemporaryDirectory() as tmp:
        prof = os.path.join(tmp, "profiles")
        os.makedirs(prof)
        shipped = open(os.path.join(perf.ROOT, "profiles", "default.toml")).read()
        for name in os.listdir(os.path.join(perf.ROOT, "profiles")):
            if name.endswith(".toml") or name == "seccomp":
                src = os.path.join(perf.ROOT, "profiles", name)
                os.symlink(src, os.path.join(prof, name))
        with open(os.path.join(prof, "cold.toml"), "w") as f:
            f.write(shipped[:shipped.index("\n[warm]")] + "\n")
        d, sock = perf.start_daemon(os.path.join(args.target, "vivariumd"), tmp, prof,
                                    f"vivarium-bench-files-{os.getpid()}", "max_concurrent_jobs = 16\n")
        try:
            variants = {}
            for profile in ("default", "cold"):
                variants[(profile, 0)] = perf.Library(client, sock, profile, CODE, "0\n")
                variants[(profile, None)] = perf.Library(client, sock, profile, CODE, "0\n",
                                                         no_outputs=True)
                variants[(profile, size)] = perf.Library(client, sock, profile, CODE, f"{size}\n",
                                                         input_bytes=size)
                n = size // 256 * 256
                variants[(profile, "tmp")] = perf.Library(client, sock, profile, OUT % ("/tmp/o.bin", n), "0\n")
                variants[(profile, "out")] = perf.Library(client, sock, profile, OUT % ("out/o.bin", n), "0\n",
                                                          artifact_bytes=n)
            times = {k: [] for k in variants}
            for _ in range(args.runs):
                order = list(variants)
                random.shuffle(order)
                for k in order:
                    times[k].append(variants[k]())
                    time.sleep(0.1)  # a ready sandbox's refill lands here, not on the next job
            for v in variants.values():
                v.close()
        finally:
            d.terminate()
            d.wait(timeout=30)
    print(f"a file of {size / 1e6:g} MB, {args.runs} rounds, medians:")
    for profile in ("default", "cold"):
        bare, with_file = statistics.median(times[(profile, 0)]), statistics.median(times[(profile, size)])
        print(f"  in:  {profile:8} without {bare:7.2f} ms   with {with_file:7.2f} ms   "
              f"added {with_file - bare:6.2f} ms = {(with_file - bare) / (size / 1e6):.2f} ms/MB")
    for profile in ("default", "cold"):
        none, default = statistics.median(times[(profile, None)]), statistics.median(times[(profile, 0)])
        print(f"  no artifacts: {profile:8} asking none {none:7.2f} ms   asking the default {default:7.2f} ms   "
              f"added {default - none:6.2f} ms")
    for profile in ("default", "cold"):
        kept, returned = statistics.median(times[(profile, "tmp")]), statistics.median(times[(profile, "out")])
        print(f"  out: {profile:8} in /tmp {kept:7.2f} ms   in out/ (returned) {returned:7.2f} ms   "
              f"added {returned - kept:6.2f} ms = {(returned - kept) / (size / 1e6):.2f} ms/MB")


if __name__ == "__main__":
    main()
