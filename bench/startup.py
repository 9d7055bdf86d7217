#!/usr/bin/env python3
"""Start-up benchmark: bare interpreter vs. a fully sandboxed `viv run`, side by side.

Runs interleaved pairs (bare, sandboxed, bare, sandboxed, ...) so that machine drift
hits both sides alike, with the same interpreter and the same flags on both sides:
`/usr/bin/python3 -I -S -c pass` against `viv run` of a file containing `pass` under a
profile whose interpreter args are `-I -S` (a copy of profiles/default.toml written to
a temp dir). Starts its own daemon (release build) on a private socket.

Usage (as root):  cargo build --release && python3 bench/startup.py [--runs 200]
"""
import argparse, os, shutil, signal, statistics, subprocess, sys, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def timed(cmd):
    t = time.perf_counter()
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = (time.perf_counter() - t) * 1000
    if r.returncode != 0:
        sys.exit(f"{cmd} failed ({r.returncode}): {r.stderr.decode()[-500:]}")
    return dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--target", default=os.path.join(ROOT, "target", "release"))
    args = ap.parse_args()
    daemon, viv = (os.path.join(args.target, b) for b in ("vivariumd", "viv"))
    for b in (daemon, viv):
        if not os.path.exists(b):
            sys.exit(f"{b} missing: run `cargo build --release` first")
    tmp = tempfile.mkdtemp(prefix="vivarium-bench-")
    try:
        prof = os.path.join(tmp, "profiles")
        os.makedirs(prof)
        shutil.copytree(os.path.join(ROOT, "profiles", "seccomp"), os.path.join(prof, "seccomp"))
        text = open(os.path.join(ROOT, "profiles", "default.toml")).read()
        text = text.replace('args = ["-I", "-u"]', 'args = ["-I", "-S"]')
        assert '"-S"' in text
        open(os.path.join(prof, "bench.toml"), "w").write(text)
        sock = os.path.join(tmp, "d.sock")
        cfg = os.path.join(tmp, "d.toml")
        open(cfg, "w").write(
            f'socket = "{sock}"\nprofiles_dir = "{prof}"\nstate_dir = "{tmp}/state"\n'
            f'cgroup_subtree = "vivarium-bench-{os.getpid()}"\n'
        )
        log = open(os.path.join(tmp, "d.log"), "w")
        d = subprocess.Popen([daemon, "--config", cfg], stderr=log, env={**os.environ, "VIVARIUM_LOG": "warn"})
        try:
            for _ in range(100):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
            script = os.path.join(tmp, "pass.py")
            open(script, "w").write("pass\n")
            bare = [PY, "-I", "-S", "-c", "pass"]
            boxed = [viv, "--socket", sock, "run", "--profile", "bench", script]
            for _ in range(10):  # warm caches on both sides
                timed(bare), timed(boxed)
            b, s = [], []
            for _ in range(args.runs):
                b.append(timed(bare))
                s.append(timed(boxed))
            ratios = [y / x for x, y in zip(b, s)]
            print(f"machine: {os.uname().release}, {os.cpu_count()} cpus; runs: {args.runs} interleaved pairs")
            print(f"{'':28} {'median':>8} {'p90':>8} {'p99':>8}")
            for name, xs in ((f"bare {' '.join(bare[1:])}", b), ("viv run (sandboxed, -I -S)", s)):
                print(f"{name:28} {statistics.median(xs):7.2f}ms {pct(xs, 90):7.2f}ms {pct(xs, 99):7.2f}ms")
            print(f"ratio of medians: {statistics.median(s) / statistics.median(b):.2f}x; "
                  f"median of paired ratios: {statistics.median(ratios):.2f}x")
        finally:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
