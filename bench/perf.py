#!/usr/bin/env python3
"""Vivarium's start-up and throughput benchmark, side by side in one run.

Latency: every round runs each launcher once, in a rotating order, so machine drift and
order effects hit all of them alike, with a pause after each launch (`--settle-ms`, 100 by
default) so that its asynchronous aftermath (namespaces torn down after the outcome, a warm
pool's refill: a numpy sandbox is ~50 ms of CPU) does not land on the next launcher; each
launcher runs the same interpreter with the same flags (`/usr/bin/python3 -I -S`, never a
PATH shim):
  bare     /usr/bin/python3 -I -S -c pass
  bwrap    Debian's bubblewrap: all namespaces, read-only /usr, /proc, /dev, /tmp, no caps
  viv      `viv run` of a file holding `pass` (the CLI process included), fully sandboxed
  viv-default  `viv run` of the same file with no --profile, against a second daemon
           serving the shipped profiles (profiles/): what a user's first command gets. Its
           profile's interpreter flags are its own (`-I -u`: site imported), so it is also
           paired with `bare-default`, the bare interpreter with those flags (and each
           further --viv gets such a row: `viv-default-2`, ...); `--shipped-profile NAME`
           runs these rows on another of the shipped profiles (`viv run --profile NAME`).
           `library-default`: the library's job on the same profile, beside them
  library  the client library (client/examples/bench_client.rs): connect, submit
           `pass`, outcome; measured inside that process
  warm     the library with a warm profile: sandboxes built ahead by cold starts
  zygote   the library with a zygote profile: sandboxes forked from a preloaded
           interpreter, kept ready (and `zygote0`: none kept, each forked per job)
Ratios are to the bare interpreter: the ratio of medians and the median of per-round
ratios. Throughput: jobs per second with 1, 2 and 8 concurrent clients over a fixed time,
bare interpreter starts beside library jobs. Memory: the daemon's and the spawner's peak
resident set (VmHWM) after the run; private memory (USS) of idle warm sandboxes, of a
zygote and its forked sandboxes, and of a small job forked from a zygote while it runs.

Usage (as root, after `cargo build --release --workspace --lib --bins --examples`, the
zygote library being a lib target, then `cargo rustc --release -p vivarium-client --bin viv
-- -C target-feature=+crt-static`: viv as dist/install.sh installs it, statically linked;
or time another viv with --viv, e.g. one built for x86_64-unknown-linux-musl):
  python3 bench/perf.py [--runs 200] [--seconds 10] [--viv PATH]... [--write docs/PERFORMANCE.md]
"""
import argparse
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib

from common import loops, pct, start_daemon, timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"
FLAGS = ["-I", "-S"]


def bwrap_cmd(code):
    """bubblewrap with an isolation set comparable to Vivarium's namespaces and mounts
    (it has no Landlock, seccomp, cgroup limits or rlimits: Vivarium does more)."""
    cmd = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
           "--ro-bind", "/usr", "/usr"]
    for link in ("bin", "lib", "lib64", "sbin"):
        target = os.readlink(f"/{link}") if os.path.islink(f"/{link}") else None
        if target:
            cmd += ["--symlink", target, f"/{link}"]
        elif os.path.isdir(f"/{link}"):
            cmd += ["--ro-bind", f"/{link}", f"/{link}"]
    cmd += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--chdir", "/tmp",
            "--clearenv", PY, *FLAGS, "-c", code]
    return cmd


class Library:
    """A long-lived bench_client in latency mode: one line in, one job, one time out."""

    def __init__(self, exe, sock, profile, code="pass", expect="", packages=(), input_bytes=0,
                 artifact_bytes=0, no_outputs=False):
        cmd = [exe, "--socket", sock, "--profile", profile, "--code", code, "--expect", expect,
               "--mode", "latency"]
        for p in packages:
            cmd += ["--package", p]
        if input_bytes:
            cmd += ["--input-bytes", str(input_bytes)]
        if artifact_bytes:
            cmd += ["--expect-artifact-bytes", str(artifact_bytes)]
        if no_outputs:
            cmd += ["--no-outputs"]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.kinds = []

    def __call__(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            sys.exit("bench_client failed (see its stderr above)")
        # "<ms> <where the sandbox came from>" (an older build's: "<ms>").
        ms, *kind = line.split()
        self.kinds.append(kind[0] if kind else "unknown")
        return float(ms)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


class SessionOpen:
    """A long-lived bench_client in session mode: each call opens a session, runs `cells`
    pairs of cells (`x = 1`, then `x`) in it and closes it; returns the open's time, and
    keeps the cells' round trips (`assign`, `value`) and where each session's sandbox came
    from."""

    def __init__(self, exe, sock, profile, cells=3):
        self.p = subprocess.Popen([exe, "--socket", sock, "--profile", profile, "--mode", "session",
                                   "--cells", str(cells)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.cells = {"assign": [], "value": [], "close": []}
        self.kinds = []

    def __call__(self):
        self.p.stdin.write("go\n")
        self.p.stdin.flush()
        opened = None
        while True:
            line = self.p.stdout.readline()
            if not line:
                sys.exit("bench_client (session) failed (see its stderr above)")
            what, ms, *kind = line.split()
            if what == "open":
                opened = float(ms)
                self.kinds.append(kind[0])
            else:
                self.cells[what].append(float(ms))
            if what == "close":
                return opened

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


def idle_session_uss(exe, sock, spawner, profile, count, packages=()):
    """Median USS of an idle session's sandbox (its init + its interpreter, after one cell
    `x = 1`), with `count` sessions held open by a bench_client in hold mode."""
    cmd = [exe, "--socket", sock, "--profile", profile, "--mode", "hold", "--clients", str(count)]
    for p in packages:
        cmd += ["--package", p]
    hold = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        line = hold.stdout.readline()
        if not line.startswith("held "):
            sys.exit("bench_client (hold) failed (see its stderr above)")
        time.sleep(0.5)
        found = []
        for init in children(spawner):
            procs = [init] + children(init)
            try:
                cmdline = "".join(open(f"/proc/{p}/cmdline").read() for p in procs)
                if SESSION_MARK not in cmdline:
                    continue
                found.append(sum(uss_kib(p) for p in procs))
            except OSError:
                continue
        # The held sessions, and any ready session sandboxes of the pool beside them.
        return statistics.median(found) if len(found) >= count else None
    finally:
        hold.stdin.close()
        hold.wait(timeout=30)


# Text of the session bootstrap, which its interpreter's command line carries (`-c`).
SESSION_MARK = "Vivarium's session sandbox"


def bare_throughput(clients, seconds):
    """Bare interpreter starts per second with `clients` concurrent loops. Each loop is its
    own process (posix_spawn + waitpid), so the harness is not one interpreter's threads
    taking turns at a lock: at 8 clients that held the bare rate below the 2-client one."""
    argv = [PY, *FLAGS, "-c", "pass"]

    def start():
        _, status = os.waitpid(os.posix_spawn(PY, argv, os.environ), 0)
        return status == 0

    total, span = loops(clients, seconds, start)
    return total / span


def library_throughput(exe, sock, profile, clients, seconds):
    return library_throughput_ready(exe, sock, profile, clients, seconds)[0]


def library_throughput_ready(exe, sock, profile, clients, seconds):
    """Jobs per second, and the share of them that took a sandbox built ahead (None from a
    build whose bench_client does not say)."""
    out = subprocess.run([exe, "--socket", sock, "--profile", profile, "--code", "pass",
                          "--expect", "", "--mode", "throughput", "--clients", str(clients),
                          "--seconds", str(seconds)], check=True, capture_output=True, text=True)
    fields = dict(kv.split("=") for kv in out.stdout.split())
    if int(fields["failed"]):
        sys.exit(f"library throughput: {fields['failed']} jobs failed")
    rate = int(fields["jobs"]) / float(fields["seconds"])
    # The share of jobs that took a sandbox built ahead (unknown from older builds).
    ready = int(fields["ready"]) / max(1, int(fields["jobs"])) if "ready" in fields else None
    return rate, ready


def vm_hwm_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def uss_kib(pid):
    """Private memory (USS): pages no other process maps."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith(("Private_Clean:", "Private_Dirty:")):
                total += int(line.split()[1])
    return total


def children(pid):
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                pass
    return out


def idle_warm_uss(spawner, sandboxes):
    """Once `sandboxes` warm sandboxes wait and nothing else runs: median USS per sandbox
    (its init plus its interpreter), for plain ones and for numpy-preloaded ones. (The
    spawner's other children are zygotes' inits.)"""
    def inits():
        return [i for i in children(spawner) if not any(is_zygote(c) for c in children(i))]
    for _ in range(400):
        if len(inits()) >= sandboxes:
            break
        time.sleep(0.05)
    else:
        return None, None
    time.sleep(0.5)
    plain, numpy = [], []
    for init in inits():
        procs = [init] + children(init)
        try:
            maps = "".join(open(f"/proc/{p}/maps").read() for p in procs)
            uss = sum(uss_kib(p) for p in procs)
        except OSError:
            continue
        (numpy if "numpy" in maps else plain).append(uss)
    med = lambda xs: statistics.median(xs) if xs else None
    return med(plain), med(numpy)


def bench_profiles(tmp):
    """A profiles directory in `tmp` with `bench`: the default policy, run with `-I -S`
    (the bare interpreter's flags). Returns the directory and the profile's text."""
    prof = os.path.join(tmp, "profiles")
    os.makedirs(prof)
    shutil.copytree(os.path.join(ROOT, "profiles", "seccomp"), os.path.join(prof, "seccomp"))
    text = open(os.path.join(ROOT, "profiles", "default.toml")).read()
    # Without the default's fast path (its [warm] section, the file's last): `bench` is
    # the cold path, and the warm rows add a [warm] of their own.
    text = text.split("\n[warm]\n")[0] + "\n"
    text = text.replace('args = ["-I", "-u"]', 'args = ["-I", "-S"]')
    assert '"-S"' in text
    # No [packages]: the benchmark installs none, and older builds compared by ab.py may
    # not know the section's newer keys.
    text = re.sub(r"(?ms)^\[packages\]\n.*?(?=^\[)", "", text)
    assert "[packages]" not in text
    # The network's mode is left to the build's default (a private loopback since
    # network.mode exists; older builds compared by ab.py know no `mode` and have `lo`
    # down).
    text = re.sub(r'(?m)^mode = "loopback"\n', "", text)
    assert "\nmode =" not in text
    # Thread hints change only the job's environment, and older builds know no key.
    text = re.sub(r"(?m)^thread_hints = .*\n", "", text)
    with open(os.path.join(prof, "bench.toml"), "w") as f:
        f.write(text)
    return prof, text


def warm_profiles(prof, text, pool):
    """Beside `bench` (its profile text `text`) in `prof`: the same policy with the warm
    path (sandboxes built ahead, one job each), built by cold starts (`benchwarm`) or
    forked from a zygote, `pool` kept ready (`benchzyg`) or each forked per job
    (`benchzyg0`)."""
    for name, warm in (("benchwarm", f"pool = {pool}"), ("benchzyg", f"zygote = true\npool = {pool}"),
                       ("benchzyg0", "zygote = true\npool = 0")):
        with open(os.path.join(prof, f"{name}.toml"), "w") as f:
            f.write(text + f"\n[warm]\n{warm}\nidle_secs = 600\n")


def is_zygote(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return b"\0_vivarium_zygote = True" in f.read()
    except OSError:
        return False


def zygote_uss(spawner, sandboxes):
    """Once `sandboxes` forked sandboxes wait: median USS per forked sandbox (its init
    plus its payload, both forked from the zygote), and each zygote's own (its init plus
    the zygote), plain and numpy-preloaded."""
    def families():
        out = []
        for init in children(spawner):
            for z in children(init):
                if is_zygote(z):
                    out.append((init, z, [(c, children(c)) for c in children(z)]))
        return out
    for _ in range(400):
        if sum(len(f[2]) for f in families()) >= sandboxes:
            break
        time.sleep(0.05)
    else:
        return None
    time.sleep(0.5)
    res = {"forked": [], "np-forked": [], "zygote": [], "np-zygote": []}
    for init, z, kids in families():
        try:
            np = "numpy" in open(f"/proc/{z}/maps").read()
            res[("np-" if np else "") + "zygote"].append(uss_kib(init) + uss_kib(z))
            for c, gs in kids:
                res[("np-" if np else "") + "forked"].append(uss_kib(c) + sum(uss_kib(g) for g in gs))
        except OSError:
            continue
    return {k: (statistics.median(v) if v else None) for k, v in res.items()}


def running_forked_uss(viv, sock, spawner, profile):
    """USS of a small job forked from a zygote while it runs (its init plus its payload):
    `profile` keeps no pool, so the only forked sandbox is the running job."""
    job = subprocess.Popen([viv, "--socket", sock, "run", "--profile", profile, "-"],
                           stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    job.stdin.write(b"import time\nx = [i for i in range(1000)]\ntime.sleep(1.5)\n")
    job.stdin.close()
    uss = None
    for _ in range(100):
        time.sleep(0.02)
        for init in children(spawner):
            for z in children(init):
                if is_zygote(z):
                    for c in children(z):
                        gs = children(c)
                        if gs:
                            time.sleep(0.5)  # the job is in its sleep by now
                            try:
                                uss = uss_kib(c) + sum(uss_kib(g) for g in gs)
                            except OSError:
                                pass
        if uss is not None:
            break
    job.wait(timeout=30)
    return uss


def spawner_pid(daemon_pid):
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if ppid == daemon_pid and b"__spawner" in cmdline:
            return int(entry)
    return None


def linkage(exe):
    """'static' or 'dynamic': whether `exe` names a program interpreter (ld.so)."""
    with open(exe, "rb") as f:
        return "dynamic" if b"/ld-linux" in f.read(4096) else "static"


def libc(exe):
    """'glibc' or 'musl': which C library `exe` runs on (a static glibc carries its tunables'
    names)."""
    with open(exe, "rb") as f:
        return "glibc" if b"glibc." in f.read() else "musl"


def machine():
    cpu = "unknown cpu"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_gib = int(f.readline().split()[1]) / 2**20
    py = subprocess.run([PY, "-c", "import sys; print(sys.version.split()[0])"],
                        capture_output=True, text=True).stdout.strip()
    bw = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return (f"{platform.node()}: Linux {os.uname().release}, {os.cpu_count()} vCPUs ({cpu}), "
            f"{mem_gib:.0f} GiB; {PY} {py}; {bw}; vivarium {commit or 'unknown'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=10.0, help="per throughput measurement")
    ap.add_argument("--target", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--viv", action="append", default=[],
                    help="the viv to time (default: the one in --target); repeated, each further "
                    "one gets a row of its own on the shipped default profile")
    ap.add_argument("--shipped-profile", default="default",
                    help="the shipped profile of the viv-default rows (default: default, with no "
                    "--profile, as a user runs it)")
    ap.add_argument("--write", metavar="MD", help="also write the results as Markdown")
    ap.add_argument("--settle-ms", type=float, default=100.0,
                    help="pause after each latency launch (0: back to back)")
    ap.add_argument("--pool", type=int, default=4, help="warm sandboxes kept by the warm profile")
    ap.add_argument("--no-numpy", action="store_true",
                    help="skip the numpy rows (they install numpy from PyPI with the pinned uv)")
    ap.add_argument("--uv", default="/opt/vivarium/uv/bin/uv", help="the pinned uv (scripts/install-uv.sh)")
    args = ap.parse_args()
    daemon, viv = (os.path.join(args.target, b) for b in ("vivariumd", "viv"))
    viv, more_vivs = (args.viv or [viv])[0], args.viv[1:]
    lib_exe = os.path.join(args.target, "examples", "bench_client")
    for b in (daemon, viv, *more_vivs, lib_exe):
        if not os.path.exists(b):
            sys.exit(f"{b} missing: run `cargo build --release --workspace --lib --bins --examples` first")
    if not os.path.exists(os.path.join(args.target, "libvivarium_zygote.so")):
        sys.exit("libvivarium_zygote.so missing: run `cargo build --release --workspace --lib` first")
    if linkage(viv) != "static":
        print(f"note: {viv} is dynamically linked; dist/install.sh installs a static one, which "
              "starts ~0.5 ms sooner (see the usage above)", file=sys.stderr)
    if not shutil.which("bwrap"):
        sys.exit("bwrap missing: apt-get install bubblewrap")
    tmp = tempfile.mkdtemp(prefix="vivarium-perf-")
    os.chmod(tmp, 0o755)  # the package cache inside must be reachable by the sandboxes' uids
    d = shipped = None
    try:
        prof, text = bench_profiles(tmp)
        warm_profiles(prof, text, args.pool)
        numpy = not args.no_numpy
        if numpy and not os.path.exists(args.uv):
            sys.exit(f"{args.uv} missing: run scripts/install-uv.sh, or pass --no-numpy")
        if numpy:
            # The numpy job, with site (the environment needs it) and single-threaded
            # OpenBLAS, on both sides; the warm profile installs and preloads numpy.
            np_text = text.replace('args = ["-I", "-S"]', 'args = ["-I"]').replace(
                'LANG = "C.UTF-8"', 'LANG = "C.UTF-8"\nOPENBLAS_NUM_THREADS = "1"')
            assert "OPENBLAS" in np_text
            # Its packages from PyPI (bench_profiles dropped the section for `bench`).
            np_text = np_text.replace("[env]", '[packages]\nenabled = true\n'
                                      'index_url = "https://pypi.org/simple"\n'
                                      'allow_hosts = ["files.pythonhosted.org"]\n\n[env]', 1)
            assert "[packages]" in np_text
            with open(os.path.join(prof, "benchnp.toml"), "w") as f:
                f.write(np_text)
            with open(os.path.join(prof, "benchnpwarm.toml"), "w") as f:
                f.write(np_text + f'\n[warm]\npool = {args.pool}\nidle_secs = 600\n'
                        'packages = ["numpy"]\npreload = ["numpy"]\n')
            with open(os.path.join(prof, "benchnpsess.toml"), "w") as f:
                f.write(np_text + '\n[warm]\npool = 0\npackages = ["numpy"]\npreload = ["numpy"]\n'
                        '\n[session]\npool = 2\n')
            with open(os.path.join(prof, "benchnpzyg.toml"), "w") as f:
                f.write(np_text + f'\n[warm]\nzygote = true\npool = {args.pool}\nidle_secs = 600\n'
                        'packages = ["numpy"]\npreload = ["numpy"]\n')
            venv = os.path.join(tmp, "venv")
            subprocess.run([args.uv, "venv", "-q", "--python", PY, venv], check=True)
            subprocess.run([args.uv, "pip", "install", "-q", "--python", f"{venv}/bin/python",
                            "--compile-bytecode", "numpy"], check=True)
        d, sock = start_daemon(daemon, tmp, prof, f"vivarium-bench-{os.getpid()}",
                               f'max_concurrent_jobs = 16\nuv = "{args.uv}"\n'
                               f'package_cache_dir = "{tmp}/cache"\n')
        # A second daemon with the shipped profiles, for `viv run` as a user gets it.
        os.makedirs(os.path.join(tmp, "shipped"))
        shipped, shipped_sock = start_daemon(
            daemon, os.path.join(tmp, "shipped"), os.path.join(ROOT, "profiles"),
            f"vivarium-bench-shipped-{os.getpid()}",
            f'max_concurrent_jobs = 16\nuv = "{args.uv}"\npackage_cache_dir = "{tmp}/shipped/cache"\n')
        with open(os.path.join(ROOT, "profiles", f"{args.shipped_profile}.toml"), "rb") as f:
            shipped_python = tomllib.load(f)["python"]
        bare_default = [shipped_python["interpreter"], *shipped_python["args"], "-c", "pass"]
        shipped_run = ["run"] + (["--profile", args.shipped_profile]
                                 if args.shipped_profile != "default" else [])
        shipped_label = (f"the shipped {args.shipped_profile} profile"
                         + (" (no --profile)" if args.shipped_profile == "default" else ""))
        script = os.path.join(tmp, "pass.py")
        with open(script, "w") as f:
            f.write("pass\n")
        lib = Library(lib_exe, sock, "bench")
        warm = Library(lib_exe, sock, "benchwarm")
        zyg = Library(lib_exe, sock, "benchzyg")
        zyg0 = Library(lib_exe, sock, "benchzyg0")
        lib_default = Library(lib_exe, shipped_sock, args.shipped_profile)
        session = SessionOpen(lib_exe, shipped_sock, args.shipped_profile)
        launchers = [
            ("bare", f"{PY} -I -S -c pass", lambda: timed([PY, *FLAGS, "-c", "pass"])),
            ("bwrap", "bwrap --unshare-all ... python3 -I -S -c pass", lambda: timed(bwrap_cmd("pass"))),
            ("viv", "viv run (CLI), sandboxed, -I -S", lambda: timed([viv, "--socket", sock, "run",
                                                                       "--profile", "bench", script])),
            ("viv-default", f"viv run (CLI), {shipped_label}",
             lambda: timed([viv, "--socket", shipped_sock, *shipped_run, script])),
            ("bare-default", f"bare with that profile's flags: {' '.join(bare_default)}",
             lambda: timed(bare_default)),
            *((f"viv-default-{i}", f"the same with {v} ({linkage(v)}, {libc(v)})",
               lambda v=v: timed([v, "--socket", shipped_sock, *shipped_run, script]))
              for i, v in enumerate(more_vivs, 2)),
            ("library-default", f"client library, the shipped {args.shipped_profile} profile: what viv "
             "adds is the difference",
             lib_default),
            ("library", "client library submit-to-outcome", lib),
            ("warm", "warm path, sandboxes built by cold starts (library)", warm),
            ("session-open", f"open a session, the shipped {args.shipped_profile} profile "
             "(library; from its session pool)", session),
            ("zygote", "warm path, sandboxes forked from a zygote (library)", zyg),
            ("zygote0", "zygote without a pool: forked per job (library)", zyg0),
        ]
        np_code = "import numpy; print(numpy.arange(1000).sum())"
        if numpy:
            np_env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}

            def np_bare():
                t = time.perf_counter()
                r = subprocess.run([f"{venv}/bin/python", "-I", "-c", np_code], env=np_env,
                                   capture_output=True)
                dt = (time.perf_counter() - t) * 1000
                if r.stdout != b"499500\n":
                    sys.exit(f"bare numpy: {r.stdout!r} {r.stderr[-500:]!r}")
                return dt

            np_cold = Library(lib_exe, sock, "benchnp", np_code, "499500\n", ["numpy"])
            np_warm = Library(lib_exe, sock, "benchnpwarm", np_code, "499500\n", ["numpy"])
            np_zyg = Library(lib_exe, sock, "benchnpzyg", np_code, "499500\n", ["numpy"])
            launchers += [
                ("np-bare", "numpy: bare `python -I -c` (venv of the same interpreter)", np_bare),
                ("np-cold", "numpy: library, cached environment, cold sandbox", np_cold),
                ("np-warm", "numpy: library, warm sandboxes (cold-built) preloading numpy", np_warm),
                ("np-zygote", "numpy: library, zygote preloading numpy", np_zyg),
            ]
        for _ in range(10):  # warm the page cache and the daemon on every side
            for _, _, f in launchers:
                f()
        times = {name: [] for name, _, _ in launchers}
        for i in range(args.runs):
            k = i % len(launchers)
            for name, _, f in launchers[k:] + launchers[:k]:
                times[name].append(f())
                time.sleep(args.settle_ms / 1000)
        for l in (lib, warm, zyg, zyg0, lib_default, session):
            l.close()
        if numpy:
            np_cold.close()
            np_warm.close()
            np_zyg.close()
        rows = []
        for name, label, _ in launchers:
            xs = times[name]
            # numpy rows against the bare numpy job, the others against bare `pass`.
            bare = times["np-bare" if name.startswith("np-") else "bare"]
            paired = statistics.median(y / x for x, y in zip(bare, xs))
            rows.append((label, statistics.median(xs), pct(xs, 90), pct(xs, 99),
                         statistics.median(xs) / statistics.median(bare), paired))
        tput = []
        for clients in (1, 2, 8):
            tput.append((clients, bare_throughput(clients, args.seconds),
                         *(library_throughput(lib_exe, sock, p, clients, args.seconds)
                           for p in ("bench", "benchwarm", "benchzyg")),
                         *library_throughput_ready(lib_exe, shipped_sock, args.shipped_profile,
                                                   clients, args.seconds)))
        lib_default_ready = lib_default.kinds.count("ready") / max(1, len(lib_default.kinds))
        sp = spawner_pid(d.pid)
        mem = (vm_hwm_kib(d.pid), vm_hwm_kib(sp) if sp else 0)
        pools = args.pool * (2 if numpy else 1)
        zuss = zygote_uss(sp, pools) if sp else None
        running = running_forked_uss(viv, sock, sp, "benchzyg0") if sp else None
        warm_uss, np_uss = idle_warm_uss(sp, pools) if sp else (None, None)
        ssp = spawner_pid(shipped.pid)
        sess_uss = idle_session_uss(lib_exe, shipped_sock, ssp, args.shipped_profile, 4) if ssp else None
        np_sess_uss = (idle_session_uss(lib_exe, sock, sp, "benchnpsess", 2, ["numpy"])
                       if sp and numpy else None)
    finally:
        for p in (d, shipped):
            if p is not None:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)

    lines = [f"Machine: {machine()}; viv {linkage(viv)}ally linked ({libc(viv)})",
             f"Latency: {args.runs} rounds, launchers interleaved in rotating order, "
             f"{args.settle_ms:g} ms of settling after each launch.", "",
             "| launcher | median ms | p90 ms | p99 ms | ratio of medians | median paired ratio |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {l} | {m:.2f} | {p90:.2f} | {p99:.2f} | {r:.2f}x | {pr:.2f}x |"
              for l, m, p90, p99, r, pr in rows]
    med = {name: statistics.median(times[name]) for name in times}
    lines += ["", f"viv run on {shipped_label} against the bare interpreter with that "
              f"profile's flags (`{' '.join(shipped_python['args'])}`): "
              f"{med['viv-default'] / med['bare-default']:.2f}x (ratio of medians), "
              f"{statistics.median(y / x for x, y in zip(times['bare-default'], times['viv-default'])):.2f}x "
              "(median paired); the table's ratios are to bare `-I -S`."]
    lines += ["", "numpy rows: `import numpy; print(numpy.arange(1000).sum())`, ratios to the bare "
              "numpy row; the other rows' ratios are to bare `-c pass`." if numpy else
              "numpy rows: skipped (--no-numpy).",
              "", f"Throughput over {args.seconds:g} s per cell (jobs/s):", "",
              "| concurrent clients | bare `python3 -I -S -c pass` | sandboxed, cold | ratio "
              f"| warm, cold-built | ratio | warm, zygote | ratio | {shipped_label} | ratio "
              "| of its jobs from the pool |",
              "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    share = lambda r: "n/a" if r is None else f"{100 * r:.0f}%"
    lines += [f"| {c} | {b:.1f} | {s:.1f} | {s / b:.2f}x | {w:.1f} | {w / b:.2f}x | {z:.1f} | {z / b:.2f}x "
              f"| {dft:.1f} | {dft / b:.2f}x | {share(ready)} |"
              for c, b, s, w, z, dft, ready in tput]
    lines += ["", f"Of the library-default row's jobs, {share(lib_default_ready)} took a sandbox "
              "built ahead (the daemon's Event::Sandbox); the viv-default rows run on the same "
              "daemon in the same rounds. In the throughput column, the shipped profile's jobs "
              "beyond its pool run cold: a refill is a whole cold build, done only while no job "
              "waits."]
    mib = lambda k: f"{k / 1024:.1f} MiB" if k is not None else "not measured"
    cells = session.cells
    lines += ["", f"Sessions ({shipped_label}, through the library, one connection): "
              f"{share(session.kinds.count('ready') / max(1, len(session.kinds)))} of the "
              "session-open row's sessions took a sandbox from the session pool.", "",
              "| cell round trip | n | median ms | p90 ms | p99 ms |", "|---|---:|---:|---:|---:|"]
    lines += [f"| `{code}` | {len(xs)} | {statistics.median(xs):.3f} | {pct(xs, 90):.3f} | {pct(xs, 99):.3f} |"
              for code, xs in (("x = 1", cells["assign"]), ("x", cells["value"]),
                               ("close the session", cells["close"]))]
    lines += ["", f"Idle session, private memory (USS of its init + its interpreter after one "
              f"cell, median of 4): {mib(sess_uss)}; numpy-preloaded (its environment and "
              f"`import numpy` done in the pool): {mib(np_sess_uss)}."]
    zuss = zuss or {}
    lines += ["", f"Peak resident memory (VmHWM): daemon {mem[0] / 1024:.1f} MiB, "
                  f"spawner {mem[1] / 1024:.1f} MiB. Idle warm sandbox, private memory (USS of "
                  f"its init + its waiting interpreter, median): "
                  + (f"{warm_uss / 1024:.1f} MiB" if warm_uss is not None else "not measured")
                  + "; with numpy preloaded: "
                  + (f"{np_uss / 1024:.1f} MiB." if np_uss is not None else "not measured."),
              "",
              f"Zygote, private memory (USS, median): a ready forked sandbox (init + payload) "
              f"{mib(zuss.get('forked'))}, numpy-preloaded {mib(zuss.get('np-forked'))}; a running "
              f"small job forked from the zygote {mib(running)}; the zygote itself (its init + "
              f"interpreter) {mib(zuss.get('zygote'))}, numpy-preloaded {mib(zuss.get('np-zygote'))}."]
    out = "\n".join(lines)
    print(out)
    if args.write:
        with open(args.write) as f:
            doc = f.read()
        begin, end = "<!-- perf.py begin -->", "<!-- perf.py end -->"
        if begin not in doc or end not in doc:
            sys.exit(f"{args.write} lacks the {begin} / {end} markers")
        head, rest = doc.split(begin, 1)
        _, tail = rest.split(end, 1)
        with open(args.write, "w") as f:
            f.write(f"{head}{begin}\n{out}\n{end}{tail}")


if __name__ == "__main__":
    main()
