# How long the host has been up, from the job's own clocks (CLOCK_BOOTTIME, CLOCK_MONOTONIC
# and /proc/uptime), compared with the host's uptime when the test started.
import time
host = ARGS["host_uptime_s"]
clocks = {
    "boottime": time.clock_gettime(time.CLOCK_BOOTTIME),
    "monotonic": time.clock_gettime(time.CLOCK_MONOTONIC),
    "proc_uptime": float(open("/proc/uptime").read().split()[0]),
}
seen = {k: round(v, 1) for k, v in clocks.items()}
if any(v >= host - 5 for v in clocks.values()):
    escaped(f"a clock shows the host's uptime ({host:.0f} s): {seen}")
if all(v < 60 for v in clocks.values()):
    blocked(f"every clock starts with the job's namespace, the host's uptime is {host:.0f} s: {seen}")
unclear(f"host uptime {host:.0f} s: {seen}")
