# Become root (uid 0 of the job's user namespace) again.
_, err = syscall(105, 0)  # setuid(0)
if err is None:
    escaped(f"setuid(0) worked: uid {os.getuid()}")
# EPERM: uid 0 exists in the job's user namespace (a cold job's maps it to init's host
# uid) but the capability is gone. EINVAL: uid 0 is not mapped at all (a job forked from
# a zygote: its user namespace maps uid 1000 only).
decide_errno("setuid(0)", err, {"EPERM", "EINVAL"}, set())
