"""Helpers shared by the benchmarks in bench/ (run by hand, not in CI)."""
import subprocess
import sys
import time


def pct(xs, p):
    """The p-th percentile of xs (nearest rank)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def timed(cmd, env=None):
    """Run cmd to its end; its wall time in ms. A failing command ends the benchmark."""
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    dt = (time.perf_counter() - t) * 1000
    if r.returncode != 0:
        sys.exit(f"{cmd} failed ({r.returncode}): {r.stderr.decode()[-800:]}")
    return dt
