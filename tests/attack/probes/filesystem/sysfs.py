# Reach /sys (kernel objects, firmware, debugfs, the host's cgroupfs). The job's own
# cgroup at /sys/fs/cgroup is its only part (tests/tests/cgroup_view.rs checks that view).
seen = {}
for p in ("/sys", "/sys/fs", "/sys/kernel", "/sys/kernel/debug", "/sys/firmware", "/sys/class"):
    _, seen[p] = attempt(lambda: sorted(os.listdir(p)))
refused = ("ENOENT", "EACCES", "EPERM")
only = {"/sys": ["fs"], "/sys/fs": ["cgroup"]}
beyond = {p: v for p, v in seen.items() if v not in refused and v != only.get(p)}
if beyond:
    escaped(f"listed: {beyond}")
blocked(f"nothing of /sys but the job's own cgroup: {seen}")
