"""Helpers shared by the benchmarks in bench/ (run by hand, not in CI)."""
import os
import signal
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


def start_daemon(vivariumd, tmp, profiles, subtree, extra=""):
    """Start `vivariumd` with its config, socket, state and log in `tmp` and wait (up to
    10 s) for its socket. Returns the process and the socket's path."""
    sock, cfg, log = (os.path.join(tmp, n) for n in ("d.sock", "d.toml", "d.log"))
    with open(cfg, "w") as f:
        f.write(f'socket = "{sock}"\nprofiles_dir = "{profiles}"\nstate_dir = "{tmp}/state"\n'
                f'cgroup_subtree = "{subtree}"\n{extra}')
    d = subprocess.Popen([vivariumd, "--config", cfg], stderr=open(log, "w"),
                         env={**os.environ, "VIVARIUM_LOG": "warn"})
    for _ in range(200):
        if os.path.exists(sock):
            return d, sock
        time.sleep(0.05)
    d.kill()
    d.wait()
    with open(log) as f:
        tail = f.read()[-3000:]
    sys.exit(f"{vivariumd} did not come up within 10 s; its log ({log}) ends:\n{tail}")


def traced_jobs(job, trace, markers, jobs, gap_s):
    """Run `job()` `jobs` times, `gap_s` apart, under `perf trace -a` on the syscalls
    `markers` (written to `trace`); returns each run's own result (its latency)."""
    tracer = subprocess.Popen(["perf", "trace", "-a", "-o", trace, "-e", markers],
                              stderr=subprocess.DEVNULL)
    time.sleep(2)  # perf attaches
    latency = []
    for _ in range(jobs):
        latency.append(job())
        time.sleep(gap_s)
    time.sleep(0.3)
    tracer.send_signal(signal.SIGINT)
    tracer.wait()
    return latency


def loops(clients, seconds, job):
    """Run `job()` over and over in `clients` processes of their own (forks of this one,
    so no interpreter lock is shared) for `seconds`; the jobs done in all and the span in
    seconds. `job` returns False for a failure, which ends the benchmark."""
    start = time.monotonic()
    deadline = start + seconds
    workers = []
    for _ in range(clients):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            n = 0
            while time.monotonic() < deadline:
                if job() is False:
                    os._exit(1)
                n += 1
            os.write(w, str(n).encode())
            os._exit(0)
        os.close(w)
        workers.append((pid, r))
    total = 0
    for pid, r in workers:
        with os.fdopen(r) as f:
            text = f.read()
        _, status = os.waitpid(pid, 0)
        if status != 0 or not text:
            sys.exit("a benchmark loop failed")
        total += int(text)
    return total, time.monotonic() - start


def busy_seconds():
    """CPU time the whole machine has spent busy (not idle or waiting on I/O), in s."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
