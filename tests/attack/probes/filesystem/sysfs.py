# Reach /sys (kernel objects, firmware, cgroupfs, debugfs).
seen = {}
for p in ("/sys", "/sys/kernel", "/sys/fs/cgroup", "/sys/kernel/debug", "/sys/firmware"):
    kind, val = attempt(lambda: os.listdir(p))
    seen[p] = f"{len(val)} entries" if kind == "ok" else val
if any(v not in ("ENOENT", "EACCES", "EPERM") for v in seen.values()):
    escaped(f"listed: {seen}")
blocked(f"every listdir refused: {seen}")
