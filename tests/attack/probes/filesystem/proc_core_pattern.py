# /proc/sys/kernel/core_pattern: a pipe handler there runs as host root on any crash (a
# classic container escape). Opened for writing only; nothing is written.
kind, val = attempt(lambda: os.close(os.open("/proc/sys/kernel/core_pattern", os.O_WRONLY)))
if kind == "ok":
    escaped("opened /proc/sys/kernel/core_pattern for writing")
decide_errno("open core_pattern O_WRONLY", val, {"EACCES", "EPERM", "EROFS"}, set())
