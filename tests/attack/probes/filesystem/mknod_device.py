# Create a device node for /dev/mem (char 1:1) in writable /tmp.
kind, val = attempt(lambda: os.mknod("/tmp/mem", 0o600 | 0o020000, os.makedev(1, 1)))
if kind == "ok":
    escaped("created /tmp/mem (char 1:1)")
decide_errno("mknod /tmp/mem c 1 1", val, {"EPERM", "EACCES"}, set())
