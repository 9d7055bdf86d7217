#!/usr/bin/env python3
"""Package benchmark: numpy through vivarium's two-phase install, beside plain uv.

Side by side, each cold (empty caches) and warm:
- viv cold:    `viv run --with numpy` on an empty package cache: install sandbox (uv
               resolves against PyPI, downloads, installs into a new environment), cache
               commit, then the job (import numpy, compute) in its own sandbox;
- viv cached:  the same job again: the cached environment bound read-only (median of N);
- uv cold:     `uv venv` + `uv pip install --compile-bytecode numpy` (as the daemon
               does) with an empty uv cache, no sandbox,
               then `python -c 'import numpy ...'` from that venv;
- uv warm:     the same with uv's cache warm (a fresh venv each time; median of N);
- bare run:    `python -c 'import numpy ...'` from the uv venv (median of N): what the
               cached viv run compares with.
Needs network to PyPI. Starts its own daemon (release build) on a private socket, with
a private package cache that it removes at the end.

Usage (as root):  cargo build --release && ./scripts/install-uv.sh && \\
                  python3 bench/packages.py [--runs 20] [--uv /opt/vivarium/uv/bin/uv]
"""
import argparse, os, shutil, signal, statistics, subprocess, sys, tempfile, time

from common import pct, timed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE = "import numpy as np\nprint(float(np.linalg.det(np.eye(50) * 2) > 0))\n"




def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--target", default=os.path.join(ROOT, "target", "release"))
    ap.add_argument("--uv", default="/opt/vivarium/uv/bin/uv")
    args = ap.parse_args()
    daemon, viv = (os.path.join(args.target, b) for b in ("vivariumd", "viv"))
    for b in (daemon, viv, args.uv):
        if not os.path.exists(b):
            sys.exit(f"{b} missing: cargo build --release; ./scripts/install-uv.sh")
    tmp = tempfile.mkdtemp(prefix="vivarium-bench-pkg-")
    os.chmod(tmp, 0o755)
    try:
        sock, cfg, cache = (os.path.join(tmp, n) for n in ("d.sock", "d.toml", "cache"))
        open(cfg, "w").write(
            f'socket = "{sock}"\nprofiles_dir = "{ROOT}/profiles"\nstate_dir = "{tmp}/state"\n'
            f'cgroup_subtree = "vivarium-bench-{os.getpid()}"\nuv = "{args.uv}"\n'
            f'package_cache_dir = "{cache}"\n'
        )
        script = os.path.join(tmp, "np.py")
        open(script, "w").write(CODE)
        log = open(os.path.join(tmp, "d.log"), "w")
        d = subprocess.Popen([daemon, "--config", cfg], stderr=log, env={**os.environ, "VIVARIUM_LOG": "warn"})
        try:
            for _ in range(100):
                if os.path.exists(sock):
                    break
                time.sleep(0.05)
            boxed = [viv, "--socket", sock, "run", "--with", "numpy", script]
            viv_cold = timed(boxed)
            viv_cached = [timed(boxed) for _ in range(args.runs)]
        finally:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=10)

        env = {"PATH": "/usr/bin:/bin", "UV_CACHE_DIR": os.path.join(tmp, "uvcache"),
               "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "UV_SYSTEM_CERTS": "1",
               "UV_LINK_MODE": "copy", "HOME": tmp}

        def uv_install(venv):
            shutil.rmtree(venv, ignore_errors=True)
            t = timed([args.uv, "venv", "-q", "--python", "/usr/bin/python3", venv], env)
            return t + timed([args.uv, "pip", "install", "-q", "--python", f"{venv}/bin/python",
                              "--only-binary", ":all:", "--compile-bytecode", "numpy"], env)

        venv = os.path.join(tmp, "venv")
        run_bare = [f"{venv}/bin/python", "-I", "-c", CODE]
        uv_cold = uv_install(venv) + timed(run_bare)
        uv_warm = [uv_install(venv) for _ in range(min(args.runs, 10))]
        bare = [timed(run_bare) for _ in range(args.runs)]

        med = statistics.median
        print(f"machine: {os.uname().release}, {os.cpu_count()} cpus; numpy from PyPI; runs: {args.runs}")
        print(f"{'viv run --with numpy, cold (install + run)':48} {viv_cold:9.0f} ms")
        print(f"{'uv venv + uv pip install numpy, cold + run':48} {uv_cold:9.0f} ms")
        print(f"{'uv venv + uv pip install numpy, warm uv cache':48} {med(uv_warm):9.0f} ms (median)")
        print(f"{'viv run --with numpy, cached environment':48} {med(viv_cached):9.0f} ms (median)")
        print(f"{'python -I -c (import numpy ...), no sandbox':48} {med(bare):9.0f} ms (median)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
