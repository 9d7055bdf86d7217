# /proc/self/comm is ours by unix permissions; only Landlock (writes beneath /work, /tmp,
# /dev/shm only) refuses it.
kind, val = attempt(lambda: open("/proc/self/comm", "w").write("pwned"))
if kind == "ok":
    escaped("rewrote /proc/self/comm")
decide_errno("write /proc/self/comm", val, {"EACCES", "EPERM"}, set())
