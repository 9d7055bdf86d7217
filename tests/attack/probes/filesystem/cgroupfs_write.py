# Write cgroup control files: release_agent (the classic cgroup v1 escape), cgroup.procs,
# the memory limit. Opened for writing only; nothing is written.
paths = ["/sys/fs/cgroup/memory/release_agent", "/sys/fs/cgroup/cgroup.procs",
         "/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/pids/pids.max"]
seen = {}
for p in paths:
    kind, val = attempt(lambda: os.close(os.open(p, os.O_WRONLY)))
    seen[p] = "opened" if kind == "ok" else val
if "opened" in seen.values():
    escaped(f"opened for writing: {seen}")
if all(v in ("ENOENT", "EACCES", "EPERM", "EROFS") for v in seen.values()):
    blocked(f"nothing opened for writing: {seen}")
unclear(str(seen))
