# See host processes in /proc (the daemon's pid is a hint of what to look for).
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
hint = ARGS["daemon_pid"]
if hint in pids or any(p > 64 for p in pids):
    escaped(f"/proc lists {len(pids)} pids: {pids[:12]}")
if set(pids) <= {1, 2, os.getpid()}:
    blocked(f"/proc lists only {pids}; the daemon's {hint} is absent")
unclear(f"pids {pids}")
