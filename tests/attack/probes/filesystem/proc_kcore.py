# /proc/kcore: the host's physical memory as an ELF core.
kind, val = attempt(lambda: open("/proc/kcore", "rb").read(64))
if kind == "ok":
    escaped(f"read {len(val)} bytes of /proc/kcore")
decide_errno("read /proc/kcore", val, {"EACCES", "EPERM", "ENOENT"}, set())
