# The host's kernel command line (/proc/cmdline: boot parameters, root device, sometimes
# secrets an operator put there), compared by hash with the host's.
import hashlib
kind, val = attempt(lambda: open("/proc/cmdline", "rb").read())
if kind == "ok":
    if hashlib.sha256(val).hexdigest() == ARGS["host_cmdline_sha256"]:
        escaped("/proc/cmdline is the host's kernel command line")
    blocked(f"/proc/cmdline is not the host's ({len(val)} bytes)")
decide_errno("read /proc/cmdline", val, {"ENOENT", "EACCES", "EPERM"}, set())
