# ptrace the job's init (uid 0 inside, a copy of the root spawner, the daemon's env).
# PTRACE_SEIZE: the same permission check as PTRACE_ATTACH, but it does not stop init
# where it succeeds (the tracee is released when this process exits).
_, err = syscall(101, 0x4206, 1, 0, 0)  # PTRACE_SEIZE pid 1
decide_errno("PTRACE_SEIZE pid 1", err, {"EPERM", "ENOSYS"}, set())
