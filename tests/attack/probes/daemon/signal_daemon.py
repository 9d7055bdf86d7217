# Signal the daemon and its root spawner by their host pids (signal 0; pidfd_open too).
seen = {}
for who in ("daemon_pid", "spawner_pid"):
    _, e1 = syscall(62, ARGS[who], 0)
    _, e2 = syscall(434, ARGS[who], 0)
    seen[who] = (ARGS[who], e1 or "ok", e2 or "ok")
if any(e1 == "ok" or e2 == "ok" for _, e1, e2 in seen.values()):
    escaped(f"host pids reachable: {seen}")
if all(e1 in ("ESRCH", "EPERM") and e2 in ("ESRCH", "EPERM") for _, e1, e2 in seen.values()):
    blocked(f"kill(pid, 0) and pidfd_open: {seen}")
unclear(str(seen))
