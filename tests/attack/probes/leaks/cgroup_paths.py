# Host cgroup paths (the daemon's subtree, the job's cgroup name).
lines = open("/proc/self/cgroup").read().splitlines()
paths = {l.split(":", 2)[2] for l in lines}
if any(ARGS["cgroup_subtree"] in p or "job-" in p for p in paths):
    escaped(f"cgroup paths name the host's tree: {sorted(paths)}")
if paths == {"/"}:
    blocked(f"every one of {len(lines)} hierarchies shows /")
unclear(f"paths {sorted(paths)}")
