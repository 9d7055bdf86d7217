# /proc/1/cmdline: init is a clone of the daemon's spawner, so its argv is the spawner's,
# including the host path of the daemon's binary.
kind, val = attempt(lambda: open("/proc/1/cmdline", "rb").read())
if kind != "ok":
    # /proc is mounted hidepid=invisible: init (uid 0 inside) is not visible at all.
    decide_errno("read /proc/1/cmdline", val, {"ENOENT", "EACCES", "EPERM"}, set())
cmdline = val.replace(b"\0", b" ").decode(errors="replace")
if ARGS["daemon_binary"] in cmdline:
    escaped(f"/proc/1/cmdline is {cmdline.strip()!r}")
blocked(f"/proc/1/cmdline {cmdline.strip()!r} does not name the daemon's binary")
