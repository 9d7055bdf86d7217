# /proc/sysrq-trigger (reboot, crash, OOM-kill the host). Opened for writing only.
kind, val = attempt(lambda: os.close(os.open("/proc/sysrq-trigger", os.O_WRONLY)))
if kind == "ok":
    escaped("opened /proc/sysrq-trigger for writing")
decide_errno("open /proc/sysrq-trigger O_WRONLY", val, {"EACCES", "EPERM", "EROFS", "ENOENT"}, set())
