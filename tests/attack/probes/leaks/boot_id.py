# The host's boot id (/proc/sys/kernel/random/boot_id), a stable per-boot identifier of
# the machine, compared by hash with the host's.
import hashlib
kind, val = attempt(lambda: open("/proc/sys/kernel/random/boot_id").read().strip())
if kind == "ok":
    if hashlib.sha256(val.encode()).hexdigest() == ARGS["host_boot_id_sha256"]:
        escaped("/proc/sys/kernel/random/boot_id is the host's boot id")
    blocked("boot_id differs from the host's")
decide_errno("read boot_id", val, {"ENOENT", "EACCES", "EPERM"}, set())
